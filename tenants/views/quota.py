"""Quota usage as bars: Kubernetes quantities read back by the worker, turned into numbers people read."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from tenants import selectors, services
from tenants.models import Allocation, Team, TenantRequest
from tenants.quantities import parse_quantity

_LABELS = {
    "requests.cpu": "CPU requested",
    "limits.cpu": "CPU limit",
    "cpu": "CPU requested",
    "requests.memory": "Memory requested",
    "limits.memory": "Memory limit",
    "memory": "Memory requested",
    "requests.storage": "Storage",
    "requests.ephemeral-storage": "Ephemeral storage requested",
    "limits.ephemeral-storage": "Ephemeral storage limit",
    "pods": "Pods",
    "services": "Services",
    "services.loadbalancers": "Load balancers",
    "services.nodeports": "Node ports",
    "persistentvolumeclaims": "Volume claims",
    "configmaps": "ConfigMaps",
    "secrets": "Secrets",
    "count/deployments.apps": "Deployments",
    "count/jobs.batch": "Jobs",
}
_ORDER = list(_LABELS)


def _display(resource: str, amount: Decimal) -> str:
    if amount == 0:  # nothing, in the unit people think of the resource in ("0 CPU", not "0m CPU"; "0 GiB", not "0 B")
        return "0 CPU" if resource.endswith("cpu") else "0 GiB" if resource.endswith(("memory", "storage")) else "0"
    if resource.endswith("cpu"):
        return f"{amount.normalize():f}".rstrip(".") + " CPU" if amount >= 1 else f"{int(amount * 1000)}m CPU"
    if resource.endswith(("memory", "storage")):
        for unit, size in (("GiB", Decimal(2) ** 30), ("MiB", Decimal(2) ** 20), ("KiB", Decimal(2) ** 10)):
            if amount >= size:
                return f"{(amount / size).quantize(Decimal('0.1')).normalize():f} {unit}"
        return f"{int(amount)} B"
    return f"{int(amount)}"


@dataclass(frozen=True)
class UsageRow:
    resource: str
    label: str
    used: str
    total: str
    percent: int | None  # None when there is no limit to measure against (hard is 0 or unreadable)
    width_class: str
    tone: str  # "", "warn" (≥ 85 %) or "bad" (at or over the limit)
    remaining: str = ""

    @property
    def meter_value(self) -> int:
        return min(self.percent if self.percent is not None else (100 if self.tone == "bad" else 0), 100)


def _bucket(percent: float) -> int:
    """The nearest whole percent, so a CSS class (w-0 … w-100) can draw the bar without an inline style.

    Any use at all shows at least 1 %: an empty bar would read as "nothing used"; nothing used is an empty bar.
    """
    if percent <= 0:
        return 0
    return max(1, min(100, int(round(percent))))


def usage_rows(quota_usage: dict | None) -> list[UsageRow]:
    """One row per resource in ``{"hard": {...}, "used": {...}}``, in a stable, readable order."""
    hard = (quota_usage or {}).get("hard") or {}
    used = (quota_usage or {}).get("used") or {}
    rows = []
    for resource in sorted(hard, key=lambda r: (_ORDER.index(r) if r in _ORDER else len(_ORDER), r)):
        limit = parse_quantity(hard[resource])
        current = parse_quantity(used.get(resource, "0")) or Decimal(0)
        if limit is None:
            continue
        percent = float(current / limit * 100) if limit > 0 else None
        if percent is None:
            tone = "bad" if current > 0 else ""
        else:
            tone = "bad" if percent >= 100 else "warn" if percent >= 85 else ""
        rows.append(
            UsageRow(
                resource=resource,
                label=_LABELS.get(resource, resource),
                used=_display(resource, current),
                total=_display(resource, limit) if limit > 0 else "none allowed",
                percent=None if percent is None else int(round(percent)),
                width_class=f"w-{_bucket(percent if percent is not None else (100 if current > 0 else 0))}",
                tone=tone,
            )
        )
    return rows


@dataclass(frozen=True)
class BudgetRow:
    label: str
    used: str
    total: str
    remaining: str
    percent: int
    width_class: str
    tone: str
    # With a choice in view (a tier, a request): what the team would hold after it, and whether that is too much.
    after: str = ""
    after_over: bool = False

    @property
    def meter_value(self) -> int:
        return min(self.percent, 100)


def _budget_display(key: str, value: int) -> str:
    if key == "cpu_millis":
        return _display("cpu", Decimal(value) / 1000)
    if key == "memory_mib":
        return _display("memory", Decimal(value) * 2**20)
    if key == "storage_gib":
        return f"{value} GiB"
    return str(value)


_BUDGET_LABELS = {
    "cpu_millis": "CPU (limits)",
    "memory_mib": "Memory (limits)",
    "storage_gib": "Storage",
    "tenants": "Tenants",
}


def budget_rows(budget: dict, adding: Allocation | None = None) -> list[BudgetRow]:
    """``selectors.team_budget`` as bars: what the team's live tenants hold against its budget, and with ``adding``
    what it would hold after that choice ("6 CPU of 16 CPU")."""
    rows = []
    for key, label in _BUDGET_LABELS.items():
        entry = budget[key]
        percent = entry["used"] / entry["total"] * 100 if entry["total"] else (100.0 if entry["used"] else 0.0)
        after: int | None = entry["used"] + getattr(adding, key) if adding is not None else None
        # Adding nothing (a requested tenant already counts) leaves nothing new to say, only whether it fits.
        after_text = ""
        if after is not None and adding != Allocation():
            after_text = f"{_budget_display(key, after)} of {_budget_display(key, entry['total'])}"
        rows.append(
            BudgetRow(
                label=label,
                used=_budget_display(key, entry["used"]),
                total=_budget_display(key, entry["total"]),
                remaining=_budget_display(key, entry["remaining"]),
                percent=int(round(percent)),
                width_class=f"w-{_bucket(percent)}",
                tone="bad" if percent >= 100 else "warn" if percent >= 85 else "",
                after=after_text,
                after_over=after is not None and after > entry["total"],
            )
        )
    return rows


def budget_fits(rows: list[BudgetRow]) -> bool:
    return not any(row.after_over for row in rows)


def request_budget_effect(req: TenantRequest, *, team: Team | None = None) -> list[BudgetRow] | None:
    """The team's budget once ``req`` is approved (``team``: its team, annotated by ``selectors.with_allocation``
    when a page shows many); None when approving checks no budget."""
    adding = services.approval_adds(tenant_request=req, tenant=req.tenant)
    if adding is None:
        return None
    return budget_rows(selectors.team_budget(team=team or req.team), adding=adding)
