"""tenants.services: the tenant lifecycle, change/extend/delete requests, and who may do what."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from tenants import dispatch, services
from tenants.audit import SYSTEM
from tenants.errors import Forbidden, InvalidTransition
from tenants.models import AuditEvent, Tenant, TenantRequest, TenantStatus
from tenants.services import TRANSITIONS

pytestmark = pytest.mark.django_db

ALLOWED = sorted((old, new) for old, targets in TRANSITIONS.items() for new in targets)
REFUSED = sorted(
    (old, new) for old in TRANSITIONS for new in TenantStatus.values if new not in TRANSITIONS[old] and new != old
)


def test_the_transition_table_names_every_status():
    assert set(TRANSITIONS) == set(TenantStatus.values)
    assert all(targets <= set(TenantStatus.values) for targets in TRANSITIONS.values())


@pytest.mark.parametrize(("old", "new"), ALLOWED)
def test_every_allowed_transition_moves_the_tenant_and_is_audited(make_tenant, team_a, alice, old, new):
    tenant = make_tenant(team=team_a, created_by=alice, status=old)
    moved = services.transition(tenant=tenant, new=new, actor=None, action="tenant.test", ctx=SYSTEM, reason="why")
    assert moved.status == new == Tenant.objects.get(pk=tenant.pk).status
    assert moved.status_reason == "why"
    event = AuditEvent.objects.get(action="tenant.test")
    assert (event.before["status"], event.after["status"], event.after["reason"]) == (old, new, "why")
    if new == TenantStatus.READY:
        assert moved.ready_at is not None


@pytest.mark.parametrize(("old", "new"), REFUSED)
def test_every_other_transition_is_refused(make_tenant, team_a, alice, old, new):
    tenant = make_tenant(team=team_a, created_by=alice, status=old)
    with pytest.raises(InvalidTransition):
        services.transition(tenant=tenant, new=new, actor=None, action="tenant.test", ctx=SYSTEM)
    assert Tenant.objects.get(pk=tenant.pk).status == old
    assert not AuditEvent.objects.filter(action="tenant.test").exists()


def test_a_stale_tenant_loses_the_compare_and_swap(make_tenant, team_a, alice):
    tenant = make_tenant(team=team_a, created_by=alice, status=TenantStatus.APPROVED)
    stale = Tenant.objects.get(pk=tenant.pk)
    services.tenant_mark_provisioning(tenant=tenant)
    with pytest.raises(InvalidTransition, match="someone else acted first"):
        services.tenant_mark_provisioning(tenant=stale)
    assert AuditEvent.objects.filter(action="tenant.provisioning").count() == 1


def test_the_database_refuses_an_unknown_status(make_tenant, team_a, alice):
    tenant = make_tenant(team=team_a, created_by=alice)
    with pytest.raises(IntegrityError), transaction.atomic():
        Tenant.objects.filter(pk=tenant.pk).update(status="paused")


# --- the worker's reports ---------------------------------------------------------------


def test_the_worker_moves_an_approved_tenant_to_ready(submit, carol):
    req = services.request_approve(tenant_request=submit(), actor=carol)
    tenant = services.tenant_mark_provisioning(tenant=req.tenant)
    tenant = services.tenant_mark_ready(tenant=tenant, applied_generation=1)
    assert (tenant.status, tenant.applied_generation) == (TenantStatus.READY, 1)
    assert tenant.ready_at is not None
    actions = list(
        AuditEvent.objects.filter(object_id=str(tenant.pk)).order_by("id").values_list("action", "actor_name")
    )
    assert actions[-2:] == [("tenant.provisioning", "system"), ("tenant.ready", "system")]


def test_a_failure_is_recorded_with_a_readable_reason(ready_tenant):
    tenant = services.tenant_mark_failed(tenant=ready_tenant(), reason="ResourceQuota refused: forbidden")
    assert (tenant.status, tenant.status_reason) == (TenantStatus.FAILED, "ResourceQuota refused: forbidden")


def test_a_requested_tenant_cannot_start_provisioning(submit):
    with pytest.raises(InvalidTransition):
        services.tenant_mark_provisioning(tenant=submit().tenant)


# --- decommission and retry -----------------------------------------------------------


@pytest.mark.parametrize("who", ["alice", "dave"])
def test_owners_and_admins_decommission_and_the_worker_is_told(
    ready_tenant, who, request, dispatched, django_capture_on_commit_callbacks
):
    tenant = ready_tenant()
    dispatched.clear()
    with django_capture_on_commit_callbacks(execute=True):
        tenant = services.tenant_decommission(tenant=tenant, actor=request.getfixturevalue(who), reason="done")
    assert (tenant.status, tenant.status_reason) == (TenantStatus.DECOMMISSIONING, "done")
    assert tenant.decommission_requested_at is not None
    assert dispatched == [(dispatch.DECOMMISSION, (str(tenant.pk),))]


@pytest.mark.parametrize("who", ["amir", "vera", "bob", "erin", "carol"])
def test_members_viewers_and_outsiders_cannot_decommission(ready_tenant, who, request):
    tenant = ready_tenant()
    with pytest.raises(Forbidden):
        services.tenant_decommission(tenant=tenant, actor=request.getfixturevalue(who))
    assert Tenant.objects.get(pk=tenant.pk).status == TenantStatus.READY


def test_a_requested_tenant_cannot_be_decommissioned(submit, alice):
    with pytest.raises(InvalidTransition):
        services.tenant_decommission(tenant=submit().tenant, actor=alice)


def test_decommission_cancels_pending_requests_and_audits_it(ready_tenant, alice, amir):
    tenant = ready_tenant()
    pending = services.request_submit(actor=amir, action="delete", tenant=tenant)
    services.tenant_decommission(tenant=tenant, actor=alice)
    pending.refresh_from_db()
    assert pending.status == TenantRequest.Status.CANCELLED and pending.decided_by == alice
    assert AuditEvent.objects.filter(action="request.cancel", object_id=str(pending.pk), actor=alice).exists()


def test_an_expired_tenant_is_decommissioned_by_the_system(
    ready_tenant, dispatched, django_capture_on_commit_callbacks
):
    tenant = ready_tenant()
    dispatched.clear()
    with django_capture_on_commit_callbacks(execute=True):
        tenant = services.tenant_expire(tenant=tenant)
    assert (tenant.status, tenant.status_reason) == (TenantStatus.DECOMMISSIONING, "Expired.")
    assert AuditEvent.objects.get(action="tenant.decommission").actor_name == "system"
    assert dispatched == [(dispatch.DECOMMISSION, (str(tenant.pk),))]


def test_a_failed_tenant_is_retried_by_provisioning_again(
    ready_tenant, alice, dispatched, django_capture_on_commit_callbacks
):
    tenant = services.tenant_mark_failed(tenant=ready_tenant(), reason="drift")
    dispatched.clear()
    with django_capture_on_commit_callbacks(execute=True):
        tenant = services.tenant_retry(tenant=tenant, actor=alice)
    assert tenant.status == TenantStatus.APPROVED
    assert dispatched == [(dispatch.PROVISION, (str(tenant.pk),))]


def test_a_failed_decommission_is_retried_as_a_decommission(
    ready_tenant, alice, dave, dispatched, django_capture_on_commit_callbacks
):
    tenant = services.tenant_decommission(tenant=ready_tenant(), actor=alice)
    tenant = services.tenant_mark_failed(tenant=tenant, reason="namespace stuck terminating")
    dispatched.clear()
    with django_capture_on_commit_callbacks(execute=True):
        tenant = services.tenant_retry(tenant=tenant, actor=dave)
    assert tenant.status == TenantStatus.DECOMMISSIONING
    assert dispatched == [(dispatch.DECOMMISSION, (str(tenant.pk),))]


def test_only_failed_tenants_are_retried(ready_tenant, alice):
    with pytest.raises(InvalidTransition):
        services.tenant_retry(tenant=ready_tenant(), actor=alice)


def test_a_member_cannot_retry(ready_tenant, amir):
    tenant = services.tenant_mark_failed(tenant=ready_tenant(), reason="x")
    with pytest.raises(Forbidden):
        services.tenant_retry(tenant=tenant, actor=amir)


# --- change tier, extend, delete ------------------------------------------------------


def test_a_tier_change_waits_then_bumps_the_generation_and_reapplies(
    ready_tenant, amir, carol, large, team_a, dispatched, django_capture_on_commit_callbacks
):
    team_a.budget_cpu_millis, team_a.budget_memory_mib = 64000, 131072
    team_a.save()
    tenant = ready_tenant()
    req = services.request_submit(actor=amir, action="change_tier", tenant=tenant, tier=large, purpose="load test")
    assert (req.status, req.tier, req.name) == (TenantRequest.Status.PENDING, large, tenant.name)
    dispatched.clear()
    with django_capture_on_commit_callbacks(execute=True):
        services.request_approve(tenant_request=req, actor=carol)
    tenant.refresh_from_db()
    assert (tenant.tier, tenant.generation, tenant.status) == (large, 2, TenantStatus.READY)
    assert dispatched == [(dispatch.PROVISION, (str(tenant.pk),))]
    event = AuditEvent.objects.get(action="tenant.change_tier")
    assert (event.before["tier"], event.after["tier"], event.after["generation"]) == ("medium", "large", 2)


def test_a_change_down_to_an_auto_approved_tier_is_approved_at_once(ready_tenant, alice, small):
    tenant = ready_tenant()
    req = services.request_submit(actor=alice, action="change_tier", tenant=tenant, tier=small)
    assert req.status == TenantRequest.Status.APPROVED and req.auto_approved
    tenant.refresh_from_db()
    assert tenant.tier == small


def test_a_change_to_the_same_tier_is_refused(ready_tenant, alice, medium):
    with pytest.raises(ValidationError) as refused:
        services.request_submit(actor=alice, action="change_tier", tenant=ready_tenant(), tier=medium)
    assert "already on this tier" in refused.value.message_dict["tier"][0]


def test_a_tier_change_needs_a_tier(ready_tenant, alice):
    with pytest.raises(ValidationError) as refused:
        services.request_submit(actor=alice, action="change_tier", tenant=ready_tenant())
    assert "tier" in refused.value.message_dict


def test_a_tier_change_to_a_tier_the_cluster_lacks_is_refused(ready_tenant, alice, cluster, large):
    tenant = ready_tenant()
    cluster.tiers.remove(large)
    with pytest.raises(ValidationError) as refused:
        services.request_submit(actor=alice, action="change_tier", tenant=tenant, tier=large)
    assert "not offered" in refused.value.message_dict["tier"][0]


def test_a_tier_change_is_held_to_the_budget_at_submit_and_at_approval(ready_tenant, alice, carol, team_a, large):
    tenant = ready_tenant()
    team_a.budget_cpu_millis = 16000
    team_a.save()
    with pytest.raises(ValidationError):
        services.request_submit(actor=alice, action="change_tier", tenant=tenant, tier=large)  # 32 CPU > 16
    team_a.budget_cpu_millis, team_a.budget_memory_mib = 40000, 131072
    team_a.save()
    req = services.request_submit(actor=alice, action="change_tier", tenant=tenant, tier=large)
    team_a.budget_cpu_millis = 16000
    team_a.save()
    with pytest.raises(ValidationError):
        services.request_approve(tenant_request=req, actor=carol)
    tenant.refresh_from_db()
    assert tenant.tier.name == "medium"


def test_extend_moves_the_expiry_and_resets_the_reminder(ready_tenant, alice, carol, medium):
    tenant = ready_tenant()
    services.tenant_remind_expiry(tenant=tenant)
    wanted = timezone.now().date() + dt.timedelta(days=medium.max_expiry_days)
    req = services.request_submit(actor=alice, action="extend", tenant=tenant, requested_expiry=wanted)
    assert req.status == TenantRequest.Status.PENDING  # medium is not auto-approved
    services.request_approve(tenant_request=req, actor=carol)
    tenant.refresh_from_db()
    assert tenant.expires_at == dt.datetime.combine(wanted, dt.time(23, 59, 59), tzinfo=dt.UTC)
    assert tenant.expiry_reminded_at is None
    assert AuditEvent.objects.filter(action="tenant.extend", object_id=str(tenant.pk)).exists()


def test_extend_on_an_auto_approved_tier_is_approved_at_once(ready_tenant, alice, small):
    tenant = ready_tenant(tier=small)
    wanted = timezone.now().date() + dt.timedelta(days=small.max_expiry_days)
    req = services.request_submit(actor=alice, action="extend", tenant=tenant, requested_expiry=wanted)
    assert req.status == TenantRequest.Status.APPROVED
    tenant.refresh_from_db()
    assert tenant.expires_at.date() == wanted


def test_extend_must_go_past_the_current_expiry(ready_tenant, alice):
    tenant = ready_tenant()
    with pytest.raises(ValidationError) as refused:
        services.request_submit(actor=alice, action="extend", tenant=tenant, requested_expiry=tenant.expires_at.date())
    assert "after the current expiry" in refused.value.message_dict["requested_expiry"][0]


def test_extend_needs_a_date_within_the_tiers_maximum(ready_tenant, alice, medium):
    tenant = ready_tenant()
    with pytest.raises(ValidationError):
        services.request_submit(actor=alice, action="extend", tenant=tenant)
    with pytest.raises(ValidationError):
        services.request_submit(
            actor=alice,
            action="extend",
            tenant=tenant,
            requested_expiry=timezone.now().date() + dt.timedelta(days=medium.max_expiry_days + 1),
        )


def test_a_delete_request_is_never_auto_approved_and_starts_decommissioning(
    ready_tenant, amir, carol, small, dispatched, django_capture_on_commit_callbacks
):
    tenant = ready_tenant(tier=small)
    req = services.request_submit(actor=amir, action="delete", tenant=tenant)
    assert req.status == TenantRequest.Status.PENDING
    dispatched.clear()
    with django_capture_on_commit_callbacks(execute=True):
        services.request_approve(tenant_request=req, actor=carol)
    tenant.refresh_from_db()
    assert tenant.status == TenantStatus.DECOMMISSIONING and tenant.decommission_requested_at is not None
    assert dispatched == [(dispatch.DECOMMISSION, (str(tenant.pk),))]


def test_a_failed_tenant_may_be_deleted_but_not_changed(ready_tenant, alice, large):
    tenant = services.tenant_mark_failed(tenant=ready_tenant(), reason="x")
    with pytest.raises(InvalidTransition):
        services.request_submit(actor=alice, action="change_tier", tenant=tenant, tier=large)
    assert services.request_submit(actor=alice, action="delete", tenant=tenant).status == TenantRequest.Status.PENDING


def test_a_tenant_still_being_requested_takes_no_change_request(submit, alice):
    with pytest.raises(InvalidTransition):
        services.request_submit(actor=alice, action="delete", tenant=submit().tenant)


def test_a_tenant_has_at_most_one_pending_request(ready_tenant, alice, amir):
    tenant = ready_tenant()
    services.request_submit(actor=alice, action="delete", tenant=tenant)
    with pytest.raises(InvalidTransition, match="pending"):
        services.request_submit(actor=amir, action="delete", tenant=tenant)


def test_the_database_refuses_a_second_pending_request_for_a_tenant(ready_tenant, alice):
    tenant = ready_tenant()
    first = services.request_submit(actor=alice, action="delete", tenant=tenant)
    with pytest.raises(IntegrityError), transaction.atomic():
        TenantRequest.objects.create(
            action="delete",
            name=tenant.name,
            team=tenant.team,
            tier=tenant.tier,
            cluster=tenant.cluster,
            tenant=tenant,
            requested_by=alice,
        )
    assert first.status == TenantRequest.Status.PENDING


def test_a_change_request_needs_a_tenant(alice):
    with pytest.raises(ValidationError) as refused:
        services.request_submit(actor=alice, action="delete")
    assert "tenant" in refused.value.message_dict


@pytest.mark.parametrize("who", ["vera", "bob", "erin", "carol"])
def test_only_the_teams_owners_and_members_ask_for_changes(ready_tenant, who, request):
    with pytest.raises(Forbidden):
        services.request_submit(actor=request.getfixturevalue(who), action="delete", tenant=ready_tenant())


# --- tiers and housekeeping -----------------------------------------------------------


def test_tier_reapply_bumps_every_live_tenant_and_enqueues_it(
    ready_tenant, make_tenant, team_a, alice, medium, dispatched, django_capture_on_commit_callbacks
):
    live = ready_tenant()
    make_tenant(team=team_a, created_by=alice, status=TenantStatus.DELETED, name="gone")
    dispatched.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert services.tier_reapply(tier=medium) == 1
    live.refresh_from_db()
    assert live.generation == 2
    assert dispatched == [(dispatch.PROVISION, (str(live.pk),))]


def test_only_admins_edit_tiers(medium, alice, dave):
    with pytest.raises(Forbidden):
        services.tier_update(tier=medium, actor=alice, changes={"max_pods": 5})
    services.tier_update(tier=medium, actor=dave, changes={"max_pods": 5})
    medium.refresh_from_db()
    assert medium.max_pods == 5
    event = AuditEvent.objects.get(action="tier.update")
    assert (event.before, event.after) == ({"max_pods": 100}, {"max_pods": 5})


def test_the_expiry_reminder_is_sent_once(ready_tenant):
    tenant = ready_tenant()
    assert services.tenant_remind_expiry(tenant=tenant) is True
    assert services.tenant_remind_expiry(tenant=tenant) is False
    assert AuditEvent.objects.filter(action="tenant.expiry_reminded").count() == 1


def test_repaired_drift_is_audited_and_a_clean_reapply_is_not(ready_tenant):
    tenant = ready_tenant()
    services.tenant_record_applied(tenant=tenant, generation=1, repaired=[])
    services.tenant_record_applied(tenant=tenant, generation=1, repaired=["NetworkPolicy/default-deny"])
    event = AuditEvent.objects.get(action="tenant.drift_repaired")
    assert event.after == {"repaired": ["NetworkPolicy/default-deny"], "generation": 1}


def test_a_vcluster_cannot_change_to_a_tier_of_another_node_pool(ready_tenant, alice, large):
    # Its control plane's volume stays with the nodes it was made on (local-path, a zone's disks).
    tenant = ready_tenant(kind="vcluster")
    with pytest.raises(ValidationError) as refused:
        services.request_submit(actor=alice, action="change_tier", tenant=tenant, tier=large)
    assert "runs on other nodes than medium" in refused.value.message_dict["tier"][0]
