"""Real vclusters on the dev nodes: the whole tenant journey through a real Celery worker, with nothing played.

The host is ``node_control_plane`` (two real nodes with kube-proxy, CoreDNS, local-path-provisioner and
kube-network-policies), its nodes holding the images the project builds for vcluster (devcluster/images.py:
the syncer with kine and helm, the Kubernetes binaries, CoreDNS, the hosts rewriter). The worker's real helm
installs the vendored chart 0.30.0 with the values Berth renders; the Service is a LoadBalancer, whose address
the dev load balancer gives (devcluster/loadbalancer.py) and which the cluster record leaves as the tenants'
endpoint (no ``public_host_template``). Every claim about access is made with the handed-back kubeconfig.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devcluster.images import VCLUSTER_KUBERNETES_IMAGE, VCLUSTER_REGISTRY, VCLUSTER_SYNCER_IMAGE, WORKLOAD_IMAGE
from tenants import services
from tenants.audit import AuditContext
from tenants.models import AuditEvent, Cluster, Tenant, TenantRequest, Tier
from tests.plugins.kube import manifest, read_or_none, wait_for
from tests.plugins.worker import NETWORK_CHECK_IDS, OUTPUT, fetch_kubeconfig, stored_anywhere, wait_status
from tests.worker.backends.conftest import approved_vcluster
from worker import kube, provisioning
from worker.backends import backend_for
from worker.backends.vcluster import VClusterControlPlane
from worker.kube import Kube
from worker.vcluster_values import parse_config

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.cluster,
    pytest.mark.nodes,
    pytest.mark.worker,
    pytest.mark.vcluster,
]

READY_TIMEOUT = 300  # approval to ready: the chart's pod, the virtual control plane, CoreDNS inside


@pytest.fixture
def real_vcluster_host(
    node_control_plane, node_kube_admin, small, medium, large, vcluster_chart_repo
) -> Iterator[Callable[..., Cluster]]:
    """real_vcluster_host(**settings): a registered Cluster on the host with nodes, offering vcluster with the
    project's images."""
    prefixes: list[str] = []

    def make(**settings: Any) -> Cluster:
        prefix = f"r{secrets.token_hex(2)}-"
        prefixes.append(prefix)
        cluster = Cluster.objects.create(
            name=f"rv-{prefix[:-1]}",
            display_name="Dev nodes (vcluster)",
            api_url=node_control_plane.api_url,
            ca_pem=node_control_plane.ca_cert_pem,
            credential_ref=f"kubeconfig:{node_control_plane.kubeconfig_path}",
            public_endpoint=node_control_plane.api_url,
            namespace_prefix=prefix,
            kinds=["namespace", "vcluster"],
            virtual_config={
                "vcluster": {
                    "installer": "helm",
                    "chart_repo": vcluster_chart_repo,
                    "expose": "LoadBalancer",
                    "image_registry": VCLUSTER_REGISTRY,
                    "syncer_image": VCLUSTER_SYNCER_IMAGE,
                    "kubernetes_image": VCLUSTER_KUBERNETES_IMAGE,
                    **settings,
                }
            },
        )
        cluster.tiers.set([small, medium, large])
        return cluster

    yield make
    core = client.CoreV1Api(node_kube_admin)
    for ns in core.list_namespace().items:
        name = str(ns.metadata.name)
        if any(name.startswith(p) for p in prefixes) and not ns.metadata.deletion_timestamp:
            core.delete_namespace(name)


def _kubectl(kubectl_bin: Path, kubeconfig: str, *args: str, input: str | None = None, timeout: float = 60):
    return subprocess.run(
        [str(kubectl_bin), f"--kubeconfig={kubeconfig}", "--request-timeout=30s", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _deployment(name: str, *, privileged: bool = False, cpu_limit: str = "100m") -> str:
    """A small web server as restricted Pod Security admits it (or, with ``privileged``, as it refuses it)."""
    security = (
        {"privileged": True}
        if privileged
        else {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        }
    )
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "containers": [
                            {
                                "name": "web",
                                "image": WORKLOAD_IMAGE,
                                "command": ["httpd", "-f", "-v", "-p", "8080", "-h", "/www"],
                                "ports": [{"containerPort": 8080}],
                                "resources": {
                                    "requests": {"cpu": "10m", "memory": "16Mi"},
                                    "limits": {"cpu": cpu_limit, "memory": "32Mi"},
                                },
                                "securityContext": security,
                            }
                        ]
                    },
                },
            },
        }
    )


def _explained_wait(tenant: Tenant, status: str, kube_admin, timeout: float) -> None:
    """wait_status, and on timeout what the host namespace holds: pods with their states, and its events."""
    try:
        wait_status(tenant, status, timeout=timeout)
    except pytest.fail.Exception:
        core = client.CoreV1Api(kube_admin)
        pods = [
            (p.metadata.name, p.status.phase, [(c.name, c.state.to_dict()) for c in p.status.container_statuses or []])
            for p in core.list_namespaced_pod(tenant.namespace).items
        ]
        events = [
            f"{e.involved_object.kind}/{e.involved_object.name}: {e.reason}: {e.message}"
            for e in core.list_namespaced_event(tenant.namespace).items
        ]
        pytest.fail(f"{tenant.name} is {tenant.status} ({tenant.status_reason}); pods: {pods}; events: {events}")


def _host_pods(kube_admin, namespace: str, app: str) -> list[Any]:
    """The host's copies of the vcluster's pods labelled app=<app> (vcluster keeps the labels it syncs)."""
    pods = client.CoreV1Api(kube_admin).list_namespaced_pod(namespace).items
    return [p for p in pods if (p.metadata.labels or {}).get("app") == app]


def _fetch(kubectl_bin: Path, kubeconfig: str, namespace: str, pod: str, ip: str) -> bool:
    """Whether ``pod`` gets the web page from ``ip``:8080 within 3 s, run through ``kubeconfig``'s server (busybox
    nc: Debian's busybox-static wget crashes with -T)."""
    request = f"printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {ip} 8080"
    run = _kubectl(kubectl_bin, kubeconfig, "exec", "-n", namespace, pod, "--", "sh", "-c", request)
    return "berth busybox" in run.stdout


def _synced_pods_are_fenced_by_the_host_namespace(
    kubectl_bin: Path, kubeconfig: str, plane, kube_admin, tenant: Tenant
) -> None:
    """Packets: the host namespace's default deny holds for what vcluster syncs. A synced pod reaches its sibling
    (same namespace), but neither reaches nor is reached by a pod of another namespace on the host."""
    core = client.CoreV1Api(kube_admin)
    other = f"{tenant.cluster.namespace_prefix}bystander"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    core.create_namespaced_pod(
        other,
        manifest(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "web", "labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {"name": "web", "image": WORKLOAD_IMAGE, "command": ["httpd", "-f", "-p", "8080", "-h", "/www"]}
                    ]
                },
            }
        ),
    )
    bystander = wait_for(
        lambda: (p := core.read_namespaced_pod("web", other)).status.phase == "Running" and p,
        timeout=60,
        what="the bystander pod",
    )
    admin = str(plane.kubeconfig_path)
    first, second = sorted(
        json.loads(
            _kubectl(kubectl_bin, kubeconfig, "get", "pods", "-n", "default", "-l", "app=hello", "-o", "json").stdout
        )["items"],
        key=lambda pod: pod["metadata"]["name"],
    )
    sibling = second["status"]["podIP"]
    assert wait_for(
        lambda: _fetch(kubectl_bin, kubeconfig, "default", first["metadata"]["name"], sibling),
        timeout=30,
        what="a synced pod to reach its sibling",
    )
    assert not _fetch(
        kubectl_bin,
        kubeconfig,
        "default",
        first["metadata"]["name"],
        bystander.status.pod_ip,
    ), "a synced pod reached a pod of another namespace"
    assert not _fetch(kubectl_bin, admin, other, "web", sibling), "another namespace's pod reached a synced pod"
    # The same bystander is reachable from outside the tenant: the refusals above are the tenant's policy.
    assert _fetch(kubectl_bin, admin, other, "web", bystander.status.pod_ip)
    core.delete_namespace(other)


def _chart_runs_under_the_tier(kube_admin, tenant: Tenant) -> None:
    """The control plane's pod runs in the host namespace under the tier: the Pod Security label, every
    container with requests and limits and no privilege escalation, counted by the quota; nothing cluster-scoped
    on the host; the team gets no Role, binding or ServiceAccount of Berth's there."""
    core = client.CoreV1Api(kube_admin)
    labels = core.read_namespace(tenant.namespace).metadata.labels or {}
    assert labels["pod-security.kubernetes.io/enforce"] == tenant.tier.pod_security_level
    pod = core.read_namespaced_pod(f"{tenant.name}-0", tenant.namespace)
    for container in [*(pod.spec.init_containers or []), *pod.spec.containers]:
        resources = container.resources
        assert {"cpu", "memory"} <= set(resources.requests or {}) & set(resources.limits or {}), container.name
        assert container.security_context.allow_privilege_escalation is False, container.name
    used = core.read_namespaced_resource_quota("berth-quota", tenant.namespace).status.used or {}
    assert int(used["pods"]) >= 4  # the control plane, CoreDNS and the team's two pods
    rbac = client.RbacAuthorizationV1Api(kube_admin)
    assert rbac.list_cluster_role_binding(label_selector=f"release={tenant.name}").items == []
    bindings = rbac.list_namespaced_role_binding(tenant.namespace).items
    assert [(b.metadata.name, b.role_ref.name) for b in bindings] == [(f"vc-{tenant.name}", f"vc-{tenant.name}")]
    accounts = {sa.metadata.name for sa in core.list_namespaced_service_account(tenant.namespace).items}
    assert not {"berth-tenant", "berth-viewer"} & accounts


def _report_is_proven_and_each_guard_matters(tenant: Tenant, kube_admin) -> None:
    """The isolation report runs against the real vcluster and proves the network with packets; taking a guard
    away fails its check, and putting it back passes it again."""

    def report() -> dict | None:
        tenant.refresh_from_db()
        return tenant.isolation_report

    checks = {c["id"]: c for c in wait_for(report, timeout=120, what="the isolation report")["checks"]}
    assert set(checks) == {
        "virtual-cluster-admin",
        "virtual-no-host-credentials",
        "MTB-PL1-CC-FNS-1",
        *NETWORK_CHECK_IDS,
    }
    assert all(c["passed"] and c.get("proven", True) for c in checks.values()), checks

    networking = client.NetworkingV1Api(kube_admin)
    # Without the namespace's policies (the control plane's own opening aside) nothing fences its pods.
    for policy in networking.list_namespaced_network_policy(tenant.namespace).items:
        if policy.metadata.name != "berth-allow-vcluster-control-plane":
            networking.delete_namespaced_network_policy(str(policy.metadata.name), tenant.namespace)
    admin = VClusterControlPlane().admin_kubeconfig(
        tenant, kube.for_cluster(tenant.cluster), parse_config(tenant.cluster)
    )
    assert admin is not None
    inside = Kube.from_kubeconfig_dict(admin)
    inside.delete("ClusterRoleBinding", "berth-tenant-cluster-admin")
    broken_report = provisioning.isolation_report(str(tenant.pk))
    assert broken_report is not None
    broken = {c["id"]: c for c in broken_report["checks"]}
    assert not broken["MTB-PL1-CC-NET-1"]["passed"] and broken["MTB-PL1-CC-NET-1"]["proven"], broken
    assert not broken["virtual-cluster-admin"]["passed"], broken

    assert provisioning.provision(str(tenant.pk)).outcome == "repaired"
    mended = provisioning.isolation_report(str(tenant.pk))
    assert mended is not None and mended["passed"], mended


def _admin_kubeconfig_never_leaves_the_worker(tenant: Tenant, kube_admin, caplog) -> None:
    """The vcluster's admin client key appears in no log line, table or audit event of the portal's."""
    caplog.set_level(logging.DEBUG)
    assert provisioning.provision(str(tenant.pk)).outcome == "in sync"
    data = client.CoreV1Api(kube_admin).read_namespaced_secret(f"vc-{tenant.name}", tenant.namespace).data or {}
    key = yaml.safe_load(base64.b64decode(data["config"]))["users"][0]["user"]["client-key-data"]
    pem_line = base64.b64decode(key).decode().splitlines()[1]
    for leak in (key, pem_line):
        assert leak not in caplog.text
        assert leak not in (OUTPUT / "celery-worker.log").read_text(errors="replace")
        assert stored_anywhere(leak) == []
        assert leak not in str(list(AuditEvent.objects.values_list("before", "after")))


def test_a_team_runs_its_workload_in_a_real_vcluster_and_the_host_bounds_it(
    celery_worker,
    real_vcluster_host,
    node_control_plane,
    node_kube_admin,
    alice,
    carol,
    team_a,
    medium,
    tmp_path,
    caplog,
):
    cluster = real_vcluster_host()
    began = time.monotonic()
    tenant = approved_vcluster(alice=alice, carol=carol, team=team_a, tier=medium, cluster=cluster)
    _explained_wait(tenant, "ready", node_kube_admin, READY_TIMEOUT)
    approve_to_ready = time.monotonic() - began
    core = client.CoreV1Api(node_kube_admin)

    # The control plane is the real vcluster: its pod runs the project's syncer image on a node.
    control = core.read_namespaced_pod(f"{tenant.name}-0", tenant.namespace)
    assert control.status.phase == "Running" and control.spec.node_name
    images = {c.image for c in [*(control.spec.init_containers or []), *control.spec.containers]}
    assert f"{VCLUSTER_REGISTRY}/{VCLUSTER_SYNCER_IMAGE}" in images
    assert f"{VCLUSTER_REGISTRY}/{VCLUSTER_KUBERNETES_IMAGE}" in images
    service = core.read_namespaced_service(tenant.name, tenant.namespace)
    (ingress,) = service.status.load_balancer.ingress or []
    assert service.spec.type == "LoadBalancer" and service.spec.allocate_load_balancer_node_ports is False

    # The team's kubeconfig is for the vcluster's endpoint (the load balancer's address), never the host.
    path, config = fetch_kubeconfig(alice, tenant, tmp_path)
    assert config["clusters"][0]["cluster"]["server"] == f"https://{ingress.ip}"
    assert "token" in config["users"][0]["user"] and "client-key-data" not in config["users"][0]["user"]
    kubectl_bin = node_control_plane.kubectl
    version = json.loads(_kubectl(kubectl_bin, path, "version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"].startswith("v1.34"), version
    assert _kubectl(kubectl_bin, path, "auth", "can-i", "*", "*").stdout.strip() == "yes"
    nodes = _kubectl(kubectl_bin, path, "get", "nodes", "-o", "name")
    assert nodes.returncode == 0, nodes.stderr
    # Against the host (trusting the host's CA), the token is unknown: 401.
    refused = _kubectl(
        kubectl_bin,
        path,
        "get",
        "namespaces",
        f"--server={node_control_plane.api_url}",
        f"--certificate-authority={node_control_plane.ca_file}",
    )
    assert refused.returncode != 0 and "must be logged in" in refused.stderr.lower(), refused.stderr

    # A Deployment applied inside runs on the host: synced into the host namespace, Running on a shared node.
    applied = _kubectl(kubectl_bin, path, "apply", "-f", "-", input=_deployment("hello"))
    assert applied.returncode == 0, applied.stderr

    def running_on_host() -> Any:
        pods = [p for p in _host_pods(node_kube_admin, tenant.namespace, "hello") if p.status.phase == "Running"]
        return pods[0] if len(pods) == 2 else None

    synced = wait_for(running_on_host, timeout=120, what="the vcluster's pods to run on the host")
    node = core.read_node(synced.spec.node_name)
    assert (node.metadata.labels or {}).get("berth.dev/pool") == "shared"
    inside = json.loads(
        _kubectl(kubectl_bin, path, "get", "pods", "-n", "default", "-l", "app=hello", "-o", "json").stdout
    )
    name = inside["items"][0]["metadata"]["name"]
    wait_for(
        lambda: (
            _kubectl(
                kubectl_bin,
                path,
                "exec",
                "-n",
                "default",
                name,
                "--",
                "wget",
                "-qO-",
                "http://127.0.0.1:8080/index.html",
            ).stdout
            or None
        ),
        timeout=60,
        what="exec through the vcluster",
    )
    served = _kubectl(
        kubectl_bin, path, "exec", "-n", "default", name, "--", "wget", "-qO-", "http://127.0.0.1:8080/index.html"
    )
    assert served.stdout == "berth busybox\n", served.stderr
    logs = _kubectl(kubectl_bin, path, "logs", "-n", "default", name)
    assert logs.returncode == 0 and "127.0.0.1" in logs.stdout, logs.stderr

    _synced_pods_are_fenced_by_the_host_namespace(kubectl_bin, path, node_control_plane, node_kube_admin, tenant)
    _chart_runs_under_the_tier(node_kube_admin, tenant)
    _report_is_proven_and_each_guard_matters(tenant, node_kube_admin)
    _admin_kubeconfig_never_leaves_the_worker(tenant, node_kube_admin, caplog)

    # The tier's Pod Security refuses a privileged pod, already inside the vcluster (policies.podSecurityStandard).
    denied = _kubectl(kubectl_bin, path, "apply", "-f", "-", input=_deployment("root", privileged=True))
    assert denied.returncode == 0, denied.stderr  # a Deployment is admitted; its pods are not

    def refused_event(words: str) -> str | None:
        events = _kubectl(kubectl_bin, path, "get", "events", "-n", "default", "-o", "json").stdout
        messages = [e.get("message", "") for e in json.loads(events or "{}").get("items", [])]
        return next((m for m in messages if words in m), None)

    refusal = wait_for(lambda: refused_event("violates PodSecurity"), timeout=60, what="the refusal inside")
    assert "privileged" in refusal
    assert _host_pods(node_kube_admin, tenant.namespace, "root") == []

    # The host's LimitRange bounds what is synced: a pod above the tier's maximum is admitted inside (the
    # virtual cluster has no LimitRange of its own) but refused on the host, and the syncer says so inside.
    huge = _kubectl(kubectl_bin, path, "apply", "-f", "-", input=_deployment("huge", cpu_limit="64"))
    assert huge.returncode == 0, huge.stderr
    refusal = wait_for(lambda: refused_event("maximum cpu usage per Container"), timeout=90, what="the host's refusal")
    assert "forbidden" in refusal
    assert _host_pods(node_kube_admin, tenant.namespace, "huge") == []

    # Decommission: helm uninstall, volume claims and the host namespace gone; nothing of it left.
    services.tenant_decommission(tenant=tenant, actor=alice, reason="done", ctx=AuditContext())
    wait_status(tenant, "deleted", timeout=240)
    assert read_or_none(lambda: core.read_namespace(tenant.namespace)) is None
    volumes = [
        v.metadata.name
        for v in core.list_persistent_volume().items
        if (v.spec.claim_ref and v.spec.claim_ref.namespace == tenant.namespace)
    ]
    wait_for(
        lambda: (
            not [
                v
                for v in core.list_persistent_volume().items
                if v.spec.claim_ref and v.spec.claim_ref.namespace == tenant.namespace
            ]
        ),
        timeout=60,
        what=f"the volumes of {tenant.namespace} ({volumes}) to be reclaimed",
    )
    print(f"approve->ready {approve_to_ready:.1f}s")


def test_a_vcluster_follows_its_tier_moves_teams_and_is_repaired(
    celery_worker,
    real_vcluster_host,
    node_control_plane,
    node_kube_admin,
    alice,
    bob,
    carol,
    team_a,
    team_b,
    medium,
    tmp_path,
):
    cluster = real_vcluster_host()
    # A bigger tier on the same nodes (a vcluster cannot move pools: its control plane's volume stays there).
    bigger = Tier.objects.get(pk=medium.pk)
    bigger.pk, bigger.name, bigger.cpu_limit_millis, bigger.sleep_allowed = None, "medium-plus", 12000, True
    bigger.save()
    cluster.tiers.add(bigger)
    tenant = approved_vcluster(alice=alice, carol=carol, team=team_a, tier=medium, cluster=cluster, name="grow")
    core = client.CoreV1Api(node_kube_admin)
    # A fault: the control plane's pod killed while it comes up. Its StatefulSet makes it anew; the tenant converges.
    control_plane = f"{tenant.name}-0"
    wait_for(
        lambda: read_or_none(lambda: core.read_namespaced_pod(control_plane, tenant.namespace)),
        timeout=120,
        what="the control plane's pod",
    )
    core.delete_namespaced_pod(control_plane, tenant.namespace, grace_period_seconds=0)
    _explained_wait(tenant, "ready", node_kube_admin, READY_TIMEOUT)
    kubectl_bin = node_control_plane.kubectl
    before, _ = fetch_kubeconfig(alice, tenant, tmp_path)
    assert _kubectl(kubectl_bin, before, "auth", "can-i", "*", "*").stdout.strip() == "yes"

    # Quota usage comes from the host namespace: the control plane and CoreDNS count.
    tenant.refresh_from_db()
    assert int(tenant.quota_usage["used"]["pods"]) >= 2, tenant.quota_usage

    # A tier change: the worker's helm upgrade gives the chart's quota the new tier's, as Berth's own.
    change = services.request_submit(actor=alice, action=TenantRequest.Action.CHANGE_TIER, tenant=tenant, tier=bigger)
    services.request_approve(tenant_request=change, actor=carol)
    limit = "12"

    def follows() -> bool:
        chart = core.read_namespaced_resource_quota(f"vc-{tenant.name}", tenant.namespace).spec.hard or {}
        berth = core.read_namespaced_resource_quota("berth-quota", tenant.namespace).spec.hard or {}
        return chart.get("limits.cpu") == limit and berth.get("limits.cpu") == limit

    wait_for(follows, timeout=120, what="the host quotas to follow the tier change")
    # The chart's pod carries a hash of its config (vClusterConfigHash), so the tier change replaces the control
    # plane's pod; Berth keeps the tenant ready meanwhile. The team's kubeconfig is used straight after (below), so
    # wait for the StatefulSet to have rolled out, as `kubectl rollout status` judges it.
    apps = client.AppsV1Api(node_kube_admin)

    def rolled_out() -> bool:
        sts = apps.read_namespaced_stateful_set(tenant.name, tenant.namespace)
        status = sts.status
        return (
            (status.observed_generation or 0) >= (sts.metadata.generation or 0)
            and (status.ready_replicas or 0) >= 1
            and status.update_revision == status.current_revision
        )

    wait_for(rolled_out, timeout=READY_TIMEOUT, what="the control plane's pod replaced on the new tier")
    assert core.read_namespaced_pod(f"{tenant.name}-0", tenant.namespace).status.phase == "Running"

    # A hand edit of the release's objects is repaired by the reconcile (the worker's helm upgrade).
    core.patch_namespaced_resource_quota(
        f"vc-{tenant.name}", tenant.namespace, {"spec": {"hard": {"limits.cpu": "64"}}}
    )
    # (the worker may still hold the tenant's lock from the tier change's own pass)
    outcome = wait_for(
        lambda: (o := provisioning.provision(str(tenant.pk)).outcome) != "locked" and o, timeout=60, what="the lock"
    )
    assert outcome in ("in sync", "repaired")
    chart = core.read_namespaced_resource_quota(f"vc-{tenant.name}", tenant.namespace).spec.hard or {}
    assert chart["limits.cpu"] == limit

    _sleeps_and_wakes_with_its_state(tenant, kubectl_bin, before, node_kube_admin, alice)

    # A transfer: the new team's credentials work inside, the old team's are refused by the virtual API server.
    control_plane_pod = core.read_namespaced_pod(f"{tenant.name}-0", tenant.namespace).metadata.uid
    req = services.transfer_ask(tenant=tenant, target_team=team_b, actor=alice)
    req = services.transfer_accept(tenant_request=req, actor=bob)
    if req.status == TenantRequest.Status.PENDING:
        services.request_approve(tenant_request=req, actor=carol)

    def renewed() -> bool:
        tenant.refresh_from_db()
        return tenant.team_id == team_b.pk and tenant.applied_credential_epoch == tenant.credential_epoch

    wait_for(renewed, timeout=120, what="the transfer's credentials to be renewed inside")
    after, _ = fetch_kubeconfig(bob, tenant, tmp_path)  # at once: the transfer did not restart the control plane
    assert _kubectl(kubectl_bin, after, "auth", "can-i", "*", "*").stdout.strip() == "yes"
    # The transfer did not replace the control plane's pod (its pods do not carry the team).
    assert core.read_namespaced_pod(f"{tenant.name}-0", tenant.namespace).metadata.uid == control_plane_pod
    wait_for(
        lambda: "must be logged in" in _kubectl(kubectl_bin, before, "get", "namespaces").stderr.lower(),
        timeout=30,
        what="the old team's token to be refused inside",
    )

    services.tenant_decommission(tenant=tenant, actor=bob, reason="done", ctx=AuditContext())
    wait_status(tenant, "deleted", timeout=240)
    assert read_or_none(lambda: core.read_namespace(tenant.namespace)) is None


def _sleeps_and_wakes_with_its_state(tenant: Tenant, kubectl_bin: Path, kubeconfig: str, kube_admin, alice) -> None:
    """Asleep, nothing of the vcluster runs on the host (the team's pods, CoreDNS, the control plane) but its
    volume; awake, the team's Deployment has its replicas back and what it created inside is still there."""
    core = client.CoreV1Api(kube_admin)
    assert _kubectl(kubectl_bin, kubeconfig, "apply", "-f", "-", input=_deployment("hello")).returncode == 0
    made = _kubectl(kubectl_bin, kubeconfig, "create", "configmap", "kept", "-n", "default", "--from-literal=a=b")
    assert made.returncode == 0, made.stderr

    def host_pods(app: str, count: int) -> bool:
        running = [p for p in _host_pods(kube_admin, tenant.namespace, app) if p.status.phase == "Running"]
        return len(running) == count

    wait_for(lambda: host_pods("hello", 2), timeout=120, what="the team's pods to run on the host")
    tenant.refresh_from_db()  # on its new tier, which allows sleeping
    services.tenant_sleep(tenant=tenant, actor=alice)

    def applied() -> bool:
        tenant.refresh_from_db()
        return tenant.sleep_applied

    wait_for(applied, timeout=180, what=f"the vcluster to fall asleep ({tenant.sleep_note})")
    wait_for(
        lambda: not core.list_namespaced_pod(tenant.namespace).items, timeout=120, what="the host namespace to empty"
    )
    assert core.list_namespaced_persistent_volume_claim(tenant.namespace).items  # its state stays
    sts = client.AppsV1Api(kube_admin).read_namespaced_stateful_set(tenant.name, tenant.namespace)
    assert sts.spec.replicas == 0
    # A reconcile keeps it asleep (the values say replicas 0) and does not call it broken.
    outcome = wait_for(
        lambda: (o := provisioning.provision(str(tenant.pk)).outcome) != "locked" and o, timeout=60, what="the lock"
    )
    assert outcome in ("in sync", "repaired")
    tenant.refresh_from_db()
    assert tenant.status == "ready" and backend_for(tenant).is_ready(tenant, kube.for_cluster(tenant.cluster))
    assert client.AppsV1Api(kube_admin).read_namespaced_stateful_set(tenant.name, tenant.namespace).spec.replicas == 0

    services.tenant_wake(tenant=tenant, actor=alice)
    wait_for(applied, timeout=240, what=f"the vcluster to wake ({tenant.sleep_note})")
    wait_for(lambda: host_pods("hello", 2), timeout=120, what="the team's pods to run again")
    kept = _kubectl(kubectl_bin, kubeconfig, "get", "configmap", "kept", "-n", "default", "-o", "jsonpath={.data.a}")
    assert kept.stdout == "b", kept.stderr
