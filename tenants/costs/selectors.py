"""Reads for showback: everything tenants.costs.showback computes from, loaded in a few queries for any number of
tenants, and the reports it makes of them for a team or a tenant."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import (
    Min,
    Q,
)

from tenants.costs import showback
from tenants.models import (
    AuditEvent,
    ClusterPrice,
    Team,
    Tenant,
    TenantRequest,
    TenantSleepPeriod,
    TenantStatus,
    TenantUsageDay,
    Tier,
)


@dataclass(frozen=True)
class CostRow:
    """One line of a cost report: a tenant's month for one team, in one currency."""

    tenant: Tenant
    team: Team
    line: showback.CostLine


@dataclass(frozen=True)
class CostReport:
    """One month's figures (``period_end`` is now for the month so far)."""

    month: dt.date
    period_start: dt.datetime
    period_end: dt.datetime
    rows: list[CostRow]
    totals: list[showback.Total]


def _quota(tier: Tier) -> showback.Quota:
    return showback.Quota(tier.cpu_request_millis, tier.memory_request_mib, tier.storage_gib)


def _usage_day(team_id: int, seconds: float, usage: dict) -> showback.UsageDay:
    def number(resource: str, key: str) -> Decimal:
        return Decimal(str((usage.get(resource) or {}).get(key) or 0))

    return showback.UsageDay(
        team_id,
        number("requests.cpu", "used_seconds"),
        number("requests.memory", "used_seconds"),
        number("requests.storage", "used_seconds"),
        seconds=Decimal(str(seconds or 0)),
        measured_seconds=min(number("measured.cpu", "seconds"), number("measured.memory", "seconds")),
        measured_cpu_core_seconds=number("measured.cpu", "used_seconds"),
        measured_memory_byte_seconds=number("measured.memory", "used_seconds"),
    )


def _tier_history(tenant: Tenant, approved: list[TenantRequest]) -> list[tuple[dt.datetime | None, showback.Quota]]:
    """The tenant's tiers over time: its create request's tier, then each approved tier change from its decision."""
    created = next((r for r in approved if r.action == TenantRequest.Action.CREATE), None)
    changes = [(r.decided_at, _quota(r.tier)) for r in approved if r.action == TenantRequest.Action.CHANGE_TIER]
    first = _quota(created.tier) if created else (changes[0][1] if changes else _quota(tenant.tier))
    return [(None, first), *changes]


def _histories(tenants: list[Tenant], start: dt.date, end: dt.date) -> list[showback.TenantHistory]:
    """Everything showback needs about ``tenants`` for the UTC days [start, end): eight queries in all."""
    ids = [t.pk for t in tenants]
    start_at, end_at = showback.midnight(start), showback.midnight(end)
    first_ready = dict(
        AuditEvent.objects.filter(object_type="tenant", action="tenant.ready", object_id__in=[str(i) for i in ids])
        .values("object_id")
        .annotate(first=Min("at"))
        .values_list("object_id", "first")
    )
    approved: dict[Any, list[TenantRequest]] = defaultdict(list)
    for req in (
        TenantRequest.objects.filter(
            tenant__in=ids,
            status=TenantRequest.Status.APPROVED,
            action__in=[TenantRequest.Action.CREATE, TenantRequest.Action.CHANGE_TIER],
        )
        .select_related("tier")
        .order_by("decided_at")
    ):
        approved[req.tenant_id].append(req)
    sleeps: dict[Any, list[tuple[dt.datetime, dt.datetime | None]]] = defaultdict(list)
    for tenant_id, started, ended in (
        TenantSleepPeriod.objects.filter(tenant__in=ids, started_at__lt=end_at)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start_at))
        .values_list("tenant_id", "started_at", "ended_at")
    ):
        sleeps[tenant_id].append((started, ended))
    days: dict[Any, dict[dt.date, showback.UsageDay]] = defaultdict(dict)
    for tenant_id, day, team_id, seconds, usage in TenantUsageDay.objects.filter(
        tenant__in=ids, day__gte=start, day__lt=end
    ).values_list("tenant_id", "day", "team_id", "seconds", "usage"):
        days[tenant_id][day] = _usage_day(team_id, seconds, usage)
    team_before = dict(
        TenantUsageDay.objects.filter(tenant__in=ids, day__lt=start)
        .order_by("tenant_id", "-day")
        .distinct("tenant_id")
        .values_list("tenant_id", "team_id")
    )
    team_after = dict(
        TenantUsageDay.objects.filter(tenant__in=ids, day__gte=end)
        .order_by("tenant_id", "day")
        .distinct("tenant_id")
        .values_list("tenant_id", "team_id")
    )
    prices: dict[int, list[tuple[dt.date, showback.Prices]]] = defaultdict(list)
    for price in ClusterPrice.objects.filter(cluster__in={t.cluster_id for t in tenants}, effective_from__lt=end):
        prices[price.cluster_id].append(
            (
                price.effective_from,
                showback.Prices(price.currency, price.cpu_core_hour, price.memory_gib_hour, price.storage_gib_month),
            )
        )
    return [
        showback.TenantHistory(
            tenant=t.pk,
            team=t.team_id,
            live_from=first_ready.get(str(t.pk), t.ready_at),
            live_until=t.status_changed_at if t.status == TenantStatus.DELETED else None,
            tiers=_tier_history(t, approved[t.pk]),
            sleeps=sleeps[t.pk],
            prices=prices[t.cluster_id],
            days=days[t.pk],
            team_before=team_before.get(t.pk),
            team_after=team_after.get(t.pk),
        )
        for t in tenants
    ]


def _reports(
    tenants: list[Tenant], *, months: list[dt.date], now: dt.datetime, team: Team | None = None
) -> dict[dt.date, CostReport]:
    """A report per month for ``tenants`` (only ``team``'s days when given), computed by tenants.costs.showback."""
    if not months:
        return {}
    histories = _histories(tenants, min(months), showback.next_month(max(months))) if tenants else []
    by_id: dict[Any, Tenant] = {t.pk: t for t in tenants}
    lines = {
        month: [
            line
            for history in histories
            for line in showback.tenant_month(history, month=month, now=now)
            if team is None or line.team == team.pk
        ]
        for month in months
    }
    teams = Team.objects.in_bulk({line.team for month_lines in lines.values() for line in month_lines})
    reports = {}
    for month, month_lines in lines.items():
        rows = sorted(
            (CostRow(by_id[line.tenant], teams[line.team], line) for line in month_lines),
            key=lambda row: (row.tenant.name, row.tenant.cluster.name, row.team.slug, row.line.currency),
        )
        reports[month] = CostReport(
            month=month,
            period_start=showback.midnight(month),
            # A month not begun yet has an empty period: it starts and ends at its first instant.
            period_end=max(showback.midnight(month), min(showback.midnight(showback.next_month(month)), now)),
            rows=rows,
            totals=showback.totals(month_lines),
        )
    return reports


def team_costs(*, team: Team, months: list[dt.date], now: dt.datetime) -> dict[dt.date, CostReport]:
    """``team``'s costs per month: every tenant it held on any of those days (the caller checked visibility)."""
    # Any tenant it holds or ever held: a day without a usage row may take its team from a row months away.
    tenants = list(Tenant.objects.filter(Q(team=team) | Q(usage_days__team=team)).distinct().select_related("cluster"))
    return _reports(tenants, months=months, now=now, team=team)


def tenant_costs(*, tenant: Tenant, months: list[dt.date], now: dt.datetime) -> dict[dt.date, CostReport]:
    """``tenant``'s costs per month, whichever teams held it (the caller checked visibility)."""
    return _reports([tenant], months=months, now=now)
