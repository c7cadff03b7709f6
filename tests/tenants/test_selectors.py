"""tenants.selectors: every read is scoped to the caller; another team's things are simply absent."""

from __future__ import annotations

import pytest
from django.db.models import Q

from tenants import audit, selectors, services
from tenants.models import AuditEvent, Membership, Team, Tenant, TenantRequest, TenantStatus

from .conftest import vacuum_analyze

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_teams(make_tenant, submit, team_a, team_b, alice, bob, amir):
    """One tenant and one request per team, and audit events for each."""
    a_tenant = make_tenant(team=team_a, created_by=alice, name="a-web")
    b_tenant = make_tenant(team=team_b, created_by=bob, name="b-web")
    a_request = submit(name="a-api")
    b_request = submit(name="b-api", actor=bob, team=team_b)
    return a_tenant, b_tenant, a_request, b_request


def test_bob_cannot_see_alices_tenant(two_teams, bob):
    a_tenant, b_tenant, *_ = two_teams
    visible = set(selectors.tenants_visible_to(user=bob))
    assert a_tenant not in visible and b_tenant in visible
    assert all(t.team.slug == "team-b" for t in visible)


def test_bob_cannot_see_alices_requests(two_teams, bob):
    *_, a_request, b_request = two_teams
    assert list(selectors.requests_visible_to(user=bob)) == [b_request]


def test_bob_cannot_see_team_a_at_all(two_teams, bob, team_b):
    assert list(selectors.teams_visible_to(user=bob)) == [team_b]


def test_bob_sees_none_of_team_as_audit_events(two_teams, bob, team_b):
    events = list(selectors.audit_events_visible_to(user=bob))
    assert events and all(e.team == team_b or e.actor == bob for e in events)


@pytest.mark.parametrize("who", ["alice", "amir", "vera"])
def test_everyone_in_team_a_sees_team_as_things(two_teams, who, request):
    user = request.getfixturevalue(who)
    a_tenant, b_tenant, a_request, b_request = two_teams
    assert set(selectors.tenants_visible_to(user=user)) >= {a_tenant, a_request.tenant}
    assert b_tenant not in set(selectors.tenants_visible_to(user=user))
    assert list(selectors.requests_visible_to(user=user)) == [a_request]


def test_erin_in_no_team_sees_nothing(two_teams, erin):
    assert not selectors.tenants_visible_to(user=erin).exists()
    assert not selectors.requests_visible_to(user=erin).exists()
    assert not selectors.teams_visible_to(user=erin).exists()
    assert not selectors.audit_events_visible_to(user=erin).exists()


@pytest.mark.parametrize("who", ["carol", "dave"])
def test_approvers_and_admins_see_every_team(two_teams, who, request):
    user = request.getfixturevalue(who)
    assert selectors.tenants_visible_to(user=user).count() == 4
    assert selectors.requests_visible_to(user=user).count() == 2
    assert selectors.teams_visible_to(user=user).count() == 2


def test_admins_see_every_audit_event(two_teams, dave):
    assert selectors.audit_events_visible_to(user=dave).count() == selectors.AuditEvent.objects.count()


def test_approvers_see_every_teams_history_but_not_other_peoples_sign_ins(two_teams, carol, alice, bob, team_a, team_b):
    *_, a_request, _ = two_teams
    services.request_approve(tenant_request=a_request, actor=carol)
    audit.record(actor=None, action="tenant.ready", object_type="tenant", team=team_a)
    audit.record(actor=alice, action="auth.login", object_type="session")
    audit.record(actor=carol, action="auth.login", object_type="session")
    events = list(selectors.audit_events_visible_to(user=carol))
    actions = {e.action for e in events}
    assert {"request.submit", "request.approve", "tenant.approve", "tenant.ready"} <= actions
    assert {e.team for e in events if e.team is not None} == {team_a, team_b}
    # Sign-ins carry no team: an approver sees only their own.
    assert [e.actor for e in events if e.action == "auth.login"] == [carol]


def test_members_see_their_teams_events_and_their_own(two_teams, alice, team_a):
    audit.record(actor=alice, action="auth.login", object_type="session")
    events = list(selectors.audit_events_visible_to(user=alice))
    assert {e.action for e in events if e.team is None} == {"auth.login"}
    assert all(e.team in (team_a, None) for e in events)


def test_the_approval_queue_holds_others_pending_requests_oldest_first(submit, dave, carol, team_a):
    team_a.budget_cpu_millis, team_a.budget_memory_mib = 10**6, 10**6  # room for three mediums
    team_a.save()
    first = submit(name="one")
    second = submit(name="two")
    own = submit(name="three", actor=dave, team=team_a)
    assert list(selectors.requests_awaiting_decision(user=dave)) == [first, second]
    assert list(selectors.requests_awaiting_decision(user=carol)) == [first, second, own]


@pytest.mark.parametrize("who", ["alice", "amir", "vera", "bob", "erin"])
def test_people_who_cannot_decide_have_no_queue(submit, who, request):
    submit()
    assert not selectors.requests_awaiting_decision(user=request.getfixturevalue(who)).exists()


def test_who_may_request_for_which_team(alice, amir, vera, bob, dave, team_a, team_b):
    assert list(selectors.teams_where_can_request(user=alice)) == [team_a]
    assert list(selectors.teams_where_can_request(user=amir)) == [team_a]
    assert list(selectors.teams_where_can_request(user=vera)) == []
    assert list(selectors.teams_where_can_request(user=bob)) == [team_b]
    assert set(selectors.teams_where_can_request(user=dave)) == {team_a, team_b}


def test_api_tokens_are_listed_for_their_owner_only(alice, bob):
    mine, _ = services.api_token_create(actor=alice, name="mine", expires_in_days=1)
    services.api_token_create(actor=bob, name="bobs", expires_in_days=1)
    assert list(selectors.api_tokens_of(user=alice)) == [mine]


# --- budgets --------------------------------------------------------------------------


def test_team_allocation_counts_live_tenants_only(make_tenant, team_a, alice, medium, small):
    make_tenant(team=team_a, created_by=alice, tier=medium)
    make_tenant(team=team_a, created_by=alice, tier=small, status=TenantStatus.FAILED)
    for dead in (TenantStatus.DELETED, TenantStatus.REJECTED, TenantStatus.CANCELLED):
        make_tenant(team=team_a, created_by=alice, tier=medium, status=dead)
    used = selectors.team_allocation(team=team_a)
    assert used.astuple() == (
        medium.cpu_limit_millis + small.cpu_limit_millis,
        medium.memory_limit_mib + small.memory_limit_mib,
        medium.storage_gib + small.storage_gib,
        2,
    )


def test_team_budget_reports_used_total_and_remaining(make_tenant, team_a, alice, medium):
    make_tenant(team=team_a, created_by=alice, tier=medium)
    team_a.budget_tenants = 1
    budget = selectors.team_budget(team=team_a)
    assert budget["cpu_millis"] == {"used": 8000, "total": 16000, "remaining": 8000}
    assert budget["tenants"] == {"used": 1, "total": 1, "remaining": 0}


def test_an_overspent_budget_shows_zero_remaining(make_tenant, team_a, alice, large):
    make_tenant(team=team_a, created_by=alice, tier=large)
    assert selectors.team_budget(team=team_a)["cpu_millis"] == {"used": 32000, "total": 16000, "remaining": 0}


def test_annotated_budgets_equal_the_per_team_ones(make_tenant, team_a, team_b, alice, bob, medium, small):
    make_tenant(team=team_a, created_by=alice, tier=medium)
    make_tenant(team=team_a, created_by=alice, tier=small)
    make_tenant(team=team_a, created_by=alice, tier=small, status=TenantStatus.DELETED)
    Team.objects.create(slug="team-empty", name="Empty", oidc_group="team-empty")
    for team in selectors.with_allocation(Team.objects.all()):
        assert selectors.team_budget(team=team) == selectors.team_budget(team=Team.objects.get(pk=team.pk))


def test_annotated_budgets_are_one_query_for_any_number_of_teams(django_assert_num_queries, dave):
    for i in range(5):
        Team.objects.create(slug=f"team-{i}", name=f"T{i}", oidc_group=f"team-{i}")
    with django_assert_num_queries(1):
        [selectors.team_budget(team=t) for t in selectors.with_allocation(selectors.teams_visible_to(user=dave))]


@pytest.mark.django_db(transaction=True)  # VACUUM cannot run inside a transaction
def test_a_teams_budget_in_use_is_read_from_its_index_alone(make_tenant, team_a, team_b, alice, medium, small, dave):
    """Every submission and approval sums the team's live tenants under the team's row lock (services.budget_check),
    and the teams list sums every team's: both read tenant_team_allocation alone (an index-only scan), never the
    tenants' rows, which carry kilobytes of reports and usage each. A query that comes to need a column the index
    lacks would read the table, and the team's lock would be held while it does."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    make_tenant(team=team_a, created_by=alice, tier=medium)
    make_tenant(team=team_a, created_by=alice, tier=small, sleeping=True)
    make_tenant(team=team_a, created_by=alice, tier=small, status=TenantStatus.DELETED)
    with CaptureQueriesContext(connection) as one:
        used = selectors.team_allocation(team=team_a)
    with CaptureQueriesContext(connection) as listed:
        budgets = [
            selectors.team_budget(team=t) for t in selectors.with_allocation(selectors.teams_visible_to(user=dave))
        ]
    assert used.tenants == 2 and len(budgets) >= 2
    queries = [q["sql"] for q in one.captured_queries + listed.captured_queries]
    assert len(queries) == 2, queries
    with connection.cursor() as cursor:
        vacuum_analyze(cursor, "tenants_tenant")
        # A table of 3 rows is best read whole: with that way (and bitmaps) set aside, the plan shows the index
        # that serves each query, as the planner picks it for a team of thousands (bench/README.md).
        for way in ("seqscan", "bitmapscan"):
            cursor.execute(f"SET enable_{way} = off")
        try:
            for sql in queries:
                cursor.execute("EXPLAIN " + sql)
                plan = [row[0] for row in cursor.fetchall()]
                reads = [line for line in plan if " on tenants_tenant " in line]
                assert reads, plan
                assert all("Index Only Scan using tenant_team_allocation " in line for line in reads), plan
        finally:
            cursor.execute("RESET ALL")


def test_a_namespace_is_taken_only_while_a_tenant_holds_it(make_tenant, team_a, alice, cluster):
    tenant = make_tenant(team=team_a, created_by=alice, name="web", status=TenantStatus.DECOMMISSIONING)
    assert selectors.namespace_taken(cluster=cluster, namespace="web")
    type(tenant).objects.filter(pk=tenant.pk).update(status=TenantStatus.DELETED)
    assert not selectors.namespace_taken(cluster=cluster, namespace="web")


# --- monitoring links -----------------------------------------------------------------


def links_for(make_tenant, team, user, cluster, templates, name="web"):
    cluster.monitoring_links = templates
    cluster.save()
    return selectors.monitoring_links(tenant=make_tenant(team=team, created_by=user, name=name))


def test_monitoring_links_are_filled_in_for_the_tenant(make_tenant, team_a, alice, cluster):
    links = links_for(
        make_tenant,
        team_a,
        alice,
        cluster,
        [
            {"name": "Grafana", "url": "https://g.example.test/d?ns={namespace}&t={tenant}&team={team}&c={cluster}"},
            {"url": "http://logs.example.test/{namespace}"},
        ],
    )
    assert links == [
        {"name": "Grafana", "url": "https://g.example.test/d?ns=web&t=web&team=team-a&c=dev"},
        {"name": "Monitoring", "url": "http://logs.example.test/web"},
    ]


def test_monitoring_links_other_than_http_are_dropped(make_tenant, team_a, alice, cluster):
    links = links_for(
        make_tenant,
        team_a,
        alice,
        cluster,
        [
            {"name": "x", "url": "javascript:alert({namespace})"},
            {"name": "y", "url": "//evil.example/{namespace}"},
            "not-a-dict",
            {"name": "no url"},
            {"name": "bad", "url": 42},
        ],
    )
    assert links == []


@pytest.mark.parametrize(
    "template", ["https://g.test/{", "https://g.test/{0}", "https://g.test/{}", "https://g.test/}{"]
)
def test_a_malformed_monitoring_template_never_breaks_the_tenant_page(make_tenant, team_a, alice, cluster, template):
    assert links_for(make_tenant, team_a, alice, cluster, [{"name": "g", "url": template}]) == [
        {"name": "g", "url": template}
    ]


def test_monitoring_templates_cannot_reach_into_python_objects(make_tenant, team_a, alice, cluster):
    template = "https://g.test/{namespace.__class__}/{unknown}"
    assert links_for(make_tenant, team_a, alice, cluster, [{"name": "g", "url": template}])[0]["url"] == template


def test_the_team_and_owner_mailing_lists(alice, amir, vera, team_a, carol, dave):
    team_a.contact_email = "team-a@example.test"
    team_a.save()
    assert selectors.team_emails(team=team_a) == ["alice@example.test", "amir@example.test", "team-a@example.test"]
    assert selectors.team_owner_emails(team=team_a) == ["alice@example.test", "team-a@example.test"]
    assert sorted(selectors.approver_emails()) == ["carol@example.test", "dave@example.test"]


def test_memberships_of_a_person(alice, team_b):
    Membership.objects.create(user=alice, team=team_b, role="viewer")
    assert [(m.team.slug, m.role) for m in selectors.memberships_of(user=alice)] == [
        ("team-a", "owner"),
        ("team-b", "viewer"),
    ]


@pytest.mark.parametrize("person", ["alice", "amir", "bob", "erin"])
def test_a_member_sees_the_rows_of_their_teams_and_transfers_offered_to_them(
    varied, person, request, alice, team_a, team_b
):
    """Each list's scope against the rule written plainly: the rows of the member's teams (alice, bob), none for a
    member of no team (erin), requests whose receiving team is theirs (a transfer offered to team-b), and the audit
    events they acted in."""
    offered = TenantRequest.objects.filter(team=team_a).first()
    assert offered is not None
    offered.pk, offered.action, offered.target_team, offered.status = None, "transfer", team_b, "cancelled"
    offered.save()
    audit.record(actor=alice, action="t.x", object_type="t", team=None)  # no team: only its actor sees it
    user = request.getfixturevalue(person)
    teams = Membership.objects.filter(user=user).values("team_id")
    as_in = {
        "tenants": Tenant.objects.filter(team_id__in=teams),
        "requests": TenantRequest.objects.filter(Q(team_id__in=teams) | Q(target_team_id__in=teams)),
        "audit": AuditEvent.objects.filter(Q(team_id__in=teams) | Q(actor_id=user.pk)),
    }
    scoped = {
        "tenants": selectors.tenants_visible_to(user=user),
        "requests": selectors.requests_visible_to(user=user),
        "audit": selectors.audit_events_visible_to(user=user),
    }
    for name, expected in as_in.items():
        assert set(scoped[name].values_list("pk", flat=True)) == set(expected.values_list("pk", flat=True)), name
    if person == "erin":  # in no team
        assert not scoped["tenants"].exists() and not scoped["requests"].exists()
    if person == "bob":
        assert list(scoped["requests"].filter(team=team_a)) == [offered]
    assert Tenant.objects.count() > scoped["tenants"].count()
    if person in ("alice", "bob"):
        assert scoped["tenants"].exists() and scoped["audit"].exists()
