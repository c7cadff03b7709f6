"""Provisioning: turns a tenant row into objects on its cluster and reports back through tenants.services.

Every entry point is idempotent and takes a per-tenant PostgreSQL advisory
lock, so two workers (or a redelivered message) never provision one tenant at
the same time; whoever does not get the lock leaves the job to the holder.
"""

from __future__ import annotations

import contextlib
import logging
import zlib
from collections.abc import Iterator

from django.db import connection

from tenants import dispatch, services
from tenants.errors import InvalidTransition
from tenants.models import Tenant, TenantStatus
from worker import isolation, kube, ownership
from worker.backends import backend_for
from worker.kube import KubePermanentError, KubeTransientError

logger = logging.getLogger(__name__)
S = TenantStatus
READY_TIMEOUT = 60.0


@contextlib.contextmanager
def tenant_lock(tenant_id: str) -> Iterator[bool]:
    """A session-level advisory lock; released on exit or when the worker's connection dies."""
    key = zlib.crc32(f"berth-tenant:{tenant_id}".encode()) - 2**31
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s)", [key])
        got = cur.fetchone()[0]
    try:
        yield got
    finally:
        if got:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s)", [key])


def _load(tenant_id: str) -> Tenant | None:
    return Tenant.objects.select_related("tier", "cluster", "team").filter(pk=tenant_id).first()


# --- Entry points used by the tasks -------------------------------------------------------


def provision(tenant_id: str) -> str:
    """Bring the cluster in line with the tenant; returns what happened (for logs and tests)."""
    with tenant_lock(tenant_id) as got:
        if not got:
            return "locked"
        tenant = _load(tenant_id)
        if tenant is None:
            return "gone"
        if tenant.status == S.APPROVED:
            try:
                tenant = services.tenant_mark_provisioning(tenant=tenant)
            except InvalidTransition:
                return "raced"
        if tenant.status not in (S.PROVISIONING, S.READY):
            return f"skipped ({tenant.status})"
        generation = tenant.generation
        backend = backend_for(tenant)
        try:
            k = kube.for_cluster(tenant.cluster)
            _place_on_physical_cluster(tenant, k)
            tops = backend.top_level(tenant)
            ownership.claim(k, tenant, tops)  # Berth never adopts: before anything is applied
            repaired = backend.apply(tenant, k, detect_drift=tenant.status == S.READY)
            services.tenant_record_owned(tenant=tenant, uids=ownership.uids(k, tops))
            kube.wait_until(
                lambda: backend.is_ready(tenant, k),
                timeout=READY_TIMEOUT,
                what=f"namespace {tenant.namespace} to be ready",
            )
        except KubeTransientError as exc:
            services.tenant_note_progress(tenant=tenant, note=f"Waiting for the cluster: {exc}")
            raise
        except ownership.ForeignObject as exc:
            # Someone else's object under the tenant's name: nothing was changed, and nothing will be.
            services.tenant_mark_failed(tenant=tenant, reason=str(exc))
            return "failed"
        except KubePermanentError as exc:
            if tenant.status == S.PROVISIONING:
                services.tenant_mark_failed(tenant=tenant, reason=str(exc))
                return "failed"
            services.tenant_note_progress(tenant=tenant, note=f"Last reconcile failed: {exc}")
            raise
        if tenant.status == S.PROVISIONING:
            services.tenant_mark_ready(tenant=tenant, applied_generation=generation)
            dispatch.enqueue(dispatch.ISOLATION_CHECK, str(tenant.pk))
            result = "ready"
        else:
            services.tenant_record_applied(tenant=tenant, generation=generation, repaired=repaired)
            result = "repaired" if repaired else "in sync"
        services.tenant_record_usage(tenant=tenant, usage=backend.usage(tenant, k))
        return result


def _place_on_physical_cluster(tenant: Tenant, k: kube.Kube) -> None:
    """Make sure the tenant holds its namespace on the physical API server its cluster record points at.

    The server is known by its kube-system UID (looked up only when the record does not know it yet, or
    the tenant was placed on another server); two records of one server share one namespace space, so a
    namespace another record's live tenant holds there fails this tenant (ForeignObject).
    """
    cluster = tenant.cluster
    if cluster.physical_id and tenant.cluster_identity == cluster.physical_id:
        return
    identity = kube.cluster_identity(k)
    services.cluster_record_identity(cluster=cluster, identity=identity)
    if not services.tenant_record_identity(tenant=tenant, identity=identity):
        raise ownership.ForeignObject(
            f"Namespace {tenant.namespace} on this API server is already held by another Berth tenant "
            f"(through another cluster record pointing at the same server as {cluster.name})."
        )


def decommission(tenant_id: str) -> str:
    with tenant_lock(tenant_id) as got:
        if not got:
            return "locked"
        tenant = _load(tenant_id)
        if tenant is None or tenant.status != S.DECOMMISSIONING:
            return "skipped"
        backend = backend_for(tenant)
        k = kube.for_cluster(tenant.cluster)
        try:
            gone = kube.wait_until(
                lambda: backend.teardown(tenant, k),
                timeout=READY_TIMEOUT,
                what=f"namespace {tenant.namespace} to be deleted",
            )
        except KubePermanentError as exc:
            services.tenant_mark_failed(tenant=tenant, reason=str(exc))
            return "failed"
        if gone:
            services.tenant_mark_deleted(tenant=tenant)
        return "deleted"


def refresh_usage(tenant_id: str) -> None:
    tenant = _load(tenant_id)
    if tenant is None or tenant.status != S.READY:
        return
    services.tenant_record_usage(
        tenant=tenant, usage=backend_for(tenant).usage(tenant, kube.for_cluster(tenant.cluster))
    )


def isolation_report(tenant_id: str) -> dict | None:
    """The tenant's isolation report, checked with its own credentials; None unless it is ready."""
    tenant = _load(tenant_id)
    if tenant is None or tenant.status != S.READY:
        return None
    backend = backend_for(tenant)
    host = kube.for_cluster(tenant.cluster)
    return isolation.report(backend.isolation_client(tenant, host), tenant, backend.isolation_checks())
