"""Namespace tenants end to end: services → Redis → a real Celery worker → the dev control plane.

Every assertion about access is made with the handed-back kubeconfig itself, never the admin client.
"""

from __future__ import annotations

import threading

import pytest
import yaml
from django.db import connections
from kubernetes import client
from rest_framework.test import APIClient

from tenants import services
from tenants.audit import AuditContext
from tenants.models import AuditEvent, Tenant, TenantRequest
from tests.plugins.kube import read_or_none, wait_for
from tests.plugins.worker import (
    assert_passes_but_packets_unproven,
    fetch_kubeconfig,
    provision_until_settled,
    wait_status,
)
from worker import provisioning

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]


def _create(*, actor, team, tier, cluster, name="web") -> Tenant:
    req = services.request_submit(
        actor=actor,
        action=TenantRequest.Action.CREATE,
        team=team,
        tier=tier,
        cluster=cluster,
        name=name,
        purpose="integration test",
    )
    return req.tenant


def _approved(*, alice, carol, team_a, tier, cluster, name="web") -> Tenant:
    tenant = _create(actor=alice, team=team_a, tier=tier, cluster=cluster, name=name)
    if tenant.status == "requested":
        services.request_approve(tenant_request=tenant.requests.get(), actor=carol, comment="ok")
    return tenant


def test_approved_medium_tenant_becomes_ready_with_every_object(
    celery_worker, live_cluster, kube_admin, alice, carol, team_a, medium
):
    tenant = _approved(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_cluster)
    wait_status(tenant, "ready")
    core, rbac, net = (
        client.CoreV1Api(kube_admin),
        client.RbacAuthorizationV1Api(kube_admin),
        client.NetworkingV1Api(kube_admin),
    )
    labels = core.read_namespace(tenant.namespace).metadata.labels or {}
    assert labels["app.kubernetes.io/managed-by"] == "berth"
    assert labels["berth.dev/tenant-id"] == str(tenant.pk)
    assert labels["berth.dev/team"] == "team-a"
    assert labels["berth.dev/tier"] == "medium"
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
    hard = core.read_namespaced_resource_quota("berth-quota", tenant.namespace).status.hard or {}
    assert hard["limits.cpu"] == "8"
    assert hard["requests.memory"] == "8Gi"
    assert hard["services.nodeports"] == "0"
    assert hard["services.loadbalancers"] == "1"
    priority = core.read_namespaced_resource_quota("berth-priority-classes", tenant.namespace)
    assert set((priority.spec.scope_selector.match_expressions or [])[0].values or []) >= {
        "system-cluster-critical",
        "system-node-critical",
    }
    limits = core.read_namespaced_limit_range("berth-limits", tenant.namespace)
    assert limits.spec.limits[0].default_request == {"cpu": "100m", "memory": "128Mi"}
    policies = {p.metadata.name for p in net.list_namespaced_network_policy(tenant.namespace).items}
    assert {"berth-default-deny", "berth-allow-dns", "berth-allow-same-namespace"} <= policies
    role = rbac.read_namespaced_role("berth-tenant", tenant.namespace)
    assert not any(verb in ("escalate", "bind", "impersonate", "*") for rule in role.rules for verb in rule.verbs)
    subject = (rbac.read_namespaced_role_binding("berth-tenant", tenant.namespace).subjects or [])[0]
    assert subject.kind == "ServiceAccount" and subject.name == "berth-tenant"
    tenant.refresh_from_db()
    assert tenant.quota_usage["hard"]["pods"] == "100"
    events = list(AuditEvent.objects.filter(object_id=str(tenant.pk)).values_list("action", flat=True))
    assert {"tenant.approve", "tenant.provisioning", "tenant.ready"} <= set(events)


def test_small_tier_gets_a_flow_schema_and_auto_approval(celery_worker, live_cluster, kube_admin, alice, team_a, small):
    tenant = _create(actor=alice, team=team_a, tier=small, cluster=live_cluster, name="ci")
    wait_status(tenant, "ready")
    schema = client.FlowcontrolApiserverV1Api(kube_admin).read_flow_schema(f"berth-{tenant.namespace}")
    assert schema.spec.priority_level_configuration.name == "workload-low"
    assert (schema.spec.rules or [])[0].subjects[0].service_account.namespace == tenant.namespace


def test_kubeconfig_works_and_is_limited(celery_worker, live_cluster, kubectl, alice, carol, team_a, medium, tmp_path):
    tenant = _approved(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_cluster)
    wait_status(tenant, "ready")
    path, config = fetch_kubeconfig(alice, tenant, tmp_path, lifetime_seconds=900)
    assert config["clusters"][0]["cluster"]["server"] == live_cluster.public_endpoint
    assert config["contexts"][0]["context"]["namespace"] == tenant.namespace
    ns = tenant.namespace

    def can(*args: str) -> str:
        return kubectl("auth", "can-i", *args, kubeconfig=path).stdout.strip()

    assert can("create", "deployments", "-n", ns) == "yes"
    assert can("delete", "secrets", "-n", ns) == "yes"
    assert can("list", "namespaces") == "no"
    assert can("get", "pods", "-n", "kube-system") == "no"
    assert can("patch", "resourcequotas", "-n", ns) == "no"
    assert can("create", "rolebindings", "-n", ns) == "no"
    assert can("create", "serviceaccounts", "--subresource=token", "-n", ns) == "no"
    made = kubectl("create", "configmap", "hello", "--from-literal=a=b", "-n", ns, kubeconfig=path)
    assert made.returncode == 0, made.stderr
    refused = kubectl("get", "namespaces", kubeconfig=path)
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower()
    event = AuditEvent.objects.get(action="tenant.kubeconfig_issued", object_id=str(tenant.pk))
    assert event.actor == alice and event.after["lifetime_seconds"] == 900 and event.after["role"] == "edit"
    token = config["users"][0]["user"]["token"]
    assert token not in str(AuditEvent.objects.values_list("before", "after"))
    forever = kubectl(
        "create",
        "-n",
        ns,
        "-f",
        "-",
        kubeconfig=path,
        input=yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/service-account-token",
                "metadata": {"name": "forever", "annotations": {"kubernetes.io/service-account.name": "berth-tenant"}},
            }
        ),
    )
    assert forever.returncode != 0 and "short-lived kubeconfig" in forever.stderr, forever.stderr


def test_viewer_gets_read_only_kubeconfig_and_outsider_gets_404(
    celery_worker, live_cluster, kubectl, alice, vera, bob, carol, team_a, medium, tmp_path
):
    tenant = _approved(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_cluster)
    wait_status(tenant, "ready")
    path, _ = fetch_kubeconfig(vera, tenant, tmp_path, lifetime_seconds=None)
    assert kubectl("auth", "can-i", "list", "pods", "-n", tenant.namespace, kubeconfig=path).stdout.strip() == "yes"
    assert kubectl("auth", "can-i", "create", "pods", "-n", tenant.namespace, kubeconfig=path).stdout.strip() == "no"
    assert kubectl("auth", "can-i", "get", "secrets", "-n", tenant.namespace, kubeconfig=path).stdout.strip() == "no"
    api = APIClient()
    api.force_authenticate(bob)
    assert api.post(f"/api/v1/tenants/{tenant.pk}/kubeconfig/", {}, format="json").status_code == 404


def test_kubeconfig_lifetime_outside_tier_limits_is_a_field_error(
    celery_worker, live_cluster, alice, carol, team_a, medium
):
    tenant = _approved(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_cluster)
    wait_status(tenant, "ready")
    api = APIClient()
    api.force_authenticate(alice)
    for bad in (60, 10 * 24 * 3600, "soon"):
        resp = api.post(f"/api/v1/tenants/{tenant.pk}/kubeconfig/", {"lifetime_seconds": bad}, format="json")
        assert resp.status_code == 400 and "lifetime_seconds" in resp.json(), resp.content
    assert not AuditEvent.objects.filter(action="tenant.kubeconfig_issued").exists()


def test_merged_kubeconfig_lists_my_namespaces(
    celery_worker, live_cluster, kubectl, alice, carol, team_a, medium, small, tmp_path
):
    one = _approved(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_cluster, name="one")
    two = _approved(alice=alice, carol=carol, team_a=team_a, tier=small, cluster=live_cluster, name="two")
    wait_status(one, "ready")
    wait_status(two, "ready")
    api = APIClient()
    api.force_authenticate(alice)
    resp = api.get("/api/v1/kubeconfig/")
    assert resp.status_code == 200
    path = tmp_path / "merged.kubeconfig"
    path.write_bytes(resp.content)
    contexts = kubectl("config", "get-contexts", "-o", "name", kubeconfig=str(path)).stdout.split()
    assert sorted(contexts) == sorted([f"{live_cluster.name}/{one.namespace}", f"{live_cluster.name}/{two.namespace}"])
    ctx_two = f"{live_cluster.name}/{two.namespace}"
    assert (
        kubectl("--context", ctx_two, "auth", "can-i", "create", "pods", kubeconfig=str(path)).stdout.strip() == "yes"
    )


def test_isolation_report_passes_then_fails_when_a_hand_made_binding_grants_too_much(
    celery_worker, live_cluster, kube_admin, alice, carol, team_a, medium
):
    tenant = _approved(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_cluster)
    wait_status(tenant, "ready")

    def report():
        tenant.refresh_from_db()
        return tenant.isolation_report

    wait_for(report, timeout=60, what="the first isolation report")
    assert_passes_but_packets_unproven(tenant.isolation_report)
    assert {c["id"] for c in tenant.isolation_report["checks"]} >= {
        "MTB-PL1-BC-CPI-5",
        "MTB-PL1-BC-HI-5",
        "MTB-PL1-CC-CPI-2",
        "berth-short-lived-credentials",
    }
    client.RbacAuthorizationV1Api(kube_admin).create_namespaced_role_binding(
        tenant.namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="too-much"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="cluster-admin"),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="berth-tenant", namespace=tenant.namespace)],
        ),
    )
    first_at = tenant.isolation_report_at
    api = APIClient()
    api.force_authenticate(alice)
    assert api.post(f"/api/v1/tenants/{tenant.pk}/isolation-check/").status_code == 202
    wait_for(
        lambda: report() and tenant.isolation_report_at != first_at, timeout=60, what="the second isolation report"
    )
    assert tenant.isolation_report["passed"] is False
    failing = {c["id"] for c in tenant.isolation_report["checks"] if not c["passed"]}
    assert {"MTB-PL1-CC-FNS-2", "MTB-PL1-CC-CPI-2"} <= failing


def test_reconcile_restores_a_deleted_network_policy_and_audits_it(
    celery_worker, live_cluster, kube_admin, alice, carol, team_a, medium
):
    tenant = _approved(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_cluster)
    wait_status(tenant, "ready")
    net = client.NetworkingV1Api(kube_admin)
    net.delete_namespaced_network_policy("berth-default-deny", tenant.namespace)
    core = client.CoreV1Api(kube_admin)
    core.patch_namespaced_resource_quota("berth-quota", tenant.namespace, {"spec": {"hard": {"pods": "9999"}}})
    assert provisioning.provision(str(tenant.pk)).outcome == "repaired"
    assert read_or_none(lambda: net.read_namespaced_network_policy("berth-default-deny", tenant.namespace)) is not None
    assert (core.read_namespaced_resource_quota("berth-quota", tenant.namespace).spec.hard or {})["pods"] == "100"
    event = AuditEvent.objects.get(action="tenant.drift_repaired", object_id=str(tenant.pk))
    assert "NetworkPolicy/berth-default-deny was missing" in event.after["repaired"]
    assert "ResourceQuota/berth-quota was changed" in event.after["repaired"]
    assert provisioning.provision(str(tenant.pk)).outcome == "in sync"


def test_tier_change_updates_the_quota(celery_worker, live_cluster, kube_admin, alice, carol, team_a, small, medium):
    tenant = _create(actor=alice, team=team_a, tier=small, cluster=live_cluster, name="grow")
    wait_status(tenant, "ready")
    change = services.request_submit(actor=alice, action=TenantRequest.Action.CHANGE_TIER, tenant=tenant, tier=medium)
    services.request_approve(tenant_request=change, actor=carol)
    core = client.CoreV1Api(kube_admin)

    def upgraded():
        hard = core.read_namespaced_resource_quota("berth-quota", tenant.namespace).spec.hard or {}
        return hard["limits.cpu"] == "8"

    wait_for(upgraded, timeout=60, what="the quota to follow the tier change")
    # medium has no API fairness level: the small tier's FlowSchema is pruned.
    wait_for(
        lambda: (
            read_or_none(
                lambda: client.FlowcontrolApiserverV1Api(kube_admin).read_flow_schema(f"berth-{tenant.namespace}")
            )
            is None
        ),
        timeout=30,
        what="the FlowSchema to be removed",
    )


def test_decommission_removes_everything(celery_worker, live_cluster, kube_admin, alice, team_a, small):
    tenant = _create(actor=alice, team=team_a, tier=small, cluster=live_cluster, name="bye")
    wait_status(tenant, "ready")
    with_objects = client.CoreV1Api(kube_admin)
    with_objects.create_namespaced_config_map(
        tenant.namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="data"))
    )
    services.tenant_decommission(tenant=tenant, actor=alice, reason="done", ctx=AuditContext())
    wait_status(tenant, "deleted", timeout=120)
    assert read_or_none(lambda: with_objects.read_namespace(tenant.namespace)) is None
    assert (
        read_or_none(lambda: client.FlowcontrolApiserverV1Api(kube_admin).read_flow_schema(f"berth-{tenant.namespace}"))
        is None
    )


def test_unreachable_cluster_leaves_tenant_retrying_then_it_converges(
    celery_worker, live_cluster, alice, team_a, small, control_plane
):
    from tests.worker.proxy import TcpProxy

    target = control_plane.api_url.removeprefix("https://")
    host, port = target.rsplit(":", 1)
    with TcpProxy(host, int(port)) as proxy:
        proxy.down()
        live_cluster.api_url = f"https://127.0.0.1:{proxy.port}"
        live_cluster.save()
        tenant = _create(actor=alice, team=team_a, tier=small, cluster=live_cluster, name="flaky")

        def waiting():
            tenant.refresh_from_db()
            return tenant.status == "provisioning" and "Waiting for the cluster" in tenant.status_reason

        wait_for(waiting, timeout=60, what="the tenant to report it is waiting for the cluster")
        proxy.up()
        wait_status(tenant, "ready", timeout=120)
    assert tenant.status_reason == ""


def test_redis_down_at_approval_still_ends_ready_through_the_sweep(
    celery_worker, live_cluster, redis_server, alice, carol, team_a, medium, settings, empty_provision_queue
):
    from worker.tasks import sweep

    tenant = _create(actor=alice, team=team_a, tier=medium, cluster=live_cluster, name="outage")
    redis_server.stop()
    try:
        services.request_approve(tenant_request=tenant.requests.get(), actor=carol)
    finally:
        redis_server.start()
    tenant.refresh_from_db()
    assert tenant.status == "approved"  # approved work is recorded, not lost
    settings.BERTH_STUCK_AFTER_SECONDS = 0
    settings.BERTH_STUCK_BACKLOG_SECONDS = 0  # whatever the worker's queue holds at the moment the sweep looks

    def swept_and_ready():
        tenant.refresh_from_db()
        if tenant.status == "approved":
            sweep()
        return tenant.status == "ready"

    wait_for(swept_and_ready, timeout=120, interval=2, what="the sweep to re-send the provisioning job")


def test_two_workers_racing_on_one_tenant_provision_it_once(live_cluster, alice, carol, team_a, medium, dispatched):
    tenant = _approved(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_cluster, name="race")
    results: list[str] = []
    barrier = threading.Barrier(2)

    def work():
        try:
            barrier.wait()
            results.append(provision_until_settled(str(tenant.pk)).outcome)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results)[-1] == "ready" and results.count("ready") == 1, results
    assert AuditEvent.objects.filter(object_id=str(tenant.pk), action="tenant.ready").count() == 1
    assert AuditEvent.objects.filter(object_id=str(tenant.pk), action="tenant.provisioning").count() == 1
