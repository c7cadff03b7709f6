"""Tiers: platform admins edit them, and every live tenant on an edited tier is re-applied."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import F

from tenants import audit, dispatch
from tenants.audit import SYSTEM, AuditContext
from tenants.errors import Forbidden
from tenants.models import Tenant, Tier, User
from tenants.services.lifecycle import S


@transaction.atomic
def tier_update(*, tier: Tier, actor: User, changes: dict[str, Any], ctx: AuditContext = SYSTEM) -> Tier:
    """Edit a tier and re-apply it to every live tenant on it."""
    if not actor.is_platform_admin:
        raise Forbidden("Only platform admins edit tiers.")
    if not changes:
        return tier
    before = {k: getattr(tier, k) for k in changes}
    for key, value in changes.items():
        setattr(tier, key, value)
    tier.full_clean()
    tier.save()
    audit.record(actor=actor, action="tier.update", obj=tier, before=before, after=changes, ctx=ctx)
    tier_reapply(tier=tier)
    return tier


def tier_reapply(*, tier: Tier) -> int:
    """Bump every live tenant on ``tier`` so the worker re-applies it; returns how many."""
    live = Tenant.objects.filter(tier=tier, status__in=[S.PROVISIONING, S.READY])
    ids = [str(pk) for pk in live.values_list("pk", flat=True)]
    live.update(generation=F("generation") + 1)
    for pk in ids:
        dispatch.enqueue(dispatch.PROVISION, pk)
    return len(ids)
