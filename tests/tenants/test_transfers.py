"""tenants.services.transfers: moving a tenant to another team (ask, accept or decline, approve, complete)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from tenants import dispatch, selectors, services
from tenants.errors import Forbidden, InvalidTransition
from tenants.models import AuditEvent, Membership, Team, Tenant, TenantRequest, User

from .conftest import CTX

pytestmark = pytest.mark.django_db

Status = TenantRequest.Status


@pytest.fixture
def team_c(db) -> Team:
    return Team.objects.create(slug="team-c", name="Team C", oidc_group="team-c")


@pytest.fixture
def tom(team_c) -> User:
    """Owner of team-c: neither giving nor receiving."""
    user = User.objects.create(username="tom", email="tom@example.test", oidc_subject="sub-tom")
    Membership.objects.create(user=user, team=team_c, role=Membership.Role.OWNER)
    return user


@pytest.fixture
def shop(ready_tenant, small) -> Tenant:
    """Team-a's ready small-tier tenant (small: approved automatically)."""
    return ready_tenant(name="shop", tier=small)


def _actions(obj) -> list[str]:
    return list(AuditEvent.objects.filter(object_id=str(obj.pk)).order_by("id").values_list("action", flat=True))


def test_an_accepted_transfer_within_budget_and_an_automatic_tier_completes(
    shop, alice, bob, team_a, team_b, dispatched, django_capture_on_commit_callbacks
):
    dispatched.clear()
    req = services.transfer_ask(tenant=shop, target_team=team_b, actor=alice, purpose="reorg", ctx=CTX)
    assert (req.action, req.status, req.team, req.target_team) == ("transfer", Status.PENDING, team_a, team_b)
    assert Tenant.objects.get(pk=shop.pk).team == team_a  # nothing moves before the receiving team accepts
    generation, epoch = shop.generation, shop.credential_epoch
    with django_capture_on_commit_callbacks(execute=True):
        req = services.transfer_accept(tenant_request=req, actor=bob, ctx=CTX)
    assert req.status == Status.APPROVED and req.auto_approved and req.accepted_by == bob
    shop.refresh_from_db()
    assert shop.team == team_b and shop.status == "ready"
    assert (shop.generation, shop.credential_epoch) == (generation + 1, epoch + 1)
    assert (dispatch.PROVISION, (str(shop.pk),)) in dispatched
    assert _actions(req) == ["transfer.ask", "transfer.accept", "transfer.approve"]
    moves = AuditEvent.objects.filter(action="transfer.complete", object_id=str(shop.pk))
    assert {e.team for e in moves} == {team_a, team_b}
    assert all(e.before["team"] == "team-a" and e.after["team"] == "team-b" for e in moves)
    accept = AuditEvent.objects.get(action="transfer.accept")
    assert accept.team == team_b and accept.actor == bob and accept.after["needs_approval"] is False


def test_the_old_team_loses_the_tenant_and_the_new_team_gets_it(shop, alice, amir, bob, team_a, team_b):
    req = services.transfer_ask(tenant=shop, target_team=team_b, actor=alice)
    services.transfer_accept(tenant_request=req, actor=bob)
    assert not selectors.tenants_visible_to(user=alice).filter(pk=shop.pk).exists()
    assert not selectors.tenants_visible_to(user=amir).filter(pk=shop.pk).exists()
    assert selectors.tenants_visible_to(user=bob).filter(pk=shop.pk).exists()
    shop.refresh_from_db()
    with pytest.raises(Forbidden):
        services.tenant_issue_kubeconfig(tenant=shop, actor=alice)
    assert services.kubeconfig_role(tenant=shop, actor=bob) == "edit"
    # Budgets follow: the tenant counts for team-b now, not team-a.
    assert selectors.team_allocation(team=team_b).tenants == 1
    assert selectors.team_allocation(team=team_a).tenants == 0


def test_a_plain_member_cannot_ask(shop, amir, team_b):
    with pytest.raises(Forbidden):
        services.transfer_ask(tenant=shop, target_team=team_b, actor=amir)
    assert not TenantRequest.objects.filter(action="transfer").exists()


def test_a_viewer_and_an_outsider_cannot_ask(shop, vera, bob, team_b, team_c):
    for actor, target in ((vera, team_b), (bob, team_c)):
        with pytest.raises(Forbidden):
            services.transfer_ask(tenant=shop, target_team=target, actor=actor)


def test_a_platform_admin_may_ask(shop, dave, team_b):
    assert services.transfer_ask(tenant=shop, target_team=team_b, actor=dave).requested_by == dave


def test_an_owner_of_a_third_team_cannot_accept_or_decline(shop, alice, tom, team_b, team_c):
    req = services.transfer_ask(tenant=shop, target_team=team_b, actor=alice)
    with pytest.raises(Forbidden):
        services.transfer_accept(tenant_request=req, actor=tom)
    with pytest.raises(Forbidden):
        services.transfer_decline(tenant_request=req, actor=tom, reason="no")
    req.refresh_from_db()
    assert req.status == Status.PENDING and req.accepted_at is None


def test_the_giving_owner_cannot_accept_for_the_receiving_team(shop, alice, team_b):
    req = services.transfer_ask(tenant=shop, target_team=team_b, actor=alice)
    with pytest.raises(Forbidden):
        services.transfer_accept(tenant_request=req, actor=alice)


def test_a_plain_member_of_the_receiving_team_cannot_accept(shop, alice, team_b):
    member = User.objects.create(username="bea", oidc_subject="sub-bea")
    Membership.objects.create(user=member, team=team_b, role=Membership.Role.MEMBER)
    req = services.transfer_ask(tenant=shop, target_team=team_b, actor=alice)
    with pytest.raises(Forbidden):
        services.transfer_accept(tenant_request=req, actor=member)


def test_the_receiving_owner_cannot_accept_twice(ready_tenant, alice, bob, team_b, medium):
    tenant = ready_tenant(name="big", tier=medium)  # medium: an approver must approve after acceptance
    req = services.transfer_ask(tenant=tenant, target_team=team_b, actor=alice)
    req = services.transfer_accept(tenant_request=req, actor=bob)
    assert req.status == Status.PENDING and req.accepted_by == bob
    with pytest.raises(InvalidTransition):
        services.transfer_accept(tenant_request=req, actor=bob)
    with pytest.raises(InvalidTransition):
        services.transfer_decline(tenant_request=req, actor=bob, reason="changed my mind")
    assert AuditEvent.objects.filter(action="transfer.accept").count() == 1


def test_accepting_a_completed_transfer_is_a_conflict(shop, alice, bob, team_b):
    req = services.transfer_ask(tenant=shop, target_team=team_b, actor=alice)
    services.transfer_accept(tenant_request=req, actor=bob)
    with pytest.raises(InvalidTransition):
        services.transfer_accept(tenant_request=req, actor=bob)


def test_over_the_receiving_budget_an_approver_must_approve(shop, alice, bob, carol, team_a, team_b, small):
    Team.objects.filter(pk=team_b.pk).update(budget_cpu_millis=small.cpu_limit_millis - 1)
    req = services.transfer_ask(tenant=shop, target_team=team_b, actor=alice)
    assert not selectors.requests_awaiting_decision(user=carol).filter(pk=req.pk).exists()  # not accepted yet
    with pytest.raises(InvalidTransition):  # an approver cannot decide before the receiving team accepts
        services.request_approve(tenant_request=req, actor=carol)
    req = services.transfer_accept(tenant_request=req, actor=bob)
    assert req.status == Status.PENDING
    assert "budget of team team-b" in req.approval_reason and "CPU" in req.approval_reason
    assert Tenant.objects.get(pk=shop.pk).team == team_a
    assert selectors.requests_awaiting_decision(user=carol).filter(pk=req.pk).exists()
    req = services.request_approve(tenant_request=req, actor=carol, comment="budget raise coming")
    assert req.status == Status.APPROVED and req.decided_by == carol and not req.auto_approved
    assert Tenant.objects.get(pk=shop.pk).team == team_b
    assert _actions(req) == ["transfer.ask", "transfer.accept", "request.approve"]


def test_a_tier_that_is_not_automatic_needs_an_approver(ready_tenant, alice, bob, carol, team_b, medium):
    tenant = ready_tenant(name="big", tier=medium)
    req = services.transfer_ask(tenant=tenant, target_team=team_b, actor=alice)
    req = services.transfer_accept(tenant_request=req, actor=bob)
    assert req.status == Status.PENDING and "Tier medium is not approved automatically." in req.approval_reason
    services.request_reject(tenant_request=req, actor=carol, reason="not now")
    tenant.refresh_from_db()
    assert tenant.team.slug == "team-a"


def test_the_one_who_accepted_cannot_approve_it(ready_tenant, alice, team_b, medium):
    approving_owner = User.objects.create(username="olga", oidc_subject="sub-olga", is_approver=True)
    Membership.objects.create(user=approving_owner, team=team_b, role=Membership.Role.OWNER)
    req = services.transfer_ask(tenant=ready_tenant(name="big", tier=medium), target_team=team_b, actor=alice)
    req = services.transfer_accept(tenant_request=req, actor=approving_owner)
    assert not selectors.requests_awaiting_decision(user=approving_owner).filter(pk=req.pk).exists()
    with pytest.raises(Forbidden):
        services.request_approve(tenant_request=req, actor=approving_owner)


def test_declining_leaves_the_tenant_where_it_was(shop, alice, bob, team_a, team_b):
    req = services.transfer_ask(tenant=shop, target_team=team_b, actor=alice)
    req = services.transfer_decline(tenant_request=req, actor=bob, reason="we have no room", ctx=CTX)
    assert req.status == Status.REJECTED and req.decided_by == bob
    shop.refresh_from_db()
    assert shop.team == team_a and shop.credential_epoch == 1
    decline = AuditEvent.objects.get(action="transfer.decline")
    assert decline.team == team_b and decline.after["reason"] == "we have no room"


def test_the_giving_owner_may_cancel(shop, alice, team_b):
    req = services.transfer_ask(tenant=shop, target_team=team_b, actor=alice)
    assert services.request_cancel(tenant_request=req, actor=alice).status == Status.CANCELLED


def test_one_pending_request_per_tenant(shop, alice, team_b, team_c):
    services.transfer_ask(tenant=shop, target_team=team_b, actor=alice)
    with pytest.raises(InvalidTransition):
        services.transfer_ask(tenant=shop, target_team=team_c, actor=alice)


def test_a_transfer_to_the_same_team_is_refused(shop, alice, team_a):
    with pytest.raises(ValidationError) as refused:
        services.transfer_ask(tenant=shop, target_team=team_a, actor=alice)
    assert "target_team" in refused.value.message_dict


def test_only_a_ready_tenant_moves(submit, alice, team_b):
    tenant = submit(name="new").tenant  # requested, not ready
    with pytest.raises(InvalidTransition):
        services.transfer_ask(tenant=tenant, target_team=team_b, actor=alice)


def test_the_receiving_owners_see_it_offered_and_the_giving_team_does_not(shop, alice, amir, bob, tom, team_b):
    req = services.transfer_ask(tenant=shop, target_team=team_b, actor=alice)
    assert list(selectors.transfers_awaiting_acceptance(user=bob)) == [req]
    assert not selectors.transfers_awaiting_acceptance(user=alice).exists()
    assert not selectors.transfers_awaiting_acceptance(user=tom).exists()
    assert selectors.requests_visible_to(user=bob).filter(pk=req.pk).exists()
    assert selectors.requests_visible_to(user=amir).filter(pk=req.pk).exists()
    assert not selectors.requests_visible_to(user=tom).filter(pk=req.pk).exists()


def test_both_teams_hear_of_it(shop, alice, bob, team_b, mailoutbox, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        req = services.transfer_ask(tenant=shop, target_team=team_b, actor=alice)
    asked = mailoutbox[-1]
    assert "bob@example.test" in asked.to and "alice@example.test" in asked.to
    mailoutbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        services.transfer_accept(tenant_request=req, actor=bob)
    moved = next(m for m in mailoutbox if "moved to team-b" in m.subject)
    assert {"alice@example.test", "bob@example.test"} <= set(moved.to)
