"""Provisioning: turns a tenant row into objects on its cluster and reports back through tenants.services.

Every entry point is idempotent and takes a per-tenant PostgreSQL advisory
lock, so two workers (or a redelivered message) never provision one tenant at
the same time; whoever does not get the lock leaves the job to the holder.
Nothing here waits for a cluster: ``provision`` and ``decommission`` do what
can be done now and return ``Progress``; "not yet" carries when to look again,
and the Celery task re-queues itself for then.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from tenants import dispatch, services
from tenants.errors import InvalidTransition
from tenants.models import LIVE_STATUSES, OrphanNamespace, Tenant, TenantKind, TenantStatus
from tenants.services.sleep import SLEEP_KINDS
from worker import isolation, kube, manifests, measured_usage, ownership, sleep
from worker.backends import backend_for, vcluster
from worker.backends.base import Backend, NotReadyYet
from worker.backends.namespace import NamespaceBackend
from worker.backends.virtual import VirtualClusterBackend
from worker.cluster_settings import ClusterConfigError
from worker.kube import KubeForbidden, KubePermanentError, KubeTransientError

logger = logging.getLogger(__name__)
S = TenantStatus
# How soon to look again at a tenant that is not ready (or not gone) yet: soon at first, then less often.
POLL_MIN_SECONDS = 2.0
POLL_MAX_SECONDS = 30.0


class Outcome(StrEnum):
    READY = "ready"
    NOT_YET = "not yet"
    FAILED = "failed"
    REPAIRED = "repaired"
    IN_SYNC = "in sync"
    DELETED = "deleted"
    LOCKED = "locked"  # another worker holds the tenant
    GONE = "gone"  # no such tenant
    RACED = "raced"  # someone moved the tenant first
    SKIPPED = "skipped"  # nothing to do in the tenant's status
    DIVERGED = "diverged"  # its recorded namespace is gone or another object: left for an admin


@dataclass(frozen=True)
class Progress:
    """What one provisioning step achieved; ``requeue_after`` (seconds) is set when the job must come back."""

    outcome: Outcome
    reason: str = ""
    requeue_after: float | None = None
    # The generation this provisioning run has applied in full: the step that comes back only looks.
    applied_generation: int | None = None

    def __str__(self) -> str:
        return f"{self.outcome}: {self.reason}" if self.reason else str(self.outcome)


def lock_key(tenant_id: str) -> int:
    """The tenant's PostgreSQL advisory lock key."""
    return zlib.crc32(f"berth-tenant:{tenant_id}".encode()) - 2**31


@contextlib.contextmanager
def tenant_lock(tenant_id: str) -> Iterator[bool]:
    """A session-level advisory lock; released on exit or when the worker's connection dies."""
    key = lock_key(tenant_id)
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s)", [key])
        row = cur.fetchone()
    got = bool(row and row[0])
    try:
        yield got
    finally:
        if got:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s)", [key])


def _load(tenant_id: str) -> Tenant | None:
    return Tenant.objects.select_related("tier", "cluster", "team").filter(pk=tenant_id).first()


def _waited(tenant: Tenant) -> dt.timedelta:
    """How long the tenant has been in its status (provisioning, decommissioning)."""
    return timezone.now() - tenant.status_changed_at


def _come_back(
    tenant: Tenant, *, doing: str, note: str, applied_generation: int | None = None, after: float | None = None
) -> Progress:
    """Not there yet: fail the tenant once it has been at it too long, else say when to look again: ``after``
    seconds (POLL_MIN_SECONDS unless said) at first, then a quarter of the time waited so far."""
    waited = _waited(tenant)
    limit = int(settings.BERTH_PROVISION_TIMEOUT_SECONDS)
    if waited.total_seconds() >= limit:
        return _fail(tenant, f"Not {doing} after {_minutes(limit)}: {note}")
    services.tenant_note_progress(tenant=tenant, note=note)
    poll = min(POLL_MAX_SECONDS, max(POLL_MIN_SECONDS if after is None else after, waited.total_seconds() / 4))
    return Progress(Outcome.NOT_YET, reason=note, requeue_after=poll, applied_generation=applied_generation)


def _minutes(seconds: int) -> str:
    minutes = max(1, round(seconds / 60))
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


def _fail(tenant: Tenant, reason: str) -> Progress:
    services.tenant_mark_failed(tenant=tenant, reason=reason)
    return Progress(Outcome.FAILED, reason=reason)


# --- Entry points used by the tasks -------------------------------------------------------


def provision(
    tenant_id: str, applied_generation: int | None = None, *, measure: measured_usage.Measure | None = None
) -> Progress:
    """Bring the cluster in line with the tenant, as far as it goes now; says what happened and whether to come
    back.

    ``applied_generation`` comes from the step before in the same provisioning run (``Progress``): when the
    tenant is still provisioning that generation and its backend applies everything in one step, this step only
    looks whether the cluster reports it ready (hand edits in between are the reconcile pass's to repair).
    ``measure`` gives a ready tenant's measured usage for its quota reading (a reconcile pass hands in the one
    measurement it takes for the whole cluster); by default its cluster's Prometheus is asked.
    """
    with tenant_lock(tenant_id) as got:
        if not got:
            return Progress(Outcome.LOCKED)
        tenant = _load(tenant_id)
        if tenant is None:
            return Progress(Outcome.GONE)
        if tenant.status == S.APPROVED:
            try:
                tenant = services.tenant_mark_provisioning(tenant=tenant)
            except InvalidTransition:
                return Progress(Outcome.RACED)
        if tenant.status not in (S.PROVISIONING, S.READY):
            return Progress(Outcome.SKIPPED, reason=str(tenant.status))
        with kube.one_step():
            return _provision(tenant, applied_generation, measure or measured_usage.measure_tenant)


def _provision(tenant: Tenant, applied_generation: int | None, measure: measured_usage.Measure) -> Progress:
    generation = tenant.generation
    try:
        backend = backend_for(tenant)
        k = kube.for_cluster(tenant.cluster)
        if tenant.status == S.READY and (reason := _divergence(tenant, backend, k)):
            services.tenant_mark_diverged(tenant=tenant, reason=reason)
            return Progress(Outcome.DIVERGED, reason=reason)
        if tenant.status == S.PROVISIONING and applied_generation == generation and backend.applied_in_one_step:
            repaired: list[str] = []
        else:
            repaired = _apply(tenant, backend, k)
        ready = backend.is_ready(tenant, k)
    except NotReadyYet as exc:
        return _not_ready(tenant, str(exc), after=exc.after)
    except KubeTransientError as exc:
        services.tenant_note_progress(tenant=tenant, note=f"Waiting for the cluster: {exc}")
        raise
    except ownership.ForeignObject as exc:
        # Someone else's object under the tenant's name: nothing was changed, and nothing will be.
        return _fail(tenant, str(exc))
    except (KubePermanentError, ClusterConfigError) as exc:
        if tenant.status == S.PROVISIONING:
            return _fail(tenant, str(exc))
        services.tenant_note_progress(tenant=tenant, note=f"Last reconcile failed: {exc}")
        raise
    if tenant.status == S.READY:
        services.tenant_record_applied(tenant=tenant, generation=generation, repaired=repaired)
        _record_usage(tenant, backend, k, measure)
        if not ready:
            # Re-applied, but something is not up (again): say so; the periodic reconcile looks again.
            services.tenant_note_progress(tenant=tenant, note="Re-applied; the cluster does not report it ready.")
        return Progress(Outcome.REPAIRED if repaired else Outcome.IN_SYNC, reason="; ".join(repaired))
    if not ready:
        return _not_ready(tenant, "Applied; waiting for the cluster to report it ready.", applied_generation=generation)
    services.tenant_mark_ready(tenant=tenant, applied_generation=generation)
    dispatch.enqueue(dispatch.ISOLATION_CHECK, str(tenant.pk))
    _record_usage(tenant, backend, k, measure)
    return Progress(Outcome.READY)


def _record_usage(tenant: Tenant, backend: Backend, k: kube.Kube, measure: measured_usage.Measure) -> None:
    """The tenant's quota reading, with what its containers used when that could be measured."""
    usage = backend.usage(tenant, k)
    services.tenant_record_usage(tenant=tenant, usage=usage, measured=measure(tenant, usage))


def _divergence(tenant: Tenant, backend: Backend, k: kube.Kube) -> str:
    """Why the ready tenant's recorded namespace is not on the cluster as recorded ('' when it is): checked before
    anything is applied, so a namespace gone since (or replaced) is never recreated behind an admin's back."""
    for top in backend.top_level(tenant):
        if top.kind == "Namespace":
            live = k.get(top.kind, top.name, namespace=top.namespace, fresh=True)
            if reason := ownership.divergence(tenant, top, live):
                return reason
    return ""


def _apply(tenant: Tenant, backend: Backend, k: kube.Kube) -> list[str]:
    """Claim the tenant's names (Berth never adopts), then apply; what drift was repaired."""
    _place_on_physical_cluster(tenant, k)
    tops = backend.top_level(tenant)
    ownership.claim(k, tenant, tops)  # before anything is applied
    accounts = backend.service_accounts(tenant) if isinstance(backend, NamespaceBackend) else []
    epoch = tenant.credential_epoch
    renewed: list[str] | None = []
    if epoch != tenant.applied_credential_epoch:
        if isinstance(backend, VirtualClusterBackend):
            renewed = backend.renew_credentials(tenant, k)  # its identities live inside the virtual cluster
        else:
            renewed = _renew_service_accounts(tenant, k, accounts)
    # A ready tenant whose generation moved on (a tier change, a transfer) differs from the cluster on purpose:
    # that is the change being applied, not drift someone made by hand.
    drift = tenant.status == S.READY and tenant.applied_generation == tenant.generation
    repaired = backend.apply(tenant, k, detect_drift=drift)
    # The ServiceAccounts as the apply left them (made anew, or again after someone deleted one): read from the
    # apply's answers, not the cluster.
    known = {key: uid for key, uid in (tenant.owned_uids or {}).items() if not key.startswith("ServiceAccount/")}
    services.tenant_record_owned(tenant=tenant, uids=ownership.uids(k, tops + accounts, known=known))
    if renewed is None:
        raise NotReadyYet("The tenant's ServiceAccounts are renewed once Berth can reach them.")
    if epoch != tenant.applied_credential_epoch:
        services.tenant_record_credentials_renewed(tenant=tenant, epoch=epoch, renewed=renewed)
    return repaired


def _renew_service_accounts(tenant: Tenant, k: kube.Kube, accounts: list[ownership.TopLevel]) -> list[str] | None:
    """After a transfer (the credential epoch was bumped), delete the tenant's ServiceAccounts, the very ones
    Berth made (by recorded UID): the apply that follows makes new ones, and every token issued for the old ones is
    refused (a TokenRequest token is bound to its ServiceAccount's UID). What was deleted; None when the worker
    may not look in the namespace yet (its own grant there was removed: the apply puts it back first).

    Someone else's ServiceAccount under Berth's name is never deleted: ForeignObject, nothing changed.
    """
    deleted = []
    for top in accounts:
        try:
            live = k.get(top.kind, top.name, namespace=top.namespace, fresh=True)
        except KubeForbidden:
            return None
        if live is None:
            continue
        ownership.claim(k, tenant, [top])
        ownership.delete(k, tenant, top)
        deleted.append(f"{top.kind}/{top.name}")
    return deleted


def _not_ready(
    tenant: Tenant, note: str, *, applied_generation: int | None = None, after: float | None = None
) -> Progress:
    if tenant.status == S.READY:
        services.tenant_note_progress(tenant=tenant, note=note)
        return Progress(Outcome.NOT_YET, reason=note, requeue_after=POLL_MIN_SECONDS if after is None else after)
    return _come_back(tenant, doing="ready", note=note, applied_generation=applied_generation, after=after)


def _place_on_physical_cluster(tenant: Tenant, k: kube.Kube) -> None:
    """Make sure the tenant holds its namespace on the physical API server its cluster record points at.

    The server is known by its kube-system UID (looked up only when the record does not know it yet, or
    the tenant was placed on another server); two records of one server share one namespace space, so a
    namespace another record's live tenant holds there fails this tenant (ForeignObject).
    """
    cluster = tenant.cluster
    if cluster.physical_id and tenant.cluster_identity == cluster.physical_id:
        return
    identity = kube.cluster_identity(k, cached=True)
    services.cluster_record_identity(cluster=cluster, identity=identity)
    if not services.tenant_record_identity(tenant=tenant, identity=identity):
        raise ownership.ForeignObject(
            f"Namespace {tenant.namespace} on this API server is already held by another Berth tenant "
            f"(through another cluster record pointing at the same server as {cluster.name})."
        )


def decommission(tenant_id: str) -> Progress:
    """Ask for the deletion of everything Berth created for the tenant; deleted once it is really gone."""
    with tenant_lock(tenant_id) as got:
        if not got:
            return Progress(Outcome.LOCKED)
        tenant = _load(tenant_id)
        if tenant is None:
            return Progress(Outcome.GONE)
        if tenant.status != S.DECOMMISSIONING:
            return Progress(Outcome.SKIPPED, reason=str(tenant.status))
        try:
            gone = backend_for(tenant).teardown(tenant, kube.for_cluster(tenant.cluster))
        except (KubePermanentError, ClusterConfigError) as exc:
            return _fail(tenant, str(exc))
        if not gone:
            return _come_back(tenant, doing="deleted", note="Deleting; waiting for the cluster to finish.")
        services.tenant_mark_deleted(tenant=tenant)
        return Progress(Outcome.DELETED)


def apply_sleep(tenant_id: str) -> Progress:
    """Make the tenant's workloads match ``Tenant.sleeping`` (scaled to zero, or restored) and report it."""
    with tenant_lock(tenant_id) as got:
        if not got:
            return Progress(Outcome.LOCKED)
        tenant = _load(tenant_id)
        if tenant is None:
            return Progress(Outcome.GONE)
        if tenant.status != S.READY or tenant.kind not in SLEEP_KINDS:
            return Progress(Outcome.SKIPPED, reason=str(tenant.status))
        return enforce_sleep(tenant, kube.for_cluster(tenant.cluster))


def enforce_sleep(tenant: Tenant, k: kube.Kube) -> Progress:
    """One sleep (or wake) pass over the tenant's namespace; the caller holds the tenant's lock.

    A sleeping tenant is put back to sleep on every pass (the reconcile pass calls this too), so what was
    created or scaled up while it slept goes back to zero. An awake tenant whose restore is not finished is
    restored; an awake one that is applied costs nothing.
    """
    if tenant.sleeping or not tenant.sleep_applied:
        if tenant.kind == TenantKind.VCLUSTER:
            result = vcluster.sleep_pass(tenant, k)  # inside the virtual cluster, then its control plane
        elif tenant.sleeping:
            result = sleep.sleep_namespace(k, tenant.namespace)
        else:
            result = sleep.wake_namespace(k, tenant.namespace, max_replicas=tenant.tier.max_pods)
        if not tenant.sleeping:
            result.carry(tenant.sleep_note)  # what an earlier pass of this wake left at zero
    else:
        return Progress(Outcome.IN_SYNC)
    if result.conflicts or result.waiting:
        services.tenant_note_sleep(tenant=tenant, sleeping=tenant.sleeping, note=result.note())
        return Progress(Outcome.NOT_YET, reason=result.note(), requeue_after=POLL_MIN_SECONDS)
    services.tenant_record_sleep_applied(tenant=tenant, sleeping=tenant.sleeping, note=result.note())
    outcome = Outcome.REPAIRED if result.changed else Outcome.IN_SYNC
    return Progress(outcome, reason=", ".join(result.changed))


def delete_orphan(orphan_id: int) -> str:
    """Delete an orphan namespace an admin chose to decommission (tenants.services.orphan_decommission): only the
    very namespace listed (its UID as the precondition), and only while it still carries Berth's labels, the same
    tenant id, and no live tenant has that id (an admin may have re-attached it since); what was done."""
    orphan = OrphanNamespace.objects.select_related("cluster").filter(pk=orphan_id).first()
    if orphan is None or orphan.decommission_requested_at is None:
        return "nothing asked"
    k = kube.for_cluster(orphan.cluster)
    live = k.get("Namespace", orphan.name, fresh=True)
    if live is None:
        return "gone"
    meta = live["metadata"]
    labels = meta.get("labels") or {}
    berths = all(labels.get(key) == value for key, value in manifests.MANAGED_BY.items())
    if str(meta.get("uid")) != orphan.uid or not berths or labels.get(manifests.TENANT_ID_LABEL) != orphan.tenant_id:
        return "another namespace under that name now: left alone"
    if Tenant.objects.filter(pk__in=_as_uuid(orphan.tenant_id), status__in=LIVE_STATUSES).exists():
        return "a live tenant has it: left alone"
    if not meta.get("deletionTimestamp"):
        k.delete("Namespace", orphan.name, uid=orphan.uid)
    return "deleting"


def _as_uuid(value: str) -> list[str]:
    try:
        return [str(uuid.UUID(value))]
    except ValueError:
        return []


def refresh_usage(tenant_id: str) -> None:
    tenant = _load(tenant_id)
    if tenant is None or tenant.status != S.READY:
        return
    _record_usage(tenant, backend_for(tenant), kube.for_cluster(tenant.cluster), measured_usage.measure_tenant)


def isolation_report(tenant_id: str) -> dict[str, Any] | None:
    """The tenant's isolation report, checked with its own credentials; None unless it is ready."""
    tenant = _load(tenant_id)
    if tenant is None or tenant.status != S.READY:
        return None
    backend = backend_for(tenant)
    host = kube.for_cluster(tenant.cluster)
    return isolation.report(backend.isolation_client(tenant, host), tenant, backend.isolation_checks())
