"""Tenancy backends by tenant kind. A kind is offered only where a cluster lists it in ``kinds``."""

from __future__ import annotations

from typing import Any

from worker.backends import capn, hypershift, kcp, vcluster
from worker.backends.base import Access, Backend
from worker.backends.namespace import NamespaceBackend
from worker.cluster_settings import ClusterConfigError
from worker.kube import Kube
from worker.manifests import to_yaml

_INSTALLED: tuple[Backend, ...] = (
    NamespaceBackend(),
    vcluster.backend(),
    capn.backend(),
    hypershift.backend(),
    kcp.backend(),
)
BACKENDS: dict[str, Backend] = {b.kind: b for b in _INSTALLED}


def backend_for(tenant: Any) -> Backend:
    try:
        return BACKENDS[tenant.kind]
    except KeyError:
        raise ClusterConfigError(f"No backend for {tenant.kind} tenants is installed in this portal.") from None


def cluster_config_errors(cluster: Any) -> dict[str, str]:
    """What is wrong with a Cluster's kinds and per-kind settings, by kind (empty when nothing is)."""
    errors: dict[str, str] = {}
    for kind in cluster.kinds or []:
        backend = BACKENDS.get(kind)
        if backend is None:
            errors[kind] = f"No backend for {kind!r}; known kinds: {', '.join(sorted(BACKENDS))}."
            continue
        try:
            backend.check_cluster(cluster)
        except ClusterConfigError as exc:
            errors[kind] = str(exc)
    return errors


def top_level_exists(k: Kube, *, kind: str, name: str) -> bool:
    """Whether the object a new tenant of ``kind`` named ``name`` would be created as is already there.

    kcp tenants are Workspaces in the parent workspace; every other kind lives in a host namespace.
    """
    return k.get("Workspace" if kind == "kcp" else "Namespace", name) is not None


def preview_yaml(tenant: Any, *, tier: Any = None) -> str:
    """What approving would create, for the approver's page (without live cluster facts)."""
    return to_yaml(backend_for(tenant).preview(tenant, tier or tenant.tier))


__all__ = ["BACKENDS", "Access", "Backend", "ClusterConfigError", "backend_for", "preview_yaml"]
