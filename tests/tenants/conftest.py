"""Helpers for the portal-core tests: API clients, an audit context, and tenants in a chosen state."""

from __future__ import annotations

import datetime as dt
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from tenants import audit, services
from tenants.audit import AuditContext
from tenants.models import Cluster, Team, Tenant, TenantRequest, TenantStatus, Tier, User

# What a page or API call would pass: used to check that every audit row carries it.
CTX = AuditContext(request_id="req-0042", source_ip="203.0.113.7", user_agent="pytest-agent/1.0")


@pytest.fixture
def api() -> Callable[..., APIClient]:
    """``api(user)``: a DRF client signed in as ``user`` (``api()``: anonymous)."""

    def client_for(user: User | None = None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user)
        return client

    return client_for


@pytest.fixture
def token_client() -> Callable[..., APIClient]:
    """``token_client(user, team=None)``: a client sending a real portal API token of ``user``."""

    def client_for(user: User, team: Team | None = None) -> APIClient:
        _, plaintext = services.api_token_create(actor=user, name="ci", expires_in_days=7, team=team)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {plaintext}")
        return client

    return client_for


@pytest.fixture
def submit(alice: User, team_a: Team, medium: Tier, cluster: Cluster) -> Callable[..., TenantRequest]:
    """``submit(name=..., actor=..., tier=...)``: a create request through the service (alice, team-a, medium)."""

    def _submit(
        *, name: str = "web", actor: User = alice, team: Team = team_a, tier: Tier = medium, **kwargs
    ) -> TenantRequest:
        kwargs.setdefault("cluster", cluster)
        return services.request_submit(actor=actor, action="create", team=team, name=name, tier=tier, **kwargs)

    return _submit


@pytest.fixture
def ready_tenant(submit, carol: User, dispatched) -> Callable[..., Tenant]:
    """``ready_tenant(name=...)``: a tenant taken through request → approve → provisioning → ready by the services."""

    def _ready(*, name: str = "web", **kwargs) -> Tenant:
        req = submit(name=name, **kwargs)
        if req.status == TenantRequest.Status.PENDING:
            services.request_approve(tenant_request=req, actor=carol)
        tenant = services.tenant_mark_provisioning(tenant=Tenant.objects.get(pk=req.tenant_id))
        return services.tenant_mark_ready(tenant=tenant, applied_generation=tenant.generation)

    return _ready


@pytest.fixture
def make_tenant(cluster: Cluster, medium: Tier) -> Callable[..., Tenant]:
    """``make_tenant(team=..., created_by=..., status=...)``: a row written directly, for read-side tests."""
    names = itertools.count(1)

    def _make(
        *,
        team: Team,
        created_by: User,
        status: str = TenantStatus.READY,
        tier: Tier = medium,
        name: str = "",
        cluster: Cluster = cluster,
        **fields: Any,
    ) -> Tenant:
        name = name or f"row-{next(names)}"
        fields.setdefault("namespace", cluster.namespace_prefix + name)
        return Tenant.objects.create(
            name=name, team=team, tier=tier, cluster=cluster, status=status, created_by=created_by, **fields
        )

    return _make


def run_together(*calls: Callable[[], Any]) -> list[Any]:
    """Run ``calls`` in threads released at the same instant; each result is a return value or the exception.

    Each thread uses its own database connection (Django's are per thread) and closes it at the end.
    Only for ``transaction=True`` tests: the threads must see committed data.
    """
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def worker(i: int, fn: Callable[[], Any]) -> None:
        try:
            barrier.wait(timeout=10)
            results[i] = fn()
        except Exception as exc:  # the loser's exception is the result under test
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i, fn)) for i, fn in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread hung: a lock was never released"
    return results


def vacuum_analyze(cursor: Any, table: str) -> None:
    """VACUUM ANALYZE ``table`` until every page of it is marked all-visible, as autovacuum leaves a fleet's table.

    The tests' PostgreSQL commits asynchronously (devcluster/servers.py: ``synchronous_commit=off``), and VACUUM
    marks a page all-visible only once the commits of its rows have reached the WAL on disk. Run straight after
    the inserts it leaves the visibility map empty: the planner then prices an index-only scan like a plain index
    scan, and which of two indexes over the same rows it shows becomes a tie broken by chance (a new index over
    the live tenants took the dashboard's count from tenant_live_summary that way). Waiting for the WAL writer
    (200 ms at most) and checking the map makes a plan read here the one a vacuumed fleet gets.
    """
    cursor.execute("SELECT pg_current_wal_insert_lsn()")
    (written,) = cursor.fetchone()
    pages = visible = -1
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        cursor.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", [written])
        if cursor.fetchone()[0]:
            cursor.execute(f"VACUUM ANALYZE {table}")
            cursor.execute("SELECT relpages, relallvisible FROM pg_class WHERE relname = %s", [table])
            pages, visible = cursor.fetchone()
            if visible == pages:
                return
        time.sleep(0.05)  # the WAL writer's next flush, or a snapshot older than the rows (an autoanalyze) ending
    raise AssertionError(f"{table}: {visible} of {pages} pages all-visible after 10 s of VACUUM")


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
