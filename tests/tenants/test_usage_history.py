"""The usage history (tenants.services.usage): readings folded into one row per tenant and UTC day."""

from __future__ import annotations

import datetime as dt

import pytest

from tenants import services
from tenants.models import Tenant, TenantUsageDay
from tenants.services.usage import covered_by_day, fold

T0 = dt.datetime(2026, 10, 31, 23, 50, tzinfo=dt.UTC)


def reading(cpu: str, memory: str = "0", *, hard_cpu: str = "4", hard_memory: str = "8Gi") -> dict:
    return {
        "hard": {"requests.cpu": hard_cpu, "requests.memory": hard_memory},
        "used": {"requests.cpu": cpu, "requests.memory": memory},
    }


def test_an_interval_is_split_at_midnight_utc():
    assert covered_by_day(T0, T0 + dt.timedelta(minutes=30)) == [
        (dt.date(2026, 10, 31), 600.0),
        (dt.date(2026, 11, 1), 1200.0),
    ]
    assert covered_by_day(T0, T0) == []
    # Another zone's time is the same instant.
    cet = dt.timezone(dt.timedelta(hours=1))
    assert covered_by_day(T0.astimezone(cet), (T0 + dt.timedelta(minutes=5)).astimezone(cet)) == [
        (dt.date(2026, 10, 31), 300.0)
    ]


def test_fold_adds_used_times_seconds_keeps_the_peak_and_the_last_quota():
    usage = fold({}, reading("500m", "1Gi"), 60)
    usage = fold(usage, reading("2", "512Mi", hard_cpu="8"), 30)
    assert usage["requests.cpu"] == {"used_seconds": 0.5 * 60 + 2 * 30, "max": 2.0, "hard": 8.0}
    assert usage["requests.memory"] == {"used_seconds": 2**30 * 60 + 2**29 * 30, "max": 2.0**30, "hard": 2.0**33}


def test_fold_counts_a_resource_missing_from_used_as_zero_and_skips_an_unreadable_quota():
    usage = fold({}, {"hard": {"pods": "10", "limits.cpu": "lots"}, "used": {}}, 100)
    assert usage == {"pods": {"used_seconds": 0.0, "max": 0.0, "hard": 10.0}}


@pytest.fixture
def tenant(make_tenant, team_a, alice) -> Tenant:
    return make_tenant(team=team_a, created_by=alice, name="hist")


def record(tenant: Tenant, at: dt.datetime, value: dict) -> None:
    services.usage_record_readings(readings={str(tenant.pk): value}, at=at)


def test_each_reading_covers_the_time_since_the_previous_one_split_by_day(tenant, settings):
    settings.BERTH_USAGE_MAX_GAP_SECONDS = 3600
    record(tenant, T0, reading("1"))  # the first reading covers no time
    record(tenant, T0 + dt.timedelta(minutes=5), reading("1"))
    record(tenant, T0 + dt.timedelta(minutes=20), reading("3"))  # 5 minutes before midnight, 10 after
    october, november = TenantUsageDay.objects.filter(tenant=tenant).order_by("day")
    assert (october.day, october.seconds, october.samples) == (dt.date(2026, 10, 31), 600.0, 3)
    assert october.usage["requests.cpu"]["used_seconds"] == 1 * 300 + 3 * 300
    assert october.average("requests.cpu") == 2.0
    assert (november.day, november.seconds, november.samples) == (dt.date(2026, 11, 1), 600.0, 1)
    assert november.usage["requests.cpu"] == {"used_seconds": 1800.0, "max": 3.0, "hard": 4.0}
    assert (november.team_id, november.tier_id) == (tenant.team_id, tenant.tier_id)


def test_a_long_silence_is_unknown_time_not_usage(tenant, settings):
    settings.BERTH_USAGE_MAX_GAP_SECONDS = 600
    start = dt.datetime(2026, 11, 2, 8, tzinfo=dt.UTC)
    record(tenant, start, reading("1"))
    record(tenant, start + dt.timedelta(hours=5), reading("2"))
    day = TenantUsageDay.objects.get(tenant=tenant)
    assert day.seconds == 600.0 and day.usage["requests.cpu"]["used_seconds"] == 1200.0


def test_a_reading_without_an_enforced_quota_is_not_history(tenant):
    record(tenant, T0, {"hard": {}, "used": {"requests.cpu": "1"}})
    assert not TenantUsageDay.objects.exists()
    assert Tenant.objects.get(pk=tenant.pk).usage_sampled_at is None


def test_the_portal_records_history_with_every_usage_it_stores(tenant):
    services.tenant_record_usage(tenant=tenant, usage=reading("1"))
    services.tenants_record_usage(usages={}, readings={str(tenant.pk): reading("2")})
    day = TenantUsageDay.objects.get(tenant=tenant)
    assert day.samples == 2 and day.usage["requests.cpu"]["max"] == 2.0
