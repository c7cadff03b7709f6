"""Tenants' workloads on real nodes: kubelet + containerd + runc + the CNI bridge (devcluster/nodes.py).

Two nodes: shared-1 (berth.dev/pool=shared, where every namespace without a selector of its own goes) and
dedicated-1 (berth.dev/pool=dedicated, the large tier's pool). Every action is taken with the tenant's own
kubeconfig from the portal; the admin client only reads.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from typing import Any

import pytest
from kubernetes import client

from devcluster.images import WORKLOAD_IMAGE
from tenants import services
from tenants.models import Tenant, TenantRequest
from tests.plugins.kube import wait_for
from tests.plugins.worker import fetch_kubeconfig, wait_status
from worker import provisioning

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker, pytest.mark.nodes]

RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@pytest.fixture
def team_a(team_a):
    """team-a with room in its budget for a large tenant beside mediums."""
    team_a.budget_cpu_millis = team_a.budget_memory_mib = team_a.budget_storage_gib = team_a.budget_tenants = 10**6
    team_a.save()
    return team_a


def _ready_tenant(*, alice, carol, team_a, tier, cluster, name: str) -> Tenant:
    tenant = services.request_submit(
        actor=alice,
        action=TenantRequest.Action.CREATE,
        team=team_a,
        tier=tier,
        cluster=cluster,
        name=name,
        purpose="workloads on real nodes",
    ).tenant
    if tenant.status == "requested":
        services.request_approve(tenant_request=tenant.requests.get(), actor=carol, comment="ok")
    return wait_status(tenant, "ready")


def _container(name: str = "web", command: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": WORKLOAD_IMAGE,
        "imagePullPolicy": "Never",
        "command": command or ["httpd", "-f", "-p", "8080", "-h", "/www"],
        "securityContext": RESTRICTED_CONTAINER,
        **extra,
    }


def _pod(name: str, *, containers: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"securityContext": RESTRICTED_POD, "containers": containers or [_container()], **spec},
    }


def _deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"securityContext": RESTRICTED_POD, "containers": [_container()]},
            },
        },
    }


def _apply(kubectl, config: str, body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return kubectl("apply", "-f", "-", kubeconfig=config, input=json.dumps(body))


def _kubectl_for(node_control_plane):
    def run(*args: str, kubeconfig: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(node_control_plane.kubectl), f"--kubeconfig={kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    return run


def _running_pods(core: client.CoreV1Api, namespace: str, selector: str, count: int) -> list[client.V1Pod]:
    def check() -> list[client.V1Pod] | None:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        running = [
            p for p in pods if p.status.phase == "Running" and all(c.ready for c in p.status.container_statuses or [])
        ]
        return running if len(running) == count else None

    return wait_for(check, timeout=90, what=f"{count} running pods {selector} in {namespace}")


def _http_get(ip: str | None, port: int = 8080) -> str:
    with urllib.request.urlopen(f"http://{ip}:{port}/", timeout=5) as response:
        return response.read().decode()


def test_medium_deployment_runs_on_the_shared_pool_and_serves(
    celery_worker, live_node_cluster, node_control_plane, node_kube_admin, alice, carol, team_a, medium, tmp_path
):
    tenant = _ready_tenant(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_node_cluster, name="web")
    config, _ = fetch_kubeconfig(alice, tenant, tmp_path)
    kubectl = _kubectl_for(node_control_plane)
    applied = _apply(kubectl, config, _deployment("web", replicas=2))
    assert applied.returncode == 0, applied.stderr
    pods = _running_pods(client.CoreV1Api(node_kube_admin), tenant.namespace, "app=web", 2)
    assert {p.spec.node_name for p in pods} == {"shared-1"}
    for pod in pods:
        assert _http_get(pod.status.pod_ip) == "berth busybox\n"


def test_large_tenants_pods_land_only_on_the_dedicated_pool(
    celery_worker, live_node_cluster, node_control_plane, node_kube_admin, alice, carol, team_a, large, tmp_path
):
    tenant = _ready_tenant(alice=alice, carol=carol, team_a=team_a, tier=large, cluster=live_node_cluster, name="big")
    config, _ = fetch_kubeconfig(alice, tenant, tmp_path)
    kubectl = _kubectl_for(node_control_plane)
    applied = _apply(kubectl, config, _deployment("big", replicas=3))
    assert applied.returncode == 0, applied.stderr
    pods = _running_pods(client.CoreV1Api(node_kube_admin), tenant.namespace, "app=big", 3)
    assert {p.spec.node_name for p in pods} == {"dedicated-1"}
    assert _http_get(pods[0].status.pod_ip) == "berth busybox\n"


def test_a_tenant_cannot_select_or_tolerate_its_way_onto_another_pool(
    celery_worker, live_node_cluster, node_control_plane, node_kube_admin, alice, carol, team_a, medium, large, tmp_path
):
    web = _ready_tenant(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_node_cluster, name="web")
    big = _ready_tenant(alice=alice, carol=carol, team_a=team_a, tier=large, cluster=live_node_cluster, name="big")
    web_config, _ = fetch_kubeconfig(alice, web, tmp_path)
    big_config, _ = fetch_kubeconfig(alice, big, tmp_path)
    kubectl = _kubectl_for(node_control_plane)

    onto_dedicated = _apply(kubectl, web_config, _pod("sneak", nodeSelector={"berth.dev/pool": "dedicated"}))
    assert onto_dedicated.returncode != 0
    assert "conflicts with its namespace node label selector" in onto_dedicated.stderr
    onto_shared = _apply(kubectl, big_config, _pod("sneak", nodeSelector={"berth.dev/pool": "shared"}))
    assert onto_shared.returncode != 0
    assert "conflicts with its namespace node label selector" in onto_shared.stderr
    tolerating = _pod("sneak", tolerations=[{"key": "berth.dev/pool", "operator": "Exists"}])
    refused = _apply(kubectl, web_config, tolerating)
    assert refused.returncode != 0
    assert "berth-node-pool-tolerations" in refused.stderr
    # A node name skips the scheduler; the pod must still not run on the other pool.
    pinned = _apply(kubectl, web_config, _pod("pinned", nodeName="dedicated-1"))
    assert pinned.returncode != 0 or _never_runs_on(node_kube_admin, web.namespace, "pinned", "dedicated-1")
    core = client.CoreV1Api(node_kube_admin)
    for namespace in (web.namespace, big.namespace):
        assert not [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name == "sneak"]


def _never_runs_on(admin, namespace: str, name: str, node: str) -> bool:
    core = client.CoreV1Api(admin)
    pod = wait_for(
        lambda: (p := core.read_namespaced_pod(name, namespace)).status.phase != "Pending" and p,
        timeout=60,
        what=f"{namespace}/{name} to leave Pending",
    )
    return pod.status.phase == "Failed" and pod.spec.node_name == node


def test_quota_usage_follows_running_pods_and_the_quota_stops_the_pod_beyond_it(
    celery_worker, live_node_cluster, node_control_plane, node_kube_admin, alice, carol, team_a, medium, tmp_path
):
    tenant = _ready_tenant(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_node_cluster, name="q")
    config, _ = fetch_kubeconfig(alice, tenant, tmp_path)
    kubectl = _kubectl_for(node_control_plane)
    core = client.CoreV1Api(node_kube_admin)

    def used() -> dict[str, str]:
        provisioning.refresh_usage(str(tenant.pk))
        tenant.refresh_from_db()
        return (tenant.quota_usage or {}).get("used", {})

    wait_for(lambda: used().get("pods") == "0", what="the portal to show no pods in use")
    # The medium tier requests at most 8Gi of memory: 6Gi fits, another 3Gi does not.
    big = {"requests": {"memory": "6Gi", "cpu": "100m"}, "limits": {"memory": "6Gi", "cpu": "500m"}}
    applied = _apply(kubectl, config, _pod("big", containers=[_container(resources=big)]))
    assert applied.returncode == 0, applied.stderr
    wait_for(
        lambda: core.read_namespaced_pod("big", tenant.namespace).status.phase == "Running", what="the big pod to run"
    )
    wait_for(
        lambda: (u := used()).get("pods") == "1" and u.get("requests.memory") == "6Gi",
        what="the portal's quota usage to show the running pod",
    )
    more = {"requests": {"memory": "3Gi"}, "limits": {"memory": "3Gi"}}
    refused = _apply(kubectl, config, _pod("more", containers=[_container(resources=more)]))
    assert refused.returncode != 0
    assert "exceeded quota: berth-quota" in refused.stderr
    deleted = kubectl("delete", "pod", "big", "--wait=true", kubeconfig=config)
    assert deleted.returncode == 0, deleted.stderr
    wait_for(lambda: used().get("pods") == "0", timeout=60, what="the portal's usage to drop with the pod")


def test_limitrange_defaults_make_a_pod_without_requests_burstable(
    celery_worker, live_node_cluster, node_control_plane, node_kube_admin, alice, carol, team_a, medium, tmp_path
):
    tenant = _ready_tenant(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_node_cluster, name="qos")
    config, _ = fetch_kubeconfig(alice, tenant, tmp_path)
    kubectl = _kubectl_for(node_control_plane)
    applied = _apply(kubectl, config, _pod("plain"))
    assert applied.returncode == 0, applied.stderr
    core = client.CoreV1Api(node_kube_admin)
    pod = wait_for(
        lambda: (p := core.read_namespaced_pod("plain", tenant.namespace)).status.phase == "Running" and p,
        what="the pod without requests to run",
    )
    resources = pod.spec.containers[0].resources
    assert resources.requests == {"cpu": "100m", "memory": "128Mi"}
    assert resources.limits == {"cpu": "500m", "memory": "512Mi"}
    # Requests below limits: Burstable, neither evicted first (BestEffort) nor reserving its limit (Guaranteed).
    assert pod.status.qos_class == "Burstable"


def _wait_running(core: client.CoreV1Api, namespace: str, name: str) -> None:
    wait_for(
        lambda: core.read_namespaced_pod(name, namespace).status.phase == "Running", what=f"{namespace}/{name} to run"
    )


def test_logs_and_exec_work_in_the_tenants_namespace_only(
    celery_worker, live_node_cluster, node_control_plane, node_kube_admin, alice, carol, team_a, medium, tmp_path
):
    mine = _ready_tenant(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_node_cluster, name="mine")
    other = _ready_tenant(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_node_cluster, name="other")
    config, _ = fetch_kubeconfig(alice, mine, tmp_path)
    other_config, _ = fetch_kubeconfig(alice, other, tmp_path)
    kubectl = _kubectl_for(node_control_plane)
    talker = _container("talk", command=["sh", "-c", "echo hello from $(hostname); exec sleep 3600"])
    for cfg in (config, other_config):
        applied = _apply(kubectl, cfg, _pod("talk", containers=[talker]))
        assert applied.returncode == 0, applied.stderr
    core = client.CoreV1Api(node_kube_admin)
    for namespace in (mine.namespace, other.namespace):
        _wait_running(core, namespace, "talk")

    logs = wait_for(
        lambda: (r := kubectl("logs", "talk", kubeconfig=config)).returncode == 0 and r,
        what="kubectl logs to answer",
    )
    assert logs.stdout == "hello from talk\n"
    executed = kubectl("exec", "talk", "--", "id", "-u", kubeconfig=config)
    assert executed.returncode == 0, executed.stderr
    assert executed.stdout == "65534\n"

    for verb in (["logs", "talk"], ["exec", "talk", "--", "id"]):
        refused = kubectl(f"--namespace={other.namespace}", *verb, kubeconfig=config)
        assert refused.returncode != 0
        assert "forbidden" in refused.stderr.lower()
