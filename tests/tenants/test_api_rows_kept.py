"""List rows kept rendered (tenants.api.rows.PlainRows.fragments): read and rendered again exactly when a table row
they show has been written since, and otherwise the same bytes the serializer would give.

Every page below is also compared with what the view answers through its serializer (``list_rows = None``).
"""

from __future__ import annotations

import zoneinfo
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from tenants.api import rows as rows_module
from tenants.api import serializers as s
from tenants.api.pagination import After, encode_cursor
from tenants.api.rows import PlainRows
from tenants.api.views import AuditEventViewSet, RequestViewSet, TenantViewSet
from tenants.models import AuditEvent, Cluster, Team, Tenant, TenantRequest, Tier, User

pytestmark = pytest.mark.django_db

API = "/api/v1"


@pytest.fixture
def loads(monkeypatch) -> list[list[Any]]:
    """The pks of every row query (PlainRows._load) the lists run, in order."""
    calls: list[list[Any]] = []
    load = PlainRows._load

    def counted(self, pks, tz):
        calls.append(list(pks))
        return load(self, pks, tz)

    monkeypatch.setattr(PlainRows, "_load", counted)
    return calls


@pytest.fixture(autouse=True)
def nothing_kept_before():
    for rows in (s.TENANT_ROWS, s.REQUEST_ROWS, s.AUDIT_EVENT_ROWS):
        rows._kept.clear()


def _rename_tiers() -> None:
    for pk in Tier.objects.values_list("pk", flat=True):
        Tier.objects.filter(pk=pk).update(name=f"tiny-{pk}")


def _page(client, monkeypatch, view, url: str) -> bytes:
    """The page, after checking it is what the serializer answers."""
    fast = client.get(url)
    with monkeypatch.context() as m:
        m.setattr(view, "list_rows", None)
        full = client.get(url)
    assert fast.status_code == full.status_code == 200, fast.content
    assert fast.content == full.content, url
    return fast.content


def test_a_page_read_again_reads_no_row_and_answers_the_same(api, varied, alice, monkeypatch, loads):
    client = api(alice)
    first = _page(client, monkeypatch, TenantViewSet, f"{API}/tenants/?team=team-a&limit=10")
    assert len(loads) == 1 and len(loads[0]) == 10
    again = _page(client, monkeypatch, TenantViewSet, f"{API}/tenants/?team=team-a&limit=10")
    assert again == first
    assert len(loads) == 1  # every row of the page was kept at the version the page's statement read
    # A page overlapping it reads only the rows it has not rendered.
    _page(client, monkeypatch, TenantViewSet, f"{API}/tenants/?team=team-a&limit=10&offset=5")
    assert len(loads) == 2 and len(loads[1]) == 5


@pytest.mark.parametrize(
    ("view", "path", "write", "shown"),
    [
        # The row itself.
        (TenantViewSet, "tenants/", lambda: Tenant.objects.update(purpose="rewritten ✓"), b"rewritten \xe2\x9c\x93"),
        (RequestViewSet, "requests/", lambda: TenantRequest.objects.update(purpose="rewritten"), b'"rewritten"'),
        # A row of another table it shows: the team's slug, the tier's and the cluster's names, a cluster's links,
        # the team's time zone (a tenant's sleep schedule), a user's name (who asked, who decided), an event's team.
        (TenantViewSet, "tenants/", lambda: Team.objects.filter(slug="team-a").update(slug="team-q"), b'"team-q"'),
        (TenantViewSet, "tenants/", lambda: _rename_tiers(), b'"tier":"tiny-'),
        (
            TenantViewSet,
            "tenants/",
            lambda: Cluster.objects.filter(name="edge").update(name="moved"),
            b'"cluster":"moved"',
        ),
        (
            TenantViewSet,
            "tenants/",
            lambda: Cluster.objects.update(monitoring_links=[{"name": "New", "url": "https://new.example.test/"}]),
            b"https://new.example.test/",
        ),
        (TenantViewSet, "tenants/", lambda: Team.objects.update(time_zone="Asia/Tokyo"), b"Asia/Tokyo"),
        (
            RequestViewSet,
            "requests/",
            lambda: User.objects.filter(username="amir").update(username="amira"),
            b'"amira"',
        ),
        (
            AuditEventViewSet,
            "audit-events/",
            lambda: Team.objects.filter(slug="team-b").update(slug="team-z"),
            b'"team":"team-z"',
        ),
    ],
)
def test_a_row_is_rendered_again_when_it_or_a_row_it_shows_is_written(
    api, varied, dave, monkeypatch, loads, view, path, write, shown
):
    client = api(dave)  # an admin sees every row, whatever its team is called
    url = f"{API}/{path}?limit=200"
    before = _page(client, monkeypatch, view, url)
    assert shown not in before
    read = len(loads)
    write()
    after = _page(client, monkeypatch, view, url)
    assert shown in after
    assert len(loads) == read + 1


def test_two_writes_in_one_transaction_are_two_versions(api, varied, alice, monkeypatch):
    """Both versions carry the transaction's id as xmin; their places (ctid) tell them apart."""
    client = api(alice)
    url = f"{API}/tenants/?team=team-a&limit=200"
    tenant = Tenant.objects.filter(team__slug="team-a").order_by("pk").first()
    assert tenant is not None
    with transaction.atomic():
        for purpose in ("first ✓", "second ✓"):
            Tenant.objects.filter(pk=tenant.pk).update(purpose=purpose)
            assert purpose.encode() in _page(client, monkeypatch, TenantViewSet, url)


def test_rows_are_kept_per_time_zone(varied):
    listed = s.REQUEST_ROWS.listed(list(TenantRequest.objects.order_by("pk").values_list("pk", flat=True)))
    berlin, utc = zoneinfo.ZoneInfo("Europe/Berlin"), zoneinfo.ZoneInfo("UTC")
    with timezone.override(berlin):
        in_berlin = s.REQUEST_ROWS.fragments(listed)
    with timezone.override(utc):
        in_utc = s.REQUEST_ROWS.fragments(listed)
    assert in_berlin != in_utc
    with timezone.override(berlin):
        assert s.REQUEST_ROWS.fragments(listed) == in_berlin
    assert set(s.REQUEST_ROWS._kept) == {berlin, utc}


def test_rows_kept_are_bounded_and_none_when_off(api, varied, dave, monkeypatch, settings, loads):
    client = api(dave)
    settings.API_LIST_ROWS_KEPT = 7
    first = _page(client, monkeypatch, AuditEventViewSet, f"{API}/audit-events/?limit=50")
    assert [len(kept) for kept in s.AUDIT_EVENT_ROWS._kept.values()] == [7]
    assert _page(client, monkeypatch, AuditEventViewSet, f"{API}/audit-events/?limit=50") == first
    assert len(loads[1]) == len(loads[0]) - 7  # the seven kept are the last rendered
    settings.API_LIST_ROWS_KEPT = 0
    s.AUDIT_EVENT_ROWS._kept.clear()
    for _ in range(2):
        assert _page(client, monkeypatch, AuditEventViewSet, f"{API}/audit-events/?limit=50") == first
    assert s.AUDIT_EVENT_ROWS._kept == {}
    assert [len(pks) for pks in loads[2:]] == [len(loads[0])] * 2


def test_rows_kept_are_all_dropped_after_a_while(api, varied, dave, monkeypatch, loads):
    client = api(dave)
    _page(client, monkeypatch, RequestViewSet, f"{API}/requests/?limit=20")
    assert sum(len(kept) for kept in s.REQUEST_ROWS._kept.values()) == 20
    monkeypatch.setattr(s.REQUEST_ROWS, "_kept_since", s.REQUEST_ROWS._kept_since - rows_module._KEPT_SECONDS - 1)
    _page(client, monkeypatch, RequestViewSet, f"{API}/requests/?limit=20")
    assert [len(pks) for pks in loads] == [20, 20]


def test_a_page_the_orm_lists_keeps_its_rows_too(api, varied, alice, monkeypatch, loads):
    """A shape left to the ORM (here a value the filters treat specially) reads versions by its page's ids."""
    monkeypatch.setattr(TenantViewSet, "_compiled_window", lambda self, request: None)
    client = api(alice)
    first = _page(client, monkeypatch, TenantViewSet, f"{API}/tenants/?limit=8")
    assert _page(client, monkeypatch, TenantViewSet, f"{API}/tenants/?limit=8") == first
    assert [len(pks) for pks in loads] == [8]


@pytest.mark.parametrize(
    "accept", ["application/json; indent=2", "text/html", "application/json; indent=0", "application/yaml"]
)
def test_rendered_rows_answer_any_renderer_as_the_rows_themselves(api, varied, alice, monkeypatch, accept):
    client = api(alice)
    url = f"{API}/requests/?limit=5"
    for _ in range(2):  # rendered, then kept
        fast = client.get(url, HTTP_ACCEPT=accept)
        with monkeypatch.context() as m:
            m.setattr(RequestViewSet, "list_rows", None)
            full = client.get(url, HTTP_ACCEPT=accept)
        assert fast.status_code == full.status_code == 200
        assert fast["Content-Type"] == full["Content-Type"]
        if "html" in accept:  # the browsable API: the same rows, in a page that differs by its CSRF token
            assert fast.content.count(b"&quot;name&quot;") == full.content.count(b"&quot;name&quot;") > 5
        else:
            assert fast.content == full.content


def test_a_row_gone_after_its_page_was_read_is_left_out(varied):
    tenants = list(Tenant.objects.order_by("pk").values_list("pk", flat=True)[:2])
    listed = s.TENANT_ROWS.listed(tenants)
    gone = Tenant(pk=None).pk  # a fresh uuid no row has
    fragments = s.TENANT_ROWS.fragments([listed[0], (gone, listed[0][1]), listed[1]])
    assert [fragment.count(str(pk).encode()) > 0 for fragment, pk in zip(fragments, tenants, strict=True)] == [True] * 2


def _fifth_event() -> tuple[Any, int]:
    return AuditEvent.objects.order_by("-at", "-id").values_list("at", "id")[4]


def test_pages_and_kept_rows_work_without_prepared_statements(api, varied, dave, monkeypatch, settings, loads):
    """Behind a pooler that cannot keep prepared statements (DATABASE_PREPARED_STATEMENTS=false) the page's
    statement is bound by the client: the same pages, counts and kept rows."""
    settings.DATABASE_PREPARED_STATEMENTS = False
    client = api(dave)
    for view, path in (
        (TenantViewSet, "tenants/"),
        (RequestViewSet, "requests/"),
        (AuditEventViewSet, "audit-events/"),
    ):
        pages = ("?limit=5", "?limit=5&offset=5", "?limit=200", "?offset=1000")
        if view is AuditEventViewSet:
            pages = (
                "?limit=5",
                f"?limit=5&cursor={encode_cursor(After(*_fifth_event()))}",
                "?limit=200",
                "?cursor=0.1",
            )
        for page in pages:
            first = _page(client, monkeypatch, view, f"{API}/{path}{page}")
            read = len(loads)
            assert _page(client, monkeypatch, view, f"{API}/{path}{page}") == first
            assert len(loads) == read
