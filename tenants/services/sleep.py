"""Sleep and wake: a tenant's workloads scaled to zero while nobody needs them, and restored exactly after.

``Tenant.sleeping`` is what Berth wants; the worker (``worker.sleep``) makes the cluster match and reports back
through ``tenant_record_sleep_applied``. Every sleep and wake is audited (``tenant.slept`` / ``tenant.woke``, with
the reason), notified, and writes a ``TenantSleepPeriod`` (open while asleep, closed on wake).

Three triggers, all allowed only where the tenant's tier says ``sleep_allowed``:
- an owner or platform admin (page, API, CLI): reason ``owner``;
- the tenant's weekly schedule, read in the team's time zone (``schedule_window``): reason ``schedule``. The
  sweep acts at the start of each scheduled window, once: an owner who wakes the tenant inside a window keeps it
  awake until the next one; a tenant the schedule put to sleep wakes when the window ends;
- the tier's idle period (``Tier.sleep_after_idle_hours``), counted from the last activity Berth can see
  (``Tenant.last_activity_at``: a kubeconfig issued, a wake, a quota reading whose usage changed; else the time
  it became ready): reason ``idle``. An idle sleep lasts until someone wakes the tenant.

Only kinds whose backend can sleep may (``SLEEP_KINDS``); the others are refused with the reason
(docs/sleep.md).
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Greatest
from django.utils import timezone

from tenants import audit, dispatch, notifications
from tenants.audit import SYSTEM, AuditContext
from tenants.errors import InvalidTransition
from tenants.models import Allocation, SleepBudget, Tenant, TenantKind, TenantSleepPeriod, TenantStatus, User
from tenants.services.budget import budget_check
from tenants.services.permissions import require_owner_or_admin

Reason = TenantSleepPeriod.Reason
# Where a schedule can still matter: not once the tenant is leaving or gone.
SCHEDULABLE = frozenset(
    {TenantStatus.REQUESTED, TenantStatus.APPROVED, TenantStatus.PROVISIONING, TenantStatus.READY, TenantStatus.FAILED}
)

# Kinds whose backend can scale the tenant's workloads to zero and back; why the others cannot (docs/sleep.md).
SLEEP_KINDS = frozenset({TenantKind.NAMESPACE, TenantKind.VCLUSTER})
WHY_NOT: dict[str, str] = {
    TenantKind.VIRTUALCLUSTER: "VirtualCluster tenants cannot sleep: the archived project has no way to stop a "
    "tenant's control plane and keep its state.",
    TenantKind.HYPERSHIFT: "HyperShift tenants cannot sleep in Berth: scaling a hosted cluster's NodePool to zero "
    "is the way, and Berth does not manage its nodes' workloads.",
    TenantKind.KCP: "kcp workspaces run no pods, so there is nothing to put to sleep.",
}


def sleep_refusal(tenant: Tenant) -> str:
    """Why ``tenant`` cannot be put to sleep now, or '' when it can (its state aside)."""
    if not tenant.tier.sleep_allowed:
        return f"Tier {tenant.tier.name} does not allow sleeping."
    if tenant.kind not in SLEEP_KINDS:
        return WHY_NOT.get(tenant.kind, f"{tenant.kind} tenants cannot sleep.")
    if tenant.status != TenantStatus.READY:
        return f"Only ready tenants can sleep; this one is {tenant.status}."
    return ""


def sleep_state(tenant: Tenant) -> str:
    """'awake', 'falling_asleep' (wanted, not applied yet), 'asleep' or 'waking'."""
    if tenant.sleeping:
        return "asleep" if tenant.sleep_applied else "falling_asleep"
    return "awake" if tenant.sleep_applied else "waking"


def _snapshot(tenant: Tenant) -> dict[str, Any]:
    return {"sleeping": tenant.sleeping, "sleep_reason": tenant.sleep_reason or None}


@transaction.atomic
def tenant_sleep(
    *,
    tenant: Tenant,
    actor: User | None,
    reason: str = Reason.OWNER,
    ctx: AuditContext = SYSTEM,
    now: dt.datetime | None = None,
) -> Tenant:
    """Put ``tenant`` to sleep: its workloads are scaled to zero by the worker (after the commit).

    ``actor`` None is the system (schedule, idle); a person must be a team owner or a platform admin.
    """
    if actor is not None:
        require_owner_or_admin(actor=actor, team=tenant.team, doing="put a tenant to sleep")
    refusal = sleep_refusal(tenant)
    if refusal:
        raise InvalidTransition(refusal)
    now = now or timezone.now()
    before = _snapshot(tenant)
    updated = Tenant.objects.filter(pk=tenant.pk, status=TenantStatus.READY, sleeping=False).update(
        sleeping=True, sleep_applied=False, sleep_reason=reason, asleep_since=now, sleep_note=""
    )
    if updated != 1:
        raise InvalidTransition("The tenant is already asleep.")
    TenantSleepPeriod.objects.create(tenant=tenant, reason=reason, started_at=now)
    tenant.refresh_from_db()
    audit.record(
        actor=actor,
        action="tenant.slept",
        obj=tenant,
        team=tenant.team,
        before=before,
        after={**_snapshot(tenant), "reason": reason},
        ctx=ctx,
    )
    notifications.tenant_slept(tenant, reason=reason, actor=actor)
    dispatch.enqueue(dispatch.APPLY_SLEEP, str(tenant.pk))
    return tenant


@transaction.atomic
def tenant_wake(
    *,
    tenant: Tenant,
    actor: User | None,
    reason: str = Reason.OWNER,
    ctx: AuditContext = SYSTEM,
    now: dt.datetime | None = None,
) -> Tenant:
    """Wake ``tenant``: the worker restores each workload's replica count and CronJob suspension.

    Where the tier does not count a sleeping tenant's CPU and memory, waking takes them back from the team's
    budget, so it is refused (409) when they no longer fit.
    """
    if actor is not None:
        require_owner_or_admin(actor=actor, team=tenant.team, doing="wake a tenant")
    if not tenant.sleeping:
        raise InvalidTransition("The tenant is not asleep.")
    if tenant.tier.sleep_budget == SleepBudget.NONE:
        tier = tenant.tier
        try:
            budget_check(team=tenant.team, adding=Allocation(tier.cpu_limit_millis, tier.memory_limit_mib, 0, 0))
        except ValidationError as exc:
            raise InvalidTransition("Cannot wake: " + " ".join(exc.messages)) from None
    now = now or timezone.now()
    before = _snapshot(tenant)
    slept_reason = tenant.sleep_reason
    updated = Tenant.objects.filter(pk=tenant.pk, sleeping=True).update(
        sleeping=False, sleep_applied=False, sleep_reason="", asleep_since=None, sleep_note="", last_activity_at=now
    )
    if updated != 1:
        raise InvalidTransition("The tenant is not asleep.")
    _close_period(tenant=tenant, now=now)
    tenant.refresh_from_db()
    audit.record(
        actor=actor,
        action="tenant.woke",
        obj=tenant,
        team=tenant.team,
        before=before,
        after={**_snapshot(tenant), "reason": reason, "slept_for": slept_reason},
        ctx=ctx,
    )
    notifications.tenant_woke(tenant, reason=reason, actor=actor)
    if tenant.status == TenantStatus.READY:
        dispatch.enqueue(dispatch.APPLY_SLEEP, str(tenant.pk))
    return tenant


def _close_period(*, tenant: Tenant, now: dt.datetime) -> None:
    TenantSleepPeriod.objects.filter(tenant=tenant, ended_at__isnull=True).update(
        ended_at=Greatest(now, F("started_at"))
    )


def tenant_end_sleep_on_removal(*, tenant: Tenant) -> None:
    """A tenant that is deleted sleeps no more: its open period closes (showback stops counting it)."""
    _close_period(tenant=tenant, now=timezone.now())
    Tenant.objects.filter(pk=tenant.pk, sleeping=True).update(sleeping=False, sleep_applied=True, asleep_since=None)


@transaction.atomic
def tenant_set_sleep_schedule(
    *,
    tenant: Tenant,
    actor: User,
    start: dt.time | None,
    end: dt.time | None,
    weekends: bool,
    ctx: AuditContext = SYSTEM,
) -> Tenant:
    """Set (or with no start, end and weekends, clear) the tenant's weekly sleep schedule; owners and admins."""
    require_owner_or_admin(actor=actor, team=tenant.team, doing="change a tenant's sleep schedule")
    if tenant.status not in SCHEDULABLE:
        raise InvalidTransition(f"A tenant that is {tenant.status} has no sleep schedule to change.")
    if (start is None) != (end is None):
        missing = "end" if end is None else "start"
        raise ValidationError({missing: "Give both a start and an end for the nightly sleep, or neither."})
    if start is not None and start == end:
        raise ValidationError({"end": "The end must differ from the start."})  # a day has no such window
    if (start is not None or weekends) and not tenant.tier.sleep_allowed:
        raise InvalidTransition(f"Tier {tenant.tier.name} does not allow sleeping.")
    if (start is not None or weekends) and tenant.kind not in SLEEP_KINDS:
        raise InvalidTransition(WHY_NOT.get(tenant.kind, f"{tenant.kind} tenants cannot sleep."))
    before = schedule_json(tenant)
    Tenant.objects.filter(pk=tenant.pk).update(
        sleep_schedule_start=start, sleep_schedule_end=end, sleep_weekends=weekends
    )
    tenant.refresh_from_db()
    audit.record(
        actor=actor,
        action="tenant.sleep_schedule_set",
        obj=tenant,
        team=tenant.team,
        before=before,
        after=schedule_json(tenant),
        ctx=ctx,
    )
    return tenant


def schedule_json(tenant: Tenant) -> dict[str, Any]:
    start, end = tenant.sleep_schedule_start, tenant.sleep_schedule_end
    return {
        "start": start.strftime("%H:%M") if start else None,
        "end": end.strftime("%H:%M") if end else None,
        "weekends": tenant.sleep_weekends,
        "time_zone": tenant.team.time_zone,
    }


# --- The schedule ------------------------------------------------------------------------------------------------


def _asleep_at(local: dt.datetime, *, start: dt.time | None, end: dt.time | None, weekends: bool) -> bool:
    """Whether the schedule wants sleep at the wall-clock time ``local`` (naive, in the team's zone)."""
    if weekends and local.weekday() >= 5:
        return True
    if start is None or end is None:
        return False
    t = local.time()
    return start <= t < end if start < end else (t >= start or t < end)


def schedule_window(tenant: Tenant, *, now: dt.datetime) -> dt.datetime | None:
    """When the scheduled sleep window ``now`` lies in began (aware, UTC), or None when ``now`` is outside one.

    Read in the team's time zone on the wall clock: a window from 19:00 to 07:00 begins at 19:00 local time,
    whatever the offset that day. Nights next to a weekend make one window (Friday 19:00 to Monday 07:00).
    """
    start, end, weekends = tenant.sleep_schedule_start, tenant.sleep_schedule_end, tenant.sleep_weekends
    if start is None and not weekends:
        return None
    zone = zoneinfo.ZoneInfo(tenant.team.time_zone or "UTC")
    local = now.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)

    def asleep(at: dt.datetime) -> bool:
        return _asleep_at(at, start=start, end=end, weekends=weekends)

    if not asleep(local):
        return None
    # The window began at the latest boundary (a schedule start or end, or a midnight) at which sleep began.
    minute = dt.timedelta(minutes=1)
    candidates = []
    for days_back in range(4):
        day = local.date() - dt.timedelta(days=days_back)
        for at in (dt.time(0, 0), start, end):
            if at is not None:
                candidates.append(dt.datetime.combine(day, at))
    began = max(
        (c for c in candidates if c <= local and asleep(c) and not asleep(c - minute)),
        default=local,
    )
    return began.replace(tzinfo=zone).astimezone(dt.UTC)


# --- What the sweep does -----------------------------------------------------------------------------------------


def _sleepable() -> Any:
    """Ready tenants the sweep may act on: where the tier allows sleep, and (to be woken) any that sleep."""
    return Tenant.objects.select_related("tier", "team", "cluster").filter(
        Q(tier__sleep_allowed=True) | Q(sleeping=True), status=TenantStatus.READY, kind__in=list(SLEEP_KINDS)
    )


def tenants_sleep_sweep(*, now: dt.datetime | None = None) -> dict[str, int]:
    """Apply schedules and idle periods (the periodic sweep); how many tenants were put to sleep and woken."""
    now = now or timezone.now()
    counts = {"slept": 0, "woke": 0, "not_woken": 0}
    scheduled = _sleepable().filter(Q(sleep_schedule_start__isnull=False) | Q(sleep_weekends=True))
    for tenant in scheduled:
        window = schedule_window(tenant, now=now)
        try:
            if window is not None and tenant.schedule_window_at != window:
                Tenant.objects.filter(pk=tenant.pk).update(schedule_window_at=window)
                if not tenant.sleeping and tenant.tier.sleep_allowed:
                    tenant_sleep(tenant=tenant, actor=None, reason=Reason.SCHEDULE, now=now)
                    counts["slept"] += 1
            elif window is None and tenant.sleeping and tenant.sleep_reason == Reason.SCHEDULE:
                tenant_wake(tenant=tenant, actor=None, reason=Reason.SCHEDULE, now=now)
                counts["woke"] += 1
        except InvalidTransition as exc:
            counts["not_woken"] += tenant.sleeping
            Tenant.objects.filter(pk=tenant.pk).update(sleep_note=str(exc)[:500])
    idle = _sleepable().filter(sleeping=False, tier__sleep_allowed=True, tier__sleep_after_idle_hours__isnull=False)
    for tenant in idle:
        hours = tenant.tier.sleep_after_idle_hours or 0
        last = max(filter(None, (tenant.last_activity_at, tenant.ready_at)), default=None)
        if last is None or now - last < dt.timedelta(hours=hours):
            continue
        try:
            tenant_sleep(tenant=tenant, actor=None, reason=Reason.IDLE, now=now)
            counts["slept"] += 1
        except InvalidTransition:
            pass  # someone acted first
    return counts


# --- What the worker and the other services report ----------------------------------------------------------------


def tenant_record_sleep_applied(*, tenant: Tenant, sleeping: bool, note: str = "") -> bool:
    """The worker made the cluster match ``sleeping``; False (nothing recorded) when Berth wants otherwise by now."""
    return bool(
        Tenant.objects.filter(pk=tenant.pk, sleeping=sleeping).update(sleep_applied=True, sleep_note=note[:500])
    )


def tenant_note_sleep(*, tenant: Tenant, sleeping: bool, note: str) -> None:
    """A visible note on the worker's pass towards ``sleeping`` (e.g. objects that changed while it scaled them);
    nothing is noted when Berth wants otherwise by now: the note belongs to the sleep or wake the pass was for."""
    Tenant.objects.filter(pk=tenant.pk, sleeping=sleeping).update(sleep_note=note[:500])


def tenant_touch_activity(*, tenant: Tenant, at: dt.datetime | None = None) -> None:
    """Activity Berth can see on the tenant (a kubeconfig issued, usage that changed): the idle clock restarts."""
    Tenant.objects.filter(pk=tenant.pk).update(last_activity_at=at or timezone.now())


__all__ = [
    "SLEEP_KINDS",
    "WHY_NOT",
    "schedule_json",
    "schedule_window",
    "sleep_refusal",
    "sleep_state",
    "tenant_end_sleep_on_removal",
    "tenant_note_sleep",
    "tenant_record_sleep_applied",
    "tenant_set_sleep_schedule",
    "tenant_sleep",
    "tenant_touch_activity",
    "tenant_wake",
    "tenants_sleep_sweep",
]
