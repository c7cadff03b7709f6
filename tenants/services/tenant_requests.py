"""Requests: ask for a tenant or a change to one; approvers (or a tier's auto-approval) decide.

Approve, reject and cancel all lock the request's tenant before touching the request,
so they wait for each other instead of deadlocking; ``lifecycle.decide``'s guarded
update stays the final word.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from tenants import audit, dispatch, hooks, notifications, selectors
from tenants.audit import SYSTEM, AuditContext
from tenants.errors import Forbidden, IdempotencyConflict, InvalidTransition
from tenants.hooks import ClusterLookup
from tenants.models import Allocation, Cluster, Team, Tenant, TenantKind, TenantRequest, Tier, User
from tenants.rightsizing import is_downgrade
from tenants.services.budget import approval_adds, budget_check
from tenants.services.clusters import cluster_record_identity
from tenants.services.lifecycle import S, decide, lock_tenant, start_decommission, tenant_snapshot, transition
from tenants.services.permissions import is_owner_or_admin, require_decider, require_writer
from tenants.services.transfers import require_accepted, transfer_complete
from tenants.validation import tenant_name_errors

Action = TenantRequest.Action
Status = TenantRequest.Status


# --- Expiry --------------------------------------------------------------------------------


def expiry_end_of_day(day: dt.date) -> dt.datetime:
    """Tenants expire at the end of the chosen day, UTC."""
    return dt.datetime.combine(day, dt.time(23, 59, 59), tzinfo=dt.UTC)


def expiry_check(*, tier: Tier, requested: dt.date | None) -> dt.datetime:
    """When a tenant asked to live until ``requested`` (default: the tier's default) expires.

    Refused when the date is not in the future or beyond the tier's maximum.
    """
    today = timezone.now().date()
    if requested is None:
        requested = today + dt.timedelta(days=tier.default_expiry_days)
    if requested <= today:
        raise ValidationError({"requested_expiry": "Choose a date in the future."})
    if requested > today + dt.timedelta(days=tier.max_expiry_days):
        raise ValidationError({"requested_expiry": f"Tier {tier.name} allows at most {tier.max_expiry_days} days."})
    return expiry_end_of_day(requested)


# --- Submitting ------------------------------------------------------------------------------


def _payload_digest(
    *,
    action: str,
    team: Team | None,
    kind: str,
    name: str,
    tier: Tier | None,
    cluster: Cluster | None,
    tenant: Tenant | None,
    purpose: str,
    requested_expiry: dt.date | None,
) -> str:
    """What a request asks for, as a digest: a replayed key must ask for exactly the same."""
    payload = {
        "action": action,
        "team": team.pk if team else None,
        "kind": kind if action == Action.CREATE else None,
        "name": name if action == Action.CREATE else None,
        "tier": tier.pk if tier else None,
        "cluster": cluster.pk if cluster else None,
        "tenant": str(tenant.pk) if tenant else None,
        "purpose": purpose,
        "requested_expiry": requested_expiry.isoformat() if requested_expiry else None,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _snapshot(req: TenantRequest) -> dict[str, object]:
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


def _placement_errors(*, kind: str, tier: Tier, cluster: Cluster) -> dict[str, str]:
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
    idempotency_scope: str = "",
    ctx: AuditContext = SYSTEM,
) -> TenantRequest:
    """Ask for a new tenant or a change to one; auto-approved where the tier says so.

    ``idempotency_key`` makes a retry safe: the same key from the same person, credential
    (``idempotency_scope``) and team returns the first request, and 409s when it asks for something else.
    """
    digest = ""
    if idempotency_key:
        key_team = team if action == Action.CREATE else (tenant.team if tenant is not None else None)
        digest = _payload_digest(
            action=action,
            team=key_team,
            kind=kind,
            name=name,
            tier=tier,
            cluster=cluster,
            tenant=tenant,
            purpose=purpose,
            requested_expiry=requested_expiry,
        )
        # A client's retry may overlap its first attempt: take turns per actor, then look for the first one.
        User.objects.select_for_update(no_key=True).filter(pk=actor.pk).first()
        earlier = TenantRequest.objects.filter(
            requested_by=actor, idempotency_scope=idempotency_scope, team=key_team, idempotency_key=idempotency_key
        ).first()
        if earlier is not None:
            if earlier.idempotency_digest != digest:
                raise IdempotencyConflict(
                    f"Idempotency-Key {idempotency_key!r} was first used for another request ({earlier.pk}); "
                    "use a new key for a new request."
                )
            return earlier
    keyed = {"idempotency_key": idempotency_key, "idempotency_scope": idempotency_scope, "idempotency_digest": digest}
    if action == Action.CREATE:
        req = _submit_create(
            actor=actor,
            team=team,
            kind=kind,
            name=name,
            tier=tier,
            cluster=cluster,
            purpose=purpose,
            requested_expiry=requested_expiry,
            keyed=keyed,
        )
    elif action in (Action.CHANGE_TIER, Action.EXTEND, Action.DELETE):
        req = _submit_change(
            actor=actor,
            action=action,
            tenant=tenant,
            tier=tier,
            purpose=purpose,
            requested_expiry=requested_expiry,
            keyed=keyed,
        )
    else:
        raise ValidationError({"action": f"Unknown action {action!r}."})
    audit.record(actor=actor, action="request.submit", obj=req, team=req.team, after=_snapshot(req), ctx=ctx)
    if req.action != Action.DELETE and req.tier.auto_approve:
        return _approve(req=req, actor=None, comment=f"Auto-approved by tier {req.tier.name}.", ctx=ctx, auto=True)
    if req.action == Action.CHANGE_TIER and downgrade_approves_itself(current=req.tenant.tier, target=req.tier):
        comment = f"Auto-approved: a downgrade from tier {req.tenant.tier.name}, which lets downgrades through."
        return _approve(req=req, actor=None, comment=comment, ctx=ctx, auto=True)
    notifications.request_submitted(req)
    return req


def downgrade_approves_itself(*, current: Tier, target: Tier) -> bool:
    """A move to a smaller tier that grants nothing more, from a tier that lets such downgrades through."""
    return current.auto_approve_downgrades and is_downgrade(target, current)


def _submit_create(
    *,
    actor: User,
    team: Team | None,
    kind: str,
    name: str,
    tier: Tier | None,
    cluster: Cluster | None,
    purpose: str,
    requested_expiry: dt.date | None,
    keyed: dict[str, str],
) -> TenantRequest:
    if team is None or tier is None or cluster is None:
        given = (("team", team), ("tier", tier), ("cluster", cluster))
        raise ValidationError({field: "This field is required." for field, value in given if value is None})
    require_writer(actor=actor, team=team)
    errors: dict[str, list[str] | str] = {}
    if kind not in TenantKind.values:
        errors["kind"] = f"Choose one of: {', '.join(TenantKind.values)}."
    name_errors = tenant_name_errors(name, prefix=cluster.namespace_prefix, reserved=settings.BERTH_RESERVED_NAMES)
    if name_errors:
        errors["name"] = name_errors
    errors.update(_placement_errors(kind=kind, tier=tier, cluster=cluster))
    namespace = cluster.namespace_prefix + name
    if "name" not in errors:
        name_error = _name_taken(cluster=cluster, kind=kind, name=name, namespace=namespace)
        if name_error:
            errors["name"] = name_error
    if errors:
        raise ValidationError(errors)
    expires_at = expiry_check(tier=tier, requested=requested_expiry)
    budget_check(team=team, adding=Allocation.of(tier))
    try:
        with transaction.atomic():
            tenant = Tenant.objects.create(
                name=name,
                namespace=namespace,
                kind=kind,
                team=team,
                tier=tier,
                cluster=cluster,
                purpose=purpose,
                created_by=actor,
                expires_at=expires_at,
                cluster_identity=cluster.physical_id,
            )
    except IntegrityError:
        raise ValidationError({"name": f"'{name}' is already in use on cluster {cluster.name}."}) from None
    return TenantRequest.objects.create(
        action=Action.CREATE,
        kind=kind,
        name=name,
        team=team,
        tier=tier,
        cluster=cluster,
        tenant=tenant,
        purpose=purpose,
        requested_expiry=expires_at.date(),
        requested_by=actor,
        **keyed,
    )


def _name_taken(*, cluster: Cluster, kind: str, name: str, namespace: str) -> str:
    """Why ``name`` cannot be had on ``cluster`` (held by a tenant, or already on the cluster), or ''.

    The cluster is asked only briefly; when it cannot answer, the worker's check before the first
    apply still refuses a name that exists (Berth never adopts).
    """
    worker = hooks.installed()
    lookup = worker.cluster_lookup(cluster, kind=kind, namespace=namespace) if worker else ClusterLookup()
    if lookup.identity:
        cluster_record_identity(cluster=cluster, identity=lookup.identity)
    if selectors.namespace_taken(cluster=cluster, namespace=namespace):
        return f"'{name}' is already in use on cluster {cluster.name}."
    if lookup.name_exists:
        return (
            f"'{namespace}' already exists on cluster {cluster.name} and is not Berth's to give; choose another name."
        )
    return ""


def _submit_change(
    *,
    actor: User,
    action: str,
    tenant: Tenant | None,
    tier: Tier | None,
    purpose: str,
    requested_expiry: dt.date | None,
    keyed: dict[str, str],
) -> TenantRequest:
    if tenant is None:
        raise ValidationError({"tenant": "This field is required."})
    require_writer(actor=actor, team=tenant.team)
    allowed = {S.READY} | ({S.FAILED} if action == Action.DELETE else set())
    if tenant.status not in allowed:
        raise InvalidTransition(f"A tenant that is {tenant.status} cannot take a {action} request.")
    if TenantRequest.objects.filter(tenant=tenant, status=Status.PENDING).exists():
        raise InvalidTransition("This tenant already has a pending request.")
    target_tier = tenant.tier
    if action == Action.CHANGE_TIER:
        target_tier = _change_tier_target(tenant=tenant, tier=tier)
    expiry = None
    if action == Action.EXTEND:
        if requested_expiry is None:
            raise ValidationError({"requested_expiry": "Choose the new expiry date."})
        expiry = expiry_check(tier=tenant.tier, requested=requested_expiry).date()
        if tenant.expires_at and expiry <= tenant.expires_at.date():
            raise ValidationError({"requested_expiry": "Choose a date after the current expiry."})
    try:
        with transaction.atomic():
            return TenantRequest.objects.create(
                action=action,
                kind=tenant.kind,
                name=tenant.name,
                team=tenant.team,
                tier=target_tier,
                cluster=tenant.cluster,
                tenant=tenant,
                purpose=purpose,
                requested_expiry=expiry,
                requested_by=actor,
                **keyed,
            )
    except IntegrityError:
        raise InvalidTransition("This tenant already has a pending request.") from None


def _change_tier_target(*, tenant: Tenant, tier: Tier | None) -> Tier:
    if tier is None:
        raise ValidationError({"tier": "Choose the new tier."})
    if tier.pk == tenant.tier_id:
        raise ValidationError({"tier": "The tenant is already on this tier."})
    errors = _placement_errors(kind=tenant.kind, tier=tier, cluster=tenant.cluster)
    if errors:
        raise ValidationError(errors)
    if tenant.kind == TenantKind.VCLUSTER and (tier.node_selector or {}) != (tenant.tier.node_selector or {}):
        # The control plane keeps its state on a volume, which a node-local StorageClass (local-path, a zone's
        # disks) binds to where it was made: moved to another pool, its pod could never be scheduled again.
        raise ValidationError(
            {
                "tier": f"Tier {tier.name} runs on other nodes than {tenant.tier.name}, and a vcluster's control "
                "plane keeps its data on a volume of the nodes it runs on. Choose a tier of the same node pool, "
                "or request a new vcluster on that tier."
            }
        )
    budget_check(team=tenant.team, adding=Allocation.of(tier) - Allocation.of(tenant.tier))
    return tier


# --- Deciding ------------------------------------------------------------------------------


def _lock_tenant_of(req: TenantRequest) -> Tenant:
    """Lock the request's tenant, then check the request is still pending."""
    tenant = lock_tenant(req.tenant_id)
    status = TenantRequest.objects.filter(pk=req.pk).values_list("status", flat=True).first()
    if status != Status.PENDING:
        raise InvalidTransition(f"This request is already {status}.")
    return tenant


_DECISION_ACTIONS: dict[str, str] = {
    Status.APPROVED: "request.approve",
    Status.REJECTED: "request.reject",
    Status.CANCELLED: "request.cancel",
}


def _record_decision(*, req: TenantRequest, actor: User | None, ctx: AuditContext, **after: object) -> None:
    audit.record(
        actor=actor,
        action=_DECISION_ACTIONS[req.status],
        obj=req,
        team=req.team,
        before={"status": Status.PENDING},
        after={"status": req.status, **after},
        ctx=ctx,
    )


@transaction.atomic
def request_approve(
    *, tenant_request: TenantRequest, actor: User, comment: str = "", ctx: AuditContext = SYSTEM
) -> TenantRequest:
    require_decider(tenant_request=tenant_request, actor=actor)
    return _approve(req=tenant_request, actor=actor, comment=comment, ctx=ctx)


def _approve(
    *, req: TenantRequest, actor: User | None, comment: str, ctx: AuditContext, auto: bool = False
) -> TenantRequest:
    tenant = _lock_tenant_of(req)
    adding = approval_adds(tenant_request=req, tenant=tenant)
    if adding is not None:
        budget_check(team=req.team, adding=adding)
    elif req.action == Action.TRANSFER:
        # The approver decides with the reason on the request (e.g. over the receiving team's budget) in view.
        require_accepted(req, actor=actor)
    req = decide(tenant_request=req, new=Status.APPROVED, actor=actor, comment=comment, auto=auto)
    _record_decision(req=req, actor=actor, ctx=ctx, comment=comment, auto=auto)
    _carry_out(req=req, tenant=tenant, actor=actor, ctx=ctx)
    notifications.request_decided(req)
    return req


def _carry_out(*, req: TenantRequest, tenant: Tenant, actor: User | None, ctx: AuditContext) -> None:
    """What an approved request does to its tenant."""
    if req.action == Action.CREATE:
        transition(tenant=tenant, new=S.APPROVED, actor=actor, action="tenant.approve", ctx=ctx)
        dispatch.enqueue(dispatch.PROVISION, str(tenant.pk))
    elif req.action == Action.CHANGE_TIER:
        _update_tenant(
            tenant, actor=actor, ctx=ctx, action="tenant.change_tier", tier=req.tier, generation=F("generation") + 1
        )
        dispatch.enqueue(dispatch.PROVISION, str(tenant.pk))
    elif req.action == Action.EXTEND:
        assert req.requested_expiry is not None  # an extend request always names its date
        _update_tenant(
            tenant,
            actor=actor,
            ctx=ctx,
            action="tenant.extend",
            expires_at=expiry_end_of_day(req.requested_expiry),
            expiry_reminded_at=None,
        )
    elif req.action == Action.DELETE:
        start_decommission(tenant=tenant, actor=actor, reason=f"Delete request {req.pk} approved.", ctx=ctx)
    elif req.action == Action.TRANSFER:
        transfer_complete(req=req, tenant=tenant, actor=actor, ctx=ctx)


def _update_tenant(tenant: Tenant, *, actor: User | None, ctx: AuditContext, action: str, **fields: object) -> None:
    """A change to a tenant that keeps its status, audited with before and after."""
    before = tenant_snapshot(tenant)
    Tenant.objects.filter(pk=tenant.pk).update(**fields)
    tenant.refresh_from_db()
    audit.record(
        actor=actor, action=action, obj=tenant, team=tenant.team, before=before, after=tenant_snapshot(tenant), ctx=ctx
    )


@transaction.atomic
def request_reject(
    *, tenant_request: TenantRequest, actor: User, reason: str, ctx: AuditContext = SYSTEM
) -> TenantRequest:
    if not reason.strip():
        raise ValidationError({"reason": "Say why the request is rejected."})
    require_decider(tenant_request=tenant_request, actor=actor)
    tenant = _lock_tenant_of(tenant_request)
    req = decide(tenant_request=tenant_request, new=Status.REJECTED, actor=actor, comment=reason)
    _record_decision(req=req, actor=actor, ctx=ctx, reason=reason)
    if req.action == Action.CREATE:
        transition(tenant=tenant, new=S.REJECTED, actor=actor, action="tenant.reject", reason=reason, ctx=ctx)
    notifications.request_decided(req)
    return req


@transaction.atomic
def request_cancel(*, tenant_request: TenantRequest, actor: User, ctx: AuditContext = SYSTEM) -> TenantRequest:
    mine = tenant_request.requested_by_id == actor.pk
    if not mine and not is_owner_or_admin(user=actor, team=tenant_request.team):
        raise Forbidden("Only the requester or a team owner can cancel this request.")
    tenant = _lock_tenant_of(tenant_request)
    req = decide(tenant_request=tenant_request, new=Status.CANCELLED, actor=actor, comment="Cancelled.")
    _record_decision(req=req, actor=actor, ctx=ctx)
    if req.action == Action.CREATE:
        transition(tenant=tenant, new=S.CANCELLED, actor=actor, action="tenant.cancel", ctx=ctx)
    notifications.request_decided(req)
    return req
