"""List rows kept rendered by each gunicorn worker (tenants.api.rows.PlainRows.fragments), attacked.

The workers keep every list row they render and serve it again while its version holds. The attacker is amir, a
member of team-a, with his own API token, against the live portal (two gunicorn workers) over HTTP: after an admin
and team-b's owner have had every row rendered, he asks for team-b's rows every way the lists take; and after
team-a's tenant has been given to team-b, he asks for it again. Nothing rendered for somebody else reaches him,
and what team-b is shown is the row as it is now, not as a worker kept it.
"""

from __future__ import annotations

from typing import Any

import pytest
import requests

from tenants import audit, services
from tenants.api.pagination import After, encode_cursor
from tenants.models import AuditEvent, Cluster, Team, Tenant, Tier, User
from tests.fixtures import TokenFactory

pytestmark = pytest.mark.django_db(transaction=True)

# Enough requests that both workers answer each page (the kernel hands connections to either).
ROUNDS = 12


def _pages(portal, token: str, path: str) -> list[dict[str, Any]]:
    """The page at ``path`` as each of ROUNDS requests answered it (all 200)."""
    answers = []
    for _ in range(ROUNDS):
        answer = requests.get(f"{portal.url}/api/v1/{path}", headers={"Authorization": f"Token {token}"}, timeout=10)
        assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
        answers.append(answer.json())
    return answers


def _names(pages: list[dict[str, Any]]) -> set[str]:
    return {row["name"] for page in pages for row in page["results"]}


def test_rows_kept_for_others_never_reach_a_member_and_a_transfer_shows_at_once(
    live_portal,
    api_token: TokenFactory,
    alice: User,
    amir: User,
    bob: User,
    dave: User,
    team_a: Team,
    team_b: Team,
    small: Tier,
    cluster: Cluster,
):
    def tenant(name: str, team: Team, owner: User) -> Tenant:
        return Tenant.objects.create(
            name=name, namespace=f"dev-{name}", team=team, tier=small, cluster=cluster, status="ready", created_by=owner
        )

    ours = tenant("ours", team_a, alice)
    for n in range(3):
        tenant(f"theirs-{n}", team_b, bob)
        audit.record(actor=bob, action="test.theirs", object_type="tenant", object_id=str(n), team=team_b)
    admin, owner_b, attacker = api_token(dave), api_token(bob), api_token(amir)

    # Every row rendered and kept by both workers, for people who may see them.
    assert _names(_pages(live_portal, admin, "tenants/?limit=200")) == {"ours", "theirs-0", "theirs-1", "theirs-2"}
    assert _names(_pages(live_portal, owner_b, "tenants/?team=team-b")) == {"theirs-0", "theirs-1", "theirs-2"}
    _pages(live_portal, admin, "requests/?limit=200")
    _pages(live_portal, admin, "audit-events/?limit=200")

    # amir asks for team-b's rows every way the lists take: by team, unfiltered, by status, by cluster, paged.
    for path in (
        "tenants/",
        "tenants/?team=team-b",
        "tenants/?status=ready",
        "tenants/?cluster=dev&limit=1&offset=1",
        "tenants/?status=ready&status=failed&limit=2",
    ):
        assert _names(_pages(live_portal, attacker, path)) <= {"ours"}, path
    audit_pages = _pages(live_portal, attacker, "audit-events/?limit=200")
    assert not [row for page in audit_pages for row in page["results"] if row["team"] == "team-b"]
    # The audit trail pages by cursor, a position anyone can write: one set at team-b's newest event (its instant
    # and id read here, as if guessed), or past every row, reads none of team-b's events either.
    newest_b = AuditEvent.objects.filter(team=team_b).order_by("-at", "-id").first()
    assert newest_b is not None
    for cursor in (encode_cursor(After(newest_b.at, newest_b.pk + 1)), "9999999999999999999.1"):
        paged = _pages(live_portal, attacker, f"audit-events/?limit=200&team=team-b&cursor={cursor}")
        assert not [row for page in paged for row in page["results"] if row["team"] == "team-b"], cursor
        paged = _pages(live_portal, owner_b, f"audit-events/?limit=200&team=team-b&cursor={cursor}")
        assert [row for page in paged for row in page["results"] if row["team"] == "team-b"], cursor

    # team-a's tenant goes to team-b (asked by its owner, accepted by team-b's): amir loses it at once, on every
    # worker, though both kept its row; team-b sees the row as it is now.
    services.transfer_accept(
        tenant_request=services.transfer_ask(tenant=ours, target_team=team_b, actor=alice, purpose="reorg"), actor=bob
    )
    assert _names(_pages(live_portal, attacker, "tenants/?limit=200")) == set()
    moved = [
        row
        for page in _pages(live_portal, owner_b, "tenants/?limit=200")
        for row in page["results"]
        if row["name"] == "ours"
    ]
    assert len(moved) == ROUNDS and {row["team"] for row in moved} == {"team-b"}
    detail = requests.get(
        f"{live_portal.url}/api/v1/tenants/{ours.pk}/", headers={"Authorization": f"Token {attacker}"}, timeout=10
    )
    assert detail.status_code == 404
