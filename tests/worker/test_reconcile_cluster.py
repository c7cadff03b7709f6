"""The reconcile pass against the dev control plane: hand edits of every sort are found and repaired in one pass,
at a cost per kind plus one request per repair, and what is not Berth's is left as it was."""

from __future__ import annotations

import pytest
from kubernetes import client

from tenants import services
from tenants.models import AuditEvent, Tenant, TenantRequest
from tests.plugins.kube import read_or_none
from tests.plugins.worker import provision_until_settled
from worker import reconcile

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster]

# The managed kinds and the two guard kinds, listed once each (one page each at this size), and the facts.
KINDS = len(reconcile.MANAGED_KINDS) + 2


def _ready(*, alice, carol, team_a, tier, cluster, name: str) -> Tenant:
    req = services.request_submit(
        actor=alice, action=TenantRequest.Action.CREATE, team=team_a, tier=tier, cluster=cluster, name=name
    )
    if req.tenant.status == "requested":
        services.request_approve(tenant_request=req, actor=carol, comment="ok")
    assert provision_until_settled(str(req.tenant.pk)).outcome == "ready"
    return Tenant.objects.get(pk=req.tenant.pk)


def test_hand_edits_are_repaired_in_one_pass_and_foreign_objects_left_alone(
    live_cluster, kube_admin, alice, carol, team_a, medium, dispatched
):
    team_a.budget_cpu_millis, team_a.budget_memory_mib = 100_000, 200_000  # room for three medium tenants
    team_a.save()
    a, b, c = (
        _ready(alice=alice, carol=carol, team_a=team_a, tier=medium, cluster=live_cluster, name=f"fleet-{i}")
        for i in range(3)
    )
    in_sync = reconcile.reconcile_cluster(live_cluster)
    # Nothing the server filled in (defaults, status, managed fields) counts as drift.
    assert (in_sync.tenants, in_sync.in_sync, in_sync.repaired) == (3, 3, {})
    assert in_sync.requests <= 3 * KINDS

    core, net, rbac = (
        client.CoreV1Api(kube_admin),
        client.NetworkingV1Api(kube_admin),
        client.RbacAuthorizationV1Api(kube_admin),
    )
    core.patch_namespaced_resource_quota("berth-quota", a.namespace, {"spec": {"hard": {"pods": "9999"}}})
    net.delete_namespaced_network_policy("berth-default-deny", b.namespace)
    core.patch_namespace(c.namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})
    rbac.patch_namespaced_role(
        "berth-tenant",
        c.namespace,
        [{"op": "add", "path": "/rules/-", "value": {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}}],
    )
    # Someone else's objects: unlabelled in a tenant's namespace, and Berth-looking in a namespace of no tenant.
    foreign = client.V1NetworkPolicy(
        metadata=client.V1ObjectMeta(name="teams-own"),
        spec=client.V1NetworkPolicySpec(
            pod_selector=client.V1LabelSelector(),
            policy_types=["Ingress"],
            ingress=[client.V1NetworkPolicyIngressRule()],
        ),
    )
    net.create_namespaced_network_policy(a.namespace, foreign)

    repaired = reconcile.reconcile_cluster(live_cluster)
    assert repaired.repaired == {
        str(a.pk): ["ResourceQuota/berth-quota was changed"],
        str(b.pk): ["NetworkPolicy/berth-default-deny was missing"],
        str(c.pk): [f"Namespace/{c.namespace} was changed", "Role/berth-tenant was changed"],
    }
    # One apply per repair; an object missing from the list (the deleted NetworkPolicy) is read again first, under the
    # tenant's lock, since the watcher's repair job may have made it since the list (worker.reconcile._repair).
    assert repaired.requests == in_sync.requests + 4 + 1
    assert (core.read_namespaced_resource_quota("berth-quota", a.namespace).spec.hard or {})["pods"] == "100"
    assert read_or_none(lambda: net.read_namespaced_network_policy("berth-default-deny", b.namespace)) is not None
    labels = core.read_namespace(c.namespace).metadata.labels or {}
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    rules = rbac.read_namespaced_role("berth-tenant", c.namespace).rules
    assert not any("*" in (rule.verbs or []) for rule in rules)
    assert net.read_namespaced_network_policy("teams-own", a.namespace).spec.ingress == [
        client.V1NetworkPolicyIngressRule()
    ]
    events = AuditEvent.objects.filter(action="tenant.drift_repaired", object_id__in=[str(t.pk) for t in (a, b, c)])
    assert {e.object_id: e.after["repaired"] for e in events} == repaired.repaired

    again = reconcile.reconcile_cluster(live_cluster)
    assert (again.in_sync, again.repaired, again.requests) == (3, {}, in_sync.requests)
