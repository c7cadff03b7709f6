"""Lifecycle: the guarded status changes of tenants and requests, and what the worker reports back.

Tenant status moves only through ``transition``, which checks ``TRANSITIONS`` and
updates with the old status in the WHERE clause, so two workers or two admins can
never both win; a request is decided only through ``decide``, guarded the same way.
Nothing else assigns a status.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction
from django.db.models import ForeignKey, Model
from django.utils import timezone

from tenants import audit, dispatch, metrics, notifications
from tenants.audit import SYSTEM, AuditContext
from tenants.errors import InvalidTransition
from tenants.models import Tenant, TenantRequest, TenantStatus, User
from tenants.services.sleep import tenant_end_sleep_on_removal
from tenants.services.usage import usage_record_readings

S = TenantStatus
TRANSITIONS: dict[str, set[str]] = {
    S.REQUESTED: {S.APPROVED, S.REJECTED, S.CANCELLED},
    S.APPROVED: {S.PROVISIONING, S.FAILED, S.DECOMMISSIONING},
    S.PROVISIONING: {S.READY, S.FAILED, S.DECOMMISSIONING},
    S.READY: {S.PROVISIONING, S.DECOMMISSIONING, S.FAILED, S.DIVERGED},
    S.FAILED: {S.APPROVED, S.DECOMMISSIONING},
    # An admin decides (tenants.services.divergence): recreated (approved again) or forgotten (decommissioned).
    S.DIVERGED: {S.APPROVED, S.DECOMMISSIONING},
    S.DECOMMISSIONING: {S.DELETED, S.FAILED},
    S.DELETED: set(),
    S.REJECTED: set(),
    S.CANCELLED: set(),
}


def reread(obj: Model, *, keep: Iterable[str]) -> None:
    """``obj.refresh_from_db()``, keeping the related rows named in ``keep`` it had loaded, where their keys are
    unchanged: Django drops them all, and the audit snapshot, the notifications and the caller's next steps would
    read each again. Name only rows the caller's change leaves alone (a decision changes its request's tenant)."""
    fields = [obj._meta.get_field(name) for name in keep]
    kept = {f: f.get_cached_value(obj) for f in fields if isinstance(f, ForeignKey) and f.is_cached(obj)}
    obj.refresh_from_db()
    for f, related in kept.items():
        if getattr(obj, f.attname) == (None if related is None else related.pk):
            f.set_cached_value(obj, related)


def tenant_snapshot(tenant: Tenant) -> dict[str, Any]:
    """What the audit trail records of a tenant before and after a change."""
    return {
        "status": tenant.status,
        "tier": tenant.tier.name,
        "expires_at": tenant.expires_at.isoformat() if tenant.expires_at else None,
        "generation": tenant.generation,
    }


def transition(
    *,
    tenant: Tenant,
    new: str,
    actor: User | None,
    action: str,
    ctx: AuditContext,
    reason: str = "",
    extra: dict[str, Any] | None = None,
) -> Tenant:
    """Move ``tenant`` to ``new`` if it is still in the status the caller saw; audited in the caller's transaction."""
    old = tenant.status
    if new not in TRANSITIONS[old]:
        raise InvalidTransition(f"A tenant that is {old} cannot become {new}.")
    before = tenant_snapshot(tenant)
    now = timezone.now()
    fields: dict[str, Any] = {"status": new, "status_reason": reason, "status_changed_at": now, **(extra or {})}
    if new == S.READY:
        fields["ready_at"] = now
    if Tenant.objects.filter(pk=tenant.pk, status=old).update(**fields) != 1:
        raise InvalidTransition(f"The tenant is no longer {old}; someone else acted first.")
    reread(tenant, keep=("tier", "team", "cluster"))  # a status change leaves them alone
    after = tenant_snapshot(tenant)
    if reason:
        after["reason"] = reason
    audit.record(actor=actor, action=action, obj=tenant, team=tenant.team, before=before, after=after, ctx=ctx)
    return tenant


def lock_tenant(pk: UUID | str) -> Tenant:
    """The tenant, locked for the caller's transaction, as it is once the lock is ours (with tier, team, cluster).

    Locked without joins: under FOR UPDATE, PostgreSQL checks a join again against the row another transaction
    just changed (a tier change, a transfer to another team) and would return nothing; and it would lock the
    joined rows too, the tier and cluster all of a cluster's requests share and the team a submission locks for
    its budget, so decisions and submissions of different tenants deadlocked under load (bench/api_load.py).

    FOR NO KEY UPDATE, as every row lock in Berth: it excludes other writers of the row as FOR UPDATE does, but
    not the FOR KEY SHARE with which PostgreSQL checks, at commit, a new row's foreign key to it. Under FOR UPDATE
    a submission (its team locked, a request pointing at the tenant) and the usage sampler (the tenant locked, a
    usage day pointing at the team) deadlocked when they committed together.
    """
    Tenant.objects.select_for_update(no_key=True).filter(pk=pk).values_list("pk", flat=True).get()
    return Tenant.objects.select_related("tier", "team", "cluster").get(pk=pk)


def decide(
    *, tenant_request: TenantRequest, new: str, actor: User | None, comment: str, auto: bool = False
) -> TenantRequest:
    """Decide a pending request (approve, reject, cancel) unless someone else already did."""
    updated = TenantRequest.objects.filter(pk=tenant_request.pk, status=TenantRequest.Status.PENDING).update(
        status=new,
        decided_by=actor,
        decided_at=timezone.now(),
        decision_comment=comment,
        auto_approved=auto,
    )
    reread(tenant_request, keep=("team", "tier", "cluster", "requested_by"))
    if updated != 1:
        raise InvalidTransition(f"This request is already {tenant_request.status}.")
    return tenant_request


def start_decommission(*, tenant: Tenant, actor: User | None, reason: str, ctx: AuditContext) -> Tenant:
    """Move to decommissioning, cancel what is still pending for the tenant, and send the job."""
    tenant = transition(
        tenant=tenant,
        new=S.DECOMMISSIONING,
        actor=actor,
        action="tenant.decommission",
        reason=reason,
        ctx=ctx,
        extra={"decommission_requested_at": tenant.decommission_requested_at or timezone.now()},
    )
    for pending in TenantRequest.objects.filter(tenant=tenant, status=TenantRequest.Status.PENDING):
        decide(
            tenant_request=pending,
            new=TenantRequest.Status.CANCELLED,
            actor=actor,
            comment="Tenant is being decommissioned.",
        )
        audit.record(
            actor=actor,
            action="request.cancel",
            obj=pending,
            team=tenant.team,
            before={"status": TenantRequest.Status.PENDING},
            after={"status": pending.status, "reason": reason},
            ctx=ctx,
        )
        notifications.request_decided(pending)
    dispatch.enqueue(dispatch.DECOMMISSION, str(tenant.pk))
    return tenant


# --- What the worker reports --------------------------------------------------------------


@transaction.atomic
def tenant_mark_provisioning(*, tenant: Tenant) -> Tenant:
    return transition(tenant=tenant, new=S.PROVISIONING, actor=None, action="tenant.provisioning", ctx=SYSTEM)


@transaction.atomic
def tenant_mark_ready(*, tenant: Tenant, applied_generation: int) -> Tenant:
    previously_ready_at = tenant.ready_at
    tenant = transition(
        tenant=tenant,
        new=S.READY,
        actor=None,
        action="tenant.ready",
        ctx=SYSTEM,
        extra={"applied_generation": applied_generation},
    )
    notifications.tenant_status(tenant)
    metrics.provision_finished(tenant=tenant, result="ready")
    metrics.tenant_became_ready(tenant=tenant, previously_ready_at=previously_ready_at)
    return tenant


@transaction.atomic
def tenant_mark_failed(*, tenant: Tenant, reason: str) -> Tenant:
    provisioning = tenant.status != S.DECOMMISSIONING
    tenant = transition(tenant=tenant, new=S.FAILED, actor=None, action="tenant.failed", reason=reason, ctx=SYSTEM)
    notifications.tenant_status(tenant)
    if provisioning:
        metrics.provision_finished(tenant=tenant, result="failed")
    return tenant


@transaction.atomic
def tenant_mark_deleted(*, tenant: Tenant) -> Tenant:
    tenant = transition(tenant=tenant, new=S.DELETED, actor=None, action="tenant.deleted", ctx=SYSTEM)
    tenant_end_sleep_on_removal(tenant=tenant)
    notifications.tenant_status(tenant)
    return tenant


@transaction.atomic
def tenant_record_applied(*, tenant: Tenant, generation: int, repaired: list[str]) -> None:
    """A ready tenant was re-applied; say what drift was repaired, if any."""
    Tenant.objects.filter(pk=tenant.pk).update(applied_generation=generation)
    metrics.provision_finished(tenant=tenant, result="repaired" if repaired else "in_sync")
    metrics.drift_repaired(tenant=tenant, objects=len(repaired))
    if repaired:
        audit.record(
            actor=None,
            action="tenant.drift_repaired",
            obj=tenant,
            team=tenant.team,
            after={"repaired": repaired, "generation": generation},
        )
        notifications.tenant_drift_repaired(tenant, repaired=repaired, generation=generation)


def tenant_record_owned(*, tenant: Tenant, uids: dict[str, str]) -> None:
    """Remember the UIDs of the top-level objects Berth created for the tenant, as they are right after an apply
    (decommission deletes only those; one that is no longer wanted, such as a dropped FlowSchema, is forgotten)."""
    if uids != tenant.owned_uids:
        Tenant.objects.filter(pk=tenant.pk).update(owned_uids=uids)
        tenant.owned_uids = uids


def tenant_record_identity(*, tenant: Tenant, identity: str) -> bool:
    """Place the tenant on the physical API server ``identity``; False when another live tenant holds its
    namespace there (the database's one-namespace-one-tenant constraint)."""
    if tenant.cluster_identity == identity:
        return True
    try:
        with transaction.atomic():
            Tenant.objects.filter(pk=tenant.pk).update(cluster_identity=identity)
    except IntegrityError:
        return False
    tenant.cluster_identity = identity
    return True


def tenant_note_progress(*, tenant: Tenant, note: str) -> None:
    """A visible note on a tenant that keeps its status (e.g. 'waiting for the cluster'); not a transition."""
    Tenant.objects.filter(pk=tenant.pk, status=tenant.status).update(status_reason=note[:2000])


def tenants_record_resent(*, tenant_ids: Iterable[str], at: dt.datetime, sleep: bool = False) -> int:
    """The sweep re-sent these tenants' owed jobs (their sleep jobs with ``sleep``) at ``at``, recorded in one UPDATE
    (Tenant.resent_at, sleep_resent_at); how many rows.

    Not audited: bookkeeping of the sweep's own pacing, not a state change (the tenant's status, tier and
    everything its owners or the cluster see stay as they were; the audit trail records every state change, and
    a row per re-send would only repeat that a tenant is still waiting)."""
    ids = list(tenant_ids)
    if not ids:
        return 0
    return Tenant.objects.filter(pk__in=ids).update(**{"sleep_resent_at" if sleep else "resent_at": at})


def tenant_record_usage(*, tenant: Tenant, usage: dict[str, Any], measured: dict[str, float] | None = None) -> None:
    """Quota usage read back from the cluster: an observation, not a state change, so not audited; it also
    goes into the usage history, with what the tenant's containers used (``measured``, by its cluster's
    Prometheus: ``{"cpu": cores, "memory": bytes}``) when it was measured."""
    now = timezone.now()
    fields: dict[str, Any] = {"quota_usage": usage, "quota_usage_at": now}
    if usage_changed(tenant.quota_usage, usage):
        fields["last_activity_at"] = now  # activity Berth can see: the idle clock (services.sleep) restarts
    Tenant.objects.filter(pk=tenant.pk).update(**fields)
    reading = usage if measured is None else {**usage, "measured": measured}
    usage_record_readings(readings={str(tenant.pk): reading}, at=now)


def usage_changed(before: dict[str, Any] | None, after: dict[str, Any]) -> bool:
    """Whether what a tenant uses changed between two readings (pods came or went, requests changed)."""
    return bool(before) and (before or {}).get("used") != after.get("used")


def tenants_record_usage(
    *, usages: dict[str, dict[str, Any]], readings: dict[str, dict[str, Any]], active: Iterable[str] = ()
) -> None:
    """Quota usage of many tenants read back in one reconcile pass: ``usages`` (the ones that changed) are
    stored in one query, not one per tenant; ``readings`` (every tenant read, with its measured part when there is
    one, see tenant_record_usage) go into the usage history;
    ``active`` (tenants whose use changed) restart their idle clock (services.sleep)."""
    now = timezone.now()
    rows = [Tenant(pk=pk, quota_usage=usage, quota_usage_at=now) for pk, usage in usages.items()]
    Tenant.objects.bulk_update(rows, ["quota_usage", "quota_usage_at"], batch_size=500)
    active = list(active)
    if active:
        Tenant.objects.filter(pk__in=active).update(last_activity_at=now)
    usage_record_readings(readings=readings, at=now)


@transaction.atomic
def tenant_record_isolation_report(*, tenant: Tenant, report: dict[str, Any]) -> None:
    Tenant.objects.filter(pk=tenant.pk).update(isolation_report=report, isolation_report_at=timezone.now())
    failed_checks = [str(c["id"]) for c in report.get("checks", []) if not c.get("passed")]
    audit.record(
        actor=None,
        action="tenant.isolation_checked",
        obj=tenant,
        team=tenant.team,
        after={"passed": report.get("passed"), "failed_checks": failed_checks},
    )
    if report.get("passed") is False:
        notifications.tenant_isolation_failed(tenant, failed_checks=failed_checks)


__all__ = [
    "S",
    "TRANSITIONS",
    "decide",
    "lock_tenant",
    "start_decommission",
    "tenant_mark_deleted",
    "tenant_mark_failed",
    "tenant_mark_provisioning",
    "tenant_mark_ready",
    "tenant_note_progress",
    "tenant_record_applied",
    "tenant_record_identity",
    "tenant_record_owned",
    "tenant_record_isolation_report",
    "tenant_record_usage",
    "tenant_snapshot",
    "tenants_record_resent",
    "tenants_record_usage",
    "transition",
]
