"""The usage history: each quota reading the worker takes, folded into one row per tenant and UTC day.

A reading covers the time since the tenant's previous reading (``Tenant.usage_sampled_at``), at most
BERTH_USAGE_MAX_GAP_SECONDS: a longer silence (workers down, cluster unreachable) is unknown time, not usage.
The covered interval is split at midnight (UTC), so each day and month gets exactly its share. Per day and
resource the row keeps Σ used × seconds, the highest reading and the quota at the last reading
(``TenantUsageDay``): a year of one tenant is 365 small rows, whatever the reconcile interval.

A reading may carry a **measured** part (``{"measured": {"cpu": cores, "memory": bytes}}``): what the tenant's
containers used, by its cluster's Prometheus (worker/measured_usage.py), beside what its pods request. It is folded
as two more resources, ``measured.cpu`` and ``measured.memory``, whose ``hard`` is the matching requests quota (so
shares read "used of what the tier reserves"), ``measured.memory`` also keeping ``limit``, the ``limits.memory``
quota; and each keeps ``seconds``, the time measured readings covered that day. A reading without a measured part
(no Prometheus, or one that did not answer) adds nothing to them: the day's ``seconds`` minus theirs is time known
only by requests.

Readings are observations, not state changes: not audited.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import transaction

from tenants.models import Tenant, TenantUsageDay
from tenants.quantities import parse_quantity

Reading = Mapping[str, Any]  # {"hard": {resource: quantity}, "used": {resource: quantity}, "measured"?: {...}}
# Measured resources, each with the requests quota it is a share of.
MEASURED = {"measured.cpu": ("cpu", "requests.cpu"), "measured.memory": ("memory", "requests.memory")}
MEASURED_LIMIT = {"measured.memory": "limits.memory"}  # near this quota, containers are near being OOM-killed


def covered_by_day(start: dt.datetime, end: dt.datetime) -> list[tuple[dt.date, float]]:
    """The interval [start, end) as (UTC day, seconds of it in that day), oldest first; empty when end ≤ start."""
    parts: list[tuple[dt.date, float]] = []
    start, end = start.astimezone(dt.UTC), end.astimezone(dt.UTC)
    while start < end:
        midnight = dt.datetime.combine(start.date() + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
        stop = min(end, midnight)
        parts.append((start.date(), (stop - start).total_seconds()))
        start = stop
    return parts


def fold(usage: dict[str, dict[str, float]], reading: Reading, seconds: float) -> dict[str, dict[str, float]]:
    """``usage`` with one reading that held for ``seconds`` added (pure; the model's ``usage`` shape).

    Every resource with a readable quota is kept; one missing from ``used`` counts as 0 (nothing uses it).
    """
    hard = reading.get("hard") or {}
    used = reading.get("used") or {}
    folded = {name: dict(entry) for name, entry in usage.items()}
    for resource, quantity in hard.items():
        limit = parse_quantity(quantity)
        if limit is None:
            continue
        value = float(parse_quantity(used.get(resource, "0")) or 0)
        entry = folded.setdefault(resource, {"used_seconds": 0.0, "max": 0.0, "hard": 0.0})
        entry["used_seconds"] = float(entry["used_seconds"]) + value * seconds
        entry["max"] = max(float(entry["max"]), value)
        entry["hard"] = float(limit)
    _fold_measured(folded, reading, seconds)
    return folded


def measured_value(value: object) -> float | None:
    """One measured figure as a number: finite and not negative, else None (not evidence)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def _fold_measured(folded: dict[str, dict[str, float]], reading: Reading, seconds: float) -> None:
    measured = reading.get("measured")
    if not isinstance(measured, Mapping):
        return
    hard = reading.get("hard") or {}
    for resource, (key, quota) in MEASURED.items():
        value = measured_value(measured.get(key))
        if value is None:
            continue
        entry = folded.setdefault(resource, {"used_seconds": 0.0, "max": 0.0, "hard": 0.0, "seconds": 0.0})
        entry["used_seconds"] = float(entry["used_seconds"]) + value * seconds
        entry["max"] = max(float(entry["max"]), value)
        entry["seconds"] = float(entry.get("seconds", 0.0)) + seconds
        entry["hard"] = float(parse_quantity(hard.get(quota, "0")) or 0)
        if resource in MEASURED_LIMIT:
            entry["limit"] = float(parse_quantity(hard.get(MEASURED_LIMIT[resource], "0")) or 0)


def usage_record_readings(*, readings: Mapping[str, Reading], at: dt.datetime) -> int:
    """Fold one reading per tenant (by id), taken at ``at``, into the history; how many tenants were recorded.

    The tenants' rows are locked in id order; one another transaction holds is skipped this time (its next
    reading covers the gap, up to the limit).
    """
    readings = {pk: reading for pk, reading in readings.items() if (reading or {}).get("hard")}
    if not readings:
        return 0  # nothing enforced, nothing to measure against
    max_gap = float(settings.BERTH_USAGE_MAX_GAP_SECONDS)
    with transaction.atomic():
        tenants = list(
            Tenant.objects.select_for_update(skip_locked=True, of=("self",), no_key=True)
            .filter(pk__in=list(readings))
            .only("pk", "team_id", "tier_id", "usage_sampled_at")
            .order_by("pk")
        )
        if not tenants:
            return 0
        parts_of: dict[Any, list[tuple[dt.date, float]]] = {}
        # A tenant's first reading (or one not after the last) covers no time: it opens the day, records the peak.
        nothing_covered = [(at.astimezone(dt.UTC).date(), 0.0)]
        for tenant in tenants:
            since = tenant.usage_sampled_at
            start = at if since is None else max(since, at - dt.timedelta(seconds=max_gap))
            parts_of[tenant.pk] = covered_by_day(start, at) or nothing_covered
        wanted = {day for parts in parts_of.values() for day, _ in parts}
        existing = {
            (row.tenant_id, row.day): row for row in TenantUsageDay.objects.filter(tenant__in=tenants, day__in=wanted)
        }
        new: dict[tuple[Any, dt.date], TenantUsageDay] = {}
        for tenant in tenants:
            reading = readings[str(tenant.pk)]
            for day, seconds in parts_of[tenant.pk]:
                key = (tenant.pk, day)
                row = existing.get(key) or new.get(key)
                if row is None:
                    row = new[key] = TenantUsageDay(tenant_id=tenant.pk, day=day)
                row.usage = fold(row.usage, reading, seconds)
                row.seconds += seconds
                row.samples += 1
                row.team_id, row.tier_id = tenant.team_id, tenant.tier_id
        # One upsert for new and existing rows alike (the tenants' locks keep anyone else from the same rows):
        # bulk_update would send a CASE per field and row, several times slower for a pass over many tenants.
        TenantUsageDay.objects.bulk_create(
            [*existing.values(), *new.values()],
            update_conflicts=True,
            unique_fields=["tenant", "day"],
            update_fields=["usage", "seconds", "samples", "team", "tier"],
            batch_size=500,
        )
        Tenant.objects.filter(pk__in=[tenant.pk for tenant in tenants]).update(usage_sampled_at=at)
    return len(tenants)


__all__ = ["MEASURED", "MEASURED_LIMIT", "covered_by_day", "fold", "measured_value", "usage_record_readings"]
