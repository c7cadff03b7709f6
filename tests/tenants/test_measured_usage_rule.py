"""Measured usage (what the containers used, by Prometheus) in the usage history and the right-sizing rule: pure
functions with known readings and histories, no database."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import replace

import pytest

from tenants.rightsizing import DAY_SECONDS, Day
from tenants.services.usage import fold
from tests.tenants.test_rightsizing_rule import LARGE, MEDIUM, POLICY, SMALL, TODAY, history, run, shares

GIB = 2.0**30


def reading(measured: dict | None = None) -> dict:
    value = {
        "hard": {"requests.cpu": "4", "limits.cpu": "8", "requests.memory": "8Gi", "limits.memory": "16Gi"},
        "used": {"requests.cpu": "3", "requests.memory": "6Gi"},
    }
    return value if measured is None else {**value, "measured": measured}


# --- The history ----------------------------------------------------------------------------------------------


def test_a_measured_part_is_folded_with_its_own_coverage_and_the_requests_quota():
    usage = fold({}, reading({"cpu": 0.25, "memory": 2 * GIB}), 60)
    usage = fold(usage, reading(), 30)  # Prometheus did not answer: requests only, for these 30 s
    usage = fold(usage, reading({"cpu": "0.5", "memory": str(GIB)}), 10)
    assert usage["measured.cpu"] == {"used_seconds": 0.25 * 60 + 0.5 * 10, "max": 0.5, "hard": 4.0, "seconds": 70.0}
    assert usage["measured.memory"] == {
        "used_seconds": 2 * GIB * 60 + GIB * 10,
        "max": 2 * GIB,
        "hard": 8 * GIB,
        "limit": 16 * GIB,
        "seconds": 70.0,
    }
    assert usage["requests.cpu"]["used_seconds"] == 3 * 100  # the quota's readings cover all 100 s


def test_a_reading_without_a_measured_part_folds_as_before():
    assert fold({}, reading(), 60) == fold({}, {**reading(), "measured": None}, 60)
    assert not any(resource.startswith("measured.") for resource in fold({}, reading(), 60))


@pytest.mark.parametrize("bad", ["NaN", "inf", -1, "lots", None, [], {"x": 1}])
def test_a_measured_figure_that_is_no_finite_amount_is_no_evidence(bad):
    usage = fold({}, reading({"cpu": bad, "memory": GIB}), 60)
    assert "measured.cpu" not in usage and usage["measured.memory"]["seconds"] == 60.0
    assert all(math.isfinite(float(v)) for entry in usage.values() for v in entry.values())


# --- The rule -------------------------------------------------------------------------------------------------


def measured(d: Day, *, cpu: tuple[float, float], memory: tuple[float, float], seconds: float | None = None) -> Day:
    """``d`` with measured CPU and memory (average while awake, peak; shares of the requests quotas) over
    ``seconds`` of it (all of it by default)."""
    covered = d.seconds if seconds is None else seconds
    awake = covered * (d.seconds - d.asleep_seconds) / d.seconds
    usage: dict[str, dict[str, float]] = {r: dict(e) for r, e in d.usage.items()}
    for resource, quota, (average, peak) in (
        ("measured.cpu", "requests.cpu", cpu),
        ("measured.memory", "requests.memory", memory),
    ):
        hard = float(d.usage[quota]["hard"])
        usage[resource] = {"used_seconds": average * hard * awake, "max": peak * hard, "hard": hard, "seconds": covered}
    usage["measured.memory"]["limit"] = float(d.usage["limits.memory"]["hard"])
    return replace(d, usage=usage)


def measured_history(requested: float, cpu, memory, *, n: int = 14, seconds=None, current=MEDIUM, **kw) -> list[Day]:
    """``n`` days whose pods request ``requested`` of every CPU and memory quota, with measured use."""
    days = history(current, n=n, average=shares(requested), peak=shares(requested), **kw)
    return [measured(d, cpu=cpu, memory=memory, seconds=seconds) for d in days]


def test_without_measured_usage_the_rule_is_the_requests_rule():
    found = run(history(MEDIUM, average=shares(0.12), peak=shares(0.20)))
    assert (found.basis, found.basis_label, found.measured_seconds, found.measured_coverage) == (
        "requests",
        "quota requests",
        0.0,
        0.0,
    )
    assert found.reason.startswith("Used under 30% of Medium") and found.target.name == "small"
    assert not any(e.resource.startswith("measured.") for e in found.evidence)


def test_pods_that_request_much_but_use_little_get_a_smaller_tier_and_are_told_to_lower_requests():
    # Requests at 80% of medium: the requests rule keeps the tier. Measured: 5% / 8% of it on average.
    days = measured_history(0.8, cpu=(0.05, 0.1), memory=(0.08, 0.15))
    found = run(days)
    assert (found.basis, found.basis_label, found.measured_coverage) == ("measured", "measured (Prometheus)", 1.0)
    assert (found.direction, found.target.name) == ("down", "small")
    cpu = next(e for e in found.evidence if e.resource == "measured.cpu")
    assert (cpu.label, cpu.quota, cpu.average_share, cpu.peak_share) == ("CPU used (measured)", 4.0, 0.05, 0.1)
    assert "as its cluster's Prometheus measured them (100% measured)" in found.reason
    assert "CPU used (measured) 5% on average, peak 10%" in found.reason
    # Its pods request 3.2 cores now; small's quota is 1 core: the move would block new pods unless they lower them.
    assert "But its pods request more than Small's quota (CPU requested 3.2 cores, Small allows 1 core;" in (
        found.reason
    )
    assert "lower their requests and limits first" in found.reason
    # The requests alone keep the tier: the evidence decided it.
    plain = run(history(MEDIUM, average=shares(0.8), peak=shares(0.8)))
    assert plain.target is None and plain.basis == "requests"


def test_pods_whose_requests_fit_the_smaller_tier_get_no_warning():
    found = run(measured_history(0.1, cpu=(0.05, 0.1), memory=(0.08, 0.15)))
    assert found.target.name == "small" and "lower their requests" not in found.reason


def test_measured_use_over_the_share_keeps_the_tier_though_requests_are_small():
    # Requests at 10% (the requests rule would say small); the containers use 40% of the CPU requests quota.
    days = measured_history(0.1, cpu=(0.4, 0.5), memory=(0.05, 0.1))
    assert run(history(MEDIUM, average=shares(0.1), peak=shares(0.1))).target.name == "small"
    found = run(days)
    assert found.basis == "measured" and found.target is None


def test_a_smaller_tier_must_hold_the_measured_peaks_with_headroom():
    # A measured CPU peak of 30% of medium's 4 requested cores is 1.2 cores: small's 1 core cannot hold it.
    found = run(measured_history(0.1, cpu=(0.05, 0.3), memory=(0.05, 0.1)))
    assert found.basis == "measured" and found.target is None and "no smaller tier" in found.notes[0]


def test_too_little_measured_coverage_falls_back_to_requests_and_shows_the_measured_rows():
    # Measured for 10 of 14 days (71% < 80%): judged on requests, which keep the tier.
    days = measured_history(0.8, cpu=(0.05, 0.1), memory=(0.08, 0.15))
    partial = [*days[:10], *history(MEDIUM, n=14, average=shares(0.8), peak=shares(0.8))[10:]]
    found = run(partial)
    assert found.basis == "requests" and found.measured_coverage == pytest.approx(10 / 14)
    assert found.target is None
    assert {"measured.cpu", "measured.memory"} <= {e.resource for e in found.evidence}
    # Half of each day measured, every day: 50%, also too little.
    half = measured_history(0.8, cpu=(0.05, 0.1), memory=(0.08, 0.15), seconds=DAY_SECONDS / 2)
    assert run(half).basis == "requests" and run(half).measured_coverage == pytest.approx(0.5)
    # 90% of each day: enough.
    most = measured_history(0.8, cpu=(0.05, 0.1), memory=(0.08, 0.15), seconds=0.9 * DAY_SECONDS)
    assert run(most).basis == "measured" and run(most).target.name == "small"


def test_the_measured_average_is_over_the_measured_time_awake():
    # Asleep 12 h a day; measured over 20 h of each day; 40% while awake: not under-used.
    days = measured_history(0.1, cpu=(0.4, 0.5), memory=(0.4, 0.5), seconds=20 * 3600, asleep=12 * 3600)
    found = run(days, policy=replace(POLICY, min_coverage=0.5))
    cpu = next(e for e in found.evidence if e.resource == "measured.cpu")
    assert cpu.average_share == pytest.approx(0.4) and found.target is None


def test_memory_used_near_the_memory_limits_quota_suggests_a_larger_tier():
    # Pods request 50%; the containers' working set reached 95% of medium's requests quota = 47.5% of its
    # limits quota: not near. At 1.9 × the requests quota (95% of limits.memory), on 2 days: near.
    days = measured_history(0.5, cpu=(0.1, 0.2), memory=(0.3, 0.95))
    assert run(days).target is None
    near = [measured(d, cpu=(0.1, 0.2), memory=(0.3, 1.9)) if i < 2 else d for i, d in enumerate(days)]
    found = run(near)
    assert (found.direction, found.target.name) == ("up", "large")
    memory = next(e for e in found.evidence if e.resource == "measured.memory")
    assert (memory.near_limit_days, memory.limit) == (2, 16 * GIB)
    assert "memory used (measured) peaked at 95% of its limits.memory quota (on 2 days)" in found.reason


def test_cpu_used_near_a_quota_is_not_a_limit_reached():
    days = measured_history(0.5, cpu=(0.3, 2.0), memory=(0.1, 0.2))
    found = run(days)
    assert next(e for e in found.evidence if e.resource == "measured.cpu").near_limit_days == 0
    assert found.direction != "up"


def test_the_fingerprint_covers_the_measured_history():
    days = measured_history(0.1, cpu=(0.05, 0.1), memory=(0.08, 0.15))
    first = run(days).fingerprint
    assert first and run(days).fingerprint == first
    changed = [*days[:-1], measured(days[-1], cpu=(0.06, 0.1), memory=(0.08, 0.15))]
    assert run(changed).fingerprint != first and run(changed).target == run(days).target


def test_a_large_tenant_measured_small_moves_only_as_far_as_its_object_counts_allow():
    days = measured_history(0.02, cpu=(0.01, 0.02), memory=(0.01, 0.02), current=LARGE)
    found = run(days, current=LARGE)
    assert found.basis == "measured" and found.target == SMALL
    assert TODAY - dt.timedelta(days=14) == found.window_start


def test_a_requests_only_suggestion_keeps_the_fingerprint_it_had_before_measured_usage():
    # The value the rule gave this history before measured usage existed: a suggestion shown then is accepted now.
    found = run(history(MEDIUM, average=shares(0.12), peak=shares(0.20)))
    assert found.fingerprint == "f7f6da48507bde985fb0c8d5f528352c1953e97cee07250f493b4038e1eaec00"
