"""List pages built from ``.values()`` rows (tenants.api.rows) are the serializers' output, byte for byte.

The tenants, requests and audit-event lists build their pages with PlainRows instead of their ModelSerializer.
For a varied data set (nulls, empty and nested JSON, text beyond ASCII and the two characters DRF escapes,
timestamps with and without microseconds, IPv4 and IPv6, clusters with and without monitoring links) every page
below, for a member, an approver and an admin, with and without filters, is compared with what the same request
answers when the view lists through its serializer (``list_rows = None``).
"""

from __future__ import annotations

import zoneinfo

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.renderers import JSONRenderer

from tenants.api import rows as rows_module
from tenants.api import serializers as s
from tenants.api.pagination import After, encode_cursor
from tenants.api.rows import Computed, PlainRows
from tenants.api.views import AuditEventViewSet, RequestViewSet, TenantViewSet
from tenants.models import AuditEvent, Tenant, TenantRequest

pytestmark = pytest.mark.django_db

API = "/api/v1"


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


def _cursor_pages() -> list[str]:
    """The audit trail's pages (by keyset): from the top, after its 7th and 30th rows, and past every row."""
    rows = list(AuditEvent.objects.order_by("-at", "-id").values_list("at", "id"))
    cursors = [encode_cursor(After(*rows[n - 1])) for n in (7, 30)]
    return [
        "",
        "?limit=7",
        f"?limit=7&cursor={cursors[0]}",
        f"?limit=5&cursor={cursors[1]}",
        "?cursor=-1.0",
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
        for page in _cursor_pages() if view is AuditEventViewSet else PAGES:
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
# UTC (the portal's zone: the timestamps' UTC text is the answer), and zones with other offsets (converted).
@pytest.mark.parametrize("zone", ["UTC", "Etc/UTC", "Europe/Berlin", "America/St_Johns"])
def test_every_row_renders_as_its_serializer_does(varied, rows, serializer, model, zone):
    objects = list(model.objects.all())
    assert len(objects) >= 36
    pks = [o.pk for o in reversed(objects)]  # any order the caller asks for is kept
    with timezone.override(zoneinfo.ZoneInfo(zone)):
        plain = JSONRenderer().render(rows.rows(pks))
        full = JSONRenderer().render(serializer(list(reversed(objects)), many=True).data)
    assert plain == full
    assert (b'Z"' in plain) == zone.endswith("UTC")
    assert rows.rows([]) == []


def test_a_row_function_is_kept_per_zone_up_to_a_bound_and_made_per_page_past_it(varied, monkeypatch):
    rows = rows_module.PlainRows(s.RequestSerializer, {})
    objects = list(TenantRequest.objects.all())
    pks = [o.pk for o in objects]
    berlin, utc = zoneinfo.ZoneInfo("Europe/Berlin"), zoneinfo.ZoneInfo("UTC")
    with timezone.override(berlin):
        in_berlin = rows.rows(pks)
        assert rows.rows(pks) == in_berlin
    assert list(rows._row_functions) == [berlin]
    monkeypatch.setattr(rows_module, "_ZONES_KEPT", 1)
    with timezone.override(utc):
        # Past the bound the function is made for the page and not kept, and the answer is still the serializer's.
        in_utc = rows.rows(pks)
        assert JSONRenderer().render(in_utc) == JSONRenderer().render(s.RequestSerializer(objects, many=True).data)
    assert list(rows._row_functions) == [berlin]
    assert in_utc != in_berlin  # the zones render the same instants differently


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
