"""Transfers: moving a tenant from one team to another.

A transfer is a ``TenantRequest`` with action ``transfer`` and a ``target_team``: it shares the requests'
one-pending-per-tenant rule, idempotent decisions, approval queue, cancel and audit trail. Its steps:

1. An owner of the tenant's team (or a platform admin) asks (``transfer_ask``);
2. an owner of the receiving team accepts (``transfer_accept``) or declines (``transfer_decline``);
3. where the receiving team's budget would be exceeded, or the tenant's tier is not approved automatically,
   an approver approves it (``request_approve``, with the reason on the request); otherwise it completes on
   acceptance;
4. ``transfer_complete`` moves the tenant: the team changes (selectors scope by team, so the old team's
   members lose it at once), the generation and the credential epoch are bumped and the worker re-applies:
   RBAC subjects, labels and the ServiceAccounts (recreated, so every token issued before stops working).
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from tenants import audit, dispatch, notifications
from tenants.audit import SYSTEM, AuditContext
from tenants.errors import Forbidden, InvalidTransition
from tenants.models import Allocation, Team, Tenant, TenantKind, TenantRequest, User
from tenants.services.budget import budget_check
from tenants.services.lifecycle import S, decide, lock_tenant, tenant_snapshot
from tenants.services.permissions import require_owner_or_admin

Action = TenantRequest.Action
Status = TenantRequest.Status

# Kinds whose team credentials Berth can take back on a transfer (ServiceAccounts or OIDC group bindings it
# manages on the host cluster). A virtual cluster's credentials live inside it, out of the worker's reach here.
TRANSFERABLE_KINDS = frozenset({TenantKind.NAMESPACE, TenantKind.VCLUSTER})


def _snapshot(req: TenantRequest) -> dict[str, object]:
    return {
        "action": req.action,
        "name": req.name,
        "tenant": str(req.tenant_id),
        "team": req.team.slug,
        "target_team": req.target_team.slug if req.target_team else None,
        "tier": req.tier.name,
        "status": req.status,
        "accepted": req.accepted_at is not None,
    }


def _lock(req: TenantRequest) -> tuple[TenantRequest, Tenant]:
    """Lock the tenant (as every decision does), then read the request as it is now; still pending or 409."""
    tenant = lock_tenant(req.tenant_id)
    req = TenantRequest.objects.select_related("team", "target_team", "tier", "cluster", "requested_by").get(pk=req.pk)
    if req.action != Action.TRANSFER:
        raise InvalidTransition("This request is not a transfer.")
    if req.status != Status.PENDING:
        raise InvalidTransition(f"This transfer is already {req.status}.")
    return req, tenant


@transaction.atomic
def transfer_ask(
    *, tenant: Tenant, target_team: Team, actor: User, purpose: str = "", ctx: AuditContext = SYSTEM
) -> TenantRequest:
    """An owner of the tenant's team (or a platform admin) asks to move it to ``target_team``."""
    tenant = lock_tenant(tenant.pk)  # its team as it is now, not as the caller loaded it
    require_owner_or_admin(actor=actor, team=tenant.team, doing="move a tenant to another team")
    if tenant.kind not in TRANSFERABLE_KINDS:
        raise ValidationError(
            {
                "target_team": f"Only namespace and vcluster tenants can be transferred; "
                f"{tenant.name} is a {tenant.kind} tenant."
            }
        )
    if target_team.pk == tenant.team_id:
        raise ValidationError({"target_team": f"The tenant already belongs to {target_team.slug}."})
    if tenant.status != S.READY:
        raise InvalidTransition(f"A tenant that is {tenant.status} cannot be transferred; it must be ready.")
    if TenantRequest.objects.filter(tenant=tenant, status=Status.PENDING).exists():
        raise InvalidTransition("This tenant already has a pending request.")
    req = TenantRequest.objects.create(
        action=Action.TRANSFER,
        kind=tenant.kind,
        name=tenant.name,
        team=tenant.team,
        target_team=target_team,
        tier=tenant.tier,
        cluster=tenant.cluster,
        tenant=tenant,
        purpose=purpose,
        requested_by=actor,
    )
    audit.record(actor=actor, action="transfer.ask", obj=req, team=tenant.team, after=_snapshot(req), ctx=ctx)
    notifications.transfer_asked(req)
    return req


def approval_reasons(*, tenant: Tenant, target_team: Team) -> list[str]:
    """Why moving ``tenant`` to ``target_team`` needs an approver; empty when acceptance is enough."""
    reasons = []
    if not tenant.tier.auto_approve:
        reasons.append(f"Tier {tenant.tier.name} is not approved automatically.")
    try:
        with transaction.atomic():
            budget_check(team=target_team, adding=Allocation.of(tenant.tier), field="target_team")
    except ValidationError as exc:
        reasons.extend(exc.message_dict["target_team"])
    return reasons


@transaction.atomic
def transfer_accept(*, tenant_request: TenantRequest, actor: User, ctx: AuditContext = SYSTEM) -> TenantRequest:
    """An owner of the receiving team accepts; the transfer completes now unless an approver must approve it."""
    req, tenant = _lock(tenant_request)
    assert req.target_team is not None  # a transfer always names it (request_transfer_has_target)
    require_owner_or_admin(actor=actor, team=req.target_team, doing=f"accept transfers to {req.target_team.slug}")
    if req.accepted_at is not None:
        raise InvalidTransition(f"This transfer was already accepted by {req.accepted_by}.")
    reasons = approval_reasons(tenant=tenant, target_team=req.target_team)
    updated = TenantRequest.objects.filter(pk=req.pk, status=Status.PENDING, accepted_at__isnull=True).update(
        accepted_by=actor, accepted_at=timezone.now(), approval_reason=" ".join(reasons)
    )
    if updated != 1:
        raise InvalidTransition("This transfer was accepted or decided by someone else first.")
    req.refresh_from_db()
    audit.record(
        actor=actor,
        action="transfer.accept",
        obj=req,
        team=req.target_team,
        before={"accepted": False},
        after={"accepted": True, "needs_approval": bool(reasons), "approval_reason": req.approval_reason},
        ctx=ctx,
    )
    if reasons:
        notifications.request_submitted(req)  # the approvers' turn
        return req
    comment = f"Accepted by {actor.username}; within the budget of {req.target_team.slug} and tier {req.tier.name} " + (
        "is approved automatically."
    )
    req = decide(tenant_request=req, new=Status.APPROVED, actor=None, comment=comment, auto=True)
    audit.record(
        actor=None,
        action="transfer.approve",
        obj=req,
        team=req.target_team,
        before={"status": Status.PENDING},
        after={"status": req.status, "auto": True, "comment": comment},
        ctx=ctx,
    )
    transfer_complete(req=req, tenant=tenant, actor=actor, ctx=ctx)
    notifications.request_decided(req)
    return req


@transaction.atomic
def transfer_decline(
    *, tenant_request: TenantRequest, actor: User, reason: str = "", ctx: AuditContext = SYSTEM
) -> TenantRequest:
    """An owner of the receiving team declines; the tenant stays where it is."""
    req, _ = _lock(tenant_request)
    assert req.target_team is not None
    require_owner_or_admin(actor=actor, team=req.target_team, doing=f"decline transfers to {req.target_team.slug}")
    if req.accepted_at is not None:
        raise InvalidTransition("This transfer was accepted already; an approver decides it now.")
    req = decide(tenant_request=req, new=Status.REJECTED, actor=actor, comment=reason or "Declined.")
    audit.record(
        actor=actor,
        action="transfer.decline",
        obj=req,
        team=req.target_team,
        before={"status": Status.PENDING},
        after={"status": req.status, "reason": reason},
        ctx=ctx,
    )
    notifications.request_decided(req)
    return req


def require_accepted(req: TenantRequest, *, actor: User | None) -> None:
    """An approver decides a transfer only once the receiving team has accepted it, and not the one who
    accepted it (as no one approves their own request)."""
    if req.accepted_at is None:
        raise InvalidTransition("This transfer waits for an owner of the receiving team to accept it.")
    if actor is not None and req.accepted_by_id == actor.pk:
        raise Forbidden("You accepted this transfer; another approver decides it.")


def transfer_complete(*, req: TenantRequest, tenant: Tenant, actor: User | None, ctx: AuditContext) -> Tenant:
    """Move the approved transfer's tenant (locked by the caller) to its new team, and have the worker follow."""
    assert req.target_team is not None
    old_team = tenant.team
    before = {**tenant_snapshot(tenant), "team": old_team.slug, "credential_epoch": tenant.credential_epoch}
    moved = Tenant.objects.filter(pk=tenant.pk, team=old_team, status=S.READY).update(
        team=req.target_team, generation=F("generation") + 1, credential_epoch=F("credential_epoch") + 1
    )
    if moved != 1:
        raise InvalidTransition("The tenant changed team or status since the transfer was asked for.")
    tenant.refresh_from_db()
    after = {**tenant_snapshot(tenant), "team": tenant.team.slug, "credential_epoch": tenant.credential_epoch}
    for team in (old_team, tenant.team):  # both teams' trails show the move
        audit.record(
            actor=actor,
            action="transfer.complete",
            obj=tenant,
            team=team,
            before=before,
            after={**after, "request": str(req.pk)},
            ctx=ctx,
        )
    dispatch.enqueue(dispatch.PROVISION, str(tenant.pk))
    notifications.tenant_transferred(tenant, old_team=old_team, req=req)
    return tenant


# --- What the worker reports ---------------------------------------------------------------


@transaction.atomic
def tenant_record_credentials_renewed(*, tenant: Tenant, epoch: int, renewed: list[str]) -> None:
    """The worker made the tenant's credentials for ``epoch``: ``renewed`` (its ServiceAccounts) were deleted
    and made anew, so every token issued for the old ones is refused from now on."""
    Tenant.objects.filter(pk=tenant.pk).update(applied_credential_epoch=epoch)
    tenant.applied_credential_epoch = epoch
    audit.record(
        actor=None,
        action="tenant.credentials_renewed",
        obj=tenant,
        team=tenant.team,
        after={"credential_epoch": epoch, "renewed": renewed},
    )
