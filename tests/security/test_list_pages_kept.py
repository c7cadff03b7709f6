"""Whole list pages kept by each gunicorn worker (tenants.api.kept_pages), attacked.

A page is kept for one caller (their id, standing and token's team are in its key) and answered again while the
change log says nothing it shows has changed. The attacker is amir, with his own API token, against the live portal
(two gunicorn workers) over HTTP. He was an owner of team-b and had every way of reading its rows kept by both
workers; then his sign-in records that he has left team-b. None of the pages kept for him may show team-b's rows
again, on either worker, and a team automation token he made for team-b stops with his membership.
"""

from __future__ import annotations

from typing import Any

import pytest
import requests

from tenants import audit, services
from tenants.models import Cluster, Membership, Team, Tenant, TenantRequest, Tier, User
from tests.fixtures import TokenFactory

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 12  # enough requests that both workers answer, and keep, each page
PATHS = (
    "tenants/",
    "tenants/?team=team-b",
    "tenants/?team=team-b&limit=2",
    "requests/",
    "requests/?team=team-b",
    "audit-events/",
    "audit-events/?team=team-b",
)


def _answers(portal, token: str, path: str) -> list[Any]:
    answers = []
    for _ in range(ROUNDS):
        answer = requests.get(f"{portal.url}/api/v1/{path}", headers={"Authorization": f"Token {token}"}, timeout=10)
        answers.append((answer.status_code, answer.json()))
    return answers


def _team_b_rows(answers: list[Any]) -> int:
    """team-b's rows in ``answers``, but for the audit events of amir's own acts (his own trail is his)."""
    return sum(
        1
        for status, page in answers
        if status == 200
        for row in page["results"]
        if row.get("team") == "team-b" and row.get("actor_name") != "amir"
    )


def test_pages_kept_for_a_member_show_nothing_of_a_team_once_they_have_left_it(
    live_portal,
    api_token: TokenFactory,
    amir: User,
    bob: User,
    team_a: Team,
    team_b: Team,
    small: Tier,
    cluster: Cluster,
):
    Membership.objects.create(user=amir, team=team_b, role=Membership.Role.OWNER)
    for n in range(3):
        tenant = Tenant.objects.create(
            name=f"b-{n}",
            namespace=f"dev-b-{n}",
            team=team_b,
            tier=small,
            cluster=cluster,
            status="ready",
            created_by=bob,
        )
        TenantRequest.objects.create(
            action="create",
            kind=tenant.kind,
            name=tenant.name,
            team=team_b,
            tier=small,
            cluster=cluster,
            tenant=tenant,
            requested_by=bob,
        )
        audit.record(actor=bob, action="test.theirs", object_type="tenant", object_id=str(n), team=team_b)
    personal, for_team_b = api_token(amir), api_token(amir, team=team_b)

    for path in PATHS:
        assert all(_team_b_rows([answer]) for answer in _answers(live_portal, personal, path)), path
    assert all(_team_b_rows([answer]) for answer in _answers(live_portal, for_team_b, "tenants/"))

    # His next sign-in's groups no longer name team-b.
    services.user_sync_from_claims(
        claims={"sub": amir.oidc_subject, "preferred_username": "amir", "groups": [team_a.oidc_group]}
    )

    for path in PATHS:
        assert _team_b_rows(_answers(live_portal, personal, path)) == 0, path
    assert {status for status, _ in _answers(live_portal, for_team_b, "tenants/")} == {401}
