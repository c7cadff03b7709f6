"""`berth transfer TENANT --to TEAM`, then `berth request accept|decline` by the receiving team's owner, against
a live portal (no worker: the state is what Berth wants; tests/security/test_transfer_access.py has the cluster)."""

from __future__ import annotations

import pytest

from tenants.models import AuditEvent, Tenant, TenantRequest
from tests.fixtures import TokenFactory
from tests.plugins.portal import BerthRunner

pytestmark = pytest.mark.django_db(transaction=True)


def test_alice_offers_web_to_team_b_and_bob_accepts_it_by_id_prefix(
    berth: BerthRunner, api_token: TokenFactory, alice, bob, team_b, ready_tenant_row
) -> None:
    web = ready_tenant_row("web")
    offered = berth("transfer", "web", "--to", "team-b", "--purpose", "reorg", "-o", "json", token=api_token(alice))
    assert offered.code == 0, offered.stderr
    req = offered.json()
    assert (req["action"], req["status"], req["team"], req["target_team"]) == (
        "transfer",
        "pending",
        "team-a",
        "team-b",
    )

    accepted = berth("request", "accept", req["id"][:8], "-o", "json", token=api_token(bob))
    assert accepted.code == 0, accepted.stderr
    assert accepted.json()["accepted_by"] == "bob"
    # Medium is not approved automatically: the transfer now waits for an approver, the tenant stays team-a's.
    assert TenantRequest.objects.get(pk=req["id"]).accepted_by == bob
    assert Tenant.objects.get(pk=web.pk).team.slug == "team-a"
    actions = set(AuditEvent.objects.filter(object_id=req["id"]).values_list("action", flat=True))
    assert {"transfer.ask", "transfer.accept"} <= actions


def test_a_member_cannot_offer_another_team_cannot_find_it_and_the_receiver_may_decline(
    berth: BerthRunner, api_token: TokenFactory, alice, amir, bob, team_b, ready_tenant_row
) -> None:
    ready_tenant_row("web")
    refused = berth("transfer", "web", "--to", "team-b", token=api_token(amir))
    assert refused.code == 4, refused.stderr  # forbidden: only owners and admins offer a tenant
    assert berth("transfer", "web", "--to", "team-b", token=api_token(bob)).code == 5  # not bob's to find
    assert berth("transfer", "web", "--to", "no-such-team", token=api_token(alice)).code == 6  # a field error

    req = berth("transfer", "web", "--to", "team-b", "-o", "json", token=api_token(alice)).json()
    declined = berth("request", "decline", req["id"], "--reason", "not ours", "-o", "json", token=api_token(bob))
    assert declined.code == 0, declined.stderr
    assert declined.json()["status"] in ("rejected", "cancelled")
    assert TenantRequest.objects.get(pk=req["id"]).status != TenantRequest.Status.PENDING
