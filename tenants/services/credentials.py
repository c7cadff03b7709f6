"""Kubeconfigs: a fresh short-lived credential per issue, audited, never stored.

The credential lifetime bounds live here and nowhere else: at least the API
server's TokenRequest floor, at most the tier's maximum, an hour by default.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F

from tenants import audit, hooks, metrics
from tenants.audit import SYSTEM, AuditContext
from tenants.errors import InvalidTransition
from tenants.hooks import KubeconfigGrant
from tenants.models import Tenant, Tier, User
from tenants.services.lifecycle import S
from tenants.services.permissions import kubeconfig_role
from tenants.services.sleep import tenant_touch_activity

# The API server refuses TokenRequests shorter than ten minutes.
LIFETIME_FLOOR_SECONDS = 600
LIFETIME_DEFAULT_SECONDS = 3600


def credential_lifetime_default(*, tier: Tier) -> int:
    return min(LIFETIME_DEFAULT_SECONDS, tier.max_credential_lifetime_seconds)


def credential_lifetime(*, tier: Tier, asked: int | None) -> int:
    """The lifetime to issue for ``asked`` seconds on ``tier``; a field error when out of bounds."""
    ceiling = tier.max_credential_lifetime_seconds
    if asked is None:
        return credential_lifetime_default(tier=tier)
    if not LIFETIME_FLOOR_SECONDS <= asked <= ceiling:
        raise ValidationError(
            {
                "lifetime_seconds": f"Between {LIFETIME_FLOOR_SECONDS} (the API server's floor) and {ceiling} "
                f"seconds for tier {tier.name}."
            }
        )
    return asked


def _record_issue(*, grant: KubeconfigGrant, actor: User, ctx: AuditContext, merged: bool) -> None:
    tenant = grant.tenant
    after: dict[str, object] = {
        "role": grant.role,
        "lifetime_seconds": grant.lifetime_seconds,
        "mode": tenant.cluster.access_mode,
        "namespace": tenant.namespace,
    }
    if merged:
        after["merged"] = True
    audit.record(actor=actor, action="tenant.kubeconfig_issued", obj=tenant, team=tenant.team, ctx=ctx, after=after)
    metrics.kubeconfig_issued(tenant=tenant, role=grant.role)
    tenant_touch_activity(tenant=tenant)  # someone means to use it: the idle clock restarts


@transaction.atomic
def tenant_issue_kubeconfig(
    *, tenant: Tenant, actor: User, lifetime_seconds: int | None = None, ctx: AuditContext = SYSTEM
) -> str:
    """A kubeconfig with a fresh short-lived credential; the issue is audited, the credential never stored."""
    role = kubeconfig_role(tenant=tenant, actor=actor)
    if tenant.status != S.READY:
        raise InvalidTransition(f"Credentials are available once the tenant is ready; it is {tenant.status}.")
    if tenant.credential_epoch != tenant.applied_credential_epoch:
        # A transfer: a token from the ServiceAccounts about to be replaced would stop working within moments.
        raise InvalidTransition("The tenant's credentials are being renewed after its transfer; try again shortly.")
    grant = KubeconfigGrant(tenant, role, credential_lifetime(tier=tenant.tier, asked=lifetime_seconds))
    text = hooks.worker().issue_kubeconfig(grant)
    _record_issue(grant=grant, actor=actor, ctx=ctx, merged=False)
    return text


@transaction.atomic
def user_issue_merged_kubeconfig(
    *, actor: User, lifetime_seconds: int | None = None, ctx: AuditContext = SYSTEM
) -> str:
    """One kubeconfig with a context per ready tenant of the actor's teams; each issue is audited.

    The lifetime asked for is capped per tenant at its tier's maximum.
    """
    if lifetime_seconds is not None and lifetime_seconds < LIFETIME_FLOOR_SECONDS:
        raise ValidationError(
            {"lifetime_seconds": f"At least {LIFETIME_FLOOR_SECONDS} seconds (the API server's floor)."}
        )
    tenants = Tenant.objects.filter(
        team__memberships__user=actor, status=S.READY, credential_epoch=F("applied_credential_epoch")
    ).select_related("tier", "cluster", "team")
    grants = []
    for tenant in tenants.order_by("namespace"):
        lifetime = (
            credential_lifetime_default(tier=tenant.tier)
            if lifetime_seconds is None
            else min(lifetime_seconds, tenant.tier.max_credential_lifetime_seconds)
        )
        grants.append(KubeconfigGrant(tenant, kubeconfig_role(tenant=tenant, actor=actor), lifetime))
    text = hooks.worker().issue_merged_kubeconfig(grants)
    for grant in grants:
        _record_issue(grant=grant, actor=actor, ctx=ctx, merged=True)
    return text
