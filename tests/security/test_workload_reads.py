"""Events and pod logs on the tenant page, read with the team's own identity on the dev cluster with nodes.

A team's pods print markers; the page (Django's test client against the real worker hooks) shows them, within
the bounds, and never with Berth's rights: the reads carry a TokenRequest token of the tenant's ServiceAccount,
so the API server, not Berth, refuses another namespace's pod. The attacks use the attacker's own session and
the attacker's own team's identity.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import subprocess
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from devcluster.images import WORKLOAD_IMAGE
from devcluster.launcher import ControlPlane
from tenants.models import Tenant, Tier
from tests.plugins.kube import wait_for
from tests.plugins.worker import fetch_kubeconfig
from worker import kube, reconcile, workload

from .conftest import provision

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker, pytest.mark.nodes]

RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
# Lines of 1,000 characters, 600 of them: the last 500 lines are about 500 KB, past the 256 KiB bound.
FLOOD = "s=0123456789; s=$s$s$s$s$s$s$s$s$s$s; s=$s$s$s$s$s$s$s$s$s$s; yes $s | head -n 600; sleep 3600"


@dataclass
class Team:
    tenant: Tenant
    kubeconfig: str
    plane: ControlPlane

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.plane.kubectl), f"--kubeconfig={self.kubeconfig}", "-n", self.tenant.namespace, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def start(self, name: str, script: str, *, scratch: bool = False) -> None:
        """A pod running ``script``; with ``scratch``, an emptyDir at /scratch that outlives container restarts."""
        container: dict[str, Any] = {
            "name": "c",
            "image": WORKLOAD_IMAGE,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", script],
            "securityContext": RESTRICTED_CONTAINER,
        }
        spec: dict[str, Any] = {
            "securityContext": RESTRICTED_POD,
            "terminationGracePeriodSeconds": 0,
            "containers": [container],
        }
        if scratch:
            spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
            container["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
        created = self.kubectl("apply", "-f", "-", input=json.dumps(pod))
        assert created.returncode == 0, created.stderr

    def status(self, name: str) -> dict:
        got = self.kubectl("get", "pod", name, "-o", "json")
        return json.loads(got.stdout).get("status", {}) if got.returncode == 0 else {}


def _team(plane: ControlPlane, user, tenant: Tenant, tmp_path: Path) -> Team:
    path, _ = fetch_kubeconfig(user, tenant, tmp_path)
    return Team(tenant, path, plane)


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _log(client: Client, tenant: Tenant, pod: str, query: str = ""):
    return client.get(f"/tenants/{tenant.pk}/pods/{pod}/log/{query}")


@pytest.fixture
def shop(celery_worker, live_node_cluster, node_control_plane, alice, carol, team_a, small, tmp_path) -> Team:
    """Alice's ready small-tier namespace and her kubeconfig."""
    tenant = provision(actor=alice, team=team_a, tier=small, cluster=live_node_cluster, approver=carol, name="shop")
    return _team(node_control_plane, alice, tenant, tmp_path)


def test_the_team_sees_its_events_and_logs_bounded_and_followed_and_berth_logs_none_of_it(shop: Team, alice, caplog):
    marker, crash = f"marker-{secrets.token_hex(6)}", f"crash-{secrets.token_hex(6)}"
    shop.start("talker", f"echo {marker}; i=0; while true; do echo tick-$i; i=$((i+1)); sleep 1; done")
    shop.start("flood", FLOOD)
    shop.start("looper", "exit 1")  # a crash loop: the kubelet backs off, with a Warning event
    # Crashes once, then runs: its previous run's log is the crash.
    shop.start(
        "crasher",
        f"if [ -e /scratch/crashed ]; then echo second-run; sleep 3600; fi; "
        f"touch /scratch/crashed; echo {crash}; exit 1",
        scratch=True,
    )
    wait_for(lambda: shop.status("talker").get("phase") == "Running", timeout=90, what="talker to run")
    wait_for(
        lambda: any(
            c.get("restartCount", 0) >= 1 and "running" in c.get("state", {})
            for c in shop.status("crasher").get("containerStatuses", [])
        ),
        timeout=90,
        what="crasher to have crashed and run again",
    )
    # The cluster itself serves the crash as the previous run's log (the kubelet can lag its own status): what
    # Berth shows is compared with that below.
    try:
        wait_for(
            lambda: crash in shop.kubectl("logs", "--previous", "crasher").stdout,
            timeout=60,
            what="the cluster to serve the crasher's previous log",
        )
    except pytest.fail.Exception as e:
        pytest.fail(f"{e}; the crasher's status then: {shop.status('crasher').get('containerStatuses')}")
    wait_for(
        lambda: any(
            (c.get("state", {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff"
            for c in shop.status("looper").get("containerStatuses", [])
        ),
        timeout=90,
        what="looper to crash in a loop",
    )
    caplog.set_level(logging.DEBUG)  # every record of this process from here on, at every level
    client = _client(alice)

    started = time.monotonic()
    tab = client.get(f"/tenants/{shop.tenant.pk}/?tab=events")
    tab_ms = (time.monotonic() - started) * 1000
    assert tab.status_code == 200
    html = tab.content.decode()
    for pod in ("talker", "flood", "crasher"):
        assert f"/pods/{pod}/log/?container=c" in html
    assert "Pod/talker" in html and "Scheduled" in html
    assert 'class="row--warning"' in html and "BackOff" in html  # the crash loop, highlighted
    started = time.monotonic()
    assert client.get(f"/tenants/{shop.tenant.pk}/").status_code == 200
    overview_ms = (time.monotonic() - started) * 1000
    print(f"tenant page: overview {overview_ms:.0f} ms, events tab {tab_ms:.0f} ms")

    page = _log(client, shop.tenant, "talker", "?container=c&follow=1")
    assert page.status_code == 200, re.findall(r'id="log-error">([^<]*)', page.content.decode())
    body = page.content.decode()
    assert marker in body and "tick-0" in body
    found = re.search(r"since=([^&\"]+)&amp;polls=0", body)
    assert found, "the page polls for what comes next"
    since = urllib.parse.unquote(found[1])
    seen = set(re.findall(r"tick-\d+", body))
    time.sleep(2.5)
    follow = client.get(f"/tenants/{shop.tenant.pk}/pods/talker/log/follow/?container=c&since={since}&polls=0")
    new = set(re.findall(r"tick-\d+", follow.content.decode()))
    assert new and not new & seen  # only what came after the last line shown
    assert marker not in follow.content.decode()

    flood = _log(client, shop.tenant, "flood", "?tail=500")
    assert flood.status_code == 200
    assert "Cut at 256 KiB" in flood.content.decode()
    assert 200_000 < len(flood.content) < 256 * 1024 + 20_000  # the bound, plus the page around it

    previous = _log(client, shop.tenant, "crasher", "?container=c&previous=1").content.decode()
    assert crash in previous, (
        re.findall(r'(?s)id="log(?:-error)?"[^>]*>(.{0,300})', previous),
        shop.kubectl("logs", "--previous", "crasher").stdout,
        shop.kubectl("logs", "--previous", "crasher").stderr,
    )

    leaked = [r for r in caplog.records if any(m in r.getMessage() or m in str(r.__dict__) for m in (marker, crash))]
    assert caplog.records and not leaked


def test_a_viewer_reads_logs_only_once_the_tier_allows_it_and_the_role_is_reconciled(shop: Team, vera):
    shop.start("talker", "echo hello-viewer; sleep 3600")
    wait_for(lambda: shop.status("talker").get("phase") == "Running", timeout=90, what="talker to run")
    viewer = workload.team_reader(shop.tenant, role="view")
    ns = shop.tenant.namespace
    assert not viewer.can_i(verb="get", resource="pods", subresource="log", namespace=ns)
    assert viewer.can_i(verb="list", resource="events", namespace=ns)
    refused = _log(_client(vera), shop.tenant, "talker")
    assert refused.status_code == 403 and "does not let viewers read logs" in refused.content.decode()
    assert "Pod/talker" in _client(vera).get(f"/tenants/{shop.tenant.pk}/?tab=events").content.decode()

    Tier.objects.filter(pk=shop.tenant.tier_id).update(viewers_read_logs=True)
    reconcile.reconcile_cluster(shop.tenant.cluster)
    wait_for(
        lambda: viewer.can_i(verb="get", resource="pods", subresource="log", namespace=ns),
        timeout=30,
        what="the viewer Role to allow pods/log",
    )
    assert "hello-viewer" in _log(_client(vera), shop.tenant, "talker").content.decode()


def test_another_teams_pod_is_refused_by_the_api_server(
    shop: Team, celery_worker, live_node_cluster, node_control_plane, bob, carol, team_b, small, tmp_path
):
    """Bob names alice's pod from his own tenant's page, and reads it with his team's own token."""
    secret = f"secret-{secrets.token_hex(6)}"
    shop.start("vault", f"echo {secret}; sleep 3600")
    wait_for(lambda: shop.status("vault").get("phase") == "Running", timeout=90, what="vault to run")
    bank = provision(actor=bob, team=team_b, tier=small, cluster=live_node_cluster, approver=carol, name="bank")
    client = _client(bob)

    assert _log(client, shop.tenant, "vault").status_code == 404  # not his tenant
    assert client.get(f"/tenants/{shop.tenant.pk}/?tab=events").status_code == 404
    mine = _log(client, bank, "vault")  # the same pod name, looked up in his own namespace
    assert mine.status_code == 404 and "not found" in mine.content.decode()
    for trick in ("vault..", "..", "vault%2F..%2F..%2F" + shop.tenant.namespace):
        answer = _log(client, bank, trick)
        assert answer.status_code in (400, 404) and secret not in answer.content.decode()
    for query in (f"?container=c&namespace={shop.tenant.namespace}", "?container=..%2F..%2Fvault"):
        answer = _log(client, bank, "vault", query)
        assert answer.status_code in (400, 404) and secret not in answer.content.decode()

    # The API answers the same: 404 for alice's tenant, and the API server's "not found" for his own.
    api = APIClient()
    api.force_authenticate(bob)
    assert api.get(f"/api/v1/tenants/{shop.tenant.pk}/pods/vault/log/").status_code == 404
    answer = api.get(f"/api/v1/tenants/{bank.pk}/pods/vault/log/")
    assert (
        answer.status_code == 404 and "not found" in answer.json()["detail"] and secret not in answer.content.decode()
    )

    # His team's own tokens, in the hands of anyone who could make Berth send a request elsewhere: refused.
    for role in ("edit", "view"):
        reader = workload.team_reader(bank, role=role)
        with pytest.raises(kube.KubeForbidden):
            reader.pod_log(namespace=shop.tenant.namespace, pod="vault", tail_lines=10, limit_bytes=1024)
        with pytest.raises(kube.KubeForbidden):
            reader.list_first("Event", namespace=shop.tenant.namespace, limit=10)
