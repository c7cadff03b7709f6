"""Paging of the API's lists: ids first, with a count only when the page does not tell it (tenants, requests), and
newest first by keyset for the audit trail (no count, every page the same cost however deep). Also the indexes the
lists' scopes read, and the audit filters' text matching."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tenants import audit, selectors
from tenants.models import AuditEvent, Tenant, TenantRequest

pytestmark = pytest.mark.django_db

API = "/api/v1"
TIED = dt.datetime(2026, 3, 2, 12, 0, 0, 123456, tzinfo=dt.UTC)


def _tied_events(people, teams) -> list[AuditEvent]:
    """Seven events of one instant (one transaction's often are), whose order is their ids'."""
    at = AuditEvent._meta.get_field("at")
    at.auto_now_add = False  # as bench/api_load.py seeds: the table refuses UPDATE
    try:
        return AuditEvent.objects.bulk_create(
            AuditEvent(
                at=TIED,
                actor=people[i % len(people)],
                actor_name=people[i % len(people)].username,
                team=teams[i % len(teams)],
                object_type="tenant",
                object_id=str(i),
                action=f"test.tie{i}",
            )
            for i in range(7)
        )
    finally:
        at.auto_now_add = True


@pytest.fixture
def callers(varied, alice, bob, carol, dave, team_a, team_b, token_client, api) -> dict[str, Any]:
    # Events whose actions hold LIKE's wildcards, to be matched as text.
    for action in ("test_a", "100%", "te%t_x"):
        audit.record(actor=alice, action=action, object_type="tenant", object_id="3", team=team_a)
    _tied_events([alice, bob, carol], [team_a, team_b, None])
    return {
        "member": api(alice),
        "other member": api(bob),
        "approver": api(carol),
        "admin": api(dave),
        "team token": token_client(dave, team=team_a),
    }


def _walk(client, url: str) -> list[dict[str, Any]]:
    """Every page of a keyset list from ``url`` on, following ``next``: the rows in the order they came."""
    rows: list[dict[str, Any]] = []
    while url:
        response = client.get(url)
        assert response.status_code == 200, (url, response.content)
        body = json.loads(response.content)
        assert set(body) == {"next", "results"}
        assert body["results"] or not rows, f"{url}: an empty page after a next link"
        rows += body["results"]
        url = body["next"] or ""
        if url:
            parts = urlsplit(url)
            assert parts.path == f"{API}/audit-events/" and "offset" not in parse_qs(parts.query)
            url = f"{parts.path}?{parts.query}"
    return rows


@pytest.mark.parametrize("query", ["", "team=team-a", "action=test.", "actor=system ✓", "team=team-b&action=test.t"])
def test_walking_the_audit_trail_by_next_reads_every_row_once_newest_first(callers, query):
    for who, client in callers.items():
        whole = json.loads(client.get(f"{API}/audit-events/?limit=200&{query}").content)
        assert whole["next"] is None, who
        for limit in (1, 4, 7):
            assert _walk(client, f"{API}/audit-events/?limit={limit}&{query}") == whole["results"], (who, limit)
        ids = [row["id"] for row in whole["results"]]
        events = AuditEvent.objects.in_bulk(ids)
        keys = [(events[pk].at, pk) for pk in ids]
        assert keys == sorted(keys, reverse=True) and len(set(ids)) == len(ids)
        if who in ("approver", "admin") and query in ("", "action=test."):
            assert len([pk for pk in ids if events[pk].at == TIED]) >= 5, (who, query)  # the ties were walked


def test_a_keyset_page_reads_one_row_more_and_never_counts(callers):
    client = callers["admin"]
    with CaptureQueriesContext(connection) as queries:
        body = client.get(f"{API}/audit-events/?limit=3").json()
    assert len(body["results"]) == 3 and body["next"]
    assert [q["sql"] for q in queries.captured_queries if q["sql"].rstrip().endswith("LIMIT 4")]
    assert not [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    last = AuditEvent.objects.order_by("at", "id").first()
    assert last is not None
    micros = (last.at - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    # A page that ends with the oldest row has no next link, though it is full.
    body = client.get(f"{API}/audit-events/?limit=1&cursor={micros}.{last.pk + 1}").json()
    assert [row["id"] for row in body["results"]] == [last.pk] and body["next"] is None


@pytest.mark.parametrize(
    "query",
    [
        "offset=0",
        "offset=3&limit=3",
        "cursor=",
        "cursor=abc",
        "cursor=1.2.3",
        "cursor=1",
        "cursor=.5",
        "cursor=1.-5",
        "cursor=+1.5",
        "cursor=１.5",  # a full-width digit
        "cursor=1.5%0A",
        "cursor=%201.5",
        "cursor=12345678901234567890.1",
        "cursor=1.12345678901234567890",
        "cursor=1.5&limit=0",
    ],
)
def test_a_bad_cursor_or_an_offset_is_a_field_error_on_the_audit_trail(callers, query):
    response = callers["member"].get(f"{API}/audit-events/?{query}")
    assert response.status_code == 400, response.content
    (field,) = response.json()
    assert field in {"offset", "cursor", "limit"}


def test_the_audit_trail_matches_an_action_prefix_as_text_not_as_a_pattern(callers):
    client = callers["member"]

    def actions(query: str) -> set[str]:
        return {event["action"] for event in client.get(f"{API}/audit-events/?{query}").json()["results"]}

    assert actions("action=test_") == {"test_a"}
    assert actions("action=100%25") == {"100%"}
    assert actions("action=te%25t") == {"te%t_x"}
    assert "test.a" in actions("action=test.")


def _counts(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT COUNT(*)")]


def test_an_offset_page_counts_only_when_the_page_does_not_tell(callers):
    client = callers["member"]
    in_team_a = Tenant.objects.filter(team__slug="team-a").count()
    with CaptureQueriesContext(connection) as full:
        body = client.get(f"{API}/tenants/?team=team-a&limit=3").json()
    assert body["count"] == in_team_a > 3 and _counts(full)  # a full page: the list may go on
    with CaptureQueriesContext(connection) as last:
        body = client.get(f"{API}/tenants/?team=team-a&limit=200").json()
    assert body["count"] == len(body["results"]) == in_team_a and not _counts(last)  # it is the end
    # Past the end, a page has no row to tell the count: it is counted.
    with CaptureQueriesContext(connection) as past:
        body = client.get(f"{API}/tenants/?team=team-a&limit=3&offset=1000").json()
    assert body["count"] == in_team_a and body["results"] == [] and _counts(past)


def _indexes(table: str) -> dict[str, str]:
    """The table's indexes by name, with their definitions."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return dict(cursor.fetchall())


def test_a_members_audit_count_for_a_team_has_an_index_with_all_it_reads(alice, bob, team_a, team_b):
    """A member's COUNT of one team's audit events (the caller's teams or own actions, and the team asked for; the
    audit page counts so, while the API pages by cursor and does not) reads the team and the actor of each row:
    audit_team_actor holds both, so PostgreSQL can count from the index alone."""
    for i in range(30):
        audit.record(actor=[alice, bob][i % 2], action="t.x", object_type="t", team=[team_a, team_b, None][i % 3])
    indexes = _indexes("tenants_auditevent")
    assert indexes["audit_team_actor"].endswith("USING btree (team_id, actor_id)")
    assert "tenants_auditevent_team_id_246bc6cb" not in indexes  # the team's own index, which it covers
    # alice sees team-a's events (hers and bob's alike); bob's own events in team-b are not hers to count.
    assert selectors.audit_events_visible_to(user=alice).filter(team=team_a).count() == 10
    assert selectors.audit_events_visible_to(user=bob).filter(team=team_a).count() == 5


def test_a_members_request_count_for_a_team_has_an_index_with_all_it_reads(varied, alice, bob, team_a, team_b):
    """Which requests a member sees depends on the team and on the receiving team of a transfer
    (requests_visible_to): request_team_target holds both, and replaces the team's own index."""
    offered = TenantRequest.objects.filter(team=team_a).first()
    assert offered is not None
    offered.pk, offered.action, offered.target_team, offered.status = None, "transfer", team_b, "cancelled"
    offered.save()
    indexes = _indexes("tenants_tenantrequest")
    assert indexes["request_team_target"].endswith("USING btree (team_id, target_team_id)")
    assert "tenants_request_team_id_aea278c9" not in indexes
    assert not [name for name, definition in indexes.items() if definition.endswith("(team_id)")]
    alices = selectors.requests_visible_to(user=alice).filter(team=team_a).count()
    bobs = selectors.requests_visible_to(user=bob).filter(team=team_a)
    assert alices > bobs.count() == 1 and list(bobs) == [offered]  # bob (team-b) sees only the transfer to team-b


def test_a_member_in_no_team_sees_only_their_own_audit_events(callers, erin, api):
    audit.record(actor=erin, action="auth.login", object_type="user", object_id=str(erin.pk))
    client = api(erin)
    for query in ("", "?team=team-a", "?action=auth."):
        actors = {event["actor_name"] for event in client.get(f"{API}/audit-events/{query}").json()["results"]}
        assert actors <= {"erin"}, (query, actors)
    assert '"action":"auth.login"' in client.get(f"{API}/audit-events/").content.decode()
