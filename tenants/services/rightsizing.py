"""Right-sizing: the suggestion for a tenant from its usage history, and an owner accepting it.

Accepting files a normal change_tier request through ``request_submit`` (budget, approvals, auto-approval of
downgrades, idempotency and its audit row all apply), plus one ``tenant.rightsizing_accept`` audit row that says
the request came from a suggestion and what the owner saw. A suggestion is accepted only as it was shown: the
caller sends its fingerprint back, and a history or tier that changed since answers 409.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from django.db import transaction
from django.utils import timezone

from tenants import audit
from tenants.audit import SYSTEM, AuditContext
from tenants.errors import IdempotencyConflict, InvalidTransition
from tenants.models import (
    AuditEvent,
    Tenant,
    TenantRequest,
    TenantSleepPeriod,
    TenantStatus,
    TenantUsageDay,
    User,
)
from tenants.rightsizing import DAY_SECONDS, Assessment, Day, Policy, assess
from tenants.services.lifecycle import lock_tenant
from tenants.services.permissions import require_owner_or_admin
from tenants.services.tenant_requests import request_submit

ACCEPT_ACTION = "tenant.rightsizing_accept"
DISMISS_ACTION = "tenant.rightsizing_dismiss"
PURPOSE_PREFIX = "Right-sizing suggestion: "


def _asleep_by_day(tenant: Tenant, start: dt.date, end: dt.date) -> dict[dt.date, float]:
    """Seconds the tenant slept on each UTC day from ``start`` to ``end`` (its sleep periods, clipped per day)."""
    window_start = dt.datetime.combine(start, dt.time(), tzinfo=dt.UTC)
    window_end = dt.datetime.combine(end + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
    asleep: dict[dt.date, float] = {}
    now = timezone.now()
    periods = TenantSleepPeriod.objects.filter(tenant=tenant, started_at__lt=window_end).exclude(
        ended_at__lte=window_start
    )
    for period in periods:
        begin, stop = max(period.started_at, window_start), min(period.ended_at or now, window_end)
        while begin < stop:
            midnight = dt.datetime.combine(begin.astimezone(dt.UTC).date() + dt.timedelta(days=1), dt.time(), dt.UTC)
            part_end = min(stop, midnight)
            day = begin.astimezone(dt.UTC).date()
            asleep[day] = min(asleep.get(day, 0.0) + (part_end - begin).total_seconds(), DAY_SECONDS)
            begin = part_end
    return asleep


def _dismissed(tenant: Tenant, found: Assessment, today: dt.date) -> str:
    """Why ``found``'s suggestion is not shown (an owner dismissed this very change, until a later day), or ''."""
    dismissed = tenant.rightsizing_dismissed or {}
    if found.target is None or (dismissed.get("direction"), dismissed.get("tier")) != (
        found.direction,
        found.target.name,
    ):
        return ""
    until = dt.date.fromisoformat(dismissed["until"])
    if today > until:
        return ""
    return f"The suggestion of tier {found.target.display_name} was dismissed until {until.isoformat()}."


def _assess(tenant: Tenant, today: dt.date) -> Assessment:
    """What the rule finds, whether or not an owner dismissed it."""
    policy = Policy.from_settings()
    start, end = policy.window(today)
    rows = TenantUsageDay.objects.filter(tenant=tenant, tier_id=tenant.tier_id, day__range=(start, end))
    asleep = _asleep_by_day(tenant, start, end)
    days = [
        Day(day=r.day, seconds=r.seconds, samples=r.samples, usage=r.usage, asleep_seconds=asleep.get(r.day, 0.0))
        for r in rows
    ]
    offered = list(tenant.cluster.tiers.filter(is_active=True))
    return assess(subject=str(tenant.pk), days=days, current=tenant.tier, offered=offered, policy=policy, today=today)


def rightsizing_assess(*, tenant: Tenant, today: dt.date | None = None) -> Assessment:
    """The rule (tenants.rightsizing) over ``tenant``'s history on its current tier, against the tiers its cluster
    offers; a suggestion an owner dismissed is left out (with a note saying so). A read: nothing is recorded.
    """
    today = today or timezone.now().date()
    found = _assess(tenant, today)
    why = _dismissed(tenant, found, today)
    if found.target is not None and tenant.status != TenantStatus.READY:
        why = f"A tenant that is {tenant.get_status_display().lower()} cannot change tier."
    if why:
        return replace(found, direction=None, target=None, reason="", fingerprint="", notes=(why,))
    return found


def _shown(*, tenant: Tenant, fingerprint: str) -> Assessment:
    """The suggestion the caller was shown, as it stands now; 409 when it is gone or not the same any more."""
    found = rightsizing_assess(tenant=tenant)
    if found.target is None or found.fingerprint != fingerprint:
        raise InvalidTransition(
            "This suggestion is out of date: the tenant's tier or usage history changed since it was shown. "
            "Look at the current suggestion and accept that one if it still makes sense."
        )
    return found


def _replayed(
    *, tenant: Tenant, actor: User, fingerprint: str, idempotency_key: str, idempotency_scope: str
) -> TenantRequest | None:
    """The request an earlier accept with this key filed, when the key was used before (409 if for another)."""
    earlier = TenantRequest.objects.filter(
        requested_by=actor, idempotency_scope=idempotency_scope, team=tenant.team, idempotency_key=idempotency_key
    ).first()
    if earlier is None:
        return None
    same = AuditEvent.objects.filter(
        action=ACCEPT_ACTION,
        object_id=str(tenant.pk),
        after__request=str(earlier.pk),
        after__fingerprint=fingerprint,
    ).exists()
    if not same:
        raise IdempotencyConflict(
            f"Idempotency-Key {idempotency_key!r} was first used for another request ({earlier.pk}); "
            "use a new key for a new request."
        )
    return earlier


@transaction.atomic
def rightsizing_accept(
    *,
    tenant: Tenant,
    actor: User,
    fingerprint: str,
    idempotency_key: str = "",
    idempotency_scope: str = "",
    ctx: AuditContext = SYSTEM,
) -> TenantRequest:
    """File the tier change the suggestion shown to the owner named (``fingerprint``): owners and admins only.

    Refused (InvalidTransition, 409) when there is no suggestion now or it is not the one shown.
    """
    require_owner_or_admin(actor=actor, team=tenant.team, doing="accept a right-sizing suggestion")
    # Locked, so the tier cannot change between the check and the request.
    tenant = lock_tenant(tenant.pk)
    if idempotency_key:
        earlier = _replayed(
            tenant=tenant,
            actor=actor,
            fingerprint=fingerprint,
            idempotency_key=idempotency_key,
            idempotency_scope=idempotency_scope,
        )
        if earlier is not None:
            return earlier
    found = _shown(tenant=tenant, fingerprint=fingerprint)
    assert found.target is not None  # _shown refuses an assessment without one
    before_tier = tenant.tier
    req = request_submit(
        actor=actor,
        action=TenantRequest.Action.CHANGE_TIER,
        tenant=tenant,
        tier=found.target,
        purpose=PURPOSE_PREFIX + found.reason,
        idempotency_key=idempotency_key,
        idempotency_scope=idempotency_scope,
        ctx=ctx,
    )
    audit.record(
        actor=actor,
        action=ACCEPT_ACTION,
        obj=tenant,
        team=tenant.team,
        before={"tier": before_tier.name},
        after={
            "request": str(req.pk),
            "request_status": req.status,
            "direction": found.direction,
            "tier": found.target.name,
            "reason": found.reason,
            "window": [found.window_start.isoformat(), found.window_end.isoformat()],
            "fingerprint": fingerprint,
        },
        ctx=ctx,
    )
    return req


@transaction.atomic
def rightsizing_dismiss(*, tenant: Tenant, actor: User, fingerprint: str, ctx: AuditContext = SYSTEM) -> Assessment:
    """Hide the suggestion shown (``fingerprint``) for a window's length: owners and admins only, audited.

    Only that change is hidden: a suggestion of another tier or direction shows at once. 409 when stale.
    """
    require_owner_or_admin(actor=actor, team=tenant.team, doing="dismiss a right-sizing suggestion")
    tenant = lock_tenant(tenant.pk)
    found = _shown(tenant=tenant, fingerprint=fingerprint)
    assert found.target is not None and found.direction is not None
    until = timezone.now().date() + dt.timedelta(days=found.days)
    dismissed = {"direction": found.direction, "tier": found.target.name, "until": until.isoformat()}
    before = tenant.rightsizing_dismissed or {}
    Tenant.objects.filter(pk=tenant.pk).update(rightsizing_dismissed=dismissed)
    tenant.rightsizing_dismissed = dismissed
    audit.record(
        actor=actor,
        action=DISMISS_ACTION,
        obj=tenant,
        team=tenant.team,
        before={"dismissed": before},
        after={"dismissed": dismissed, "reason": found.reason, "fingerprint": fingerprint},
        ctx=ctx,
    )
    return rightsizing_assess(tenant=tenant)


__all__ = ["ACCEPT_ACTION", "DISMISS_ACTION", "rightsizing_accept", "rightsizing_assess", "rightsizing_dismiss"]
