"""A list page's ids and count from SQL compiled once per shape of request (tenants.api.pages).

Every kind of caller (a member, an approver, an admin, a team token) and every filter alone and together, LIKE's
special characters and a NUL included, and for the audit trail every kind of cursor, is answered the same through
the compiled SQL as through the ORM. The
shapes that can be compiled are (so the comparison is not vacuous), each is compiled once and run as a prepared
statement, and what cannot be compiled (a value changed on its way in a way not known, or lost) is left to the ORM.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import django_filters
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tenants import audit, selectors
from tenants.api.filters import BerthFilterSet, TextFilter
from tenants.api.pages import CALLER, CALLER_TEAMS, PageQueries, _team_ids_sql, shape_of, team_ids_of
from tenants.api.views import AuditEventViewSet, PlainListMixin, RequestViewSet, TenantViewSet, of_team
from tenants.models import AuditEvent, Membership, Tenant, TenantRequest

pytestmark = pytest.mark.django_db

API = "/api/v1"

FILTERS = {
    TenantViewSet: [
        "",
        "team=team-a",
        "team=team-b",
        "team=nope",
        "status=ready",
        "status=ready&status=failed&status=ready",
        "status=ready&status=failed&status=requested&cluster=odd",
        "cluster=odd&team=team-a",
        "cluster=o%00dd",
    ],
    RequestViewSet: [
        "",
        "team=team-a",
        "status=pending",
        "action=extend&status=approved",
        "team=team-b&status=rejected&action=delete",
    ],
    AuditEventViewSet: [
        "",
        "team=team-a",
        "team=team-b&action=test.",
        "action=te%25t_",  # LIKE's wildcards are text here: no action starts with them
        "action=test_a",
        "action=100%25",
        "actor=system ✓&object_type=tenant",
        "object_id=3&since=2000-01-01T00:00:00Z&until=2100-01-01T00:00:00%2B23:59",
        "since=9999-12-31T23:59:59-23:59",
        "actor=a%00b",
    ],
}
OFFSET_PAGES = ["", "limit=3", "limit=3&offset=3", "offset=1000"]
# The audit trail pages by keyset (NewestFirstPagination): from the top, inside a tie of instants (TIED holds
# seven events), past every row and before every row, and the nearest positions to those a row could have.
TIED = dt.datetime(2026, 3, 2, 12, 0, 0, 123456, tzinfo=dt.UTC)
TIED_MICROS = (TIED - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
CURSOR_PAGES = [
    "",
    "limit=3",
    "limit=3&cursor={tie}",
    "limit=2&cursor={tie_top}",
    f"limit=4&cursor={TIED_MICROS}.0",
    "cursor=99999999999999999.1",
    "cursor=9999999999999999999.9999999999999999999",
    "cursor=-9999999999999999999.5",
    "limit=1&cursor=0.1",
]
PATHS = {TenantViewSet: "tenants/", RequestViewSet: "requests/", AuditEventViewSet: "audit-events/"}


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


def _answers(client, url: str, monkeypatch, *, compiled: bool) -> tuple[int, bytes]:
    with monkeypatch.context() as m:
        if not compiled:
            m.setattr(PlainListMixin, "_compiled_window", lambda self, request, after=None: None)
        response = client.get(url)
    return response.status_code, response.content


@pytest.mark.parametrize("view", list(FILTERS))
def test_compiled_pages_answer_as_the_orm_does_for_every_caller_and_filter(callers, monkeypatch, view):
    view.list_pages._compiled.clear()
    tied = sorted(AuditEvent.objects.filter(at=TIED).values_list("pk", flat=True))
    pages = (
        [p.format(tie=f"{TIED_MICROS}.{tied[4]}", tie_top=f"{TIED_MICROS}.{tied[-1] + 1}") for p in CURSOR_PAGES]
        if view is AuditEventViewSet
        else OFFSET_PAGES
    )
    seen_rows = 0
    for who, client in callers.items():
        for query in FILTERS[view]:
            for page in pages:
                url = f"{API}/{PATHS[view]}?" + "&".join(p for p in (query, page) if p)
                compiled = _answers(client, url, monkeypatch, compiled=True)
                orm = _answers(client, url, monkeypatch, compiled=False)
                assert compiled == orm, (who, url)
                assert compiled[0] == 200, (who, url, compiled)
                seen_rows += compiled[1].count(b'"id":')
    assert seen_rows > 300  # not a comparison of empty pages
    shapes = view.list_pages._compiled
    # Every shape compiled but those with a NUL in a value (answered by the ORM, which matches nothing).
    assert shapes and all(compiled is not None for compiled in shapes.values()), shapes
    kinds = {(kind, narrowed) for kind, narrowed, _ in shapes}
    assert kinds == {("member", False), ("approver", False), ("admin", False), ("admin", True)}


def _walk(client, url: str, monkeypatch, *, compiled: bool) -> list[dict[str, Any]]:
    """Every page of a keyset list from ``url`` on, following ``next``: the rows in the order they came."""
    rows: list[dict[str, Any]] = []
    while url:
        status, content = _answers(client, url, monkeypatch, compiled=compiled)
        assert status == 200, (url, content)
        body = json.loads(content)
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
def test_walking_the_audit_trail_by_next_reads_every_row_once_newest_first(callers, monkeypatch, query):
    for who, client in callers.items():
        whole = json.loads(client.get(f"{API}/audit-events/?limit=200&{query}").content)
        assert whole["next"] is None, who
        for limit in (1, 4, 7):
            url = f"{API}/audit-events/?limit={limit}&{query}"
            walked = _walk(client, url, monkeypatch, compiled=True)
            assert walked == _walk(client, url, monkeypatch, compiled=False), (who, limit)
            assert walked == whole["results"], (who, query, limit)
        ids = [row["id"] for row in whole["results"]]
        events = AuditEvent.objects.in_bulk(ids)
        keys = [(events[pk].at, pk) for pk in ids]
        assert keys == sorted(keys, reverse=True) and len(set(ids)) == len(ids)
        if who in ("approver", "admin") and query in ("", "action=test."):
            assert len([pk for pk in ids if events[pk].at == TIED]) >= 5, (who, query)  # the ties were walked


def test_a_keyset_page_is_one_statement_without_a_count_and_reads_one_row_more(callers):
    client = callers["admin"]
    client.get(f"{API}/audit-events/?limit=3")  # compiled first
    with CaptureQueriesContext(connection) as queries:
        body = client.get(f"{API}/audit-events/?limit=3").json()
    assert len(body["results"]) == 3 and body["next"]
    (page,) = [q["sql"] for q in queries.captured_queries if "berth_rows" in q["sql"]]
    assert " LIMIT 4)" in page and "page_count" not in page
    assert not [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert _counts_run(page) == 0
    last = AuditEvent.objects.order_by("at", "id").first()
    assert last is not None
    micros = (last.at - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    # A page that ends with the oldest row has no next link, though it is full.
    body = client.get(f"{API}/audit-events/?limit=1&cursor={micros}.{last.pk + 1}").json()
    assert [row["id"] for row in body["results"]] == [last.pk] and body["next"] is None


def _prepared_pages() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE '%berth_rows%'")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.parametrize(
    ("who", "query", "prepared"),
    [
        ("member", "team=team-a&limit=3", True),  # one team's trail: its index, whatever the values
        ("member", "team=team-a&action=test&limit=3", False),  # another filter: planned with its values
        ("member", "limit=3", False),  # a member's every team, tested as values
        ("member", "actor=alice&limit=3", False),
        ("member's team token", "limit=3", True),
        ("member's team token", "object_type=tenant&limit=3", False),
        ("admin", "team=team-b&limit=3", True),
        ("admin", "limit=3", False),
    ],
)
def test_a_keyset_page_is_prepared_only_for_one_teams_trail(callers, alice, team_a, token_client, who, query, prepared):
    """How many of the trail's rows a caller may see, or a filter leaves, varies by orders of magnitude: a generic
    plan walked a sparse team's trail nearly to its end (views.PlainListMixin._newest_first), so a keyset page is
    planned with its values, except one team's trail filtered by nothing else, which that team's index finds in
    order whatever the values. The tenants' page statement is always prepared."""
    client = token_client(alice, team=team_a) if who == "member's team token" else callers[who]
    for _ in range(8):
        page = client.get(f"{API}/audit-events/?{query}").json()
        assert page["results"] and page["next"]
        assert client.get(page["next"]).status_code == 200  # and a page after a position
        assert client.get(f"{API}/tenants/?team=team-a&limit=3").status_code == 200
    assert [sql for sql in _prepared_pages() if "tenants_tenant" in sql]
    assert bool([sql for sql in _prepared_pages() if "tenants_auditevent" in sql]) is prepared


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


def test_a_shape_is_compiled_once_and_its_queries_are_prepared(callers, monkeypatch):
    TenantViewSet.list_pages._compiled.clear()
    client = callers["member"]
    calls = []
    compile_ = PageQueries._compile

    def counted(self, shape):
        calls.append(shape)
        return compile_(self, shape)

    monkeypatch.setattr(PageQueries, "_compile", counted)
    for offset in (0, 3, 6):
        assert client.get(f"{API}/tenants/?team=team-a&limit=3&offset={offset}").status_code == 200
    assert calls == [("member", False, (("team", 0),))]
    compiled = TenantViewSet.list_pages.compiled(calls[0])
    assert compiled is not None
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = {row[0] for row in cursor.fetchall()}

    def as_prepared(sql: str) -> str:  # psycopg prepares the text with $n placeholders
        numbers = iter(range(1, 100))
        return re.sub(r"%s", lambda _: f"${next(numbers)}", sql)

    # The ids query runs inside the statement that also reads the page's rows' versions (PlainRows.listed_after),
    # with its LIMIT in the text on a first page.
    ids = as_prepared(compiled.ids_sql)
    pages = [statement for statement in prepared if ids in statement and "berth_page" in statement]
    assert [statement for statement in pages if f"{ids} LIMIT 3)" in statement]
    assert [statement for statement in pages if f"{ids} LIMIT $3 OFFSET $4)" in statement]
    # So does the count, run by PostgreSQL only for a full page (see the test below).
    assert all("AS page_count) END FROM berth_rows" in statement for statement in pages)


def _counts_run(sql: str) -> int:
    """How many COUNT aggregates PostgreSQL ran for ``sql`` (its page's rows' own count included)."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE) " + sql)
        lines = [line for (line,) in cursor.fetchall() if "Aggregate" in line]
    return sum("never executed" not in line for line in lines)


def test_a_page_is_one_statement_that_counts_only_when_the_page_does_not_tell(callers):
    client = callers["member"]
    client.get(f"{API}/tenants/?team=team-a&limit=3")  # compiled before counting queries
    with CaptureQueriesContext(connection) as full:
        body = client.get(f"{API}/tenants/?team=team-a&limit=3").json()
    assert body["count"] == Tenant.objects.filter(team__slug="team-a").count() > 3
    (page,) = [q["sql"] for q in full.captured_queries if "berth_rows" in q["sql"]]
    assert not [q["sql"] for q in full.captured_queries if q["sql"].startswith("SELECT COUNT(*)")]
    assert _counts_run(page) == 2  # the page's rows (it is full), then the list's
    with CaptureQueriesContext(connection) as last:
        body = client.get(f"{API}/tenants/?team=team-a&limit=200").json()
    assert body["count"] == len(body["results"])
    (page,) = [q["sql"] for q in last.captured_queries if "berth_rows" in q["sql"]]
    assert _counts_run(page) == 1  # the page's rows only: it is not full, so it tells the count
    # Past the end, a page has no row to carry the count: it is counted on its own.
    with CaptureQueriesContext(connection) as past:
        body = client.get(f"{API}/tenants/?team=team-a&limit=3&offset=1000").json()
    assert body["count"] == Tenant.objects.filter(team__slug="team-a").count() and body["results"] == []
    assert [q["sql"] for q in past.captured_queries if q["sql"].startswith("SELECT COUNT(*)")]


class _Contains(BerthFilterSet):
    name = django_filters.CharFilter(lookup_expr="contains")

    class Meta:
        model = Tenant
        fields = ["name"]


class _Ignores(BerthFilterSet):
    name = TextFilter(method="nothing")

    def nothing(self, queryset, name, value):
        return queryset

    class Meta:
        model = Tenant
        fields = ["name"]


class _Branches(BerthFilterSet):
    name = TextFilter(method="by_round")

    def by_round(self, queryset, name, value):
        # A filter whose SQL depends on the value it is given.
        return queryset.filter(name=value) if len(value) < 24 else queryset.filter(namespace=value)

    class Meta:
        model = Tenant
        fields = ["name"]


class _Numbers(BerthFilterSet):
    # A filter whose form field takes no text stand-in: its shapes are the ORM's, and a 500 never.
    cpu = django_filters.NumberFilter(field_name="tier__cpu_limit_millis")

    class Meta:
        model = Tenant
        fields = ["cpu"]


class _Nulls(BerthFilterSet):
    status = django_filters.ChoiceFilter(choices=[("ready", "ready")], null_label="none")

    class Meta:
        model = Tenant
        fields = ["status"]


@pytest.mark.parametrize(
    ("filterset", "value"), [(_Contains, "web"), (_Ignores, "web"), (_Branches, "web"), (_Numbers, 2)]
)
def test_what_cannot_be_compiled_is_left_to_the_orm_not_guessed(db, filterset, value):
    pages = PageQueries(selectors.tenants_in, of_team, filterset)
    name = next(iter(filterset.base_filters))
    shape = shape_of(selectors.Scope(kind="member", user_id=1), None, {name: value}, filterset.base_filters)
    assert shape == ("member", False, ((name, 0),))
    assert pages.window(shape, {CALLER: [1], name: [value]}) is None
    assert pages.compiled(shape) is None  # remembered: not compiled again on every request
    # A shape without the filter compiles.
    assert pages.window(("member", False, ()), {CALLER: [1]}) is not None


def test_a_value_with_a_special_meaning_has_no_shape(db):
    scope = selectors.Scope(kind="admin", user_id=1)
    filters = {**TenantViewSet.filterset_class.base_filters, **_Contains.base_filters}
    assert shape_of(scope, None, {"name": "a\x00b"}, filters) is None
    assert shape_of(scope, None, {"status": ["ready", "a\x00"]}, filters) is None
    assert shape_of(scope, 5, {"name": "", "status": ["ready", "ready"], "cluster": None}, filters) == (
        "admin",
        True,
        (("status", 1),),
    )
    # A choice filter's null value means IS NULL, not a value to compare with.
    assert shape_of(scope, None, {"status": "null"}, _Nulls.base_filters) is None
    assert shape_of(scope, None, {"status": "ready"}, _Nulls.base_filters) == ("admin", False, (("status", 0),))


def test_a_view_that_builds_its_list_otherwise_is_not_compiled():
    class Narrower(TenantViewSet):
        visible_in = staticmethod(selectors.tenants_in)

        def get_queryset(self):
            return super().get_queryset().filter(status="ready")

    class Plain(TenantViewSet):
        visible_in = staticmethod(selectors.tenants_in)

    assert Narrower.list_pages is None
    assert Plain.list_pages is not None
    assert TenantViewSet.list_pages is not None
    assert RequestViewSet.list_pages is not None
    assert AuditEventViewSet.list_pages is not None


def _indexes(table: str) -> dict[str, str]:
    """The table's indexes by name, with their definitions."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return dict(cursor.fetchall())


def _page_of(view, window, limit: int = 200) -> list[tuple[Any, str]]:
    """The (pk, version) of the rows of the window's first page, as the view reads them."""
    listed, _, _ = view.list_rows.listed_after(
        window.db, *window.page(0, limit), limit, window.count_sql, window.params
    )
    return listed


def test_a_members_audit_count_for_a_team_has_an_index_with_all_it_reads(alice, bob, team_a, team_b):
    """A member's COUNT of one team's audit events (the caller's teams or own actions, and the team asked for; the
    audit page counts so, while the API pages by cursor and does not) reads the team and the actor of each row:
    audit_team_actor holds both, so PostgreSQL can count from the index alone (whether it does is a matter of size
    and of the visibility map: bench/README.md has the figures)."""
    for i in range(30):
        audit.record(actor=[alice, bob][i % 2], action="t.x", object_type="t", team=[team_a, team_b, None][i % 3])
    indexes = _indexes("tenants_auditevent")
    assert indexes["audit_team_actor"].endswith("USING btree (team_id, actor_id)")
    assert "tenants_auditevent_team_id_246bc6cb" not in indexes  # the team's own index, which it covers
    shape = ("member", False, (("team", 0),))
    window = AuditEventViewSet.list_pages.window(
        shape, {CALLER: [alice.pk], CALLER_TEAMS: [[team_a.pk]], "team": ["team-a"]}
    )
    assert window is not None
    # alice sees team-a's events (hers and bob's alike); bob's own events in team-b are not hers to count.
    assert window.count() == AuditEvent.objects.filter(team=team_a).count() == 10
    assert len(_page_of(AuditEventViewSet, window)) == 10
    bobs = AuditEventViewSet.list_pages.window(
        shape, {CALLER: [bob.pk], CALLER_TEAMS: [[team_b.pk]], "team": ["team-a"]}
    )
    assert bobs is not None and bobs.count() == 5


def test_a_members_request_count_for_a_team_has_an_index_with_all_it_reads(varied, alice, bob, team_a, team_b):
    """Which requests a member sees depends on the team and on the receiving team of a transfer (requests_in):
    request_team_target holds both, and replaces the team's own index."""
    offered = TenantRequest.objects.filter(team=team_a).first()
    assert offered is not None
    offered.pk, offered.action, offered.target_team, offered.status = None, "transfer", team_b, "cancelled"
    offered.save()
    indexes = _indexes("tenants_tenantrequest")
    assert indexes["request_team_target"].endswith("USING btree (team_id, target_team_id)")
    assert "tenants_request_team_id_aea278c9" not in indexes
    assert not [name for name, definition in indexes.items() if definition.endswith("(team_id)")]
    shape = ("member", False, (("team", 0),))
    counts = []
    for person in (alice, bob):
        window = RequestViewSet.list_pages.window(shape, {CALLER: [person.pk], "team": ["team-a"]})
        assert window is not None
        expected = selectors.requests_in(selectors.scope_of(person)).filter(team=team_a)
        assert window.count() == expected.count() == len(_page_of(RequestViewSet, window))
        counts.append(expected.count())
    assert counts[0] > counts[1] == 1  # bob (team-b) sees team-a's transfer offered to team-b, and only that


def test_a_member_in_no_team_sees_only_their_own_audit_events(callers, erin, api, monkeypatch):
    audit.record(actor=erin, action="auth.login", object_type="user", object_id=str(erin.pk))
    client = api(erin)
    for query in ("", "?team=team-a", "?action=auth."):
        compiled = _answers(client, f"{API}/audit-events/{query}", monkeypatch, compiled=True)
        assert compiled == _answers(client, f"{API}/audit-events/{query}", monkeypatch, compiled=False)
        actors = {event["actor_name"] for event in json.loads(compiled[1])["results"]}
        assert actors <= {"erin"}, (query, actors)
    assert '"action":"auth.login"' in client.get(f"{API}/audit-events/").content.decode()


def test_a_members_teams_are_read_only_for_the_list_that_tests_them_and_not_for_a_page_of_one_team(
    callers, alice, team_a, token_client
):
    """The audit trail tests a member's teams as values on a page of every team they see, read by a query of its
    own; a page pinned to one team (a filter, a member's team token) tests them by a subquery in its statement."""
    _, teams_sql, _, _ = _team_ids_sql()
    paths = [f"{p}?{q}" for p in ("tenants/", "requests/", "audit-events/") for q in ("team=team-a", "limit=5")]
    for who, client in [("member", callers["member"]), ("member's team token", token_client(alice, team=team_a))]:
        for path in paths:
            assert client.get(f"{API}/{path}").status_code == 200  # compiled before counting queries
        reads = {}
        for path in paths:
            with CaptureQueriesContext(connection) as queries:
                assert client.get(f"{API}/{path}").status_code == 200
            # (captured with the user's id in place of its parameter)
            reads[path] = sum(q["sql"].startswith(teams_sql.split("%s")[0]) for q in queries.captured_queries)
        expected = dict.fromkeys(paths, 0)
        if who == "member":
            expected["audit-events/?limit=5"] = 1
        assert reads == expected, who


def test_a_members_teams_are_read_by_the_selectors_sql_compiled_once(alice, bob, erin, team_b):
    Membership.objects.create(user=alice, team=team_b, role=Membership.Role.MEMBER)
    for user in (alice, bob, erin):  # two teams, one, none
        assert sorted(team_ids_of(user.pk)) == sorted(selectors.team_ids_of(user_id=user.pk))
    assert len(team_ids_of(alice.pk)) == 2 and team_ids_of(erin.pk) == []
