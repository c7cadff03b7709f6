"""Seams through which the worker lends the portal what only it can do.

``tenants`` never imports ``worker``; the worker app registers its functions
here when Django starts, so pages can show a manifest preview and the API can
hand out kubeconfigs while the domain stays testable without a cluster.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

_registry: dict[str, Callable[..., Any]] = {}


def register(name: str, fn: Callable[..., Any]) -> None:
    _registry[name] = fn


def _get(name: str) -> Callable[..., Any]:
    try:
        return _registry[name]
    except KeyError:
        raise LookupError(f"No {name} is registered: is the 'worker' app installed?") from None


def manifest_preview(tenant: Any, *, tier: Any = None) -> str | None:
    """YAML of what provisioning would apply, or None when no renderer is installed."""
    fn = _registry.get("manifest_preview")
    return fn(tenant, tier=tier) if fn else None


def cluster_config_errors(cluster: Any) -> dict[str, str]:
    """Problems with a Cluster's kinds and settings, by kind; empty when none or no checker is installed."""
    fn = _registry.get("cluster_config_errors")
    return fn(cluster) if fn else {}


def issue_kubeconfig(tenant: Any, *, role: str, lifetime_seconds: int) -> str:
    """A kubeconfig YAML with a fresh short-lived credential for ``tenant``."""
    return _get("issue_kubeconfig")(tenant, role=role, lifetime_seconds=lifetime_seconds)


def issue_merged_kubeconfig(grants: list[tuple[Any, str, int]]) -> str:
    """One kubeconfig with a context per (tenant, role, lifetime in seconds)."""
    return _get("issue_merged_kubeconfig")(grants)

