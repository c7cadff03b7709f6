"""Usage-based showback from measured usage (tenants.costs.showback): exact Decimal figures with known days, measured
whole, in part or not at all. No database."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal as D

from tenants.costs.showback import Figures, UsageDay, tenant_month, usage_basis
from tests.tenants.test_showback import GIB, MARCH, at, history, only

HOURS_18 = 18 * 3600


def requested_day(**kwargs) -> UsageDay:
    """18 h of 10 March: 1.5 cores, 2 GiB of memory and 5 GiB of storage requested on average."""
    return UsageDay(
        team=1,
        cpu_core_seconds=D(str(1.5 * HOURS_18)),
        memory_byte_seconds=D(2 * GIB * HOURS_18),
        storage_byte_seconds=D(5 * GIB * HOURS_18),
        seconds=D(HOURS_18),
        **kwargs,
    )


def line_of(days: dict[dt.date, UsageDay]):
    return only(tenant_month(history(days=days), month=MARCH, now=at(31)))


def test_a_day_measured_throughout_costs_what_its_containers_used():
    # Measured all 18 h: 0.25 cores and 512 MiB used on average, whatever the pods requested.
    row = requested_day(
        measured_seconds=D(HOURS_18),
        measured_cpu_core_seconds=D(str(0.25 * HOURS_18)),
        measured_memory_byte_seconds=D(GIB // 2 * HOURS_18),
    )
    line = line_of({dt.date(2026, 3, 10): row})
    assert line.usage_basis == "measured"
    assert line.usage == Figures(
        cpu_core_hours=D("4.5000"),  # 0.25 × 18
        memory_gib_hours=D("9.0000"),  # 0.5 × 18
        storage_gib_months=D("0.1233"),  # storage stays as requested: 90 GiB-hours / 730
        cpu=D("0.18"),  # 4.5 × 0.04
        memory=D("0.05"),  # 9 × 0.005 = 0.045, half up
        storage=D("0.01"),
    )


def test_a_day_measured_in_part_takes_requests_for_the_rest():
    # Measured 12 of the 18 h (0.25 cores, 512 MiB); the other 6 h a third of the day's requested Σ.
    row = requested_day(
        measured_seconds=D(12 * 3600),
        measured_cpu_core_seconds=D(str(0.25 * 12 * 3600)),
        measured_memory_byte_seconds=D(GIB // 2 * 12 * 3600),
    )
    line = line_of({dt.date(2026, 3, 10): row})
    assert line.usage_basis == "mixed"
    assert line.usage.cpu_core_hours == D("12.0000")  # 0.25 × 12 + 1.5 × 18 / 3
    assert line.usage.memory_gib_hours == D("18.0000")  # 0.5 × 12 + 2 × 18 / 3
    assert line.usage.cpu == D("0.48") and line.usage.memory == D("0.09")


def test_without_measured_usage_the_figures_are_the_requests_as_before():
    line = line_of({dt.date(2026, 3, 10): requested_day()})
    assert line.usage_basis == "requests"
    assert (line.usage.cpu_core_hours, line.usage.memory_gib_hours) == (D("27.0000"), D("36.0000"))
    assert (line.usage.cpu, line.usage.memory) == (D("1.08"), D("0.18"))


def test_each_day_takes_its_own_evidence_and_the_line_says_mixed():
    measured = requested_day(
        measured_seconds=D(HOURS_18),
        measured_cpu_core_seconds=D(str(0.25 * HOURS_18)),
        measured_memory_byte_seconds=D(GIB // 2 * HOURS_18),
    )
    line = line_of({dt.date(2026, 3, 10): measured, dt.date(2026, 3, 11): requested_day()})
    assert line.usage_basis == "mixed"
    assert line.usage.cpu_core_hours == D("31.5000")  # 4.5 measured + 27 requested


def test_a_line_without_readings_has_no_basis():
    line = only(tenant_month(history(), month=MARCH, now=at(31)))
    assert line.usage_basis == "none" and line.usage == Figures()
    assert usage_basis([]) == "none" and usage_basis(["measured", "measured"]) == "measured"
    assert usage_basis(["measured", "requests"]) == "mixed" and usage_basis(["requests"]) == "requests"
