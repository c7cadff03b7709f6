"""Every state change in Berth: one function per action, each auditing in its own transaction.

Tenant status moves only through ``_transition``, which checks ``TRANSITIONS``
and updates with the old status in the WHERE clause, so two workers or two
admins can never both win.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from tenants import audit, dispatch, hooks, notifications, selectors
from tenants.audit import SYSTEM, AuditContext
from tenants.errors import Forbidden, InvalidTransition
from tenants.models import (
    ApiToken,
    Cluster,
    Membership,
    Request,
    Team,
    Tenant,
    TenantKind,
    TenantStatus,
    Tier,
    User,
)
from tenants.validation import tenant_name_errors

S = TenantStatus
TRANSITIONS: dict[str, set[str]] = {
    S.REQUESTED: {S.APPROVED, S.REJECTED, S.CANCELLED},
    S.APPROVED: {S.PROVISIONING, S.FAILED, S.DECOMMISSIONING},
    S.PROVISIONING: {S.READY, S.FAILED, S.DECOMMISSIONING},
    S.READY: {S.PROVISIONING, S.DECOMMISSIONING, S.FAILED},
    S.FAILED: {S.APPROVED, S.DECOMMISSIONING},
    S.DECOMMISSIONING: {S.DELETED, S.FAILED},
    S.DELETED: set(),
    S.REJECTED: set(),
    S.CANCELLED: set(),
}
WRITER_ROLES = {Membership.Role.OWNER, Membership.Role.MEMBER}


def _snapshot(tenant: Tenant) -> dict:
    return {
        "status": tenant.status,
        "tier": tenant.tier.name,
        "expires_at": tenant.expires_at.isoformat() if tenant.expires_at else None,
        "generation": tenant.generation,
    }


def _transition(
    *,
    tenant: Tenant,
    new: str,
    actor: User | None,
    action: str,
    ctx: AuditContext,
    reason: str = "",
    extra: dict | None = None,
) -> Tenant:
    """Move ``tenant`` to ``new`` if it is still in the status the caller saw."""
    old = tenant.status
    if new not in TRANSITIONS[old]:
        raise InvalidTransition(f"A tenant that is {old} cannot become {new}.")
    before = _snapshot(tenant)
    now = timezone.now()
    fields = {"status": new, "status_reason": reason, "status_changed_at": now, **(extra or {})}
    if new == S.READY:
        fields["ready_at"] = now
    if Tenant.objects.filter(pk=tenant.pk, status=old).update(**fields) != 1:
        raise InvalidTransition(f"The tenant is no longer {old}; someone else acted first.")
    tenant.refresh_from_db()
    after = _snapshot(tenant)
    if reason:
        after["reason"] = reason
    audit.record(actor=actor, action=action, obj=tenant, team=tenant.team, before=before, after=after, ctx=ctx)
    return tenant


# --- Teams and permissions ---------------------------------------------------------


def _role(user: User, team: Team) -> str | None:
    return Membership.objects.filter(user=user, team=team).values_list("role", flat=True).first()


def _require_writer(actor: User, team: Team) -> None:
    if actor.is_platform_admin:
        return
    if _role(actor, team) not in WRITER_ROLES:
        raise Forbidden(f"Only owners and members of {team.slug} can ask for this.")


# --- Requests ----------------------------------------------------------------------


@dataclass(frozen=True)
class Allocation:
    cpu_millis: int = 0
    memory_mib: int = 0
    storage_gib: int = 0
    tenants: int = 0

    @classmethod
    def of(cls, tier: Tier, count: int = 1) -> "Allocation":
        return cls(tier.cpu_limit_millis * count, tier.memory_limit_mib * count, tier.storage_gib * count, count)

    def __add__(self, other: "Allocation") -> "Allocation":
        return Allocation(*(a + b for a, b in zip(self.astuple(), other.astuple())))

    def __sub__(self, other: "Allocation") -> "Allocation":
        return Allocation(*(a - b for a, b in zip(self.astuple(), other.astuple())))

    def astuple(self) -> tuple[int, int, int, int]:
        return (self.cpu_millis, self.memory_mib, self.storage_gib, self.tenants)


def _check_budget(*, team: Team, adding: Allocation, field: str = "tier") -> None:
    # Lock the team row: two concurrent submissions must not both fit into the last room in the budget.
    team = Team.objects.select_for_update().get(pk=team.pk)
    used = selectors.team_allocation(team=team)
    total = used + adding
    limits = [
        ("CPU", total.cpu_millis, team.budget_cpu_millis, "m"),
        ("memory", total.memory_mib, team.budget_memory_mib, " MiB"),
        ("storage", total.storage_gib, team.budget_storage_gib, " GiB"),
        ("tenants", total.tenants, team.budget_tenants, ""),
    ]
    over = [f"{name} {want}{unit} of {have}{unit}" for name, want, have, unit in limits if want > have]
    if over:
        raise ValidationError({field: f"This would exceed team {team.slug}'s budget: " + ", ".join(over) + "."})


def _validate_placement(*, kind: str, tier: Tier, cluster: Cluster) -> dict[str, str]:
    errors = {}
    if not cluster.is_active:
        errors["cluster"] = "This cluster is not accepting new tenants."
    elif kind not in cluster.kinds:
        errors["kind"] = f"Cluster {cluster.name} does not offer {kind} tenants."
    if not tier.is_active:
        errors["tier"] = "This tier is retired."
    elif not cluster.tiers.filter(pk=tier.pk).exists():
        errors["tier"] = f"Tier {tier.name} is not offered on cluster {cluster.name}."
    return errors


def _expiry_at(*, tier: Tier, requested: dt.date | None) -> dt.datetime:
    today = timezone.now().date()
    if requested is None:
        requested = today + dt.timedelta(days=tier.default_expiry_days)
    if requested <= today:
        raise ValidationError({"requested_expiry": "Choose a date in the future."})
    if requested > today + dt.timedelta(days=tier.max_expiry_days):
        raise ValidationError({"requested_expiry": f"Tier {tier.name} allows at most {tier.max_expiry_days} days."})
    return dt.datetime.combine(requested, dt.time(23, 59, 59), tzinfo=dt.timezone.utc)


def _request_snapshot(req: Request) -> dict:
    return {
        "action": req.action,
        "kind": req.kind,
        "name": req.name,
        "team": req.team.slug,
        "tier": req.tier.name,
        "cluster": req.cluster.name,
        "status": req.status,
        "requested_expiry": req.requested_expiry.isoformat() if req.requested_expiry else None,
    }


@transaction.atomic
def request_submit(
    *,
    actor: User,
    action: str,
    team: Team | None = None,
    kind: str = TenantKind.NAMESPACE,
    name: str = "",
    tier: Tier | None = None,
    cluster: Cluster | None = None,
    tenant: Tenant | None = None,
    purpose: str = "",
    requested_expiry: dt.date | None = None,
    idempotency_key: str = "",
    ctx: AuditContext = SYSTEM,
) -> Request:
    """Ask for a new tenant or a change to one; auto-approved where the tier says so."""
    if idempotency_key:
        # A client's retry may overlap its first attempt: take turns per actor, then look for the first one.
        User.objects.select_for_update().filter(pk=actor.pk).first()
        earlier = Request.objects.filter(requested_by=actor, idempotency_key=idempotency_key).first()
        if earlier is not None:
            return earlier
    if action == Request.Action.CREATE:
        req = _submit_create(actor=actor, team=team, kind=kind, name=name, tier=tier, cluster=cluster,
                             purpose=purpose, requested_expiry=requested_expiry, idempotency_key=idempotency_key)
    elif action in (Request.Action.CHANGE_TIER, Request.Action.EXTEND, Request.Action.DELETE):
        req = _submit_change(actor=actor, action=action, tenant=tenant, tier=tier, purpose=purpose,
                             requested_expiry=requested_expiry, idempotency_key=idempotency_key)
    else:
        raise ValidationError({"action": f"Unknown action {action!r}."})
    audit.record(actor=actor, action="request.submit", obj=req, team=req.team, after=_request_snapshot(req), ctx=ctx)
    if _auto_approvable(req):
        return _approve(req=req, actor=None, comment=f"Auto-approved by tier {req.tier.name}.", ctx=ctx, auto=True)
    notifications.request_submitted(req)
    return req


def _submit_create(*, actor, team, kind, name, tier, cluster, purpose, requested_expiry, idempotency_key) -> Request:
    missing = {f: "This field is required." for f, v in (("team", team), ("tier", tier), ("cluster", cluster)) if v is None}
    if missing:
        raise ValidationError(missing)
    _require_writer(actor, team)
    errors: dict[str, list[str] | str] = {}
    if kind not in TenantKind.values:
        errors["kind"] = f"Choose one of: {', '.join(TenantKind.values)}."
    name_errors = tenant_name_errors(name, prefix=cluster.namespace_prefix, reserved=settings.BERTH_RESERVED_NAMES)
    if name_errors:
        errors["name"] = name_errors
    errors.update(_validate_placement(kind=kind, tier=tier, cluster=cluster))
    namespace = cluster.namespace_prefix + name
    if "name" not in errors and selectors.namespace_taken(cluster=cluster, namespace=namespace):
        errors["name"] = f"'{name}' is already in use on cluster {cluster.name}."
    if errors:
        raise ValidationError(errors)
    expires_at = _expiry_at(tier=tier, requested=requested_expiry)
    _check_budget(team=team, adding=Allocation.of(tier))
    try:
        with transaction.atomic():
            tenant = Tenant.objects.create(
                name=name, namespace=namespace, kind=kind, team=team, tier=tier, cluster=cluster,
                purpose=purpose, created_by=actor, expires_at=expires_at,
            )
    except IntegrityError:
        raise ValidationError({"name": f"'{name}' is already in use on cluster {cluster.name}."}) from None
    return Request.objects.create(
        action=Request.Action.CREATE, kind=kind, name=name, team=team, tier=tier, cluster=cluster, tenant=tenant,
        purpose=purpose, requested_expiry=expires_at.date(), requested_by=actor, idempotency_key=idempotency_key,
    )


def _submit_change(*, actor, action, tenant, tier, purpose, requested_expiry, idempotency_key) -> Request:
    if tenant is None:
        raise ValidationError({"tenant": "This field is required."})
    _require_writer(actor, tenant.team)
    allowed = {S.READY} | ({S.FAILED} if action == Request.Action.DELETE else set())
    if tenant.status not in allowed:
        raise InvalidTransition(f"A tenant that is {tenant.status} cannot take a {action} request.")
    if Request.objects.filter(tenant=tenant, status=Request.Status.PENDING).exists():
        raise InvalidTransition("This tenant already has a pending request.")
    target_tier = tenant.tier
    if action == Request.Action.CHANGE_TIER:
        if tier is None:
            raise ValidationError({"tier": "Choose the new tier."})
        if tier.pk == tenant.tier_id:
            raise ValidationError({"tier": "The tenant is already on this tier."})
        errors = _validate_placement(kind=tenant.kind, tier=tier, cluster=tenant.cluster)
        if errors:
            raise ValidationError(errors)
        _check_budget(team=tenant.team, adding=Allocation.of(tier) - Allocation.of(tenant.tier))
        target_tier = tier
    expiry = None
    if action == Request.Action.EXTEND:
        if requested_expiry is None:
            raise ValidationError({"requested_expiry": "Choose the new expiry date."})
        expiry = _expiry_at(tier=tenant.tier, requested=requested_expiry).date()
        if tenant.expires_at and expiry <= tenant.expires_at.date():
            raise ValidationError({"requested_expiry": "Choose a date after the current expiry."})
    try:
        with transaction.atomic():
            return Request.objects.create(
                action=action, kind=tenant.kind, name=tenant.name, team=tenant.team, tier=target_tier,
                cluster=tenant.cluster, tenant=tenant, purpose=purpose, requested_expiry=expiry,
                requested_by=actor, idempotency_key=idempotency_key,
            )
    except IntegrityError:
        raise InvalidTransition("This tenant already has a pending request.") from None


def _auto_approvable(req: Request) -> bool:
    if req.action in (Request.Action.CREATE, Request.Action.CHANGE_TIER):
        return req.tier.auto_approve
    if req.action == Request.Action.EXTEND:
        return req.tier.auto_approve
    return False


def _decide(*, req: Request, new: str, actor: User | None, comment: str, auto: bool = False) -> Request:
    now = timezone.now()
    updated = Request.objects.filter(pk=req.pk, status=Request.Status.PENDING).update(
        status=new, decided_by=actor, decided_at=now, decision_comment=comment, auto_approved=auto,
    )
    if updated != 1:
        req.refresh_from_db()
        raise InvalidTransition(f"This request is already {req.status}.")
    req.refresh_from_db()
    return req


def _lock_tenant_of(req: Request) -> Tenant:
    """Lock the request's tenant, then check the request is still pending.

    Approve, reject and cancel all take the tenant lock before touching the request, so they wait
    for each other instead of deadlocking; ``_decide``'s guarded update stays the final word.
    """
    tenant = Tenant.objects.select_for_update().select_related("tier", "team", "cluster").get(pk=req.tenant_id)
    status = Request.objects.filter(pk=req.pk).values_list("status", flat=True).first()
    if status != Request.Status.PENDING:
        raise InvalidTransition(f"This request is already {status}.")
    return tenant


def _require_decider(*, req: Request, actor: User) -> None:
    if not actor.can_decide:
        raise Forbidden("Only approvers and platform admins decide requests.")
    if req.requested_by_id == actor.pk:
        raise Forbidden("You cannot decide your own request.")


@transaction.atomic
def request_approve(*, request: Request, actor: User, comment: str = "", ctx: AuditContext = SYSTEM) -> Request:
    _require_decider(req=request, actor=actor)
    return _approve(req=request, actor=actor, comment=comment, ctx=ctx)


def _approve(*, req: Request, actor: User | None, comment: str, ctx: AuditContext, auto: bool = False) -> Request:
    tenant = _lock_tenant_of(req)
    if req.action == Request.Action.CREATE:
        # The requested tenant already counts; checked again because the budget may have shrunk.
        _check_budget(team=req.team, adding=Allocation())
    elif req.action == Request.Action.CHANGE_TIER:
        _check_budget(team=req.team, adding=Allocation.of(req.tier) - Allocation.of(tenant.tier))
    req = _decide(req=req, new=Request.Status.APPROVED, actor=actor, comment=comment, auto=auto)
    audit.record(actor=actor, action="request.approve", obj=req, team=req.team,
                 before={"status": Request.Status.PENDING}, after={"status": req.status, "comment": comment, "auto": auto}, ctx=ctx)
    _apply_approved(req=req, tenant=tenant, actor=actor, ctx=ctx)
    notifications.request_decided(req)
    return req


def _apply_approved(*, req: Request, tenant: Tenant, actor: User | None, ctx: AuditContext) -> None:
    if req.action == Request.Action.CREATE:
        _transition(tenant=tenant, new=S.APPROVED, actor=actor, action="tenant.approve", ctx=ctx)
        dispatch.enqueue(dispatch.PROVISION, str(tenant.pk))
    elif req.action == Request.Action.CHANGE_TIER:
        before = _snapshot(tenant)
        Tenant.objects.filter(pk=tenant.pk).update(tier=req.tier, generation=F("generation") + 1)
        tenant.refresh_from_db()
        audit.record(actor=actor, action="tenant.change_tier", obj=tenant, team=tenant.team, before=before, after=_snapshot(tenant), ctx=ctx)
        dispatch.enqueue(dispatch.PROVISION, str(tenant.pk))
    elif req.action == Request.Action.EXTEND:
        before = _snapshot(tenant)
        new_expiry = dt.datetime.combine(req.requested_expiry, dt.time(23, 59, 59), tzinfo=dt.timezone.utc)
        Tenant.objects.filter(pk=tenant.pk).update(expires_at=new_expiry, expiry_reminded_at=None)
        tenant.refresh_from_db()
        audit.record(actor=actor, action="tenant.extend", obj=tenant, team=tenant.team, before=before, after=_snapshot(tenant), ctx=ctx)
    elif req.action == Request.Action.DELETE:
        _start_decommission(tenant=tenant, actor=actor, reason=f"Delete request {req.pk} approved.", ctx=ctx)


@transaction.atomic
def request_reject(*, request: Request, actor: User, reason: str, ctx: AuditContext = SYSTEM) -> Request:
    if not reason.strip():
        raise ValidationError({"reason": "Say why the request is rejected."})
    _require_decider(req=request, actor=actor)
    tenant = _lock_tenant_of(request)
    req = _decide(req=request, new=Request.Status.REJECTED, actor=actor, comment=reason)
    audit.record(actor=actor, action="request.reject", obj=req, team=req.team,
                 before={"status": Request.Status.PENDING}, after={"status": req.status, "reason": reason}, ctx=ctx)
    if req.action == Request.Action.CREATE:
        _transition(tenant=tenant, new=S.REJECTED, actor=actor, action="tenant.reject", reason=reason, ctx=ctx)
    notifications.request_decided(req)
    return req


@transaction.atomic
def request_cancel(*, request: Request, actor: User, ctx: AuditContext = SYSTEM) -> Request:
    if request.requested_by_id != actor.pk and _role(actor, request.team) != Membership.Role.OWNER and not actor.is_platform_admin:
        raise Forbidden("Only the requester or a team owner can cancel this request.")
    tenant = _lock_tenant_of(request)
    req = _decide(req=request, new=Request.Status.CANCELLED, actor=actor, comment="Cancelled.")
    audit.record(actor=actor, action="request.cancel", obj=req, team=req.team,
                 before={"status": Request.Status.PENDING}, after={"status": req.status}, ctx=ctx)
    if req.action == Request.Action.CREATE:
        _transition(tenant=tenant, new=S.CANCELLED, actor=actor, action="tenant.cancel", ctx=ctx)
    return req


# --- Tenants -----------------------------------------------------------------------


def _start_decommission(*, tenant: Tenant, actor: User | None, reason: str, ctx: AuditContext) -> Tenant:
    tenant = _transition(tenant=tenant, new=S.DECOMMISSIONING, actor=actor, action="tenant.decommission", reason=reason,
                         ctx=ctx, extra={"decommission_requested_at": tenant.decommission_requested_at or timezone.now()})
    for pending in Request.objects.filter(tenant=tenant, status=Request.Status.PENDING):
        _decide(req=pending, new=Request.Status.CANCELLED, actor=actor, comment="Tenant is being decommissioned.")
        audit.record(actor=actor, action="request.cancel", obj=pending, team=tenant.team,
                     before={"status": Request.Status.PENDING}, after={"status": pending.status, "reason": reason}, ctx=ctx)
    dispatch.enqueue(dispatch.DECOMMISSION, str(tenant.pk))
    return tenant


@transaction.atomic
def tenant_decommission(*, tenant: Tenant, actor: User, reason: str = "", ctx: AuditContext = SYSTEM) -> Tenant:
    """Platform admins and team owners remove a tenant at once; members ask with a delete request."""
    if not actor.is_platform_admin and _role(actor, tenant.team) != Membership.Role.OWNER:
        raise Forbidden("Only team owners and platform admins can decommission; members can submit a delete request.")
    return _start_decommission(tenant=tenant, actor=actor, reason=reason or f"Decommissioned by {actor.username}.", ctx=ctx)


@transaction.atomic
def tenant_retry(*, tenant: Tenant, actor: User, ctx: AuditContext = SYSTEM) -> Tenant:
    """Try a failed tenant again: provisioning, or decommissioning if that is what failed."""
    if not actor.is_platform_admin and _role(actor, tenant.team) != Membership.Role.OWNER:
        raise Forbidden("Only team owners and platform admins can retry.")
    if tenant.status != S.FAILED:
        raise InvalidTransition(f"Only failed tenants can be retried; this one is {tenant.status}.")
    if tenant.decommission_requested_at:
        return _start_decommission(tenant=tenant, actor=actor, reason="Retrying decommission.", ctx=ctx)
    tenant = _transition(tenant=tenant, new=S.APPROVED, actor=actor, action="tenant.retry", ctx=ctx)
    dispatch.enqueue(dispatch.PROVISION, str(tenant.pk))
    return tenant


@transaction.atomic
def tenant_mark_provisioning(*, tenant: Tenant) -> Tenant:
    return _transition(tenant=tenant, new=S.PROVISIONING, actor=None, action="tenant.provisioning", ctx=SYSTEM)


@transaction.atomic
def tenant_mark_ready(*, tenant: Tenant, applied_generation: int) -> Tenant:
    tenant = _transition(tenant=tenant, new=S.READY, actor=None, action="tenant.ready", ctx=SYSTEM,
                         extra={"applied_generation": applied_generation})
    notifications.tenant_status(tenant)
    return tenant


@transaction.atomic
def tenant_mark_failed(*, tenant: Tenant, reason: str) -> Tenant:
    tenant = _transition(tenant=tenant, new=S.FAILED, actor=None, action="tenant.failed", reason=reason, ctx=SYSTEM)
    notifications.tenant_status(tenant)
    return tenant


@transaction.atomic
def tenant_mark_deleted(*, tenant: Tenant) -> Tenant:
    return _transition(tenant=tenant, new=S.DELETED, actor=None, action="tenant.deleted", ctx=SYSTEM)


@transaction.atomic
def tenant_record_applied(*, tenant: Tenant, generation: int, repaired: list[str]) -> None:
    """A ready tenant was re-applied; say what drift was repaired, if any."""
    Tenant.objects.filter(pk=tenant.pk).update(applied_generation=generation)
    if repaired:
        audit.record(actor=None, action="tenant.drift_repaired", obj=tenant, team=tenant.team,
                     after={"repaired": repaired, "generation": generation})


def tenant_note_progress(*, tenant: Tenant, note: str) -> None:
    """A visible note on a tenant that keeps its status (e.g. 'waiting for the cluster'); not a transition."""
    Tenant.objects.filter(pk=tenant.pk, status=tenant.status).update(status_reason=note[:2000])


def tenant_record_usage(*, tenant: Tenant, usage: dict) -> None:
    """Quota usage read back from the cluster: an observation, not a state change, so not audited."""
    Tenant.objects.filter(pk=tenant.pk).update(quota_usage=usage, quota_usage_at=timezone.now())


@transaction.atomic
def tenant_record_isolation_report(*, tenant: Tenant, report: dict) -> None:
    Tenant.objects.filter(pk=tenant.pk).update(isolation_report=report, isolation_report_at=timezone.now())
    audit.record(actor=None, action="tenant.isolation_checked", obj=tenant, team=tenant.team,
                 after={"passed": report.get("passed"), "failed_checks": [c["id"] for c in report.get("checks", []) if not c.get("passed")]})


@transaction.atomic
def tenant_request_isolation_check(*, tenant: Tenant, actor: User, ctx: AuditContext = SYSTEM) -> None:
    """Ask the worker to re-run the isolation report now."""
    if tenant.status != S.READY:
        raise InvalidTransition(f"Isolation is checked on ready tenants; this one is {tenant.status}.")
    kubeconfig_role(tenant=tenant, actor=actor)  # the tenant's team (or an admin) only
    audit.record(actor=actor, action="tenant.isolation_check_requested", obj=tenant, team=tenant.team, ctx=ctx)
    dispatch.enqueue(dispatch.ISOLATION_CHECK, str(tenant.pk))


def kubeconfig_role(*, tenant: Tenant, actor: User) -> str:
    """'edit' for owners, members and platform admins; 'view' for viewers; Forbidden otherwise."""
    role = _role(actor, tenant.team)
    if role in WRITER_ROLES or actor.is_platform_admin:
        return "edit"
    if role == Membership.Role.VIEWER:
        return "view"
    raise Forbidden("Only the tenant's team can get credentials for it.")


def _lifetime(*, tenant: Tenant, lifetime_seconds: int | None) -> int:
    ceiling = tenant.tier.max_credential_lifetime_seconds
    if lifetime_seconds is None:
        return min(3600, ceiling)
    if not 600 <= lifetime_seconds <= ceiling:
        raise ValidationError({"lifetime_seconds": f"Between 600 (the API server's floor) and {ceiling} seconds for tier {tenant.tier.name}."})
    return lifetime_seconds


@transaction.atomic
def tenant_issue_kubeconfig(*, tenant: Tenant, actor: User, lifetime_seconds: int | None = None, ctx: AuditContext = SYSTEM) -> str:
    """A kubeconfig with a fresh short-lived credential; the issue is audited, the credential never stored."""
    role = kubeconfig_role(tenant=tenant, actor=actor)
    if tenant.status != S.READY:
        raise InvalidTransition(f"Credentials are available once the tenant is ready; it is {tenant.status}.")
    lifetime = _lifetime(tenant=tenant, lifetime_seconds=lifetime_seconds)
    text = hooks.issue_kubeconfig(tenant, role=role, lifetime_seconds=lifetime)
    audit.record(actor=actor, action="tenant.kubeconfig_issued", obj=tenant, team=tenant.team, ctx=ctx,
                 after={"role": role, "lifetime_seconds": lifetime, "mode": tenant.cluster.access_mode, "namespace": tenant.namespace})
    return text


@transaction.atomic
def user_issue_merged_kubeconfig(*, actor: User, lifetime_seconds: int | None = None, ctx: AuditContext = SYSTEM) -> str:
    """One kubeconfig with a context per ready tenant of the actor's teams; each issue is audited.

    The lifetime asked for is capped per tenant at its tier's maximum.
    """
    if lifetime_seconds is not None and lifetime_seconds < 600:
        raise ValidationError({"lifetime_seconds": "At least 600 seconds (the API server's floor)."})
    tenants = Tenant.objects.filter(team__memberships__user=actor, status=S.READY).select_related("tier", "cluster", "team")
    grants = []
    for tenant in tenants.order_by("namespace"):
        ceiling = tenant.tier.max_credential_lifetime_seconds
        grants.append((tenant, kubeconfig_role(tenant=tenant, actor=actor), min(lifetime_seconds or 3600, ceiling)))
    text = hooks.issue_merged_kubeconfig(grants)
    for tenant, role, lifetime in grants:
        audit.record(actor=actor, action="tenant.kubeconfig_issued", obj=tenant, team=tenant.team, ctx=ctx,
                     after={"role": role, "lifetime_seconds": lifetime, "mode": tenant.cluster.access_mode,
                            "namespace": tenant.namespace, "merged": True})
    return text


@transaction.atomic
def tenant_remind_expiry(*, tenant: Tenant) -> bool:
    """Send the expiry reminder once; False if another sweep already did."""
    if Tenant.objects.filter(pk=tenant.pk, expiry_reminded_at__isnull=True).update(expiry_reminded_at=timezone.now()) != 1:
        return False
    audit.record(actor=None, action="tenant.expiry_reminded", obj=tenant, team=tenant.team,
                 after={"expires_at": tenant.expires_at.isoformat() if tenant.expires_at else None})
    notifications.tenant_expiring(tenant)
    return True


@transaction.atomic
def tenant_expire(*, tenant: Tenant) -> Tenant:
    return _start_decommission(tenant=tenant, actor=None, reason="Expired.", ctx=SYSTEM)


@transaction.atomic
def tier_update(*, tier: Tier, actor: User, changes: dict, ctx: AuditContext = SYSTEM) -> Tier:
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


# --- Users, sign-in and API tokens -------------------------------------------------


def _team_and_role(group: str) -> tuple[str, str] | None:
    prefix = settings.BERTH_TEAM_GROUP_PREFIX
    team_group, _, role = group.partition(":")
    if not team_group.startswith(prefix):
        return None
    role = role or Membership.Role.MEMBER
    if role not in Membership.Role.values:
        return None
    return team_group, role


_ROLE_RANK = {Membership.Role.OWNER: 3, Membership.Role.MEMBER: 2, Membership.Role.VIEWER: 1}


@transaction.atomic
def user_sync_from_claims(*, claims: dict, ctx: AuditContext = SYSTEM) -> User:
    """Create or update a user from OIDC claims; teams and platform roles mirror the groups claim."""
    subject = str(claims.get("sub") or "")
    if not subject:
        raise ValidationError({"sub": "The identity provider sent no subject."})
    username = str(claims.get("preferred_username") or claims.get("email") or subject)[:150]
    user = User.objects.filter(oidc_subject=subject).first()
    if user is None:
        base, n = username, 1
        while User.objects.filter(username=username).exists():
            n += 1
            username = f"{base}-{n}"[:150]
        user = User.objects.create(oidc_subject=subject, username=username)
    if claims.get("email"):
        user.email = str(claims["email"])[:254]
    user.display_name = str(claims.get("name") or user.display_name or username)[:255]
    if "groups" not in claims:
        # Some tokens (e.g. access tokens) carry no groups: leave roles as the last sign-in set them.
        user.save()
        return user
    raw_groups = claims.get("groups") or []
    if isinstance(raw_groups, str):
        raw_groups = [raw_groups]  # some providers send a single group as a plain string
    groups = [g for g in raw_groups if isinstance(g, str)]
    roles_before = _platform_roles(user)
    user.is_platform_admin = any(g in settings.BERTH_ADMIN_GROUPS for g in groups)
    user.is_approver = any(g in settings.BERTH_APPROVER_GROUPS for g in groups)
    user.is_staff = user.is_platform_admin
    user.is_superuser = user.is_platform_admin
    user.save()
    if _platform_roles(user) != roles_before:
        audit.record(actor=user, action="user.platform_roles", obj=user, before={"roles": roles_before},
                     after={"roles": _platform_roles(user)}, ctx=ctx)
    wanted: dict[str, str] = {}
    for group in groups:
        parsed = _team_and_role(group)
        if parsed and _ROLE_RANK[parsed[1]] > _ROLE_RANK.get(wanted.get(parsed[0], ""), 0):
            wanted[parsed[0]] = parsed[1]
    _sync_memberships(user=user, wanted=wanted, ctx=ctx)
    return user


def _platform_roles(user: User) -> list[str]:
    return [role for role, has in (("admin", user.is_platform_admin), ("approver", user.is_approver)) if has]


def _sync_memberships(*, user: User, wanted: dict[str, str], ctx: AuditContext) -> None:
    current = {m.team.oidc_group: m for m in Membership.objects.filter(user=user).select_related("team")}
    for group, membership in current.items():
        if group not in wanted:
            membership.delete()
            audit.record(actor=user, action="membership.remove", obj=membership.team, team=membership.team,
                         before={"user": user.username, "role": membership.role}, ctx=ctx)
    for group, role in wanted.items():
        team, _ = Team.objects.get_or_create(
            oidc_group=group, defaults={"slug": group[:50], "name": group.removeprefix(settings.BERTH_TEAM_GROUP_PREFIX).replace("-", " ").title()}
        )
        membership = current.get(group)
        if membership is None:
            Membership.objects.create(user=user, team=team, role=role)
            audit.record(actor=user, action="membership.add", obj=team, team=team, after={"user": user.username, "role": role}, ctx=ctx)
        elif membership.role != role:
            before = membership.role
            Membership.objects.filter(pk=membership.pk).update(role=role)
            audit.record(actor=user, action="membership.change", obj=team, team=team,
                         before={"role": before}, after={"user": user.username, "role": role}, ctx=ctx)


@transaction.atomic
def auth_record(*, user: User | None, action: str, ctx: AuditContext, detail: dict | None = None, actor_name: str = "") -> None:
    """Sign-in, sign-out, failed sign-in and refused authorization."""
    audit.record(actor=user, action=action, object_type="session", after=detail or {}, ctx=ctx, actor_name=actor_name)


TOKEN_PREFIX = "brt_"


def api_token_digest(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


@transaction.atomic
def api_token_create(
    *, actor: User, name: str, expires_in_days: int, team: Team | None = None, ctx: AuditContext = SYSTEM
) -> tuple[ApiToken, str]:
    """A new API token and its plaintext, which is never stored and shown only now."""
    errors = {}
    if not name.strip():
        errors["name"] = "Give the token a name."
    if not 1 <= expires_in_days <= 365:
        errors["expires_in_days"] = "Between 1 and 365 days."
    if errors:
        raise ValidationError(errors)
    if team is not None and _role(actor, team) != Membership.Role.OWNER and not actor.is_platform_admin:
        raise Forbidden("Only team owners can create automation tokens for a team.")
    prefix = secrets.token_hex(4)
    plaintext = f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    token = ApiToken.objects.create(
        user=actor, team=team, name=name.strip()[:100], prefix=prefix, digest=api_token_digest(plaintext),
        expires_at=timezone.now() + dt.timedelta(days=expires_in_days),
    )
    audit.record(actor=actor, action="api_token.create", obj=token, team=team,
                 after={"name": token.name, "prefix": prefix, "expires_at": token.expires_at.isoformat()}, ctx=ctx)
    return token, plaintext


@transaction.atomic
def api_token_revoke(*, token: ApiToken, actor: User, ctx: AuditContext = SYSTEM) -> ApiToken:
    if token.user_id != actor.pk and not actor.is_platform_admin:
        raise Forbidden("You can revoke only your own tokens.")
    if ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()) != 1:
        raise InvalidTransition("This token is already revoked.")
    token.refresh_from_db()
    audit.record(actor=actor, action="api_token.revoke", obj=token, team=token.team, after={"prefix": token.prefix}, ctx=ctx)
    return token


def api_token_touch(*, token: ApiToken) -> None:
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
