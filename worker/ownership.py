"""Berth never adopts, changes or deletes an object it did not create.

Each tenant has top-level objects: its Namespace (or a virtual cluster's host namespace), a kcp
Workspace, a HyperShift HostedCluster. Before anything is applied, each must not exist, or must be
the one Berth created for this tenant (its UID is recorded on the tenant), or carry this tenant's id
and no UID be recorded yet (Berth made it, then was interrupted before it could record it).
Anything else is someone else's: the tenant fails with the reason and nothing is changed on the
cluster. Deletion always names the recorded UID as a precondition, so an object someone made under
the same name since is never deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.kube import Kube


class ForeignObject(Exception):
    """The name a tenant needs is taken on the cluster by an object Berth did not create for it."""


@dataclass(frozen=True)
class TopLevel:
    kind: str
    name: str
    namespace: str | None = None

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace or ''}/{self.name}"

    def describe(self) -> str:
        where = f" in namespace {self.namespace}" if self.namespace else ""
        return f"{self.kind} {self.name}{where}"


def _tenant_id(obj: dict[str, Any]) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get("berth.dev/tenant-id", ""))


def claim(k: Kube, tenant: Any, tops: list[TopLevel]) -> None:
    """Raise ForeignObject unless every top-level object is absent or this tenant's own."""
    owned: dict[str, str] = tenant.owned_uids or {}
    for top in tops:
        live = k.get(top.kind, top.name, namespace=top.namespace)
        if live is None:
            continue
        uid = str(live["metadata"].get("uid", ""))
        if owned.get(top.key) == uid:
            continue
        if top.key not in owned and _tenant_id(live) == str(tenant.pk):
            continue  # made for this tenant by an earlier attempt that stopped before recording it
        cluster = tenant.cluster.name
        if top.key in owned:
            raise ForeignObject(
                f"{top.describe()} on cluster {cluster} was replaced by an object Berth did not create "
                "(its UID changed); Berth leaves it alone. A platform admin must remove or rename it."
            )
        raise ForeignObject(
            f"{top.describe()} already exists on cluster {cluster} and is not Berth's; Berth never adopts "
            "objects it did not create. Choose another name, or have a platform admin remove it."
        )


def uids(k: Kube, tops: list[TopLevel], *, known: dict[str, str] | None = None) -> dict[str, str]:
    """The UIDs of the top-level objects as they are now (after Berth created them).

    A UID in ``known`` (the ones recorded) is taken as is: ``claim`` found that very object moments ago, and
    the apply named the namespace's UID as a precondition.
    """
    found = {}
    for top in tops:
        if known and top.key in known:
            found[top.key] = known[top.key]
            continue
        live = k.get(top.kind, top.name, namespace=top.namespace)
        if live is not None:
            found[top.key] = str(live["metadata"]["uid"])
    return found


def delete(k: Kube, tenant: Any, top: TopLevel) -> bool:
    """Delete ``top`` if it is the object Berth created for ``tenant``; True once none of Berth's is left.

    An object under that name that is not the one recorded (or, for tenants from before UIDs were
    recorded, does not carry the tenant's id) is someone else's and stays.
    """
    live = k.get(top.kind, top.name, namespace=top.namespace)
    if live is None:
        return True
    uid = (tenant.owned_uids or {}).get(top.key) or (
        str(live["metadata"]["uid"]) if _tenant_id(live) == str(tenant.pk) else ""
    )
    if not uid or str(live["metadata"]["uid"]) != uid:
        return True  # ours is gone; what stands there now is not Berth's to delete
    if not live["metadata"].get("deletionTimestamp"):
        k.delete(top.kind, top.name, namespace=top.namespace, uid=uid)
    return False


def divergence(tenant: Any, top: TopLevel, live: dict[str, Any] | None) -> str:
    """Why the recorded ``top`` of a ready tenant is not on the cluster as Berth recorded it; '' when it is, or
    when no UID was recorded. The database then holds a belief the cluster contradicts (typically: it was restored
    from a dump older than the cluster's state), so Berth neither recreates nor deletes until an admin decides."""
    recorded = (tenant.owned_uids or {}).get(top.key)
    if not recorded:
        return ""
    decide = "Berth neither recreates nor deletes anything of it until a platform admin recreates or forgets it."
    where = f"on cluster {tenant.cluster.name}"
    if live is None:
        return f"{top.describe()} (UID {recorded}) is missing {where}. {decide}"
    uid = str(live["metadata"].get("uid", ""))
    if uid != recorded:
        return f"{top.describe()} {where} is another object (UID {uid}; Berth recorded {recorded}). {decide}"
    return ""
