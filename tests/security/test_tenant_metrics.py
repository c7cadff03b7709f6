"""A tenant's metrics, attacked with the attacker's own API token: real Prometheus scraping the dev nodes' kubelets,
the upstream prom-label-proxy in front of it, and Berth's query API (tenants/api/prometheus.py) before that.

Two teams run a pod each on the node cluster. Whatever PromQL, selector, label or header the attacker sends
through their own tenant's data source, no answer may name the victim's namespace or pod; the victim's tenant
answers 404; bounds are refused in Prometheus's own error shape, and a deployment that points Berth at a bare
Prometheus gets no query through at all.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlencode

import pytest
from django.core.cache import cache
from kubernetes import client
from rest_framework.test import APIClient

from devcluster.images import WORKLOAD_IMAGE
from tenants.api.throttling import SharedRateThrottle
from tenants.models import Cluster, Tenant
from tests.plugins.kube import manifest, wait_for

from .conftest import provision

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker, pytest.mark.nodes]

CPU = "container_cpu_usage_seconds_total"


@dataclass
class Caller:
    tenant: Tenant
    pod: str
    api: APIClient

    def path(self, endpoint: str, tenant: Tenant | None = None) -> str:
        return f"/api/v1/tenants/{(tenant or self.tenant).pk}/prometheus/api/v1/{endpoint}"

    def get(self, endpoint: str, tenant: Tenant | None = None, **params):
        return self.api.get(self.path(endpoint, tenant), params)

    def post(self, endpoint: str, tenant: Tenant | None = None, **params):
        """As Grafana sends it: a urlencoded form."""
        form = urlencode(params, doseq=True)
        return self.api.post(self.path(endpoint, tenant), form, content_type="application/x-www-form-urlencoded")


@pytest.fixture
def metrics_cluster(live_node_cluster: Cluster, prometheus_label_proxy: str, settings) -> Cluster:
    settings.BERTH_PROMETHEUS = {"nodes": prometheus_label_proxy}
    live_node_cluster.prometheus = "nodes"
    live_node_cluster.save(update_fields=["prometheus"])
    return live_node_cluster


def _run_pod(kube: client.ApiClient, namespace: str, name: str) -> None:
    client.CoreV1Api(kube).create_namespaced_pod(
        namespace,
        manifest(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 1000,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "c",
                            "image": WORKLOAD_IMAGE,
                            "imagePullPolicy": "Never",
                            "command": ["sleep", "3600"],
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "16Mi"},
                                "limits": {"cpu": "50m", "memory": "32Mi"},
                            },
                            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                        }
                    ],
                },
            }
        ),
    )


@pytest.fixture
def teams(
    celery_worker,
    metrics_cluster,
    node_control_plane,
    node_kube_admin,
    alice,
    bob,
    carol,
    team_a,
    team_b,
    small,
    api_token,
) -> Iterator[tuple[Caller, Caller]]:
    """(attacker, victim): alice's and bob's tenants, a pod each, both pods' CPU series already in Prometheus."""
    callers = []
    for user, team, name in ((alice, team_a, "snoop"), (bob, team_b, "vault")):
        tenant = provision(actor=user, team=team, tier=small, cluster=metrics_cluster, approver=carol, name=name)
        pod = f"{name}-{uuid.uuid4().hex[:6]}"
        _run_pod(node_kube_admin, tenant.namespace, pod)
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Token {api_token(user)}")
        callers.append(Caller(tenant, pod, api))
    prometheus = node_control_plane.prometheus
    for caller in callers:
        selector = f'{CPU}{{namespace="{caller.tenant.namespace}", pod="{caller.pod}"}}'
        wait_for(
            functools.partial(prometheus.query, selector),
            timeout=120,
            what=f"{caller.pod}'s CPU series in Prometheus",
            interval=2,
        )
    yield callers[0], callers[1]


def _names(answer) -> set[str]:
    """Every namespace and pod an answer's series carry (vector, matrix, series) or list (label values)."""
    body = answer.json()
    data = body.get("data")
    found: set[str] = set()
    rows = data.get("result", []) if isinstance(data, dict) else data or []
    for row in rows:
        if isinstance(row, dict):
            labels = row.get("metric", row)
            found |= {labels[key] for key in ("namespace", "pod", "exported_namespace") if key in labels}
        else:
            found.add(str(row))
    return found


def test_a_team_sees_its_own_series_and_nothing_of_another_teams(teams):
    attacker, victim = teams
    own = attacker.get("query", query=CPU)
    assert own.status_code == 200, own.content
    assert own["Content-Type"] == "application/json"
    assert {attacker.tenant.namespace, attacker.pod} <= _names(own)
    assert {row["metric"]["namespace"] for row in own.json()["data"]["result"]} == {attacker.tenant.namespace}

    theirs = {victim.tenant.namespace, victim.pod}
    ns = victim.tenant.namespace
    queries = [
        f'{CPU}{{namespace="{ns}"}}',
        '{namespace=~".+"}',
        f'{{__name__=~".+", namespace!="{attacker.tenant.namespace}"}}',
        f'{CPU} or on() {CPU}{{namespace="{ns}"}}',
        f'label_replace({CPU}{{namespace="{ns}"}}, "namespace", "{attacker.tenant.namespace}", "", "")',
        f'label_replace({CPU}, "pod", "$1", "namespace", "(.*)")',
        'count by (namespace, pod) ({__name__=~"container_.+"})',
        f"sum by (namespace) (rate({CPU}[5m])) or vector(0)",
        f'absent({CPU}{{namespace="{ns}"}})',
    ]
    for query in queries:
        for send in (attacker.get, attacker.post):
            answer = send("query", query=query)
            assert answer.status_code in (200, 400, 422), (query, answer.content)  # 422: Prometheus's own
            assert not theirs & _names(answer), query
            assert ns.encode() not in answer.content and victim.pod.encode() not in answer.content, query
        now = time.time()
        ranged = attacker.get("query_range", query=query, start=str(now - 3600), end=str(now), step="60")
        assert ranged.status_code in (200, 400, 422) and ns.encode() not in ranged.content, query

    # The header prom-label-proxy trusts, or a namespace parameter, sent by the attacker: ignored.
    smuggled = attacker.api.get(attacker.path("query"), {"query": CPU, "namespace": ns}, HTTP_X_BERTH_NAMESPACE=ns)
    assert smuggled.status_code == 200 and ns.encode() not in smuggled.content

    # Series and label values never reveal another namespace's names.
    series = attacker.get("series", **{"match[]": ['{namespace=~".+"}', f'{{namespace="{ns}"}}']})
    assert series.status_code == 200 and not theirs & _names(series)
    for label in ("namespace", "pod", "container", "id", "name"):
        values = attacker.get(f"label/{label}/values")
        assert values.status_code == 200, values.content
        assert ns.encode() not in values.content and victim.pod.encode() not in values.content, label
    namespaces = attacker.get("label/namespace/values").json()["data"]
    assert namespaces == [attacker.tenant.namespace]
    labels = attacker.get("labels", **{"match[]": f'{{namespace="{ns}"}}'})
    assert labels.status_code == 200 and ns.encode() not in labels.content

    # Another team's tenant, and ids that are no tenant, answer 404 for every endpoint.
    for endpoint in ("query", "query_range", "series", "labels", "label/namespace/values"):
        for tenant in (victim.tenant, Tenant(pk=uuid.uuid4())):
            answer = attacker.get(endpoint, tenant, query="up", **{"match[]": "up"})
            assert answer.status_code == 404, (endpoint, answer.content)
            assert victim.tenant.namespace.encode() not in answer.content
    # The victim, with their own token, does see their own.
    assert victim.tenant.namespace in _names(victim.get("query", query=CPU))


def test_bounds_rate_limits_and_a_misconfigured_setting(teams, node_control_plane, settings, monkeypatch):
    """Unbounded or malformed queries get a clear 400 in bounded time; too many get 429; a bare Prometheus in the
    setting gets no query at all."""
    attacker, victim = teams
    now = time.time()
    attempts = {
        "a malformed query": {"endpoint": "query", "query": "sum(rate("},
        "a range of a year": {"endpoint": "query_range", "query": CPU, "start": "0", "end": str(now), "step": "1d"},
        "a million points": {
            "endpoint": "query_range",
            "query": CPU,
            "start": str(now - 86400),
            "end": str(now),
            "step": "0.05",
        },
        "no step": {"endpoint": "query_range", "query": CPU, "start": str(now - 60), "end": str(now)},
        "a bad label name": {"endpoint": "label/..%2F..%2Fadmin/values"},
        "an endless series window": {"endpoint": "series", "match[]": "up", "start": "0"},
    }
    for what, params in attempts.items():
        endpoint = params.pop("endpoint")
        began = time.monotonic()
        answer = attacker.get(endpoint, **params)
        assert time.monotonic() - began < 20, what
        assert answer.status_code in (400, 404), (what, answer.content)
        if answer.status_code == 400:
            body = answer.json()
            assert body["status"] == "error" and body["errorType"] and body["error"], what
    # A query that would run past its timeout is stopped by Prometheus, not left hanging.
    heavy = attacker.get("query", query=f"sum(count_over_time({CPU}[8d]))", timeout="1ms")
    assert heavy.status_code in (200, 503), heavy.content  # 503: Prometheus's own "query timed out"

    # Per person: another's budget is their own (counted afresh: the requests above spent some of the default).
    cache.clear()
    monkeypatch.setattr(SharedRateThrottle, "THROTTLE_RATES", {"prometheus": "3/min", "writes": "120/min"})
    assert [attacker.get("query", query="up").status_code for _ in range(4)] == [200, 200, 200, 429]
    assert victim.get("query", query="up").status_code == 200
    assert json.loads(attacker.get("labels").content)["detail"]
    monkeypatch.undo()

    # Misconfigured: BERTH_PROMETHEUS names Prometheus itself instead of prom-label-proxy. Nothing is sent.
    settings.BERTH_PROMETHEUS = {"nodes": node_control_plane.prometheus.url}
    answer = attacker.get("query", query=f'{CPU}{{namespace="{victim.tenant.namespace}"}}')
    assert answer.status_code == 503
    assert answer.json()["errorType"] == "unavailable"
    assert victim.tenant.namespace.encode() not in answer.content
