"""Divergence between Berth's database and its clusters, typically after a restore from an older dump.

Two cases, both found by the worker and decided by a platform admin (docs/deployment.md, "Backup and restore"):

- a tenant the database believes ready whose namespace is gone, or is another object (its UID is not the one
  Berth recorded): ``diverged``. Nothing is recreated or deleted until an admin chooses ``tenant_recreate`` (a
  fresh namespace, provisioned as for a new tenant) or ``tenant_forget`` (decommissioned: only what still carries
  the recorded UIDs is deleted, so someone else's namespace under that name stays);
- a namespace that carries Berth's labels and a tenant id no live tenant has (made after the dump was taken): an
  ``OrphanNamespace``. Never deleted by a pass or a sweep; an admin re-attaches it to a team
  (``orphan_reattach``: a tenant row with the namespace's UID recorded, so Berth adopts only that very
  namespace) or has it deleted (``orphan_decommission``: UID-checked by the worker).
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from tenants import audit, dispatch
from tenants.audit import SYSTEM, AuditContext
from tenants.errors import InvalidTransition
from tenants.models import Cluster, OrphanNamespace, Team, Tenant, Tier, User
from tenants.services.lifecycle import S, lock_tenant, start_decommission, transition
from tenants.services.permissions import require_platform_admin
from tenants.validation import tenant_name_errors

# The labels worker.manifests puts on everything Berth creates (tenants never imports worker).
MANAGED_BY = ("app.kubernetes.io/managed-by", "berth")
TENANT_ID_LABEL = "berth.dev/tenant-id"


def namespace_key(namespace: str) -> str:
    """The key under which ``Tenant.owned_uids`` records a tenant's Namespace (worker.ownership.TopLevel)."""
    return f"Namespace//{namespace}"


@transaction.atomic
def tenant_mark_diverged(*, tenant: Tenant, reason: str) -> Tenant:
    """The worker found the ready tenant's recorded namespace gone or replaced: stop acting on it, say why."""
    return transition(tenant=tenant, new=S.DIVERGED, actor=None, action="tenant.diverged", reason=reason, ctx=SYSTEM)


@transaction.atomic
def tenant_recreate(*, tenant: Tenant, actor: User, ctx: AuditContext = SYSTEM) -> Tenant:
    """Provision the diverged tenant again, as new: what Berth recorded in its old namespace is forgotten (that
    namespace is gone), so the worker makes a fresh one. A namespace someone else made under the name since is
    still never adopted: the tenant then fails with the reason."""
    require_platform_admin(actor=actor, doing="recreate a diverged tenant")
    tenant = lock_tenant(tenant.pk)
    if tenant.status != S.DIVERGED:
        raise InvalidTransition(f"Only diverged tenants can be recreated; this one is {tenant.status}.")
    forgotten = {
        key: uid
        for key, uid in (tenant.owned_uids or {}).items()
        if key == namespace_key(tenant.namespace) or key.split("/", 2)[1] == tenant.namespace
    }
    kept = {key: uid for key, uid in (tenant.owned_uids or {}).items() if key not in forgotten}
    tenant = transition(
        tenant=tenant,
        new=S.APPROVED,
        actor=actor,
        action="tenant.recreate",
        ctx=ctx,
        reason=f"Recreated by {actor.username} after it diverged.",
        extra={"owned_uids": kept, "applied_generation": 0},
    )
    dispatch.enqueue(dispatch.PROVISION, str(tenant.pk))
    return tenant


@transaction.atomic
def tenant_forget(*, tenant: Tenant, actor: User, ctx: AuditContext = SYSTEM) -> Tenant:
    """Give the diverged tenant up: decommissioned, which deletes only objects carrying the UIDs Berth recorded
    (a replacing namespace is someone else's and stays), then it is deleted in the database."""
    require_platform_admin(actor=actor, doing="forget a diverged tenant")
    tenant = lock_tenant(tenant.pk)
    if tenant.status != S.DIVERGED:
        raise InvalidTransition(f"Only diverged tenants can be forgotten; this one is {tenant.status}.")
    return start_decommission(
        tenant=tenant, actor=actor, reason=f"Forgotten by {actor.username} after it diverged.", ctx=ctx
    )


def orphan_namespaces_record(*, cluster: Cluster, found: list[dict[str, Any]], at: dt.datetime) -> None:
    """What one reconcile pass listed as orphans on ``cluster`` (name, uid, tenant_id, labels, created_at); rows of
    namespaces no longer found go. An observation of the cluster, not a change by anyone: not audited."""
    with transaction.atomic():
        for row in found:
            OrphanNamespace.objects.update_or_create(
                cluster=cluster,
                name=row["name"],
                defaults={**{k: row[k] for k in ("uid", "tenant_id", "labels", "created_at")}, "last_seen_at": at},
            )
        OrphanNamespace.objects.filter(cluster=cluster).exclude(name__in=[row["name"] for row in found]).delete()


def _orphan_snapshot(orphan: OrphanNamespace) -> dict[str, Any]:
    return {
        "cluster": orphan.cluster.name,
        "namespace": orphan.name,
        "uid": orphan.uid,
        "tenant_id": orphan.tenant_id,
        "labels": orphan.labels,
        "created_at": orphan.created_at.isoformat() if orphan.created_at else None,
    }


def _require_berths(orphan: OrphanNamespace) -> None:
    """Only a namespace carrying Berth's own labels and a tenant id Berth does not know is re-attached."""
    labels = orphan.labels or {}
    if labels.get(MANAGED_BY[0]) != MANAGED_BY[1] or labels.get(TENANT_ID_LABEL) != orphan.tenant_id:
        raise ValidationError("This namespace does not carry Berth's labels; Berth never adopts it.")
    if Tenant.objects.filter(pk=_tenant_uuid(orphan)).exists():
        raise ValidationError(
            f"Tenant {orphan.tenant_id} is known to Berth (no longer live): this namespace can only be decommissioned."
        )


def _tenant_uuid(orphan: OrphanNamespace) -> uuid.UUID:
    try:
        return uuid.UUID(orphan.tenant_id)
    except ValueError:
        raise ValidationError(f"The tenant id {orphan.tenant_id!r} on this namespace is not Berth's.") from None


@transaction.atomic
def orphan_reattach(
    *, orphan: OrphanNamespace, team: Team, tier: Tier, actor: User, ctx: AuditContext = SYSTEM
) -> Tenant:
    """Make the orphan a tenant of ``team`` again: a tenant row with the namespace's tenant id and its UID recorded,
    then provisioned (the worker applies the tier onto that very namespace, and refuses it if its UID changed). Its
    ServiceAccounts are made anew, so no token issued before the restore works any more."""
    require_platform_admin(actor=actor, doing="re-attach a namespace")
    orphan = (
        OrphanNamespace.objects.select_for_update(of=("self",), no_key=True).select_related("cluster").get(pk=orphan.pk)
    )
    _require_berths(orphan)
    cluster = orphan.cluster
    prefix = cluster.namespace_prefix or ""
    if not orphan.name.startswith(prefix):
        raise ValidationError(f"Namespace {orphan.name} does not start with the cluster's prefix {prefix!r}.")
    name = orphan.name[len(prefix) :]
    errors = tenant_name_errors(name, prefix=prefix, reserved=[])
    if errors:
        raise ValidationError(errors)
    if not cluster.tiers.filter(pk=tier.pk).exists():
        raise ValidationError({"tier": f"Cluster {cluster.name} does not offer tier {tier.name}."})
    try:
        with transaction.atomic():
            tenant = Tenant.objects.create(
                id=_tenant_uuid(orphan),
                name=name,
                namespace=orphan.name,
                team=team,
                tier=tier,
                cluster=cluster,
                status=S.APPROVED,
                status_reason=f"Re-attached by {actor.username}.",
                purpose=f"Re-attached from namespace {orphan.name} (UID {orphan.uid}).",
                created_by=actor,
                owned_uids={namespace_key(orphan.name): orphan.uid},
                cluster_identity=cluster.physical_id,
                # Tokens issued for the namespace's ServiceAccounts before (to whichever team) must stop working:
                # the worker deletes those accounts and makes them anew, as after a transfer.
                credential_epoch=2,
            )
    except IntegrityError:
        raise ValidationError(f"A live tenant holds namespace {orphan.name} on this cluster already.") from None
    audit.record(
        actor=actor,
        action="orphan.reattach",
        obj=tenant,
        team=team,
        before=_orphan_snapshot(orphan),
        after={"team": team.slug, "tier": tier.name, "status": tenant.status},
        ctx=ctx,
    )
    orphan.delete()
    dispatch.enqueue(dispatch.PROVISION, str(tenant.pk))
    return tenant


@transaction.atomic
def orphan_decommission(*, orphan: OrphanNamespace, actor: User, ctx: AuditContext = SYSTEM) -> OrphanNamespace:
    """Have the orphan deleted: the worker deletes the namespace with its UID as a precondition, and only if it
    still carries Berth's labels and the same tenant id, so a namespace made under that name since stays."""
    require_platform_admin(actor=actor, doing="decommission a namespace")
    orphan = (
        OrphanNamespace.objects.select_for_update(of=("self",), no_key=True).select_related("cluster").get(pk=orphan.pk)
    )
    labels = orphan.labels or {}
    if labels.get(MANAGED_BY[0]) != MANAGED_BY[1] or not orphan.tenant_id:
        raise ValidationError("This namespace does not carry Berth's labels; Berth never deletes it.")
    if orphan.decommission_requested_at is None:
        orphan.decommission_requested_at = timezone.now()
        orphan.save(update_fields=["decommission_requested_at"])
    audit.record(
        actor=actor,
        action="orphan.decommission",
        object_type="namespace",
        object_id=orphan.uid,
        before=_orphan_snapshot(orphan),
        ctx=ctx,
    )
    dispatch.enqueue(dispatch.DELETE_ORPHAN, str(orphan.pk))
    return orphan
