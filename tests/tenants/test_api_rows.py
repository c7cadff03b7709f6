"""List pages built from ``.values()`` rows (tenants.api.rows) are the serializers' output, byte for byte.

The tenants, requests and audit-event lists build their pages with PlainRows instead of their ModelSerializer.
For a varied data set (nulls, empty and nested JSON, text beyond ASCII and the two characters DRF escapes,
timestamps with and without microseconds, IPv4 and IPv6, clusters with and without monitoring links) every page
below, for a member, an approver and an admin, with and without filters, is compared with what the same request
answers when the view lists through its serializer (``list_rows = None``).
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.renderers import JSONRenderer

from tenants import audit
from tenants.api import serializers as s
from tenants.api.rows import Computed, PlainRows
from tenants.api.views import AuditEventViewSet, RequestViewSet, TenantViewSet
from tenants.audit import AuditContext
from tenants.models import AuditEvent, Cluster, Team, Tenant, TenantRequest

pytestmark = pytest.mark.django_db

API = "/api/v1"
ODD_TEXT = 'ünïcödé ✓ "quoted" \\ back\u2028line\u2029para \x7f \U0001f680'


@pytest.fixture
def varied(alice, amir, bob, carol, team_a, team_b, small, medium, large, cluster) -> None:
    """Tenants, requests and audit events of two teams with every kind of value a list shows."""
    edge = Cluster.objects.create(
        name="edge",
        display_name="Edge",
        api_url="https://127.0.0.1:6444",
        credential_ref="env:BERTH_TEST_NO_KUBECONFIG",
        public_endpoint="https://edge.example.test:6443",
        kinds=["namespace"],
        monitoring_links=[],
    )
    odd = Cluster.objects.create(
        name="odd",
        display_name="Odd links",
        api_url="https://127.0.0.1:6445",
        credential_ref="env:BERTH_TEST_NO_KUBECONFIG",
        public_endpoint="https://odd.example.test:6443",
        kinds=["namespace"],
        monitoring_links=[
            {"name": "", "url": "http://logs.example.test/{tenant}/{team}/{cluster}/{other}"},
            {"name": "Bad", "url": "javascript:alert({namespace})"},
            "not a link",
            {"url": 5},
            {"name": ODD_TEXT, "url": "https://x.example.test/{namespace}?q={tenant}"},
        ],
    )
    base = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)
    Team.objects.filter(pk=team_b.pk).update(time_zone="Europe/Berlin")  # the schedule shows the team's zone
    people = [alice, amir, bob]
    statuses = ["requested", "approved", "provisioning", "ready", "failed", "decommissioning", "deleted"]
    for i in range(36):
        team = team_a if i % 3 else team_b
        tenant = Tenant.objects.create(
            name=f"t-{i}",
            namespace=f"dev-t-{i}",
            kind="vcluster" if i % 7 == 0 else "namespace",
            team=team,
            tier=[small, medium, large][i % 3],
            cluster=[cluster, edge, odd][i % 3],
            status=statuses[i % len(statuses)],
            status_reason="" if i % 2 else ODD_TEXT,
            purpose=ODD_TEXT if i % 4 == 0 else f"purpose {i}",
            created_by=people[i % 3],
            ready_at=None if i % 5 == 0 else base + dt.timedelta(hours=i),
            expires_at=None if i % 6 == 0 else base + dt.timedelta(days=30, microseconds=i * 1001),
            quota_usage={} if i % 2 else {"cpu": {"used": "250m", "hard": 2.5}, "note": ODD_TEXT, "n": [1, None]},
            quota_usage_at=None if i % 2 else base + dt.timedelta(minutes=i, microseconds=7),
            isolation_report={"ok": i % 3 == 0, "checks": [{"name": "egress", "passed": False}]} if i % 4 else {},
            isolation_report_at=None if i % 4 == 0 else base,
            # Every sleep state, with and without a nightly schedule and weekends.
            sleeping=i % 4 in (1, 2),
            sleep_applied=i % 4 in (0, 1),
            sleep_reason=["", "owner", "schedule", "idle"][i % 4],
            asleep_since=base if i % 4 == 1 else None,
            sleep_note=ODD_TEXT if i % 6 == 1 else "",
            sleep_schedule_start=None if i % 3 == 0 else dt.time(22 - i % 3, 5 * (i % 12)),
            sleep_schedule_end=None if i % 3 == 0 else dt.time(6, 30),
            sleep_weekends=i % 5 == 0,
        )
        # Whole seconds for some (no microseconds in the ISO form), ties on created_at for others.
        Tenant.objects.filter(pk=tenant.pk).update(created_at=base + dt.timedelta(seconds=i // 2 * 60))
        TenantRequest.objects.create(
            action=["create", "change_tier", "extend", "delete"][i % 4],
            kind=tenant.kind,
            name=tenant.name,
            team=team,
            tier=tenant.tier,
            cluster=tenant.cluster,
            tenant=tenant,
            purpose=tenant.purpose,
            requested_expiry=None if i % 3 else dt.date(2026, 12, 31),
            status=["pending", "approved", "rejected", "cancelled"][i % 4],
            requested_by=people[i % 3],
            decided_by=None if i % 4 == 0 else carol,
            decided_at=None if i % 4 == 0 else base + dt.timedelta(seconds=i, microseconds=999999),
            decision_comment=ODD_TEXT if i % 5 == 0 else "",
            auto_approved=i % 6 == 1,
        )
    contexts = [
        AuditContext(request_id="req-1", source_ip="203.0.113.7", user_agent=ODD_TEXT),
        AuditContext(request_id="", source_ip="2001:db8::1", user_agent=""),
        AuditContext(),
    ]
    for i in range(40):
        audit.record(
            actor=[alice, bob, carol, None][i % 4],
            action=f"test.{['a', 'b', 'c'][i % 3]}",
            object_type="tenant",
            object_id=str(i) if i % 2 else "",
            team=[team_a, team_b, None][i % 3],
            before={} if i % 3 else {"status": "ready", "nested": {"list": [1, 2.5, None, ODD_TEXT]}},
            after={"i": i, "flag": bool(i % 2), "big": 2**40, "text": ODD_TEXT},
            ctx=contexts[i % 3],
            actor_name="system ✓" if i % 4 == 3 else "",
        )


def _both(client, monkeypatch, view, url: str) -> tuple[bytes, bytes]:
    fast = client.get(url)
    with monkeypatch.context() as m:
        m.setattr(view, "list_rows", None)
        full = client.get(url)
    assert fast.status_code == full.status_code == 200, fast.content
    return fast.content, full.content


PAGES = [
    "",
    "?limit=7",
    "?limit=7&offset=7",
    "?limit=5&offset=30",
    "?offset=1000",
    "?limit=200",
]


@pytest.mark.parametrize("who", ["alice", "carol", "dave"])
@pytest.mark.parametrize(
    ("view", "path", "filters"),
    [
        (TenantViewSet, "tenants/", ["", "team=team-a", "team=team-b", "status=ready&status=failed", "cluster=odd"]),
        (RequestViewSet, "requests/", ["", "team=team-a", "status=pending", "action=extend", "team=nope"]),
        (AuditEventViewSet, "audit-events/", ["", "team=team-a", "team=team-b", "action=test.a", "actor=system ✓"]),
    ],
)
def test_list_pages_are_the_serializers_output_byte_for_byte(
    api, monkeypatch, varied, request, who, view, path, filters
):
    client = api(request.getfixturevalue(who))
    compared = 0
    for query in filters:
        for page in PAGES:
            url = f"{API}/{path}{page}"
            if query:
                url += ("&" if page else "?") + query
            fast, full = _both(client, monkeypatch, view, url)
            assert fast == full, url
            compared += len(fast)
    assert compared > 10_000  # the pages were not all empty


@pytest.mark.parametrize(
    ("rows", "serializer", "model"),
    [
        (s.TENANT_ROWS, s.TenantSerializer, Tenant),
        (s.REQUEST_ROWS, s.RequestSerializer, TenantRequest),
        (s.AUDIT_EVENT_ROWS, s.AuditEventSerializer, AuditEvent),
    ],
)
def test_every_row_renders_as_its_serializer_does(varied, rows, serializer, model):
    objects = list(model.objects.all())
    assert len(objects) >= 36
    pks = [o.pk for o in reversed(objects)]  # any order the caller asks for is kept
    plain = JSONRenderer().render(rows.rows(pks))
    full = JSONRenderer().render(serializer(list(reversed(objects)), many=True).data)
    assert plain == full
    assert rows.rows([]) == []


def test_rows_gone_between_the_page_and_its_load_are_left_out(varied):
    tenant = Tenant.objects.first()
    assert tenant is not None
    missing = Tenant(pk=None).pk  # a fresh uuid no row has
    assert [row["id"] for row in s.TENANT_ROWS.rows([missing, tenant.pk])] == [str(tenant.pk)]


def test_a_field_the_rows_cannot_read_is_refused_not_guessed(db):
    with pytest.raises(TypeError, match="monitoring_links: a method field needs a Computed"):
        PlainRows(s.TenantSerializer, {}).rows([1])

    class WithNested(s.RequestSerializer):
        decided_by = s.MembershipSerializer(read_only=True)  # type: ignore[assignment]

    with pytest.raises(TypeError, match="decided_by: not a column"):
        PlainRows(WithNested, {}).rows([1])

    with pytest.raises(TypeError, match="no method fields"):
        PlainRows(s.RequestSerializer, {"extra": Computed((), lambda row: None)}).rows([1])


def _plans(sql: str) -> int:
    """How many times this session ran ``sql`` as a prepared statement (0: it is not prepared)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(generic_plans + custom_plans), 0) FROM pg_prepared_statements WHERE statement = %s",
            [sql.replace("%s", "$1")],
        )
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize("rows", [s.TENANT_ROWS, s.REQUEST_ROWS, s.AUDIT_EVENT_ROWS])
def test_a_page_query_is_prepared_once_per_connection_and_answers_the_same(varied, rows):
    pks = list(rows.model._default_manager.order_by("pk").values_list("pk", flat=True)[:20])
    before = _plans(rows._query.sql)
    first = rows.rows(pks)
    for _ in range(6):
        assert rows.rows(pks) == first
    assert _plans(rows._query.sql) == before + 7  # every page ran the one statement prepared on this connection
    assert len(first) == len(pks)


def test_preparing_can_be_turned_off_for_poolers_that_cannot_keep_statements(varied, settings):
    settings.DATABASE_PREPARED_STATEMENTS = False
    pks = list(Tenant.objects.order_by("pk").values_list("pk", flat=True)[:5])
    before = _plans(s.TENANT_ROWS._query.sql)
    for _ in range(3):
        assert len(s.TENANT_ROWS.rows(pks)) == 5
    assert _plans(s.TENANT_ROWS._query.sql) == before


def test_a_prepared_page_query_is_logged_with_its_values_like_any_other(varied):
    tenant = Tenant.objects.order_by("pk").first()
    assert tenant is not None
    with CaptureQueriesContext(connection) as queries:
        s.TENANT_ROWS.rows([tenant.pk])
    assert len(queries.captured_queries) == 1
    assert tenant.pk.hex in queries.captured_queries[0]["sql"]
