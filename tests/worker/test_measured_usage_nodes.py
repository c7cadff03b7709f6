"""Measured usage end to end: a real pod burning CPU in a real tenant namespace on the dev nodes, the real
Prometheus scraping their kubelets' cAdvisor, and the worker's reconcile pass recording what it measured into the
usage history; a Prometheus that does not answer leaves the quota readings as they were."""

from __future__ import annotations

import datetime as dt
import socket
import time

import pytest
from django.utils import timezone
from kubernetes import client

from devcluster.images import WORKLOAD_IMAGE
from devcluster.launcher import free_port
from tenants import services
from tenants.models import Cluster, Tenant, TenantRequest, TenantUsageDay
from tests.plugins.kube import manifest, wait_for
from tests.plugins.worker import provision_until_settled
from worker import measured_usage, reconcile

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.nodes]


def _ready(*, actor, approver, team, tier, cluster, name: str) -> Tenant:
    req = services.request_submit(
        actor=actor, action=TenantRequest.Action.CREATE, team=team, tier=tier, cluster=cluster, name=name
    )
    if req.tenant.status == "requested":
        services.request_approve(tenant_request=req, actor=approver, comment="ok")
    assert provision_until_settled(str(req.tenant.pk)).outcome == "ready"
    return Tenant.objects.get(pk=req.tenant.pk)


def _burn_cpu(kube: client.ApiClient, namespace: str) -> None:
    """A pod that spins one loop, held to 100m by its limit: measurable, and kind to a shared machine."""
    client.CoreV1Api(kube).create_namespaced_pod(
        namespace,
        manifest(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "burner"},
                "spec": {
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65534,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "spin",
                            "image": WORKLOAD_IMAGE,
                            "imagePullPolicy": "Never",
                            "command": ["sh", "-c", "while :; do :; done"],
                            "resources": {
                                "requests": {"cpu": "50m", "memory": "16Mi"},
                                "limits": {"cpu": "100m", "memory": "32Mi"},
                            },
                            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                        }
                    ],
                },
            }
        ),
    )


def measured_seconds(day: TenantUsageDay) -> float:
    return float((day.usage.get("measured.cpu") or {}).get("seconds", 0.0))


def _today(tenant: Tenant) -> TenantUsageDay:
    return TenantUsageDay.objects.get(tenant=tenant, day=timezone.now().astimezone(dt.UTC).date())


@pytest.fixture
def measured_cluster(live_node_cluster: Cluster, node_control_plane, settings) -> Cluster:
    """The node cluster, whose Prometheus the worker reads directly (no label proxy: the web has none here)."""
    settings.BERTH_PROMETHEUS = {"nodes": {"url": node_control_plane.prometheus.url}}
    live_node_cluster.prometheus = "nodes"
    live_node_cluster.save(update_fields=["prometheus"])
    return live_node_cluster


def test_the_pass_records_what_a_tenants_containers_used_and_nothing_for_an_idle_one(
    measured_cluster, node_control_plane, node_kube_admin, alice, bob, carol, team_a, team_b, small, dispatched
):
    busy = _ready(actor=alice, approver=carol, team=team_a, tier=small, cluster=measured_cluster, name="busy")
    idle = _ready(actor=bob, approver=carol, team=team_b, tier=small, cluster=measured_cluster, name="idle")
    _burn_cpu(node_kube_admin, busy.namespace)
    prometheus = node_control_plane.prometheus

    def burning() -> bool:
        rows = prometheus.query(measured_usage.queries()["cpu"])
        return any(r["metric"].get("namespace") == busy.namespace and float(r["value"][1]) > 0 for r in rows)

    wait_for(burning, timeout=180, what="the burner's CPU rate in Prometheus", interval=3)
    before = {t.pk: _today(t).samples for t in (busy, idle)}

    result = reconcile.reconcile_cluster(measured_cluster)

    assert result.measured and result.summary()["measured"] is True
    busy_day, idle_day = _today(busy), _today(idle)
    assert busy_day.samples == before[busy.pk] + 1 and idle_day.samples == before[idle.pk] + 1
    cpu, memory = busy_day.usage["measured.cpu"], busy_day.usage["measured.memory"]
    assert 0 < cpu["max"] <= 0.2, cpu  # held to 100m (a 5-minute rate, so some slack)
    assert cpu["seconds"] > 0 and cpu["used_seconds"] > 0
    assert cpu["hard"] == small.cpu_request_millis / 1000  # shares are of the requests quota
    assert 0 < memory["max"] <= 32 * 2**20 and memory["limit"] == small.memory_limit_mib * 2**20
    # The idle tenant was measured too: nothing ran there.
    assert idle_day.usage["measured.cpu"]["max"] == 0 and idle_day.usage["measured.memory"]["max"] == 0
    assert idle_day.usage["measured.cpu"]["seconds"] > 0
    # What is stored as the tenant's quota usage stays the quota's.
    assert "measured" not in Tenant.objects.get(pk=busy.pk).quota_usage


def test_a_prometheus_that_does_not_answer_leaves_the_quota_readings_alone(
    measured_cluster, node_kube_admin, alice, carol, team_a, small, dispatched, settings
):
    tenant = _ready(actor=alice, approver=carol, team=team_a, tier=small, cluster=measured_cluster, name="quiet")
    # The readings compared below start from a quota that counts a ConfigMap, so what it uses is not 0. Not the
    # namespace's root CA ConfigMap: the quota controller counts objects created before the quota only at its first
    # sync (from a cache that may lag) or its full resync minutes later. One created now is counted by the quota's
    # admission, as it is created.
    core = client.CoreV1Api(node_kube_admin)

    def created() -> bool:
        try:
            body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="counted"), data={"a": "b"})
            core.create_namespaced_config_map(tenant.namespace, body)
        except client.ApiException as e:
            return e.status == 409  # made by an earlier try whose answer was lost
        return True

    def counted() -> bool:
        quota = core.read_namespaced_resource_quota("berth-quota", tenant.namespace)
        return (quota.status.used or {}).get("configmaps", "0") != "0"

    wait_for(created, timeout=60, what="a ConfigMap in the tenant's namespace")  # refused until the quota has status
    wait_for(counted, timeout=60, what="the quota counting the ConfigMap")
    reconcile.reconcile_cluster(measured_cluster)
    settings.BERTH_MEASURED_USAGE_TIMEOUT = 1.0
    # Nothing listens on one address; the other accepts connections and never answers.
    closed = f"http://127.0.0.1:{free_port()}"
    silent = socket.create_server(("127.0.0.1", 0))
    try:
        for url in (closed, f"http://127.0.0.1:{silent.getsockname()[1]}"):
            settings.BERTH_PROMETHEUS = {"nodes": {"url": url}}
            before = _today(tenant)
            started = time.monotonic()
            result = reconcile.reconcile_cluster(measured_cluster)
            took = time.monotonic() - started
            after = _today(tenant)
            assert not result.measured and str(tenant.pk) in result.readings, url
            assert after.samples == before.samples + 1 and after.seconds > before.seconds, url
            # The quota's readings cover the time since the last one; nothing more was measured.
            assert after.usage["configmaps"]["used_seconds"] > before.usage["configmaps"]["used_seconds"], url
            assert measured_seconds(after) == measured_seconds(before), url
            assert took < 30, (url, took)  # a bounded wait, not a hung pass
    finally:
        silent.close()
