"""Whole list pages kept per process (tenants.api.kept_pages): answered again only while nothing they show changed.

Every test commits (``transaction=True``): a page read inside a transaction is never kept, and the change log's
rows are visible to the next request exactly when their writer commits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import Model
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from tenants import audit
from tenants.api import kept_pages
from tenants.models import Cluster, Membership, Team, Tenant, TenantRequest, Tier, User

pytestmark = pytest.mark.django_db(transaction=True)

LISTS = {
    "tenants": "/api/v1/tenants/",
    "requests": "/api/v1/requests/",
    "audit": "/api/v1/audit-events/",
}


@pytest.fixture(autouse=True)
def _fresh_pages():
    kept_pages.PAGES.clear()
    yield
    kept_pages.PAGES.clear()


@pytest.fixture
def rows(varied, team_a, team_b, alice, bob) -> None:
    """``varied`` plus a request of team-b offered to team-a, and an event of alice's in no team."""
    tenant = Tenant.objects.filter(team=team_b).first()
    assert tenant is not None
    TenantRequest.objects.create(
        action="transfer",
        kind=tenant.kind,
        name=tenant.name,
        team=team_b,
        target_team=team_a,
        tier=tenant.tier,
        cluster=tenant.cluster,
        tenant=tenant,
        requested_by=bob,
    )
    audit.record(actor=alice, action="user.sign_in", obj=alice, team=None)


def client_of(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def read(user: User, path: str) -> bytes:
    response = client_of(user).get(path)
    assert response.status_code == 200, response.content
    return response.content


def built(user: User, path: str, settings) -> bytes:
    """The page as built now, keeping nothing."""
    kept, settings.API_LIST_PAGES_KEPT = settings.API_LIST_PAGES_KEPT, 0
    try:
        return read(user, path)
    finally:
        settings.API_LIST_PAGES_KEPT = kept


def counts() -> tuple[int, int]:
    return kept_pages.PAGES.hits, kept_pages.PAGES.misses


@pytest.mark.parametrize("path", [*LISTS.values(), *(f"{p}?team=team-a&limit=7" for p in LISTS.values())])
def test_a_page_asked_again_with_nothing_changed_is_answered_as_kept_with_one_statement(rows, alice, path):
    first = read(alice, path)
    hits, misses = counts()
    with CaptureQueriesContext(connection) as queries:
        again = read(alice, path)
    assert again == first
    assert counts() == (hits + 1, misses)
    statements = [q["sql"] for q in queries.captured_queries]
    assert len(statements) == 1 and "berth_page_change" in statements[0], statements


def test_a_change_in_another_team_keeps_the_page_and_one_in_its_team_does_not(rows, alice, bob, team_b, settings):
    path = LISTS["tenants"] + "?team=team-a"
    first = read(alice, path)
    Tenant.objects.filter(team=team_b).update(purpose="team-b's own business")
    assert read(alice, path) == first
    hits, misses = counts()
    Tenant.objects.filter(team__slug="team-a").update(purpose="changed")
    again = read(alice, path)
    assert counts() == (hits, misses + 1)
    assert again != first and again == built(alice, path, settings)


def _rename(model: type[Model], field: str, name: str) -> Callable[[], Any]:
    def change() -> None:
        model._default_manager.filter(**{field: name}).update(**{field: name + "-x"})

    return change


def _tenant_status() -> None:
    Tenant.objects.filter(team__slug="team-a").exclude(status="failed").update(status="failed")


def _new_request_of_team_a() -> None:
    r = TenantRequest.objects.filter(team__slug="team-a").first()
    assert r is not None
    r.pk = None
    r.status = "pending"
    tenant = Tenant.objects.filter(team__slug="team-a").last()
    assert tenant is not None
    r.tenant = tenant
    r.save()


def _offered_to_team_a() -> None:
    TenantRequest.objects.filter(target_team__slug="team-a").update(purpose="offered again")


def _event_of_team_a() -> None:
    audit.record(
        actor=User.objects.get(username="amir"), action="tenant.note", obj=None, team=Team.objects.get(slug="team-a")
    )


def _alices_own_event() -> None:
    alice = User.objects.get(username="alice")
    audit.record(actor=alice, action="user.sign_in", obj=alice, team=None)


def _alice_leaves_team_a() -> None:
    Membership.objects.filter(user__username="alice", team__slug="team-a").delete()


def _alice_joins_team_b() -> None:
    Membership.objects.create(
        user=User.objects.get(username="alice"), team=Team.objects.get(slug="team-b"), role=Membership.Role.MEMBER
    )


def _transfer_to_team_b() -> None:
    Tenant.objects.filter(pk=Tenant.objects.filter(team__slug="team-a").first().pk).update(
        team=Team.objects.get(slug="team-b")
    )


CHANGES: dict[str, Callable[[], Any]] = {
    "a tenant's status": _tenant_status,
    "a new request": _new_request_of_team_a,
    "a request offered to the team": _offered_to_team_a,
    "an event of the team": _event_of_team_a,
    "an event of the caller in no team": _alices_own_event,
    "the caller leaves the team": _alice_leaves_team_a,
    "the caller joins another team": _alice_joins_team_b,
    "a tenant moves to another team": _transfer_to_team_b,
    "a team's slug": _rename(Team, "slug", "team-a"),
    "a team's time zone": lambda: Team.objects.filter(slug="team-a").update(time_zone="Asia/Tokyo"),
    "a tier's name": _rename(Tier, "name", "medium"),
    "a cluster's name": _rename(Cluster, "name", "edge"),
    "a cluster's links": lambda: Cluster.objects.update(monitoring_links=[{"name": "New", "url": "https://n.test/"}]),
    "a user's name": _rename(User, "username", "carol"),
}


# The team filter as it filters: an empty value is no filter, and a value is trimmed.
TEAM_VALUES = ("?team=team-a", "?team=", "?team=%20team-a%20")


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
@pytest.mark.parametrize("path", [*LISTS.values(), *(p + team for p in LISTS.values() for team in TEAM_VALUES)])
def test_after_any_change_the_page_is_what_it_would_be_built_now(rows, alice, path, change, settings):
    read(alice, path)
    read(alice, path)
    CHANGES[change]()
    alice.refresh_from_db()
    assert read(alice, path) == built(alice, path, settings)


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_each_change_above_changes_a_page(rows, alice, change, settings):
    paths = [*LISTS.values(), *(f"{p}?team=team-a" for p in LISTS.values())]
    before = [built(alice, path, settings) for path in paths]
    CHANGES[change]()
    alice.refresh_from_db()
    assert [built(alice, path, settings) for path in paths] != before


def test_a_user_signing_in_changes_no_page(rows, alice, settings):
    path = LISTS["requests"]
    first = read(alice, path)
    User.objects.filter(username="bob").update(last_login="2026-11-28T08:00:00Z", identity_checked_at=None)
    hits, _ = counts()
    assert read(alice, path) == first and counts()[0] == hits + 1


def test_a_page_read_inside_a_transaction_or_filtered_by_more_is_never_kept(rows, alice, carol):
    with transaction.atomic():
        read(alice, LISTS["tenants"])
        read(alice, LISTS["tenants"])
    for user, path in [
        (alice, LISTS["tenants"] + "?status=ready"),
        (alice, LISTS["tenants"] + "?format=json"),
        (carol, LISTS["tenants"]),  # an approver's page of every team
        (carol, LISTS["audit"] + "?team="),  # the same: an empty team is no filter
    ]:
        read(user, path)
        read(user, path)
    assert counts() == (0, 0)


@pytest.mark.parametrize("path", LISTS.values())
def test_a_team_named_with_a_nul_character_is_an_empty_page_never_kept(rows, alice, path):
    for _ in range(2):
        answer = client_of(alice).get(f"{path}?team=team-a%00")
        assert answer.status_code == 200 and answer.json()["results"] == [], answer.content
    assert counts() == (0, 0)


def test_an_approvers_page_pinned_to_a_team_is_kept_and_follows_that_team(rows, carol, settings):
    path = LISTS["audit"] + "?team=team-b"
    first = read(carol, path)
    assert read(carol, path) == first and counts()[0] == 1
    audit.record(actor=carol, action="tenant.note", obj=None, team=Team.objects.get(slug="team-b"))
    assert read(carol, path) == built(carol, path, settings) != first


def test_a_change_committed_while_the_page_is_built_is_never_missed(rows, alice, settings, monkeypatch):
    # The snapshot kept is the check's, taken before the page's statement: a change another transaction commits in
    # between is in the page, and counts as unseen, so the next request builds the page again.
    path = LISTS["tenants"] + "?team=team-a"
    check = kept_pages.KeptPages._check

    def check_then_commit_elsewhere(self, *args: Any) -> Any:
        answer = check(self, *args)
        writer = threading.Thread(target=_write_elsewhere)
        writer.start()
        writer.join()
        return answer

    monkeypatch.setattr(kept_pages.KeptPages, "_check", check_then_commit_elsewhere)
    read(alice, path)
    monkeypatch.undo()
    hits, misses = counts()
    assert read(alice, path) == built(alice, path, settings)
    assert counts() == (hits, misses + 1)


def _write_elsewhere() -> None:
    try:
        Tenant.objects.filter(team__slug="team-a").update(purpose=f"written at {threading.get_ident()}")
    finally:
        connection.close()


def test_the_pages_kept_are_bounded(rows, alice, settings):
    settings.API_LIST_PAGES_KEPT = 3
    for limit in range(1, 6):
        read(alice, f"{LISTS['tenants']}?limit={limit}")
    assert len(kept_pages.PAGES._pages) == 3
    read(alice, f"{LISTS['tenants']}?limit=1")
    assert counts()[0] == 0  # the first was dropped
