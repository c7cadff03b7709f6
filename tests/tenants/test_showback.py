"""Showback's arithmetic (tenants.costs.showback), exactly, with fixed prices and known histories. No database."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal as D

import pytest

from tenants.costs.showback import (
    Figures,
    MonthError,
    Prices,
    Quota,
    TenantHistory,
    UsageDay,
    month_label,
    parse_month,
    previous_month,
    tenant_month,
    totals,
)

MARCH = dt.date(2026, 3, 1)
APRIL_5 = dt.datetime(2026, 4, 5, tzinfo=dt.UTC)
EUR = Prices("EUR", cpu_core_hour=D("0.04"), memory_gib_hour=D("0.005"), storage_gib_month=D("0.10"))
MEDIUM = Quota(cpu_millis=2000, memory_mib=4096, storage_gib=10)
SMALL = Quota(cpu_millis=500, memory_mib=1024, storage_gib=5)
GIB = 2**30


def at(day: int, hour: int = 0, minute: int = 0, month: int = 3) -> dt.datetime:
    return dt.datetime(2026, month, day, hour, minute, tzinfo=dt.UTC)


def history(**kwargs) -> TenantHistory:
    defaults: dict = {
        "tenant": "t1",
        "team": 1,
        "live_from": at(10, 6),
        "live_until": None,
        "tiers": [(None, MEDIUM)],
        "prices": [(dt.date(2026, 1, 1), EUR)],
    }
    return TenantHistory(**{**defaults, **kwargs})


def only(lines):
    assert len(lines) == 1, lines
    return lines[0]


def test_a_whole_live_month_is_the_tiers_requests_times_the_hours_live():
    # Live from 10 March 06:00 to the end of March: 21 days and 18 hours = 522 hours.
    line = only(tenant_month(history(), month=MARCH, now=APRIL_5))
    assert line.live_hours == D("522.00") and line.asleep_hours == D("0.00")
    assert line.allocation == Figures(
        cpu_core_hours=D("1044.0000"),  # 2 cores × 522 h
        memory_gib_hours=D("2088.0000"),  # 4 GiB × 522 h
        storage_gib_months=D("7.1507"),  # 10 GiB × 522 / 730
        cpu=D("41.76"),  # 1044 × 0.04
        memory=D("10.44"),  # 2088 × 0.005
        storage=D("0.72"),  # 7.150684… × 0.10
    )
    assert line.allocation.total == D("52.92")
    assert line.usage == Figures()  # nothing was recorded


def test_the_month_so_far_stops_at_now():
    line = only(tenant_month(history(), month=MARCH, now=at(12, 12)))
    assert line.live_hours == D("54.00")  # 10 March 06:00 → 12 March 12:00
    assert line.allocation.cpu == D("4.32")  # 2 × 54 × 0.04
    assert line.allocation.memory == D("1.08")  # 4 × 54 × 0.005
    assert line.allocation.storage == D("0.07")  # 10 × 54 / 730 × 0.10 = 0.0739…


def test_a_deleted_tenant_costs_until_its_deletion_and_not_after():
    line = only(tenant_month(history(live_until=at(20)), month=MARCH, now=APRIL_5))
    assert line.live_hours == D("234.00")  # 10 March 06:00 → 20 March 00:00
    assert line.allocation.cpu == D("18.72")
    assert tenant_month(history(live_until=at(20)), month=dt.date(2026, 4, 1), now=APRIL_5) == []


def test_a_tenant_never_ready_costs_nothing():
    assert tenant_month(history(live_from=None), month=MARCH, now=APRIL_5) == []


def test_sleep_takes_cpu_and_memory_off_but_not_storage():
    # Asleep 20 March 18:00 → 23 March 06:00: 60 of the 522 hours.
    line = only(tenant_month(history(sleeps=[(at(20, 18), at(23, 6))]), month=MARCH, now=APRIL_5))
    assert (line.live_hours, line.asleep_hours) == (D("522.00"), D("60.00"))
    assert line.allocation.cpu_core_hours == D("924.0000")  # 2 × 462
    assert line.allocation.cpu == D("36.96")
    assert line.allocation.memory == D("9.24")  # 4 × 462 × 0.005
    assert line.allocation.storage == D("0.72")  # storage counts all 522 hours


def test_a_sleep_still_going_counts_until_now_and_overlapping_periods_count_once():
    sleeps = [(at(11), at(11, 12)), (at(11, 6), None)]  # the second is still open at now
    line = only(tenant_month(history(sleeps=sleeps), month=MARCH, now=at(12)))
    assert (line.live_hours, line.asleep_hours) == (D("42.00"), D("24.00"))  # asleep from 11 March 00:00 on
    assert line.allocation.cpu_core_hours == D("36.0000")  # awake 18 h × 2 cores


def test_a_sleep_before_the_tenant_was_live_does_not_count():
    line = only(tenant_month(history(sleeps=[(at(1), at(10, 12))]), month=MARCH, now=at(11)))
    assert (line.live_hours, line.asleep_hours) == (D("18.00"), D("6.00"))


def test_a_tier_change_counts_from_the_moment_it_was_approved():
    # medium until 25 March 12:30, small after: 15 days 6.5 h = 366.5 h medium, 155.5 h small.
    tiers = [(None, MEDIUM), (at(25, 12, 30), SMALL)]
    line = only(tenant_month(history(tiers=tiers), month=MARCH, now=APRIL_5))
    assert line.allocation.cpu_core_hours == D("810.7500")  # 2 × 366.5 + 0.5 × 155.5
    assert line.allocation.memory_gib_hours == D("1621.5000")  # 4 × 366.5 + 1 × 155.5
    assert line.allocation.storage_gib_months == D("6.0856")  # (10 × 366.5 + 5 × 155.5) / 730 = 4442.5 / 730
    assert line.allocation.cpu == D("32.43")  # 810.75 × 0.04
    assert line.allocation.memory == D("8.11")  # 1621.5 × 0.005 = 8.1075
    assert line.allocation.storage == D("0.61")  # 0.60856…


def test_a_price_change_applies_from_its_day_and_earlier_days_keep_the_old_price():
    dearer = Prices("EUR", cpu_core_hour=D("0.05"), memory_gib_hour=D("0.005"), storage_gib_month=D("0.10"))
    prices = [(dt.date(2026, 1, 1), EUR), (dt.date(2026, 3, 15), dearer)]
    line = only(tenant_month(history(prices=prices), month=MARCH, now=APRIL_5))
    # 10 March 06:00 → 15 March: 114 h at 0.04; 15 March → 1 April: 408 h at 0.05.
    assert line.allocation.cpu == D("49.92")  # 2 × 114 × 0.04 + 2 × 408 × 0.05 = 9.12 + 40.80
    assert line.allocation.cpu_core_hours == D("1044.0000")


def test_time_before_the_clusters_first_price_is_not_priced():
    line = only(tenant_month(history(prices=[(dt.date(2026, 3, 20), EUR)]), month=MARCH, now=APRIL_5))
    assert line.live_hours == D("288.00")  # 20 March → 1 April
    assert line.allocation.cpu == D("23.04")
    assert tenant_month(history(prices=[]), month=MARCH, now=APRIL_5) == []


def test_usage_based_cost_is_the_recorded_usage_times_the_prices():
    # 10 March, 18 h: 1.5 cores, 2 GiB of memory, 5 GiB of storage requested on average.
    row = UsageDay(
        team=1,
        cpu_core_seconds=D(str(1.5 * 18 * 3600)),
        memory_byte_seconds=D(2 * GIB * 18 * 3600),
        storage_byte_seconds=D(5 * GIB * 18 * 3600),
    )
    line = only(tenant_month(history(days={dt.date(2026, 3, 10): row}), month=MARCH, now=at(11)))
    assert line.usage == Figures(
        cpu_core_hours=D("27.0000"),
        memory_gib_hours=D("36.0000"),
        storage_gib_months=D("0.1233"),  # 90 GiB-hours / 730
        cpu=D("1.08"),
        memory=D("0.18"),
        storage=D("0.01"),
    )
    assert line.allocation.cpu == D("1.44")  # 2 cores × 18 h × 0.04: what the tier reserved


def test_a_transfer_splits_the_month_by_the_team_of_each_day():
    # Rows on 10-11 March for team 1, from 20 March for team 2; the days between have no row and stay with 1.
    days = {dt.date(2026, 3, d): UsageDay(team=1 if d < 20 else 2) for d in (10, 11, 20, 21)}
    lines = {line.team: line for line in tenant_month(history(days=days), month=MARCH, now=APRIL_5)}
    assert lines[1].live_hours == D("234.00")  # 10 March 06:00 → 20 March
    assert lines[2].live_hours == D("288.00")  # 20 March → 1 April
    assert lines[1].allocation.cpu + lines[2].allocation.cpu == D("41.76")


def test_days_before_the_first_row_take_the_team_of_the_month_before_or_else_the_first_row():
    days = {dt.date(2026, 3, 20): UsageDay(team=2)}
    lines = tenant_month(history(days=days, team_before=1), month=MARCH, now=APRIL_5)
    assert {line.team: line.live_hours for line in lines} == {1: D("234.00"), 2: D("288.00")}
    lines = tenant_month(history(days=days, team=3), month=MARCH, now=APRIL_5)
    assert {line.team: line.live_hours for line in lines} == {2: D("522.00")}
    assert {line.team for line in tenant_month(history(team=3), month=MARCH, now=APRIL_5)} == {3}


def test_with_no_row_in_the_month_the_team_comes_from_the_rows_around_it_whatever_was_loaded():
    # Loaded alone, March has no row: its days go to the team of the first row after it (April's), as they
    # would had April been loaded with it; without any row at all, to the tenant's team now.
    lines = tenant_month(history(team=3, team_after=2), month=MARCH, now=APRIL_5)
    assert {line.team for line in lines} == {2}
    with_april = history(team=3, days={dt.date(2026, 4, 2): UsageDay(team=2)})
    assert {line.team for line in tenant_month(with_april, month=MARCH, now=APRIL_5)} == {2}
    assert {line.team for line in tenant_month(history(team=3, team_before=1), month=MARCH, now=APRIL_5)} == {1}


def test_a_currency_change_gives_one_line_per_currency_and_totals_never_mix_them():
    usd = Prices("USD", cpu_core_hour=D("0.05"), memory_gib_hour=D("0.006"), storage_gib_month=D("0.12"))
    prices = [(dt.date(2026, 1, 1), EUR), (dt.date(2026, 3, 20), usd)]
    lines = tenant_month(history(prices=prices), month=MARCH, now=APRIL_5)
    by_currency = {line.currency: line for line in lines}
    assert by_currency["EUR"].live_hours == D("234.00") and by_currency["USD"].live_hours == D("288.00")
    assert by_currency["USD"].allocation.cpu == D("28.80")  # 2 × 288 × 0.05
    assert [t.currency for t in totals(lines)] == ["EUR", "USD"]


def test_totals_are_the_sums_of_the_rounded_lines():
    # Each line's storage is 0.0739… → 0.07; the total is 0.14, not a re-rounded 0.15.
    lines = tenant_month(history(), month=MARCH, now=at(12, 12)) + tenant_month(
        history(tenant="t2"), month=MARCH, now=at(12, 12)
    )
    (total,) = totals(lines)
    assert total.allocation.storage == D("0.14")
    assert total.allocation.total == D("10.94")  # 2 × (4.32 + 1.08 + 0.07)


@pytest.mark.parametrize(
    "value",
    [
        "2026-3",
        "2026-13",
        "2026-00",
        "March",
        "",
        "２０２６-03",
        "2026-03\n",
        "0000-01",
        "1999-12",
        "3000-01",
        "2026-03x",
    ],
)
def test_a_month_that_is_none_is_refused(value):
    with pytest.raises(MonthError, match="A month as YYYY-MM from 2000-01 to 2999-12"):
        parse_month(value)


def test_months_parse_and_step_back():
    assert parse_month("2026-04") == dt.date(2026, 4, 1)
    assert parse_month("2999-12") == dt.date(2999, 12, 1)
    assert previous_month(dt.date(2026, 1, 1)) == dt.date(2025, 12, 1)
    assert month_label(previous_month(MARCH)) == "2026-02"


def test_a_month_not_begun_has_no_costs_yet():
    assert tenant_month(history(), month=dt.date(2026, 5, 1), now=APRIL_5) == []
