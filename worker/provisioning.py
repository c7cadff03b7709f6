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
from typing import Any

from django.db import connection

from tenants import dispatch, services
from tenants.errors import InvalidTransition
from tenants.models import Tenant, TenantStatus
from worker import kube, manifests
from worker.kube import Kube, KubePermanentError, KubeTransientError

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


# --- The namespace backend ------------------------------------------------------------


def cluster_facts(k: Kube) -> manifests.ClusterFacts:
    return manifests.ClusterFacts(
        storage_classes=tuple(sorted(o["metadata"]["name"] for o in k.list("StorageClass"))),
        priority_classes=tuple(sorted(o["metadata"]["name"] for o in k.list("PriorityClass"))),
    )


def _is_subset(want: Any, have: Any) -> bool:
    """True when every field we set is present with the same value on the server."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_is_subset(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(_is_subset(w, h) for w, h in zip(want, have))
    return kube.same_value(want, have)


def _drift(k: Kube, objs: list[dict]) -> list[str]:
    """What is missing or was edited by hand, before we apply over it."""
    repaired = []
    for obj in objs:
        meta = obj["metadata"]
        live = k.get(obj["kind"], meta["name"], namespace=meta.get("namespace"))
        name = f"{obj['kind']}/{meta['name']}"
        if live is None:
            repaired.append(f"{name} was missing")
            continue
        wanted = {key: value for key, value in obj.items() if key not in ("apiVersion", "kind", "metadata")}
        if not _is_subset(wanted, live) or not _is_subset(meta.get("labels", {}), live["metadata"].get("labels", {})):
            repaired.append(f"{name} was changed")
    return repaired


class NamespaceBackend:
    """A namespace with quota, limits, network policies, RBAC and fairness."""

    def render(self, tenant: Tenant, k: Kube) -> list[dict]:
        return manifests.namespace_tenant(tenant, tenant.tier, tenant.cluster, cluster_facts(k))

    def apply(self, tenant: Tenant, k: Kube, *, detect_drift: bool) -> list[str]:
        objs = self.render(tenant, k)
        repaired = _drift(k, objs) if detect_drift else []
        k.apply(objs[:1])  # the Namespace first, so namespaced objects have a home
        k.apply(objs[1:])
        self._prune(tenant, k, objs)
        return repaired

    def _prune(self, tenant: Tenant, k: Kube, objs: list[dict]) -> None:
        """Remove berth objects a tier change no longer wants (e.g. an ingress policy)."""
        wanted = {(o["kind"], o["metadata"]["name"]) for o in objs}
        selector = f"berth.dev/tenant-id={tenant.pk}"
        for kind in ("NetworkPolicy", "ResourceQuota"):
            for live in k.list(kind, namespace=tenant.namespace, label_selector=selector):
                if (kind, live["metadata"]["name"]) not in wanted:
                    k.delete(kind, live["metadata"]["name"], namespace=tenant.namespace)
        if manifests.flow_schema(tenant, tenant.tier, tenant.cluster) is None:
            k.delete("FlowSchema", manifests.flow_schema_name(tenant))

    def is_ready(self, tenant: Tenant, k: Kube) -> bool:
        ns = k.get("Namespace", tenant.namespace)
        if not ns or (ns.get("status") or {}).get("phase") != "Active":
            return False
        quota = k.get("ResourceQuota", "berth-quota", namespace=tenant.namespace)
        # The quota controller has observed the quota: it is enforced from here on.
        return bool(quota and (quota.get("status") or {}).get("hard"))

    def teardown(self, tenant: Tenant, k: Kube) -> bool:
        """Start deleting; True once everything is really gone."""
        k.delete("FlowSchema", manifests.flow_schema_name(tenant))
        ns = k.get("Namespace", tenant.namespace)
        if ns is None:
            return True
        if str(tenant.pk) != ns["metadata"].get("labels", {}).get("berth.dev/tenant-id"):
            raise KubePermanentError(f"Namespace {tenant.namespace} is not this tenant's (labels differ); refusing to delete it.")
        if not ns["metadata"].get("deletionTimestamp"):
            k.delete("Namespace", tenant.namespace)
        return False

    def usage(self, tenant: Tenant, k: Kube) -> dict:
        quota = k.get("ResourceQuota", "berth-quota", namespace=tenant.namespace) or {}
        status = quota.get("status") or {}
        return {"hard": status.get("hard", {}), "used": status.get("used", {})}


BACKENDS = {"namespace": NamespaceBackend()}


def backend_for(tenant: Tenant) -> NamespaceBackend:
    try:
        return BACKENDS[tenant.kind]
    except KeyError:
        raise KubePermanentError(f"No backend for {tenant.kind} tenants is enabled on this portal.") from None


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
            repaired = backend.apply(tenant, k, detect_drift=tenant.status == S.READY)
            kube.wait_until(lambda: backend.is_ready(tenant, k), timeout=READY_TIMEOUT, what=f"namespace {tenant.namespace} to be ready")
        except KubeTransientError as exc:
            services.tenant_note_progress(tenant=tenant, note=f"Waiting for the cluster: {exc}")
            raise
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
            gone = kube.wait_until(lambda: backend.teardown(tenant, k), timeout=READY_TIMEOUT, what=f"namespace {tenant.namespace} to be deleted")
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
    services.tenant_record_usage(tenant=tenant, usage=backend_for(tenant).usage(tenant, kube.for_cluster(tenant.cluster)))
