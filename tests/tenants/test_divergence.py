"""An admin's decisions after a restore (tenants.services.divergence): diverged tenants are recreated or forgotten,
orphan namespaces re-attached or decommissioned; each audited, admins only. The worker's side, against the real
cluster after a real pg_restore: tests/worker/test_restore.py."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from tenants import dispatch, services
from tenants.errors import Forbidden, InvalidTransition
from tenants.models import AuditEvent, OrphanNamespace, Tenant

pytestmark = pytest.mark.django_db

ORPHAN_ID = "0b1c2d3e-0000-4000-8000-000000000001"


@pytest.fixture
def diverged(alice, team_a, medium, cluster) -> Tenant:
    """A ready tenant whose recorded namespace the worker found missing."""
    owned = {
        "Namespace//dev-web": "uid-ns",
        "ServiceAccount/dev-web/berth-tenant": "uid-sa",
        "FlowSchema//berth-dev-web": "uid-fs",
    }
    tenant = Tenant.objects.create(
        name="web", namespace="dev-web", team=team_a, tier=medium, cluster=cluster, status="ready",
        created_by=alice, owned_uids=owned, applied_generation=1,
    )  # fmt: skip
    return services.tenant_mark_diverged(tenant=tenant, reason="Namespace dev-web (UID uid-ns) is missing.")


@pytest.fixture
def orphan(cluster) -> OrphanNamespace:
    labels = {
        "app.kubernetes.io/managed-by": "berth",
        "berth.dev/tenant-id": ORPHAN_ID,
        "berth.dev/tenant": "newer",
        "berth.dev/team": "team-b",
        "berth.dev/tier": "small",
    }
    return OrphanNamespace.objects.create(
        cluster=cluster, name="newer", uid="uid-newer", tenant_id=ORPHAN_ID, labels=labels,
        created_at=timezone.now() - dt.timedelta(hours=3), last_seen_at=timezone.now(),
    )  # fmt: skip


def test_marking_a_tenant_diverged_is_audited_with_the_reason(diverged):
    event = AuditEvent.objects.get(action="tenant.diverged", object_id=str(diverged.pk))
    assert event.actor is None and event.before["status"] == "ready" and event.after["status"] == "diverged"
    assert "missing" in event.after["reason"]


def test_only_platform_admins_decide_on_a_diverged_tenant(diverged, alice):
    for decide in (services.tenant_recreate, services.tenant_forget):
        with pytest.raises(Forbidden):
            decide(tenant=diverged, actor=alice)
    diverged.refresh_from_db()
    assert diverged.status == "diverged"


def test_recreate_forgets_the_old_namespace_uids_and_provisions_again(
    diverged, dave, dispatched, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        tenant = services.tenant_recreate(tenant=diverged, actor=dave)
    assert tenant.status == "approved"
    assert tenant.owned_uids == {"FlowSchema//berth-dev-web": "uid-fs"}  # what lived in the namespace is gone
    assert dispatched == [(dispatch.PROVISION, (str(tenant.pk),))]
    event = AuditEvent.objects.get(action="tenant.recreate", object_id=str(tenant.pk))
    assert event.actor == dave and event.before["status"] == "diverged"


def test_forget_decommissions_by_recorded_uid_only(diverged, dave, dispatched, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        tenant = services.tenant_forget(tenant=diverged, actor=dave)
    assert tenant.status == "decommissioning" and "Forgotten by dave" in tenant.status_reason
    assert tenant.owned_uids == diverged.owned_uids  # the worker deletes only what still carries these UIDs
    assert dispatched == [(dispatch.DECOMMISSION, (str(tenant.pk),))]
    assert AuditEvent.objects.filter(action="tenant.decommission", object_id=str(tenant.pk), actor=dave).exists()


def test_a_ready_tenant_is_neither_recreated_nor_forgotten(ready_tenant_row, dave):
    tenant = ready_tenant_row("steady")
    for decide in (services.tenant_recreate, services.tenant_forget):
        with pytest.raises(InvalidTransition):
            decide(tenant=tenant, actor=dave)


def test_reattach_makes_a_tenant_of_that_very_namespace(
    orphan, dave, team_b, small, cluster, dispatched, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        tenant = services.orphan_reattach(orphan=orphan, team=team_b, tier=small, actor=dave)
    assert str(tenant.pk) == ORPHAN_ID  # the id its objects carry
    assert (tenant.name, tenant.namespace, tenant.team, tenant.tier, tenant.status) == (
        "newer", "newer", team_b, small, "approved",
    )  # fmt: skip
    assert tenant.owned_uids == {"Namespace//newer": "uid-newer"}  # Berth adopts that UID only
    assert tenant.credential_epoch != tenant.applied_credential_epoch  # its ServiceAccounts are made anew
    assert not OrphanNamespace.objects.exists()
    assert dispatched == [(dispatch.PROVISION, (ORPHAN_ID,))]
    event = AuditEvent.objects.get(action="orphan.reattach")
    assert event.actor == dave and event.object_id == ORPHAN_ID and event.team == team_b
    assert (event.before["namespace"], event.before["uid"], event.before["labels"]) == (
        "newer", "uid-newer", orphan.labels,
    )  # fmt: skip
    assert event.after == {"team": "team-b", "tier": "small", "status": "approved"}


def test_only_admins_reattach_or_decommission_orphans(orphan, alice, team_a, small):
    with pytest.raises(Forbidden):
        services.orphan_reattach(orphan=orphan, team=team_a, tier=small, actor=alice)
    with pytest.raises(Forbidden):
        services.orphan_decommission(orphan=orphan, actor=alice)
    orphan.refresh_from_db()
    assert orphan.decommission_requested_at is None and not Tenant.objects.exists()


def test_a_namespace_without_berths_labels_is_never_reattached(orphan, dave, team_b, small):
    orphan.labels = {**orphan.labels, "app.kubernetes.io/managed-by": "someone"}
    orphan.save()
    with pytest.raises(ValidationError, match="Berth never adopts"):
        services.orphan_reattach(orphan=orphan, team=team_b, tier=small, actor=dave)
    assert not Tenant.objects.exists()


def test_a_namespace_of_a_known_tenant_is_not_reattached(orphan, dave, team_b, small, ready_tenant_row):
    gone = ready_tenant_row("gone")
    Tenant.objects.filter(pk=gone.pk).update(status="deleted")
    orphan.tenant_id = str(gone.pk)
    orphan.labels["berth.dev/tenant-id"] = str(gone.pk)
    orphan.save()
    with pytest.raises(ValidationError, match="can only be decommissioned"):
        services.orphan_reattach(orphan=orphan, team=team_b, tier=small, actor=dave)


def test_a_tier_the_cluster_does_not_offer_is_refused(orphan, dave, team_b, small, cluster):
    cluster.tiers.remove(small)
    with pytest.raises(ValidationError, match="does not offer"):
        services.orphan_reattach(orphan=orphan, team=team_b, tier=small, actor=dave)


def test_decommissioning_an_orphan_asks_the_worker_and_is_audited(
    orphan, dave, dispatched, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        services.orphan_decommission(orphan=orphan, actor=dave)
    orphan.refresh_from_db()
    assert orphan.decommission_requested_at is not None
    assert dispatched == [(dispatch.DELETE_ORPHAN, (str(orphan.pk),))]
    event = AuditEvent.objects.get(action="orphan.decommission")
    assert (event.actor, event.object_type, event.object_id) == (dave, "namespace", "uid-newer")
    assert event.before["namespace"] == "newer" and event.before["tenant_id"] == ORPHAN_ID


def test_the_orphans_page_lists_labels_and_age_for_admins_only(client, orphan, dave, alice):
    client.force_login(alice)
    assert client.get("/tenants/orphans/").status_code == 403
    client.force_login(dave)
    page = client.get("/tenants/orphans/").content.decode()
    assert "<code>newer</code>" in page and "uid-newer" in page
    assert "berth.dev/tenant-id=" + ORPHAN_ID in page and "berth.dev/team=team-b" in page
    assert "3\xa0hours" in page  # its age
    assert '<th scope="row"' in page and 'aria-label="Orphan namespaces table"' in page
    assert 'href="/tenants/orphans/"' in client.get("/tenants/").content.decode()


def test_an_admin_reattaches_from_the_page(client, orphan, dave, team_b, small, dispatched):
    client.force_login(dave)
    prefix = f"orphan-{orphan.pk}"
    resp = client.post(
        f"/tenants/orphans/{orphan.pk}/reattach/", {f"{prefix}-team": "team-b", f"{prefix}-tier": "small"}
    )
    assert resp.status_code == 302 and resp["Location"] == f"/tenants/{ORPHAN_ID}/"
    assert Tenant.objects.get(pk=uuid.UUID(ORPHAN_ID)).team == team_b


def test_decommissioning_from_the_page_needs_the_name_typed(client, orphan, dave, dispatched):
    client.force_login(dave)
    url = f"/tenants/orphans/{orphan.pk}/decommission/"
    client.post(url, {f"orphan-{orphan.pk}-confirm_name": "wrong"})
    orphan.refresh_from_db()
    assert orphan.decommission_requested_at is None
    client.post(url, {f"orphan-{orphan.pk}-confirm_name": "newer"})
    orphan.refresh_from_db()
    assert orphan.decommission_requested_at is not None


def test_a_diverged_tenants_page_offers_admins_the_decision(client, diverged, dave, alice, dispatched):
    client.force_login(alice)
    page = client.get(f"/tenants/{diverged.pk}/").content.decode()
    assert "is missing" in page and "/recreate/" not in page
    assert "until a platform admin recreates or forgets it" in page
    assert client.post(f"/tenants/{diverged.pk}/recreate/").status_code == 403
    client.force_login(dave)
    page = client.get(f"/tenants/{diverged.pk}/").content.decode()
    assert f"/tenants/{diverged.pk}/recreate/" in page and f"/tenants/{diverged.pk}/forget/" in page
    client.post(f"/tenants/{diverged.pk}/recreate/")
    diverged.refresh_from_db()
    assert diverged.status == "approved"
