"""Showback: what each tenant cost in a month, from its cluster's prices. Pure functions, no database.

Two figures per tenant, team and month, side by side:

- **Allocation-based**: what the tier reserves, whether used or not: the tier's ``requests.cpu`` (cores),
  ``requests.memory`` (GiB) and storage (GiB) over the time the tenant was live. Live means from the first
  time it became ready until it was deleted (or now): a tenant that never became ready cost nothing; one that
  failed or is being decommissioned still holds its namespace and quota, so it still counts. A tier change
  counts from the moment it was approved (to the microsecond). CPU and memory are not charged while the tenant
  sleeps (its ``TenantSleepPeriod`` rows: the workloads are scaled to zero); storage is, since the volumes stay.
- **Usage-based**: what the tenant's usage history recorded (``TenantUsageDay``), per UTC day. CPU and memory
  are what its containers used (``measured.cpu`` core-seconds, ``measured.memory`` working-set byte-seconds, by
  its cluster's Prometheus) for the part of the day that was measured, and what its pods requested
  (``requests.cpu``, ``requests.memory``) for the rest of the day's readings: the day's requested Σ scaled by the
  unmeasured share of its covered seconds. Storage is always ``requests.storage``. Each line says which evidence
  its days had (``usage_basis``): ``measured`` (every day with readings fully measured), ``requests`` (none
  measured), ``mixed``, or ``none`` (no readings). A sleeping tenant's readings fall to about zero by themselves.

Units: CPU in core-hours, memory in GiB-hours (GiB = 2³⁰ bytes, 1024 MiB), storage in GiB-months, a month
being 730 hours (8760 / 12) whatever the calendar says. Months and days are UTC.

Prices (``ClusterPrice``) take effect at 00:00 UTC of their day, so every UTC day has one price; time
before a cluster's first price is not priced and not shown. Each day goes to the team that held the tenant
that day: the team of that day's usage row (the team at the day's last reading); a day without a row takes
the team of the latest row before it, else of the first row after it, else the tenant's team now. A transfer
therefore splits a month by whole UTC days.

Arithmetic is ``Decimal`` throughout (never float). Each line's costs are rounded once, half up, to the cent
(``COST_PLACES``) and its quantities to ``QUANTITY_PLACES``; totals are sums of the rounded lines, so a CSV
adds up to the totals it comes with.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Context, Decimal, localcontext

HOURS_PER_MONTH = 730  # storage is priced per GiB-month: 8760 hours / 12
SECONDS_PER_HOUR = Decimal(3600)
SECONDS_PER_MONTH = Decimal(HOURS_PER_MONTH * 3600)
GIB = Decimal(2**30)
COST_PLACES = Decimal("0.01")
QUANTITY_PLACES = Decimal("0.0001")
HOUR_PLACES = Decimal("0.01")
_PRECISION = Context(prec=50)
# Months from 2000-01 to 2999-12: every month the pattern allows is answered (one not begun has no costs yet).
_MONTH = re.compile(r"(2[0-9]{3})-(0[1-9]|1[0-2])")
MONTH_PATTERN = r"^2[0-9]{3}-(0[1-9]|1[0-2])$"


# What a line's usage-based CPU and memory come from.
MEASURED, REQUESTS, MIXED, NONE = "measured", "requests", "mixed", "none"
USAGE_BASES = (MEASURED, REQUESTS, MIXED, NONE)


def usage_basis(day_bases: Iterable[str]) -> str:
    """A line's basis from its days' (each measured, requests or mixed): none without any."""
    found = set(day_bases)
    if not found:
        return NONE
    return found.pop() if len(found) == 1 else MIXED


class MonthError(ValueError):
    """A month parameter that is not a month."""


def parse_month(value: str) -> dt.date:
    """``YYYY-MM`` (2000-01 to 2999-12) as the first day of that month; MonthError when it is not one."""
    match = _MONTH.fullmatch(value or "")
    if match is None:
        raise MonthError("A month as YYYY-MM from 2000-01 to 2999-12, e.g. 2026-03.")
    return dt.date(int(match.group(1)), int(match.group(2)), 1)


def month_label(month: dt.date) -> str:
    return f"{month.year:04d}-{month.month:02d}"


def next_month(month: dt.date) -> dt.date:
    return dt.date(month.year + month.month // 12, month.month % 12 + 1, 1)


def previous_month(month: dt.date) -> dt.date:
    return dt.date(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1)


def midnight(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)


def seconds(delta: dt.timedelta) -> Decimal:
    """A timedelta in seconds, exactly (to the microsecond)."""
    return Decimal(delta.days * 86400 + delta.seconds) + Decimal(delta.microseconds) / Decimal(1_000_000)


# --- Inputs -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prices:
    currency: str
    cpu_core_hour: Decimal
    memory_gib_hour: Decimal
    storage_gib_month: Decimal


@dataclass(frozen=True)
class Quota:
    """What a tier reserves: ``requests.cpu`` in millicores, ``requests.memory`` in MiB, storage in GiB."""

    cpu_millis: int
    memory_mib: int
    storage_gib: int


@dataclass(frozen=True)
class UsageDay:
    """One ``TenantUsageDay`` as showback reads it: Σ used × seconds in base units."""

    team: int
    cpu_core_seconds: Decimal = Decimal(0)  # requested
    memory_byte_seconds: Decimal = Decimal(0)  # requested
    storage_byte_seconds: Decimal = Decimal(0)
    seconds: Decimal = Decimal(0)  # what the day's readings cover
    measured_seconds: Decimal = Decimal(0)  # of those, what measured readings cover (CPU and memory both)
    measured_cpu_core_seconds: Decimal = Decimal(0)
    measured_memory_byte_seconds: Decimal = Decimal(0)

    def cpu_and_memory(self) -> tuple[Decimal, Decimal, str]:
        """The day's CPU core-seconds and memory byte-seconds, and their basis (tenants.costs.showback's rule)."""
        if self.measured_seconds <= 0 or self.seconds <= 0:
            return self.cpu_core_seconds, self.memory_byte_seconds, REQUESTS
        unmeasured = max(self.seconds - self.measured_seconds, Decimal(0)) / self.seconds
        return (
            self.measured_cpu_core_seconds + self.cpu_core_seconds * unmeasured,
            self.measured_memory_byte_seconds + self.memory_byte_seconds * unmeasured,
            MEASURED if unmeasured == 0 else MIXED,
        )


@dataclass(frozen=True)
class TenantHistory:
    """Everything that decides one tenant's cost.

    ``tiers`` are (from when, quota) in time order; the first holds from the beginning. ``sleeps`` are
    (start, end or None while asleep). ``prices`` are (effective day, prices) of the tenant's cluster, any
    order. ``days`` are the tenant's usage rows by UTC day over some period; ``team_before`` and ``team_after``
    are the teams of its latest row before that period and of its earliest row after it (None if none), so a
    day's team never depends on which period was loaded; ``team`` is its team now.
    """

    tenant: object
    team: int
    live_from: dt.datetime | None
    live_until: dt.datetime | None
    tiers: Sequence[tuple[dt.datetime | None, Quota]]
    sleeps: Sequence[tuple[dt.datetime, dt.datetime | None]] = ()
    prices: Sequence[tuple[dt.date, Prices]] = ()
    days: Mapping[dt.date, UsageDay] = field(default_factory=dict)
    team_before: int | None = None
    team_after: int | None = None


# --- Outputs ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    """Quantities and what they cost, in one currency."""

    cpu_core_hours: Decimal = Decimal(0)
    memory_gib_hours: Decimal = Decimal(0)
    storage_gib_months: Decimal = Decimal(0)
    cpu: Decimal = Decimal(0)
    memory: Decimal = Decimal(0)
    storage: Decimal = Decimal(0)

    @property
    def total(self) -> Decimal:
        return self.cpu + self.memory + self.storage

    def __add__(self, other: Figures) -> Figures:
        return Figures(
            self.cpu_core_hours + other.cpu_core_hours,
            self.memory_gib_hours + other.memory_gib_hours,
            self.storage_gib_months + other.storage_gib_months,
            self.cpu + other.cpu,
            self.memory + other.memory,
            self.storage + other.storage,
        )

    def rounded(self) -> Figures:
        def quantity(value: Decimal) -> Decimal:
            return value.quantize(QUANTITY_PLACES, ROUND_HALF_UP)

        def cost(value: Decimal) -> Decimal:
            return value.quantize(COST_PLACES, ROUND_HALF_UP)

        return Figures(
            cpu_core_hours=quantity(self.cpu_core_hours),
            memory_gib_hours=quantity(self.memory_gib_hours),
            storage_gib_months=quantity(self.storage_gib_months),
            cpu=cost(self.cpu),
            memory=cost(self.memory),
            storage=cost(self.storage),
        )


@dataclass(frozen=True)
class CostLine:
    """One tenant's month for one team, in one currency (normally one line per tenant and month)."""

    tenant: object
    team: int
    currency: str
    live_hours: Decimal
    asleep_hours: Decimal
    allocation: Figures
    usage: Figures
    usage_basis: str = NONE  # measured, requests, mixed or none: what usage's CPU and memory come from


@dataclass(frozen=True)
class Total:
    currency: str
    allocation: Figures
    usage: Figures


def totals(lines: Iterable[CostLine]) -> list[Total]:
    """The lines summed per currency (sorted by currency)."""
    sums: dict[str, tuple[Figures, Figures]] = {}
    for line in lines:
        allocation, usage = sums.get(line.currency, (Figures(), Figures()))
        sums[line.currency] = (allocation + line.allocation, usage + line.usage)
    return [Total(currency, *sums[currency]) for currency in sorted(sums)]


# --- The computation --------------------------------------------------------------------------------------------


Interval = tuple[dt.datetime, dt.datetime]


def _clip(interval: Interval, start: dt.datetime, end: dt.datetime) -> Interval | None:
    lo, hi = max(interval[0], start), min(interval[1], end)
    return (lo, hi) if lo < hi else None


def _overlap(interval: Interval, others: Iterable[Interval]) -> Decimal:
    """How long ``interval`` overlaps the union of ``others`` (which may overlap each other)."""
    pieces = sorted(p for p in (_clip(o, *interval) for o in others) if p is not None)
    total, reach = Decimal(0), interval[0]
    for lo, hi in pieces:
        lo = max(lo, reach)
        if lo < hi:
            total += seconds(hi - lo)
            reach = hi
    return total


def _tier_pieces(live: Interval, tiers: Sequence[tuple[dt.datetime | None, Quota]]) -> list[tuple[Interval, Quota]]:
    """``live`` split where the tier changed, each piece with the quota in effect."""
    pieces = []
    for i, (since, quota) in enumerate(tiers):
        until = tiers[i + 1][0] if i + 1 < len(tiers) else None
        piece = _clip(live, since or live[0], until or live[1])
        if piece is not None:
            pieces.append((piece, quota))
    return pieces


def _price_on(day: dt.date, prices: Sequence[tuple[dt.date, Prices]]) -> Prices | None:
    in_effect = [(since, p) for since, p in prices if since <= day]
    return max(in_effect, key=lambda item: item[0])[1] if in_effect else None


def _team_on(day: dt.date, history: TenantHistory) -> int:
    row = history.days.get(day)
    if row is not None:
        return row.team
    earlier = [d for d in history.days if d < day]
    if earlier:
        return history.days[max(earlier)].team
    if history.team_before is not None:
        return history.team_before
    later = [d for d in history.days if d > day]
    if later:
        return history.days[min(later)].team
    return history.team_after if history.team_after is not None else history.team


@dataclass
class _Sums:
    live: Decimal = Decimal(0)
    asleep: Decimal = Decimal(0)
    measured: bool = False
    allocation: Figures = Figures()
    usage: Figures = Figures()
    bases: set[str] = field(default_factory=set)


def _figures(cpu_core_s: Decimal, memory_gib_s: Decimal, storage_gib_s: Decimal, price: Prices) -> Figures:
    return Figures(
        cpu_core_hours=cpu_core_s / SECONDS_PER_HOUR,
        memory_gib_hours=memory_gib_s / SECONDS_PER_HOUR,
        storage_gib_months=storage_gib_s / SECONDS_PER_MONTH,
        cpu=cpu_core_s * price.cpu_core_hour / SECONDS_PER_HOUR,
        memory=memory_gib_s * price.memory_gib_hour / SECONDS_PER_HOUR,
        storage=storage_gib_s * price.storage_gib_month / SECONDS_PER_MONTH,
    )


def tenant_month(history: TenantHistory, *, month: dt.date, now: dt.datetime) -> list[CostLine]:
    """The tenant's cost lines for ``month`` (its first day) up to ``now``: one per team and currency."""
    with localcontext(_PRECISION):
        return _tenant_month(history, month=month, now=now)


def _tenant_month(history: TenantHistory, *, month: dt.date, now: dt.datetime) -> list[CostLine]:
    sums: dict[tuple[int, str], _Sums] = {}
    sleeps = [(start, end or now) for start, end in history.sleeps]
    live_until = min(history.live_until or now, now)
    day = month
    while day < next_month(month) and midnight(day) < now:
        price = _price_on(day, history.prices)
        if price is not None:
            bucket = sums.setdefault((_team_on(day, history), price.currency), _Sums())
            day_interval = (midnight(day), min(midnight(day + dt.timedelta(days=1)), now))
            live = _clip((history.live_from, live_until), *day_interval) if history.live_from else None
            for piece, quota in _tier_pieces(live, history.tiers) if live else []:
                length = seconds(piece[1] - piece[0])
                asleep = _overlap(piece, sleeps)
                awake = length - asleep
                bucket.live += length
                bucket.asleep += asleep
                bucket.allocation += _figures(
                    Decimal(quota.cpu_millis) / 1000 * awake,
                    Decimal(quota.memory_mib) / 1024 * awake,
                    Decimal(quota.storage_gib) * length,
                    price,
                )
            row = history.days.get(day)
            if row is not None:
                bucket.measured = True
                cpu, memory, basis = row.cpu_and_memory()
                bucket.bases.add(basis)
                bucket.usage += _figures(cpu, memory / GIB, row.storage_byte_seconds / GIB, price)
        day += dt.timedelta(days=1)
    return [
        CostLine(
            tenant=history.tenant,
            team=team,
            currency=currency,
            live_hours=(s.live / SECONDS_PER_HOUR).quantize(HOUR_PLACES, ROUND_HALF_UP),
            asleep_hours=(s.asleep / SECONDS_PER_HOUR).quantize(HOUR_PLACES, ROUND_HALF_UP),
            allocation=s.allocation.rounded(),
            usage=s.usage.rounded(),
            usage_basis=usage_basis(s.bases),
        )
        for (team, currency), s in sums.items()
        if s.live or s.measured
    ]
