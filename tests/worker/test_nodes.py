"""Tenants' workloads on real nodes: kubelet + containerd + runc + the CNI bridge (devcluster/nodes.py).

Two nodes: shared-1 (berth.dev/pool=shared, where every namespace without a selector of its own goes) and
dedicated-1 (berth.dev/pool=dedicated, the large tier's pool). Every action is taken with the tenant's own
kubeconfig from the portal; the admin client only reads.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
from typing import Any

import pytest
from kubernetes import client

from devcluster.images import WORKLOAD_IMAGE
from tenants import services
from tenants.models import Tenant, TenantRequest
from tests.plugins.kube import manifest, wait_for
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


def _http_get(kubectl, config: str, via: Any, url: str) -> str:
    """GET ``url`` from inside the namespace (pod ``via``): NetworkPolicy keeps everyone else out."""
    got = kubectl("exec", via, "--", "wget", "-q", "-O", "-", url, kubeconfig=config)
    assert got.returncode == 0, got.stderr
    return got.stdout


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
        assert (
            _http_get(kubectl, config, pods[0].metadata.name, f"http://{pod.status.pod_ip}:8080/") == "berth busybox\n"
        )


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
    url = f"http://{pods[0].status.pod_ip}:8080/"
    assert _http_get(kubectl, config, pods[1].metadata.name, url) == "berth busybox\n"


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


def _top_row(kubectl, config: str, pod: str) -> tuple[int, int] | None:
    """(CPU millicores, memory MiB) of ``pod`` as `kubectl top pod` shows it, once metrics-server has it."""
    got = kubectl("top", "pod", pod, "--no-headers", kubeconfig=config)
    match = re.fullmatch(rf"{pod}\s+(\d+)m\s+(\d+)Mi\s*", got.stdout)
    return (int(match[1]), int(match[2])) if got.returncode == 0 and match else None


def test_kubectl_top_shows_members_and_viewers_their_own_pods_usage(
    celery_worker,
    live_node_cluster,
    node_control_plane,
    node_kube_admin,
    alice,
    amir,
    vera,
    carol,
    team_a,
    medium,
    tmp_path,
):
    tenant = _ready_tenant(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_node_cluster, name="top")
    member_config, _ = fetch_kubeconfig(amir, tenant, tmp_path)
    viewer_config, _ = fetch_kubeconfig(vera, tenant, tmp_path)
    kubectl = _kubectl_for(node_control_plane)
    # Busy, but held to 50m: metrics-server must report CPU it measured, not a default.
    spinner = _container(
        "spin",
        command=["sh", "-c", "while :; do :; done"],
        resources={"requests": {"cpu": "50m"}, "limits": {"cpu": "50m"}},
    )
    applied = _apply(kubectl, member_config, _pod("spin", containers=[spinner]))
    assert applied.returncode == 0, applied.stderr
    _wait_running(client.CoreV1Api(node_kube_admin), tenant.namespace, "spin")

    # metrics-server needs two scrapes of a new pod (a CPU rate), one resolution (15 s) apart.
    cpu, memory = wait_for(
        lambda: _top_row(kubectl, member_config, "spin"), timeout=90, interval=3, what="kubectl top pod spin"
    )
    assert 0 < cpu <= 60 and memory >= 0
    assert _top_row(kubectl, viewer_config, "spin") is not None
    raw = kubectl(
        "get",
        "--raw",
        f"/apis/metrics.k8s.io/v1beta1/namespaces/{tenant.namespace}/pods/spin",
        kubeconfig=member_config,
    )
    assert raw.returncode == 0, raw.stderr
    usage = json.loads(raw.stdout)["containers"][0]["usage"]
    assert set(usage) == {"cpu", "memory"} and usage["memory"] not in ("0", "0Ki")


# --- A whole cluster: Services, DNS, storage, StatefulSets, Jobs and CronJobs, with the tenant's credentials ----


def _service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
    }


def _stateful_set(name: str) -> dict[str, Any]:
    """One replica writing to a volume claimed in the cluster's default storage class."""
    labels = {"app": name}
    claim: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    writer = _container(
        name,
        command=["sh", "-c", "echo kept > /data/hello && exec sleep 3600"],
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "serviceName": name,
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"securityContext": RESTRICTED_POD, "containers": [writer]},
            },
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": claim}],
        },
    }


def _job_spec(command: list[str]) -> dict[str, Any]:
    return {
        "backoffLimit": 0,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "securityContext": RESTRICTED_POD,
                "containers": [_container("job", command=command)],
            }
        },
    }


def _claim(name: str, storage_class: str, size: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "storageClassName": storage_class,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
        },
    }


def test_a_tenants_pods_reach_a_service_by_name_through_the_cluster_dns(
    celery_worker, live_node_cluster, node_control_plane, node_kube_admin, alice, carol, team_a, medium, tmp_path
):
    tenant = _ready_tenant(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_node_cluster, name="svc")
    config, _ = fetch_kubeconfig(alice, tenant, tmp_path)
    kubectl = _kubectl_for(node_control_plane)
    for body in (
        _deployment("web", replicas=1),
        _service("web"),
        _pod("client", containers=[_container("c", command=["sleep", "3600"])]),
    ):
        applied = _apply(kubectl, config, body)
        assert applied.returncode == 0, applied.stderr
    core = client.CoreV1Api(node_kube_admin)
    _running_pods(core, tenant.namespace, "app=web", 1)
    _wait_running(core, tenant.namespace, "client")
    # The Service's name through CoreDNS, its ClusterIP through kube-proxy, the pod through the policy that
    # lets pods of one namespace talk.
    answer = wait_for(
        lambda: (
            (r := kubectl("exec", "client", "--", "wget", "-q", "-O", "-", "http://web/", kubeconfig=config)).returncode
            == 0
            and r
        ),
        timeout=60,
        what="http://web/ to answer through the Service",
    )
    assert answer.stdout == "berth busybox\n"
    fqdn = f"http://web.{tenant.namespace}.svc.cluster.local/"
    assert _http_get(kubectl, config, "client", fqdn) == "berth busybox\n"


def test_a_tenants_stateful_set_keeps_its_volume_and_its_job_and_cron_job_run(
    celery_worker, live_node_cluster, node_control_plane, node_kube_admin, alice, carol, team_a, medium, tmp_path
):
    tenant = _ready_tenant(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_node_cluster, name="sts")
    config, _ = fetch_kubeconfig(alice, tenant, tmp_path)
    kubectl = _kubectl_for(node_control_plane)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once"}, "spec": _job_spec(["echo", "done"])}
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "tick"},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": _job_spec(["echo", "tick"])}},
    }
    for body in (_stateful_set("db"), job, cron):
        applied = _apply(kubectl, config, body)
        assert applied.returncode == 0, applied.stderr
    core = client.CoreV1Api(node_kube_admin)
    batch = client.BatchV1Api(node_kube_admin)

    _wait_running(core, tenant.namespace, "db-0")
    claim = core.read_namespaced_persistent_volume_claim("data-db-0", tenant.namespace)
    assert claim.status.phase == "Bound"
    assert claim.spec.storage_class_name == "local-path"  # the cluster's default class
    read = kubectl("exec", "db-0", "--", "cat", "/data/hello", kubeconfig=config)
    assert (read.returncode, read.stdout) == (0, "kept\n"), read.stderr
    wait_for(
        lambda: (batch.read_namespaced_job("once", tenant.namespace).status.succeeded or 0) == 1,
        timeout=60,
        what="the Job to succeed",
    )
    # The CronJob controller starts a Job at the next minute.
    wait_for(
        lambda: any(
            (j.status.succeeded or 0) == 1
            for j in batch.list_namespaced_job(tenant.namespace).items
            if j.metadata.name.startswith("tick-")
        ),
        timeout=150,
        interval=2,
        what="the CronJob to start a Job that succeeds",
    )


def test_claims_beyond_the_tiers_storage_quota_or_in_a_class_it_does_not_allow_are_refused(
    celery_worker, live_node_cluster, node_control_plane, node_kube_admin, alice, carol, team_a, small, tmp_path
):
    small.allowed_storage_classes = ["local-path"]
    small.save()
    storage = client.StorageV1Api(node_kube_admin)
    other = f"berth-test-other-{secrets.token_hex(3)}"
    storage.create_storage_class(
        manifest(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": other},
                "provisioner": "rancher.io/local-path",
            }
        )
    )
    try:
        tenant = _ready_tenant(
            alice=alice, carol=carol, team_a=team_a, tier=small, cluster=live_node_cluster, name="pvc"
        )
        config, _ = fetch_kubeconfig(alice, tenant, tmp_path)
        kubectl = _kubectl_for(node_control_plane)
        fits = _apply(kubectl, config, _claim("fits", "local-path", "1Gi"))
        assert fits.returncode == 0, fits.stderr
        too_big = _apply(kubectl, config, _claim("huge", "local-path", f"{small.storage_gib + 1}Gi"))
        assert too_big.returncode != 0
        assert "exceeded quota: berth-quota" in too_big.stderr
        elsewhere = _apply(kubectl, config, _claim("elsewhere", other, "1Gi"))
        assert elsewhere.returncode != 0
        assert (
            "berth-storage-classes" in elsewhere.stderr
        )  # the admission guard (tests/security/test_storage_classes.py)
        names = {
            c.metadata.name
            for c in client.CoreV1Api(node_kube_admin).list_namespaced_persistent_volume_claim(tenant.namespace).items
        }
        assert names == {"fits"}
    finally:
        storage.delete_storage_class(other)
