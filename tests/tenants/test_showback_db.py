"""Showback through the database: prices set by the service, a tenant's history made by the real services on a
fixed clock, and the figures read back through the selectors (tenants.costs.team_costs / tenant_costs)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal as D

import pytest
from django.core.exceptions import ValidationError

from tenants import services
from tenants.costs import selectors as costs
from tenants.errors import Forbidden
from tenants.models import AuditEvent, ClusterPrice, Tenant, TenantSleepPeriod, TenantUsageDay
from tests.tenants.conftest import CTX

pytestmark = pytest.mark.django_db
MARCH = dt.date(2026, 3, 1)
GIB = 2**30


def at(day: int, hour: int = 0, minute: int = 0, month: int = 3) -> dt.datetime:
    return dt.datetime(2026, month, day, hour, minute, tzinfo=dt.UTC)


class Clock:
    def __init__(self, monkeypatch) -> None:
        self.now = at(1)
        monkeypatch.setattr("django.utils.timezone.now", lambda: self.now)

    def set(self, when: dt.datetime) -> None:
        self.now = when


@pytest.fixture
def clock(monkeypatch) -> Clock:
    return Clock(monkeypatch)


@pytest.fixture
def eur(clock, dave, cluster) -> ClusterPrice:
    """0.04 per core-hour, 0.005 per GiB-hour, 0.10 per GiB-month on the dev cluster from 1 March."""
    clock.set(at(25, month=2))
    return services.cluster_set_prices(
        cluster=cluster,
        actor=dave,
        effective_from=MARCH,
        cpu_core_hour=D("0.04"),
        memory_gib_hour=D("0.005"),
        storage_gib_month=D("0.10"),
        ctx=CTX,
    )


@pytest.fixture
def web(clock, eur, ready_tenant) -> Tenant:
    """A medium tenant (4 cores, 8 GiB, 100 GiB requested) of team-a, ready on 10 March at 06:00."""
    clock.set(at(10, 6))
    return ready_tenant(name="web")


def test_a_month_with_a_sleep_and_a_tier_change_costs_exactly_this(clock, web, alice, small):
    TenantSleepPeriod.objects.create(tenant=web, reason="owner", started_at=at(20, 18), ended_at=at(23, 6))
    clock.set(at(25, 12, 30))
    services.request_submit(actor=alice, action="change_tier", tenant=web, tier=small)  # small approves itself
    clock.set(at(5, month=4))
    report = costs.team_costs(team=web.team, months=[MARCH], now=clock.now)[MARCH]
    (row,) = report.rows
    assert (row.tenant, row.team, row.line.currency) == (web, web.team, "EUR")
    assert (row.line.live_hours, row.line.asleep_hours) == (D("522.00"), D("60.00"))
    # medium 10 March 06:00 → 25 March 12:30 (366.5 h, 60 of them asleep), small for the 155.5 h after.
    allocation = row.line.allocation
    assert allocation.cpu_core_hours == D("1381.5000")  # 4 × 306.5 + 1 × 155.5
    assert allocation.memory_gib_hours == D("2763.0000")  # 8 × 306.5 + 2 × 155.5
    assert allocation.storage_gib_months == D("52.3356")  # (100 × 366.5 + 10 × 155.5) / 730
    assert (allocation.cpu, allocation.memory, allocation.storage) == (D("55.26"), D("13.82"), D("5.23"))
    assert [(t.currency, t.allocation.total) for t in report.totals] == [("EUR", D("74.31"))]
    assert report.period_end == at(1, month=4)
    assert costs.tenant_costs(tenant=web, months=[MARCH], now=clock.now)[MARCH].totals == report.totals


def test_the_month_so_far_and_a_new_price_leave_past_months_alone(clock, web, dave, cluster):
    clock.set(at(2, 12, month=4))
    services.cluster_set_prices(
        cluster=cluster,
        actor=dave,
        effective_from=dt.date(2026, 4, 2),
        cpu_core_hour=D("0.08"),
        memory_gib_hour=D("0.005"),
        storage_gib_month=D("0.10"),
    )
    april = dt.date(2026, 4, 1)
    reports = costs.tenant_costs(tenant=web, months=[MARCH, april], now=clock.now)
    assert reports[MARCH].rows[0].line.allocation.cpu == D("83.52")  # 4 × 522 × 0.04, the March price
    # April so far: 1 April at 0.04 (24 h), 2 April at 0.08 (12 h): 4 × (24 × 0.04 + 12 × 0.08).
    assert reports[april].rows[0].line.live_hours == D("36.00")
    assert reports[april].rows[0].line.allocation.cpu == D("7.68")
    assert reports[april].period_end == clock.now


def test_a_deleted_tenant_stops_costing_when_it_was_deleted(clock, web, alice):
    clock.set(at(19, 23))
    services.tenant_decommission(tenant=web, actor=alice, reason="done")
    clock.set(at(20))
    services.tenant_mark_deleted(tenant=Tenant.objects.get(pk=web.pk))
    clock.set(at(5, month=4))
    web.refresh_from_db()
    (row,) = costs.tenant_costs(tenant=web, months=[MARCH], now=clock.now)[MARCH].rows
    assert row.line.live_hours == D("234.00")  # decommissioning still holds the quota, until deleted


def test_a_transfer_splits_the_month_between_the_teams_by_day(clock, web, team_b):
    usage = {
        "requests.cpu": {"used_seconds": 2 * 18 * 3600, "max": 2, "hard": 4},
        "requests.memory": {"used_seconds": 0, "max": 0, "hard": 8 * GIB},
    }
    TenantUsageDay.objects.create(tenant=web, day=dt.date(2026, 3, 10), team=web.team, tier=web.tier, usage=usage)
    Tenant.objects.filter(pk=web.pk).update(team=team_b)  # what the transfer does to the tenant
    moved = {
        "requests.cpu": {"used_seconds": 24 * 3600, "max": 1, "hard": 4},
        "requests.memory": {"used_seconds": 4 * GIB * 24 * 3600, "max": 4 * GIB, "hard": 8 * GIB},
    }
    TenantUsageDay.objects.create(tenant=web, day=dt.date(2026, 3, 20), team=team_b, tier=web.tier, usage=moved)
    clock.set(at(5, month=4))
    (a,) = costs.team_costs(team=web.team, months=[MARCH], now=clock.now)[MARCH].rows
    (b,) = costs.team_costs(team=team_b, months=[MARCH], now=clock.now)[MARCH].rows
    assert (a.team.slug, a.line.live_hours, b.team.slug, b.line.live_hours) == (
        "team-a",
        D("234.00"),
        "team-b",
        D("288.00"),
    )
    assert (a.line.usage.cpu_core_hours, a.line.usage.cpu) == (D("36.0000"), D("1.44"))  # 2 cores × 18 h
    assert (b.line.usage.cpu, b.line.usage.memory) == (D("0.96"), D("0.48"))  # 24 core-h, 96 GiB-h
    assert a.line.allocation.cpu + b.line.allocation.cpu == D("83.52")  # 4 × 522 × 0.04, split once
    tenant_rows = costs.tenant_costs(tenant=web, months=[MARCH], now=clock.now)[MARCH].rows
    assert [r.team.slug for r in tenant_rows] == ["team-a", "team-b"]


def test_a_month_reads_the_same_alone_or_with_the_months_around_it(clock, web, team_b):
    # No row in March; April's first row says team-b held it, though it is team-a's now (moved back since).
    TenantUsageDay.objects.create(tenant=web, day=dt.date(2026, 4, 2), team=team_b, tier=web.tier)
    clock.set(at(5, month=4))
    alone = costs.team_costs(team=team_b, months=[MARCH], now=clock.now)[MARCH]
    together = costs.team_costs(team=team_b, months=[MARCH, dt.date(2026, 4, 1)], now=clock.now)[MARCH]
    assert [r.line for r in alone.rows] == [r.line for r in together.rows]
    assert [(r.team.slug, r.line.live_hours) for r in alone.rows] == [("team-b", D("522.00"))]
    assert costs.team_costs(team=web.team, months=[MARCH], now=clock.now)[MARCH].rows == []


def test_a_teams_report_takes_a_few_queries_whatever_the_number_of_tenants(
    clock, eur, ready_tenant, team_a, django_assert_max_num_queries
):
    clock.set(at(10, 6))
    team_a.budget_cpu_millis, team_a.budget_memory_mib = 64000, 131072
    team_a.save()
    for i in range(5):
        ready_tenant(name=f"svc-{i}")
    clock.set(at(5, month=4))
    with django_assert_max_num_queries(9):
        report = costs.team_costs(team=team_a, months=[MARCH, dt.date(2026, 4, 1)], now=clock.now)[MARCH]
    assert len(report.rows) == 5 and report.totals[0].allocation.cpu == D("417.60")  # 5 × 4 × 522 × 0.04


# --- setting prices -------------------------------------------------------------------------------------------


def test_setting_prices_is_audited_with_before_and_after(clock, eur, dave, cluster):
    clock.set(at(10))
    services.cluster_set_prices(
        cluster=cluster,
        actor=dave,
        effective_from=dt.date(2026, 3, 11),
        currency="EUR",
        cpu_core_hour=D("0.05"),
        memory_gib_hour=D("0.005"),
        storage_gib_month=D("0.1"),
        ctx=CTX,
    )
    event = AuditEvent.objects.filter(action="cluster.prices").first()
    assert event is not None
    assert (event.object_type, event.object_id, event.actor_name, event.request_id) == (
        "cluster",
        str(cluster.pk),
        "dave",
        "req-0042",
    )
    assert event.before["cpu_core_hour"] == "0.040000" and event.before["effective_from"] == "2026-03-01"
    assert event.after == {
        "effective_from": "2026-03-11",
        "currency": "EUR",
        "cpu_core_hour": "0.05",
        "memory_gib_hour": "0.005",
        "storage_gib_month": "0.1",
    }
    assert list(ClusterPrice.objects.values_list("effective_from", flat=True)) == [MARCH, dt.date(2026, 3, 11)]


def test_prices_of_a_day_not_yet_past_are_replaced_and_past_ones_never(clock, eur, dave, cluster):
    clock.set(at(10))
    again = {"cluster": cluster, "actor": dave, "memory_gib_hour": D("0"), "storage_gib_month": D("0")}
    services.cluster_set_prices(effective_from=dt.date(2026, 3, 10), cpu_core_hour=D("1"), **again)
    services.cluster_set_prices(effective_from=dt.date(2026, 3, 10), cpu_core_hour=D("2"), **again)
    assert ClusterPrice.objects.get(effective_from=dt.date(2026, 3, 10)).cpu_core_hour == D("2")
    with pytest.raises(ValidationError) as refused:
        services.cluster_set_prices(effective_from=dt.date(2026, 3, 9), cpu_core_hour=D("3"), **again)
    assert list(refused.value.message_dict) == ["effective_from"]
    assert ClusterPrice.objects.get(effective_from=MARCH).cpu_core_hour == D("0.04")


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cpu_core_hour": D("-0.01")}, "cpu_core_hour"),
        ({"memory_gib_hour": D("NaN")}, "memory_gib_hour"),
        ({"storage_gib_month": D("1e9")}, "storage_gib_month"),
        ({"cpu_core_hour": D("0.0000001")}, "cpu_core_hour"),
        ({"currency": "eur"}, "currency"),
        ({"currency": "EURO"}, "currency"),
    ],
)
def test_bad_prices_are_field_errors(clock, dave, cluster, changes, field):
    clock.set(at(10))
    prices = {"cpu_core_hour": D("1"), "memory_gib_hour": D("1"), "storage_gib_month": D("1"), **changes}
    with pytest.raises(ValidationError) as refused:
        services.cluster_set_prices(cluster=cluster, actor=dave, effective_from=dt.date(2026, 3, 10), **prices)
    assert list(refused.value.message_dict) == [field]
    assert not ClusterPrice.objects.exists()


def test_only_platform_admins_set_prices(clock, alice, carol, cluster):
    for person in (alice, carol):
        with pytest.raises(Forbidden):
            services.cluster_set_prices(
                cluster=cluster,
                actor=person,
                effective_from=dt.date(2026, 3, 10),
                cpu_core_hour=D("1"),
                memory_gib_hour=D("1"),
                storage_gib_month=D("1"),
            )
    assert not ClusterPrice.objects.exists()


# --- the admin ------------------------------------------------------------------------------------------------


def price_form(cluster, day: dt.date, cpu: str = "0.05") -> dict:
    return {
        "cluster": cluster.pk,
        "effective_from": day.isoformat(),
        "currency": "EUR",
        "cpu_core_hour": cpu,
        "memory_gib_hour": "0.005",
        "storage_gib_month": "0.1",
        "_save": "Save",
    }


def test_prices_added_in_the_admin_go_through_the_service_and_are_audited(client, clock, dave, cluster):
    clock.set(at(10, 9))
    client.force_login(dave)
    assert client.get("/admin/tenants/clusterprice/add/").status_code == 200
    response = client.post("/admin/tenants/clusterprice/add/", price_form(cluster, dt.date(2026, 3, 12)))
    assert response.status_code == 302, response.context["adminform"].form.errors
    price = ClusterPrice.objects.get()
    assert (price.effective_from, price.cpu_core_hour, price.created_by) == (dt.date(2026, 3, 12), D("0.05"), dave)
    event = AuditEvent.objects.get(action="cluster.prices")
    assert event.actor == dave and event.before == {} and event.after["cpu_core_hour"] == "0.05"
    assert client.get(f"/admin/tenants/cluster/{cluster.pk}/change/").status_code == 200  # with its history


def test_the_admin_refuses_a_past_day_at_the_field_and_never_edits_a_price_in_effect(client, clock, eur, dave, cluster):
    clock.set(at(10, 9))
    client.force_login(dave)
    response = client.post("/admin/tenants/clusterprice/add/", price_form(cluster, dt.date(2026, 3, 9), cpu="-1"))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "past days keep the prices they had" in errors["effective_from"][0]
    assert "cpu_core_hour" in errors
    assert ClusterPrice.objects.count() == 1
    # The price in effect since 1 March opens read-only: it is what March's figures were computed with.
    page = client.get(f"/admin/tenants/clusterprice/{eur.pk}/change/")
    assert page.status_code == 200 and page.context["has_change_permission"] is False
    client.post(f"/admin/tenants/clusterprice/{eur.pk}/change/", price_form(cluster, MARCH, cpu="9"))
    assert ClusterPrice.objects.get(pk=eur.pk).cpu_core_hour == D("0.04")
    assert client.post(f"/admin/tenants/clusterprice/{eur.pk}/delete/", {"post": "yes"}).status_code == 403
    assert ClusterPrice.objects.filter(pk=eur.pk).exists()
