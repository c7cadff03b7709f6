"""The right-sizing rule (tenants.rightsizing) with known histories: no database, tiers as the seed defines them."""

from __future__ import annotations

import datetime as dt
import importlib
from typing import Any

import pytest

from tenants.models import Tier
from tenants.rightsizing import DAY_SECONDS, TIER_QUOTA, Day, Policy, assess, is_downgrade, is_smaller, tier_quota

_SEED = {t["name"]: t for t in importlib.import_module("tenants.migrations.0002_seed_tiers").TIERS}
TODAY = dt.date(2026, 11, 23)
POLICY = Policy(days=14, under_share=0.3, min_coverage=0.8, near_share=0.9, near_days=2, headroom=1.25)


def tier(name: str, **changes) -> Tier:
    return Tier(**{**_SEED[name], **changes})


SMALL, MEDIUM, LARGE = tier("small"), tier("medium"), tier("large")
OFFERED = [SMALL, MEDIUM, LARGE]


def day(
    on: dt.date, quota: Tier, *, average: dict[str, float], peak: dict[str, float], seconds=DAY_SECONDS, asleep=0.0
) -> Day:
    """A day on ``quota``'s tier with each resource's average and peak as a share of its quota (others at 0)."""
    hard = tier_quota(quota)
    usage = {
        r: {
            "used_seconds": average.get(r, 0.0) * hard[r] * (seconds - asleep),
            "max": peak.get(r, 0.0) * hard[r],
            "hard": hard[r],
        }
        for r in TIER_QUOTA
    }
    usage["services.nodeports"] = {"used_seconds": 0.0, "max": 0.0, "hard": 0.0}
    return Day(day=on, seconds=seconds, samples=int(seconds // 300), usage=usage, asleep_seconds=asleep)


def history(quota: Tier, n: int = 14, **kwargs) -> list[Day]:
    return [day(TODAY - dt.timedelta(days=i), quota, **kwargs) for i in range(1, n + 1)]


CPU = ("requests.cpu", "limits.cpu")
MEM = ("requests.memory", "limits.memory")


def shares(value: float, resources=CPU + MEM) -> dict[str, float]:
    return dict.fromkeys(resources, value)


def run(days, current=MEDIUM, offered=OFFERED, policy=POLICY):
    return assess(subject="t-1", days=days, current=current, offered=offered, policy=policy, today=TODAY)


def test_an_under_used_medium_tenant_is_offered_small_with_its_evidence():
    found = run(history(MEDIUM, average=shares(0.12), peak=shares(0.20)))
    assert (found.direction, found.target.name) == ("down", "small")
    assert (found.window_start, found.window_end, found.coverage) == (dt.date(2026, 11, 9), dt.date(2026, 11, 22), 1.0)
    cpu = next(e for e in found.evidence if e.resource == "requests.cpu")
    assert cpu.average == pytest.approx(0.48) and cpu.peak == pytest.approx(0.8) and cpu.quota == 4.0
    assert (round(cpu.average_share, 4), round(cpu.peak_share, 4), cpu.near_limit_days) == (0.12, 0.2, 0)
    assert "CPU requested 12% on average, peak 20%" in found.reason
    assert "Small holds every peak with 25% headroom" in found.reason
    assert len(found.fingerprint) == 64


def test_the_smallest_tier_that_holds_the_peaks_with_headroom_is_chosen():
    # On large, a peak of 20% of the CPU limit is 6.4 cores: small (2) cannot hold it, medium (8) can with 25%.
    found = run(history(LARGE, average=shares(0.05), peak=shares(0.2)), current=LARGE)
    assert (found.direction, found.target.name) == ("down", "medium")
    # 25% of 32 cores is 8 cores: times 1.25 it no longer fits into medium's 8, and nothing smaller than large fits.
    found = run(history(LARGE, average=shares(0.05), peak=shares(0.25)), current=LARGE)
    assert found.target is None and "no smaller tier" in found.notes[0]


def test_one_resource_at_or_over_the_share_keeps_the_tier():
    averages = {**shares(0.1), "limits.memory": 0.3}
    found = run(history(MEDIUM, average=averages, peak=shares(0.2)))
    assert found.target is None and found.notes == ()


def test_storage_counts_as_a_resource_too():
    found = run(history(MEDIUM, average={**shares(0.1), "requests.storage": 0.5}, peak=shares(0.2)))
    assert found.target is None


def test_an_object_count_that_would_not_fit_keeps_the_tier():
    # 30 pods (30% of medium's 100) with headroom do not fit small's 20.
    found = run(history(MEDIUM, average=shares(0.1), peak={**shares(0.2), "pods": 0.3}))
    assert found.target is None and "no smaller tier" in found.notes[0]


def test_no_data_and_too_little_data_give_no_suggestion():
    assert run([]).target is None and "No usage recorded" in run([]).notes[0]
    # Eleven covered days of fourteen is 79%: under the 80% minimum.
    found = run(history(MEDIUM, n=11, average=shares(0.05), peak=shares(0.1)))
    assert found.target is None and "cover 79%" in found.notes[0]
    found = run(history(MEDIUM, n=12, average=shares(0.05), peak=shares(0.1)))
    assert found.target.name == "small"


def test_days_outside_the_window_and_today_are_not_read():
    old = [day(TODAY - dt.timedelta(days=15 + i), MEDIUM, average=shares(0.05), peak=shares(0.1)) for i in range(14)]
    today = [day(TODAY, MEDIUM, average=shares(0.05), peak=shares(0.1))]
    found = run(old + today)
    assert found.target is None and found.covered_seconds == 0


def test_peaks_near_the_quota_on_enough_days_suggest_the_next_tier_up():
    days = history(MEDIUM, average=shares(0.5), peak=shares(0.6))
    days[0] = day(days[0].day, MEDIUM, average=shares(0.5), peak={**shares(0.6), "limits.cpu": 0.97})
    assert run(days).target is None  # one day near the limit is not enough
    days[3] = day(days[3].day, MEDIUM, average=shares(0.5), peak={**shares(0.6), "limits.cpu": 0.9})
    found = run(days)
    assert (found.direction, found.target.name) == ("up", "large")
    assert "CPU limit peaked at 97% of its quota (on 2 days)" in found.reason
    assert "Large (dedicated nodes) is the next tier up" in found.reason


def test_near_the_limit_needs_no_minimum_coverage_and_wins_over_under_use():
    days = history(SMALL, n=2, average=shares(0.1), peak={"pods": 0.95})
    found = run(days, current=SMALL)
    assert (found.direction, found.target.name) == ("up", "medium")


def test_near_the_limit_of_the_largest_tier_has_nowhere_to_go():
    found = run(history(LARGE, average=shares(0.5), peak=shares(0.95)), current=LARGE)
    assert found.target is None and "no larger tier is offered" in found.notes[0]


def test_only_active_offered_tiers_are_suggested():
    found = run(history(MEDIUM, average=shares(0.1), peak=shares(0.2)), offered=[MEDIUM, LARGE])
    assert found.target is None
    retired = tier("small", is_active=False)
    assert run(history(MEDIUM, average=shares(0.1), peak=shares(0.2)), offered=[retired, MEDIUM]).target is None


def test_time_asleep_is_left_out_of_the_average():
    # Asleep 16 h a day at 0; awake at 40% of the quota: under-used over the whole day (13%), not while awake.
    days = history(MEDIUM, average=shares(0.4), peak=shares(0.5), asleep=16 * 3600)
    found = run(days)
    assert found.target is None
    cpu = next(e for e in found.evidence if e.resource == "requests.cpu")
    assert cpu.average_share == pytest.approx(0.4)


def test_the_fingerprint_changes_with_the_history_and_the_tier():
    days = history(MEDIUM, average=shares(0.1), peak=shares(0.2))
    first = run(days).fingerprint
    assert run(days).fingerprint == first
    changed = [*days[:-1], day(days[-1].day, MEDIUM, average=shares(0.11), peak=shares(0.2))]
    assert run(changed).fingerprint != first
    bigger = tier("medium", cpu_limit_millis=9000)
    assert run(days, current=bigger, offered=[SMALL, bigger, LARGE]).fingerprint != first
    assert (
        assess(subject="t-2", days=days, current=MEDIUM, offered=OFFERED, policy=POLICY, today=TODAY).fingerprint
        != first
    )


def test_a_downgrade_is_smaller_in_quota_and_grants_nothing_more():
    assert is_smaller(SMALL, MEDIUM) and is_downgrade(SMALL, MEDIUM) and is_downgrade(MEDIUM, LARGE)
    assert not is_smaller(MEDIUM, MEDIUM) and not is_downgrade(LARGE, MEDIUM)
    assert not is_smaller(tier("small", max_pods=500), MEDIUM)  # more of one quota: not smaller
    loosenings: list[dict[str, Any]] = [
        {"pod_security_level": "baseline"},
        {"network_profile": "open-egress"},
        {"allow_external_ips": True},
        {"allowed_priority_classes": ["system-cluster-critical"]},
        {"node_selector": {"berth.dev/pool": "gpu"}},
        {"tolerations": [{"key": "gpu", "operator": "Exists"}]},
        {"max_credential_lifetime_seconds": 24 * 3600},
    ]
    for looser in loosenings:
        assert not is_downgrade(tier("small", **looser), MEDIUM), looser
    restricted = tier("medium", allowed_storage_classes=["standard"])
    assert not is_downgrade(SMALL, restricted)  # small allows any storage class
    assert is_downgrade(tier("small", allowed_storage_classes=["standard"]), restricted)
