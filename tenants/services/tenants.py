"""What owners and admins do to a tenant directly, and the sweep's reminders and expiry."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from tenants import audit, dispatch, notifications
from tenants.audit import SYSTEM, AuditContext
from tenants.errors import InvalidTransition
from tenants.models import Tenant, User
from tenants.services.lifecycle import S, start_decommission, transition
from tenants.services.permissions import kubeconfig_role, require_owner_or_admin


@transaction.atomic
def tenant_decommission(*, tenant: Tenant, actor: User, reason: str = "", ctx: AuditContext = SYSTEM) -> Tenant:
    """Platform admins and team owners remove a tenant at once; members ask with a delete request."""
    require_owner_or_admin(actor=actor, team=tenant.team, doing="decommission; members can submit a delete request")
    return start_decommission(
        tenant=tenant, actor=actor, reason=reason or f"Decommissioned by {actor.username}.", ctx=ctx
    )


@transaction.atomic
def tenant_retry(*, tenant: Tenant, actor: User, ctx: AuditContext = SYSTEM) -> Tenant:
    """Try a failed tenant again: provisioning, or decommissioning if that is what failed."""
    require_owner_or_admin(actor=actor, team=tenant.team, doing="retry")
    if tenant.status != S.FAILED:
        raise InvalidTransition(f"Only failed tenants can be retried; this one is {tenant.status}.")
    if tenant.decommission_requested_at:
        return start_decommission(tenant=tenant, actor=actor, reason="Retrying decommission.", ctx=ctx)
    tenant = transition(tenant=tenant, new=S.APPROVED, actor=actor, action="tenant.retry", ctx=ctx)
    dispatch.enqueue(dispatch.PROVISION, str(tenant.pk))
    return tenant


@transaction.atomic
def tenant_request_isolation_check(*, tenant: Tenant, actor: User, ctx: AuditContext = SYSTEM) -> None:
    """Ask the worker to re-run the isolation report now."""
    if tenant.status != S.READY:
        raise InvalidTransition(f"Isolation is checked on ready tenants; this one is {tenant.status}.")
    kubeconfig_role(tenant=tenant, actor=actor)  # the tenant's team (or an admin) only
    audit.record(actor=actor, action="tenant.isolation_check_requested", obj=tenant, team=tenant.team, ctx=ctx)
    dispatch.enqueue(dispatch.ISOLATION_CHECK, str(tenant.pk))


@transaction.atomic
def tenant_remind_expiry(*, tenant: Tenant) -> bool:
    """Send the expiry reminder once; False if another sweep already did."""
    reminded = Tenant.objects.filter(pk=tenant.pk, expiry_reminded_at__isnull=True)
    if reminded.update(expiry_reminded_at=timezone.now()) != 1:
        return False
    audit.record(
        actor=None,
        action="tenant.expiry_reminded",
        obj=tenant,
        team=tenant.team,
        after={"expires_at": tenant.expires_at.isoformat() if tenant.expires_at else None},
    )
    notifications.tenant_expiring(tenant)
    return True


@transaction.atomic
def tenant_expire(*, tenant: Tenant) -> Tenant:
    return start_decommission(tenant=tenant, actor=None, reason="Expired.", ctx=SYSTEM)
