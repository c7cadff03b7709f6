"""Berth never adopts, changes or deletes an object it did not create, whatever the tenant asks for.

The attacks: ask for a tenant named like a namespace that exists (with someone's Secrets in it), have
a namespace appear between request and approval, replace a tenant's namespace by a look-alike before
its decommission, and reach one physical namespace through two cluster records of one API server.
"""

from __future__ import annotations

import pytest
from kubernetes import client
from rest_framework.test import APIClient

from tenants import hooks, services
from tenants.hooks import ClusterLookup
from tenants.models import AuditEvent, Cluster, Tenant, TenantRequest
from tests.plugins.kube import read_or_none, wait_for
from tests.plugins.worker import wait_status

from .conftest import provision

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]


def _create_namespace_with_a_secret(kube_admin, name: str, labels: dict[str, str] | None = None) -> str:
    core = client.CoreV1Api(kube_admin)
    ns = core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels or {})))
    core.create_namespaced_secret(
        name, client.V1Secret(metadata=client.V1ObjectMeta(name="payroll"), string_data={"iban": "DE00 1234"})
    )
    return str(ns.metadata.uid)


def _untouched(kube_admin, name: str, uid: str) -> None:
    core, rbac = client.CoreV1Api(kube_admin), client.RbacAuthorizationV1Api(kube_admin)
    ns = core.read_namespace(name)
    assert ns.metadata.uid == uid and ns.metadata.deletion_timestamp is None
    assert (
        "berth.dev/tenant-id" not in (ns.metadata.labels or {}) or ns.metadata.labels.get("berth.dev/team") != "team-a"
    )
    assert (core.read_namespaced_secret("payroll", name).data or {})["iban"]
    assert read_or_none(lambda: rbac.read_namespaced_role("berth-tenant", name)) is None
    assert read_or_none(lambda: core.read_namespaced_resource_quota("berth-quota", name)) is None


def test_a_name_that_exists_on_the_cluster_is_refused_at_request_time(
    celery_worker, guarded_cluster, kube_admin, alice, make_ns_name
):
    name = make_ns_name("ext").removeprefix(guarded_cluster.namespace_prefix)
    namespace = guarded_cluster.namespace_prefix + name
    uid = _create_namespace_with_a_secret(kube_admin, namespace)
    api = APIClient()
    api.force_authenticate(alice)
    body = {"team": "team-a", "name": name, "tier": "small", "cluster": guarded_cluster.name}
    response = api.post("/api/v1/requests/", body, format="json")
    assert response.status_code == 400, response.content
    assert "already exists" in response.json()["name"][0] and "not Berth's" in response.json()["name"][0]
    assert not Tenant.objects.filter(namespace=namespace).exists()
    _untouched(kube_admin, namespace, uid)


def test_a_namespace_that_appears_before_approval_is_not_adopted_and_survives_decommission(
    celery_worker, guarded_cluster, kube_admin, alice, carol, team_a, medium
):
    req = services.request_submit(
        actor=alice, action=TenantRequest.Action.CREATE, team=team_a, tier=medium, cluster=guarded_cluster, name="hr"
    )
    tenant = req.tenant
    uid = _create_namespace_with_a_secret(kube_admin, tenant.namespace)  # an admin's, made meanwhile
    services.request_approve(tenant_request=req, actor=carol)
    wait_status(tenant, "failed")
    assert f"Namespace {tenant.namespace} already exists on cluster" in tenant.status_reason
    assert "not Berth's" in tenant.status_reason
    failed = AuditEvent.objects.get(action="tenant.failed", object_id=str(tenant.pk))
    assert "already exists" in failed.after["reason"]
    _untouched(kube_admin, tenant.namespace, uid)
    # Its owner gives up on the tenant: the decommission removes nothing that is not Berth's.
    services.tenant_decommission(tenant=tenant, actor=alice)
    wait_status(tenant, "deleted")
    _untouched(kube_admin, tenant.namespace, uid)


def test_a_replaced_namespace_is_neither_reconciled_nor_deleted(
    celery_worker, guarded_cluster, kube_admin, alice, carol, team_a, medium
):
    tenant = provision(actor=alice, team=team_a, tier=medium, cluster=guarded_cluster, approver=carol, name="old")
    core = client.CoreV1Api(kube_admin)
    labels = core.read_namespace(tenant.namespace).metadata.labels  # Berth's own labels, copied by the impostor
    core.delete_namespace(tenant.namespace)
    wait_for(lambda: read_or_none(lambda: core.read_namespace(tenant.namespace)) is None, timeout=60, what="deletion")
    uid = _create_namespace_with_a_secret(kube_admin, tenant.namespace, labels=labels)
    # Reconcile: the name is Berth's tenant's, the labels say so, the UID does not.
    from worker import provisioning

    assert provisioning.provision(str(tenant.pk)).outcome == "diverged"
    tenant.refresh_from_db()
    assert tenant.status == "diverged" and f"is another object (UID {uid}; Berth recorded" in tenant.status_reason
    assert core.read_namespace(tenant.namespace).metadata.uid == uid
    assert read_or_none(lambda: core.read_namespaced_resource_quota("berth-quota", tenant.namespace)) is None
    services.tenant_decommission(tenant=tenant, actor=alice)
    wait_status(tenant, "deleted")
    ns = core.read_namespace(tenant.namespace)
    assert ns.metadata.uid == uid and ns.metadata.deletion_timestamp is None
    assert (core.read_namespaced_secret("payroll", tenant.namespace).data or {})["iban"]


@pytest.fixture
def second_record(guarded_cluster, small, medium, large) -> Cluster:
    """Another cluster record of the same API server, without a namespace prefix (as the demo's dev and dev-oidc)."""
    other = Cluster.objects.create(
        name=f"{guarded_cluster.name}-again",
        display_name="The same API server again",
        api_url=guarded_cluster.api_url,
        ca_pem=guarded_cluster.ca_pem,
        credential_ref=guarded_cluster.credential_ref,
        public_endpoint=guarded_cluster.public_endpoint,
        kinds=["namespace"],
    )
    other.tiers.set([small, medium, large])
    return other


def test_two_records_of_one_api_server_cannot_give_one_namespace_to_two_teams(
    celery_worker, guarded_cluster, second_record, kube_admin, alice, bob, carol, team_a, team_b, medium, monkeypatch
):
    alices = provision(actor=alice, team=team_a, tier=medium, cluster=guarded_cluster, approver=carol, name="web")
    api = APIClient()
    api.force_authenticate(bob)
    body = {"team": "team-b", "name": alices.namespace, "tier": "medium", "cluster": second_record.name}
    refused = api.post("/api/v1/requests/", body, format="json")
    assert refused.status_code == 400 and "already" in refused.json()["name"][0]
    # The cluster could not be asked at request time (and the record had never been used): the worker refuses.
    monkeypatch.setattr(type(hooks.installed()), "cluster_lookup", lambda self, cluster, **kw: ClusterLookup())
    Cluster.objects.filter(pk=second_record.pk).update(physical_id="")
    second_record.refresh_from_db()
    req = services.request_submit(
        actor=bob,
        action=TenantRequest.Action.CREATE,
        team=team_b,
        tier=medium,
        cluster=second_record,
        name=alices.namespace,
    )
    services.request_approve(tenant_request=req, actor=carol)
    bobs = wait_status(req.tenant, "failed")
    assert "already held by another Berth tenant" in bobs.status_reason
    labels = client.CoreV1Api(kube_admin).read_namespace(alices.namespace).metadata.labels or {}
    assert labels["berth.dev/tenant-id"] == str(alices.pk) and labels["berth.dev/team"] == "team-a"
    assert Tenant.objects.get(pk=alices.pk).status == "ready"
