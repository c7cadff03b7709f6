"""A transfer on the worker side, against the in-memory API server (tests/worker/fake_kube.py): the team label
follows, and the tenant's ServiceAccounts are deleted (by recorded UID) and made anew, recorded as Berth's.

The same against the dev control plane, with a kubeconfig issued before the transfer, is in
tests/security/test_transfer_access.py.
"""

from __future__ import annotations

import pytest

from tenants import services
from tenants.models import AuditEvent, Tenant
from tests.worker.conftest import MakeTenant, provisioned_ready
from tests.worker.fake_kube import FakeKube
from worker import provisioning, reconcile
from worker.kube import KubeForbidden
from worker.provisioning import Outcome

ACCOUNTS = ("ServiceAccount/dev-web/berth-tenant", "ServiceAccount/dev-web/berth-viewer")


def _uid(host: FakeKube, kind: str, name: str, namespace: str | None = "dev-web") -> str:
    live = host.get(kind, name, namespace=namespace, fresh=True)
    assert live is not None
    return str(live["metadata"]["uid"])


def _transferred(tenant: Tenant, *, alice, bob, carol, team_b) -> Tenant:
    req = services.transfer_ask(tenant=tenant, target_team=team_b, actor=alice)
    req = services.transfer_accept(tenant_request=req, actor=bob)
    services.request_approve(tenant_request=req, actor=carol)  # medium: not approved automatically
    tenant.refresh_from_db()
    assert tenant.team == team_b and tenant.credential_epoch == tenant.applied_credential_epoch + 1
    return tenant


@pytest.fixture
def web(make_tenant: MakeTenant, host: FakeKube, sent) -> Tenant:
    return provisioned_ready(make_tenant(), host)


def test_a_new_tenants_service_accounts_are_recorded_as_berths(web, host):
    for key in ACCOUNTS:
        assert web.owned_uids[key] == _uid(host, "ServiceAccount", key.rsplit("/", 1)[1])


def test_after_a_transfer_the_service_accounts_are_made_anew_and_recorded(web, host, alice, bob, carol, team_b):
    before = {name: _uid(host, "ServiceAccount", name) for name in ("berth-tenant", "berth-viewer")}
    namespace_uid = _uid(host, "Namespace", "dev-web", None)
    tenant = _transferred(web, alice=alice, bob=bob, carol=carol, team_b=team_b)
    progress = provisioning.provision(str(tenant.pk))
    assert progress.outcome in (Outcome.REPAIRED, Outcome.IN_SYNC)
    tenant.refresh_from_db()
    after = {name: _uid(host, "ServiceAccount", name) for name in before}
    assert all(after[name] != before[name] for name in before)
    assert {key: tenant.owned_uids[key] for key in ACCOUNTS} == {
        f"ServiceAccount/dev-web/{name}": uid for name, uid in after.items()
    }
    assert tenant.applied_credential_epoch == tenant.credential_epoch == 2
    assert tenant.applied_generation == tenant.generation
    assert _uid(host, "Namespace", "dev-web", None) == namespace_uid  # the namespace itself stays
    labels = host.get("Namespace", "dev-web", fresh=True)["metadata"]["labels"]
    assert labels["berth.dev/team"] == "team-b"
    quota = host.get("ResourceQuota", "berth-quota", namespace="dev-web", fresh=True)
    assert quota["metadata"]["labels"]["berth.dev/team"] == "team-b"
    assert [f"delete ServiceAccount/{name}" for name in ("berth-tenant", "berth-viewer")] == [
        w for w in host.writes if w.startswith("delete ")
    ]
    renewed = AuditEvent.objects.get(action="tenant.credentials_renewed", object_id=str(tenant.pk))
    assert renewed.team == team_b and sorted(renewed.after["renewed"]) == [
        "ServiceAccount/berth-tenant",
        "ServiceAccount/berth-viewer",
    ]
    # What the transfer changed is the change being applied, not drift someone made by hand.
    assert not AuditEvent.objects.filter(action="tenant.drift_repaired", object_id=str(tenant.pk)).exists()
    # Once renewed, a second pass deletes nothing more.
    host.writes.clear()
    provisioning.provision(str(tenant.pk))
    assert not [w for w in host.writes if w.startswith("delete ")]


def test_kubeconfigs_wait_until_the_credentials_are_renewed(web, host, alice, bob, carol, team_b):
    tenant = _transferred(web, alice=alice, bob=bob, carol=carol, team_b=team_b)
    with pytest.raises(services.InvalidTransition):
        services.tenant_issue_kubeconfig(tenant=tenant, actor=bob)


def test_someone_elses_service_account_under_berths_name_is_never_deleted(web, host, alice, bob, carol, team_b):
    impostor = host.get("ServiceAccount", "berth-tenant", namespace="dev-web", fresh=True)
    host.delete("ServiceAccount", "berth-tenant", namespace="dev-web")
    impostor["metadata"]["uid"] = "someone-elses"
    host.put(impostor)
    tenant = _transferred(web, alice=alice, bob=bob, carol=carol, team_b=team_b)
    host.writes.clear()
    assert provisioning.provision(str(tenant.pk)).outcome == Outcome.FAILED
    assert _uid(host, "ServiceAccount", "berth-tenant") == "someone-elses"
    assert not [w for w in host.writes if "ServiceAccount" in w]
    tenant.refresh_from_db()
    assert tenant.status == "failed" and "Berth did not create" in tenant.status_reason


def test_the_reconcile_pass_hands_a_transferred_tenant_to_its_own_renewal(
    web, host, cluster, alice, bob, carol, team_b
):
    before = _uid(host, "ServiceAccount", "berth-tenant")
    tenant = _transferred(web, alice=alice, bob=bob, carol=carol, team_b=team_b)
    reconcile.reconcile_cluster(cluster)
    tenant.refresh_from_db()
    assert _uid(host, "ServiceAccount", "berth-tenant") != before
    assert tenant.owned_uids[ACCOUNTS[0]] == _uid(host, "ServiceAccount", "berth-tenant")
    assert tenant.applied_credential_epoch == 2 and tenant.status == "ready"


def test_a_service_account_someone_deleted_is_made_again_and_recorded(web, host, cluster):
    host.delete("ServiceAccount", "berth-viewer", namespace="dev-web")
    reconcile.reconcile_cluster(cluster)
    web.refresh_from_db()
    assert web.status == "ready"
    assert web.owned_uids[ACCOUNTS[1]] == _uid(host, "ServiceAccount", "berth-viewer")
    provisioning.provision(str(web.pk))  # and the next pass finds it Berth's
    web.refresh_from_db()
    assert web.status == "ready"


def test_without_its_grant_in_the_namespace_the_worker_renews_once_the_apply_put_it_back(
    web, host, alice, bob, carol, team_b, monkeypatch
):
    tenant = _transferred(web, alice=alice, bob=bob, carol=carol, team_b=team_b)
    before = _uid(host, "ServiceAccount", "berth-tenant")
    real_get = host._get
    refused: list[str] = []

    def get(kind, name, *, namespace=None):
        if kind == "ServiceAccount" and not refused:
            refused.append(name)
            raise KubeForbidden("serviceaccounts is forbidden", status=403)
        return real_get(kind, name, namespace=namespace)

    monkeypatch.setattr(host, "_get", get)
    assert provisioning.provision(str(tenant.pk)).outcome == Outcome.NOT_YET
    tenant.refresh_from_db()
    assert tenant.applied_credential_epoch == 1 and tenant.team == team_b  # not renewed yet: kubeconfigs wait
    assert _uid(host, "ServiceAccount", "berth-tenant") == before
    provisioning.provision(str(tenant.pk))
    tenant.refresh_from_db()
    assert tenant.applied_credential_epoch == 2 and _uid(host, "ServiceAccount", "berth-tenant") != before
