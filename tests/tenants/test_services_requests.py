"""tenants.services: submitting, approving, rejecting and cancelling requests."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from tenants import dispatch, services
from tenants.errors import Forbidden, IdempotencyConflict, InvalidTransition
from tenants.models import AuditEvent, Cluster, Membership, Tenant, TenantRequest, TenantStatus

from .conftest import CTX

pytestmark = pytest.mark.django_db


def field_errors(excinfo: pytest.ExceptionInfo) -> dict[str, list[str]]:
    return excinfo.value.message_dict


def today() -> dt.date:
    return timezone.now().date()


# --- submitting a create request ----------------------------------------------------------


def test_alices_medium_request_waits_for_approval(submit, medium, dispatched, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        req = submit(name="web", purpose="payments API")
    assert req.status == TenantRequest.Status.PENDING and req.action == TenantRequest.Action.CREATE
    assert req.decided_by is None and not req.auto_approved
    tenant = Tenant.objects.get(pk=req.tenant_id)
    assert tenant.status == TenantStatus.REQUESTED
    assert (tenant.name, tenant.namespace, tenant.tier, tenant.purpose) == ("web", "web", medium, "payments API")
    assert tenant.expires_at.date() == today() + dt.timedelta(days=medium.default_expiry_days)
    assert req.requested_expiry == tenant.expires_at.date()
    assert dispatched == []


def test_a_member_may_submit(submit, amir):
    assert submit(actor=amir).requested_by == amir


def test_the_cluster_prefix_makes_the_namespace(submit, cluster):
    Cluster.objects.filter(pk=cluster.pk).update(namespace_prefix="dev-")
    cluster.refresh_from_db()
    req = submit(name="web", cluster=cluster)
    assert Tenant.objects.get(pk=req.tenant_id).namespace == "dev-web"


@pytest.mark.parametrize("name", ["Web", "web_1", "-web", "web-", "we.b", "web\n", "", "ü"])
def test_names_that_are_not_dns1123_labels_are_refused(submit, name):
    with pytest.raises(ValidationError) as refused:
        submit(name=name)
    assert "name" in field_errors(refused)
    assert not Tenant.objects.exists()


def test_name_plus_cluster_prefix_may_not_exceed_63_characters(submit, cluster):
    Cluster.objects.filter(pk=cluster.pk).update(namespace_prefix="dev-")
    cluster.refresh_from_db()
    with pytest.raises(ValidationError) as refused:
        submit(name="x" * 60, cluster=cluster)
    assert "at most 63" in field_errors(refused)["name"][0]
    assert submit(name="x" * 59, cluster=cluster).tenant.namespace == "dev-" + "x" * 59


@pytest.mark.parametrize("name", ["default", "kube-x", "kube-system", "openshift-x", "berth"])
def test_reserved_names_are_refused(submit, name):
    with pytest.raises(ValidationError) as refused:
        submit(name=name)
    assert "reserved" in field_errors(refused)["name"][0]


def test_a_live_name_cannot_be_taken_twice_on_the_same_cluster(submit, amir):
    submit(name="web")
    with pytest.raises(ValidationError) as refused:
        submit(name="web", actor=amir)
    assert "already in use" in field_errors(refused)["name"][0]
    assert Tenant.objects.count() == 1


def test_the_same_name_is_free_on_another_cluster(submit, cluster, medium):
    other = Cluster.objects.create(
        name="prod",
        display_name="Prod",
        api_url="https://10.0.0.1",
        credential_ref="incluster",
        public_endpoint="https://prod.example.test",
        kinds=["namespace"],
    )
    other.tiers.set([medium])
    submit(name="web")
    assert submit(name="web", cluster=other).cluster == other


def test_a_name_is_free_again_after_its_request_is_rejected(submit, carol):
    first = submit(name="web")
    services.request_reject(tenant_request=first, actor=carol, reason="Use the shared namespace.")
    second = submit(name="web")
    assert second.tenant_id != first.tenant_id


def test_a_name_is_free_again_after_its_request_is_cancelled(submit, alice):
    first = submit(name="web")
    services.request_cancel(tenant_request=first, actor=alice)
    assert submit(name="web").tenant_id != first.tenant_id


def test_a_name_is_free_again_once_its_tenant_is_deleted(ready_tenant, alice, submit):
    tenant = ready_tenant(name="web")
    tenant = services.tenant_decommission(tenant=tenant, actor=alice)
    services.tenant_mark_deleted(tenant=tenant)
    assert submit(name="web").tenant.status == TenantStatus.REQUESTED


def test_a_name_is_still_taken_while_its_tenant_is_decommissioning(ready_tenant, alice, submit):
    services.tenant_decommission(tenant=ready_tenant(name="web"), actor=alice)
    with pytest.raises(ValidationError):
        submit(name="web")


def test_a_tier_the_cluster_does_not_offer_is_refused(submit, cluster, large):
    cluster.tiers.remove(large)
    with pytest.raises(ValidationError) as refused:
        submit(tier=large)
    assert "not offered" in field_errors(refused)["tier"][0]


def test_a_retired_tier_is_refused(submit, medium):
    medium.is_active = False
    medium.save()
    with pytest.raises(ValidationError) as refused:
        submit(tier=medium)
    assert "retired" in field_errors(refused)["tier"][0]


def test_an_inactive_cluster_takes_no_new_tenants(submit, cluster):
    cluster.is_active = False
    cluster.save()
    with pytest.raises(ValidationError) as refused:
        submit()
    assert "cluster" in field_errors(refused)


def test_a_kind_the_cluster_does_not_offer_is_refused(submit, cluster):
    cluster.kinds = ["namespace"]
    cluster.save()
    with pytest.raises(ValidationError) as refused:
        submit(kind="vcluster")
    assert "does not offer vcluster" in field_errors(refused)["kind"][0]


def test_an_unknown_kind_is_refused(submit):
    with pytest.raises(ValidationError) as refused:
        submit(kind="openshift-project")
    assert "kind" in field_errors(refused)


def test_a_vcluster_is_accepted_where_offered(submit):
    assert submit(kind="vcluster").tenant.kind == "vcluster"


@pytest.mark.parametrize("missing", ["team", "tier", "cluster"])
def test_team_tier_and_cluster_are_required(submit, missing):
    with pytest.raises(ValidationError) as refused:
        submit(**{missing: None})
    assert field_errors(refused) == {missing: ["This field is required."]}


@pytest.mark.parametrize("who", ["vera", "erin", "bob"])
def test_viewers_outsiders_and_other_teams_cannot_submit_for_team_a(submit, who, request):
    with pytest.raises(Forbidden):
        submit(actor=request.getfixturevalue(who))
    assert not TenantRequest.objects.exists()


def test_an_unknown_action_is_refused(alice):
    with pytest.raises(ValidationError) as refused:
        services.request_submit(actor=alice, action="resize")
    assert "action" in field_errors(refused)


@pytest.mark.parametrize("days", [0, -1, -400])
def test_an_expiry_that_is_not_in_the_future_is_refused(submit, days):
    with pytest.raises(ValidationError) as refused:
        submit(requested_expiry=today() + dt.timedelta(days=days))
    assert "future" in field_errors(refused)["requested_expiry"][0]


def test_an_expiry_beyond_the_tiers_maximum_is_refused(submit, medium):
    with pytest.raises(ValidationError) as refused:
        submit(requested_expiry=today() + dt.timedelta(days=medium.max_expiry_days + 1))
    assert f"at most {medium.max_expiry_days} days" in field_errors(refused)["requested_expiry"][0]


def test_the_tiers_maximum_expiry_itself_is_accepted(submit, medium):
    wanted = today() + dt.timedelta(days=medium.max_expiry_days)
    req = submit(requested_expiry=wanted)
    assert req.requested_expiry == wanted and req.tenant.expires_at.date() == wanted


# --- auto-approval ----------------------------------------------------------------------


def test_a_small_tier_request_is_approved_at_once_and_provisioning_is_enqueued_after_commit(
    submit, small, dispatched, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        req = submit(name="ci", tier=small)
        assert dispatched == []  # nothing leaves before the transaction commits
    assert req.status == TenantRequest.Status.APPROVED
    assert req.auto_approved and req.decided_by is None and req.decided_at is not None
    assert "Auto-approved" in req.decision_comment
    tenant = Tenant.objects.get(pk=req.tenant_id)
    assert tenant.status == TenantStatus.APPROVED
    assert dispatched == [(dispatch.PROVISION, (str(tenant.pk),))]


def test_an_auto_approval_is_audited_as_the_system(submit, small):
    req = submit(name="ci", tier=small, ctx=CTX)
    event = AuditEvent.objects.get(action="request.approve", object_id=str(req.pk))
    assert event.actor is None and event.actor_name == "system"
    assert event.after["auto"] is True
    assert event.request_id == CTX.request_id


def test_a_rolled_back_submission_enqueues_nothing(submit, small, dispatched, django_capture_on_commit_callbacks):
    from django.db import transaction

    with django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(RuntimeError), transaction.atomic():
            submit(name="ci", tier=small)
            raise RuntimeError("the caller's transaction fails after the service returned")
    assert dispatched == [] and not Tenant.objects.exists()


# --- approving, rejecting, cancelling -------------------------------------------------------


def test_carol_approves_and_the_tenant_is_provisioned(submit, carol, dispatched, django_capture_on_commit_callbacks):
    req = submit()
    with django_capture_on_commit_callbacks(execute=True):
        req = services.request_approve(tenant_request=req, actor=carol, comment="ok", ctx=CTX)
    assert (req.status, req.decided_by, req.decision_comment, req.auto_approved) == ("approved", carol, "ok", False)
    tenant = Tenant.objects.get(pk=req.tenant_id)
    assert tenant.status == TenantStatus.APPROVED
    assert dispatched == [(dispatch.PROVISION, (str(tenant.pk),))]


def test_a_platform_admin_may_approve(submit, dave):
    assert services.request_approve(tenant_request=submit(), actor=dave).decided_by == dave


def test_a_requester_cannot_approve_their_own_request_even_as_admin(submit, dave, team_a):
    req = submit(actor=dave, team=team_a)  # admins may ask for any team
    with pytest.raises(Forbidden, match="your own"):
        services.request_approve(tenant_request=req, actor=dave)
    req.refresh_from_db()
    assert req.status == TenantRequest.Status.PENDING


def test_a_requester_cannot_reject_their_own_request_either(submit, dave):
    with pytest.raises(Forbidden):
        services.request_reject(tenant_request=submit(actor=dave), actor=dave, reason="no")


@pytest.mark.parametrize("who", ["alice", "amir", "vera", "bob", "erin"])
def test_only_approvers_and_admins_decide(submit, amir, who, request):
    req = submit(actor=amir)
    actor = request.getfixturevalue(who)
    with pytest.raises(Forbidden):
        services.request_approve(tenant_request=req, actor=actor)
    with pytest.raises(Forbidden):
        services.request_reject(tenant_request=req, actor=actor, reason="no")
    req.refresh_from_db()
    assert req.status == TenantRequest.Status.PENDING


@pytest.mark.parametrize("reason", ["", "   ", "\n"])
def test_a_rejection_needs_a_reason(submit, carol, reason):
    with pytest.raises(ValidationError) as refused:
        services.request_reject(tenant_request=submit(), actor=carol, reason=reason)
    assert "reason" in field_errors(refused)


def test_carol_rejects_and_the_tenant_is_rejected_with_the_reason(submit, carol, dispatched):
    req = services.request_reject(tenant_request=submit(), actor=carol, reason="Use the shared namespace.")
    assert (req.status, req.decided_by, req.decision_comment) == ("rejected", carol, "Use the shared namespace.")
    tenant = Tenant.objects.get(pk=req.tenant_id)
    assert (tenant.status, tenant.status_reason) == (TenantStatus.REJECTED, "Use the shared namespace.")


def test_approve_after_reject_is_an_invalid_transition(submit, carol, dave):
    req = submit()
    stale = TenantRequest.objects.get(pk=req.pk)
    services.request_reject(tenant_request=req, actor=carol, reason="no")
    with pytest.raises(InvalidTransition, match="rejected"):
        services.request_approve(tenant_request=stale, actor=dave)
    assert Tenant.objects.get(pk=req.tenant_id).status == TenantStatus.REJECTED


def test_approve_after_reject_is_an_invalid_transition_even_when_the_budget_shrank(submit, carol, dave, team_a):
    req = submit()
    services.request_reject(tenant_request=req, actor=carol, reason="no")
    team_a.budget_tenants = 0
    team_a.save()
    with pytest.raises(InvalidTransition):
        services.request_approve(tenant_request=req, actor=dave)


def test_a_request_cannot_be_approved_twice(submit, carol, dave, dispatched, django_capture_on_commit_callbacks):
    req = submit()
    with django_capture_on_commit_callbacks(execute=True):
        services.request_approve(tenant_request=TenantRequest.objects.get(pk=req.pk), actor=carol)
        with pytest.raises(InvalidTransition):
            services.request_approve(tenant_request=TenantRequest.objects.get(pk=req.pk), actor=dave)
    assert len(dispatched) == 1
    assert AuditEvent.objects.filter(action="request.approve", object_id=str(req.pk)).count() == 1


def test_reject_after_approve_is_an_invalid_transition(submit, carol, dave):
    req = submit()
    services.request_approve(tenant_request=req, actor=carol)
    with pytest.raises(InvalidTransition):
        services.request_reject(tenant_request=req, actor=dave, reason="too late")


def test_the_requester_cancels_and_the_tenant_is_cancelled(submit, amir):
    req = services.request_cancel(tenant_request=submit(actor=amir), actor=amir)
    assert req.status == TenantRequest.Status.CANCELLED
    assert Tenant.objects.get(pk=req.tenant_id).status == TenantStatus.CANCELLED


def test_a_team_owner_may_cancel_a_members_request(submit, amir, alice):
    assert (
        services.request_cancel(tenant_request=submit(actor=amir), actor=alice).status == TenantRequest.Status.CANCELLED
    )


@pytest.mark.parametrize("who", ["vera", "bob", "erin", "carol"])
def test_others_cannot_cancel(submit, amir, who, request):
    with pytest.raises(Forbidden):
        services.request_cancel(tenant_request=submit(actor=amir), actor=request.getfixturevalue(who))


def test_an_approved_request_cannot_be_cancelled(submit, carol, alice):
    req = services.request_approve(tenant_request=submit(), actor=carol)
    with pytest.raises(InvalidTransition):
        services.request_cancel(tenant_request=req, actor=alice)


# --- budget ---------------------------------------------------------------------------


def test_the_team_budget_is_enforced_at_submit(submit, team_a):
    team_a.budget_tenants = 1
    team_a.save()
    submit(name="one")
    with pytest.raises(ValidationError) as refused:
        submit(name="two")
    assert "exceed the budget of team team-a" in field_errors(refused)["tier"][0]
    assert "tenants 2 of 1" in field_errors(refused)["tier"][0]


def test_the_cpu_budget_counts_tier_limits(submit, team_a, medium, large):
    team_a.budget_cpu_millis = medium.cpu_limit_millis + large.cpu_limit_millis - 1
    team_a.save()
    submit(name="one", tier=medium)
    with pytest.raises(ValidationError) as refused:
        submit(name="two", tier=large)
    assert "CPU" in field_errors(refused)["tier"][0]


def test_the_budget_is_checked_again_at_approval(submit, team_a, carol):
    req = submit()
    team_a.budget_memory_mib = 1024  # shrunk by an admin while the request waited
    team_a.save()
    with pytest.raises(ValidationError) as refused:
        services.request_approve(tenant_request=req, actor=carol)
    assert "memory" in field_errors(refused)["tier"][0]
    req.refresh_from_db()
    assert req.status == TenantRequest.Status.PENDING
    assert Tenant.objects.get(pk=req.tenant_id).status == TenantStatus.REQUESTED


def test_rejected_and_cancelled_tenants_free_their_budget(submit, team_a, carol, alice):
    team_a.budget_tenants = 1
    team_a.save()
    services.request_reject(tenant_request=submit(name="one"), actor=carol, reason="no")
    services.request_cancel(tenant_request=submit(name="two"), actor=alice)
    assert submit(name="three").status == TenantRequest.Status.PENDING


# --- idempotency -------------------------------------------------------------------------


def test_the_same_idempotency_key_returns_the_same_request(submit):
    first = submit(name="web", idempotency_key="ci-run-17")
    again = submit(name="web", idempotency_key="ci-run-17")
    assert again.pk == first.pk
    assert Tenant.objects.count() == 1
    assert AuditEvent.objects.filter(action="request.submit").count() == 1


def test_idempotency_keys_are_per_person(submit, amir):
    first = submit(name="one", idempotency_key="k")
    second = submit(name="two", actor=amir, idempotency_key="k")
    assert first.pk != second.pk


def test_the_same_key_with_a_different_request_is_a_conflict_and_changes_nothing(submit):
    first = submit(name="web", idempotency_key="ci-run-18")
    with pytest.raises(IdempotencyConflict, match="first used for another request"):
        submit(name="api", idempotency_key="ci-run-18")
    with pytest.raises(IdempotencyConflict):
        submit(name="web", purpose="something else", idempotency_key="ci-run-18")
    assert list(TenantRequest.objects.values_list("pk", flat=True)) == [first.pk]


def test_idempotency_keys_are_per_credential_and_per_team(submit, alice, team_b):
    Membership.objects.create(user=alice, team=team_b, role=Membership.Role.OWNER)
    from_ci = submit(name="web", idempotency_key="k", idempotency_scope="token:1")
    from_browser = submit(name="web2", idempotency_key="k", idempotency_scope="session")
    other_team = submit(team=team_b, name="web3", idempotency_key="k", idempotency_scope="token:1")
    assert len({from_ci.pk, from_browser.pk, other_team.pk}) == 3


def test_without_a_key_every_submission_is_new(submit):
    submit(name="one")
    submit(name="two")
    assert TenantRequest.objects.count() == 2
