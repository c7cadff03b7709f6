"""Transfer pages: the tenant page's "Transfer to another team" for owners, the offer on the receiving owners'
dashboard and request page, accept and decline."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.test import Client
from django.urls import reverse

from tenants import services
from tenants.models import AuditEvent, Membership, Team, Tenant, TenantRequest, User

pytestmark = pytest.mark.django_db


@pytest.fixture
def as_user(client: Client) -> Callable[[User], Client]:
    def _as(user: User) -> Client:
        client.logout()
        client.force_login(user)
        return client

    return _as


@pytest.fixture
def shop(ready_tenant, small) -> Tenant:
    return ready_tenant(name="shop", tier=small)


def test_owners_see_the_transfer_action_and_members_do_not(as_user, shop, alice, amir):
    assert "Transfer to another team" in as_user(alice).get(reverse("tenant-detail", args=[shop.pk])).content.decode()
    assert (
        "Transfer to another team" not in as_user(amir).get(reverse("tenant-detail", args=[shop.pk])).content.decode()
    )


def test_the_form_offers_every_other_team(as_user, shop, alice, team_b):
    Team.objects.create(slug="team-c", name="Team C", oidc_group="team-c")
    html = as_user(alice).get(reverse("tenant-transfer", args=[shop.pk])).content.decode()
    assert 'value="team-b"' in html and 'value="team-c"' in html and 'value="team-a"' not in html


def test_a_member_posting_the_form_gets_403_and_an_outsider_404(as_user, shop, amir, bob, team_b):
    url = reverse("tenant-transfer", args=[shop.pk])
    assert as_user(amir).post(url, {"target_team": "team-b"}).status_code == 403
    assert as_user(amir).get(url).status_code == 403
    assert as_user(bob).get(url).status_code == 404
    assert not TenantRequest.objects.filter(action="transfer").exists()


def test_ask_then_the_receiving_owner_accepts_from_the_dashboard(as_user, shop, alice, bob, team_b):
    asked = as_user(alice).post(
        reverse("tenant-transfer", args=[shop.pk]), {"target_team": "team-b", "purpose": "reorg"}
    )
    req = TenantRequest.objects.get(action="transfer")
    assert asked.status_code == 302 and asked["Location"] == reverse("request-detail", args=[req.pk])
    dashboard = as_user(bob).get(reverse("dashboard")).content.decode()
    assert "Transfers offered to your team" in dashboard and reverse("transfer-accept", args=[req.pk]) in dashboard
    page = as_user(bob).get(reverse("request-detail", args=[req.pk])).content.decode()
    assert 'id="transfer-accept"' in page
    accepted = as_user(bob).post(reverse("transfer-accept", args=[req.pk]), {"next": reverse("dashboard")})
    assert accepted.status_code == 302 and accepted["Location"] == reverse("dashboard")
    shop.refresh_from_db()
    assert shop.team == team_b
    assert as_user(alice).get(reverse("tenant-detail", args=[shop.pk])).status_code == 404
    assert as_user(bob).get(reverse("tenant-detail", args=[shop.pk])).status_code == 200


def test_the_receiving_owner_declines_with_a_reason(as_user, shop, alice, bob, team_a, team_b):
    req = services.transfer_ask(tenant=shop, target_team=team_b, actor=alice)
    as_user(bob).post(reverse("transfer-decline", args=[req.pk]), {"decline-reason": "no room"})
    req.refresh_from_db()
    assert req.status == "rejected" and req.decision_comment == "no room"
    assert Tenant.objects.get(pk=shop.pk).team == team_a


def test_an_owner_of_a_third_team_cannot_see_or_accept(as_user, shop, alice, team_b):
    third = Team.objects.create(slug="team-c", name="Team C", oidc_group="team-c")
    tom = User.objects.create(username="tom", oidc_subject="sub-tom")
    Membership.objects.create(user=tom, team=third, role=Membership.Role.OWNER)
    req = services.transfer_ask(tenant=shop, target_team=team_b, actor=alice)
    assert as_user(tom).post(reverse("transfer-accept", args=[req.pk])).status_code == 404
    assert as_user(tom).get(reverse("request-detail", args=[req.pk])).status_code == 404
    assert "Transfers offered" not in as_user(tom).get(reverse("dashboard")).content.decode()


def test_the_giving_owner_sees_no_accept_button_and_approvers_wait_for_acceptance(
    as_user, ready_tenant, medium, alice, bob, carol, team_b
):
    tenant = ready_tenant(name="big", tier=medium)
    req = services.transfer_ask(tenant=tenant, target_team=team_b, actor=alice)
    assert 'id="transfer-accept"' not in as_user(alice).get(reverse("request-detail", args=[req.pk])).content.decode()
    waiting = as_user(carol).get(reverse("request-detail", args=[req.pk])).content.decode()
    assert "Your decision" not in waiting and "Waiting for an owner of team-b" in waiting
    as_user(bob).post(reverse("transfer-accept", args=[req.pk]))
    queue = as_user(carol).get(reverse("approvals")).content.decode()
    assert "team-a → team-b" in queue and "not approved automatically" in queue
    decide = as_user(carol).get(reverse("request-detail", args=[req.pk])).content.decode()
    assert "Your decision" in decide and "not approved automatically" in decide
    as_user(carol).post(reverse("request-approve", args=[req.pk]), {"approve-comment": "ok"})
    assert Tenant.objects.get(pk=tenant.pk).team == team_b
    assert AuditEvent.objects.filter(action="transfer.complete", object_id=str(tenant.pk)).count() == 2
