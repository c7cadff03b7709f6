"""What the operator adapters (VirtualCluster, HyperShift, kcp) share.

Each adapter reads its section of ``Cluster.virtual_config`` through
``worker.cluster_settings.SettingsSection`` into a frozen settings dataclass. The
custom resources are created through ``apply_custom_resources``, which explains a
missing CRD as a missing operator.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from worker.kube import Kube, KubePermanentError, Manifest


def apply_custom_resources(host: Kube, objs: list[Manifest], *, operator: str) -> list[Manifest | None]:
    """Server-side apply operator-owned custom resources; a 404 means the CRD (so the operator) is not installed."""
    try:
        return host.apply(objs)
    except KubePermanentError as exc:
        if exc.status == 404:
            kinds = ", ".join(sorted({o["kind"] for o in objs}))
            raise KubePermanentError(
                f"The cluster does not serve {kinds}: the host admin must install {operator} first ({exc})",
                status=404,
            ) from None
        raise


def condition(obj: Manifest | None, type_: str) -> dict[str, Any]:
    """The status condition of ``type_``, or {} when the operator has not reported it yet."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def delete_until_gone(host: Kube, refs: Iterable[tuple[str, str, str | None]]) -> bool:
    """Ask for deletion of each (kind, name, namespace); True once none exists (their finalizers have run)."""
    gone = True
    for kind, name, namespace in refs:
        live = host.get(kind, name, namespace=namespace)  # None also when the CRD itself is gone
        if live is None:
            continue
        gone = False
        if not live["metadata"].get("deletionTimestamp"):
            host.delete(kind, name, namespace=namespace)
    return gone
