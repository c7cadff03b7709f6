"""The seam through which the worker lends the portal what only it can do.

``tenants`` never imports ``worker``. The worker app registers one object that
implements ``WorkerHooks`` when Django starts (``worker.apps``), so pages can show a
manifest preview, the admin can check cluster settings and the API can hand out
kubeconfigs, while the domain stays testable without a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tenants.models import Cluster, Tenant, Tier


@dataclass(frozen=True)
class KubeconfigGrant:
    """One context of a kubeconfig: which tenant, with which role, for how long."""

    tenant: Tenant
    role: str  # "edit" or "view"
    lifetime_seconds: int


@dataclass(frozen=True)
class ClusterLookup:
    """What a quick look at a cluster found; empty or None where it could not be asked (the worker checks again)."""

    identity: str = ""  # the physical API server's id (its kube-system namespace's UID)
    name_exists: bool | None = None  # whether the tenant's top-level object already exists there


@dataclass(frozen=True)
class ClusterEvent:
    """One Kubernetes Event of a tenant's namespace, as the page shows it."""

    type: str  # "Normal" or "Warning"
    reason: str
    object: str  # "Pod/web-1"
    message: str
    count: int
    last_seen: datetime | None


@dataclass(frozen=True)
class PodSummary:
    name: str
    phase: str
    restarts: int
    containers: tuple[str, ...]


@dataclass(frozen=True)
class Workload:
    """What a team's own viewer identity reads of its namespace: its pods and recent events, newest first."""

    pods: tuple[PodSummary, ...]
    events: tuple[ClusterEvent, ...]


@dataclass(frozen=True)
class LogQuery:
    """One bounded read of a container's log (tenants.services.workload sets the bounds)."""

    pod: str
    container: str
    previous: bool
    tail_lines: int
    limit_bytes: int
    since_time: str = ""  # RFC 3339: only lines from then on (live follow)


@dataclass(frozen=True)
class PodLog:
    lines: tuple[str, ...]  # without their timestamps
    truncated: bool  # cut at the byte bound
    last_timestamp: str  # of the last line, to follow on from; "" when there was none


class WorkerHooks(Protocol):
    def manifest_preview(self, tenant: Tenant, *, tier: Tier | None = None) -> str:
        """YAML of what provisioning would apply (without live cluster facts)."""
        ...

    def cluster_config_errors(self, cluster: Cluster) -> dict[str, str]:
        """Problems with a Cluster's kinds and per-kind settings, by kind; empty when none."""
        ...

    def cluster_lookup(self, cluster: Cluster, *, kind: str = "", namespace: str = "") -> ClusterLookup:
        """A quick look (seconds at most) at the cluster: its identity and, for a kind and name, whether the
        tenant's top-level object already exists. Never raises: what could not be read stays unknown."""
        ...

    def issue_kubeconfig(self, grant: KubeconfigGrant) -> str:
        """A kubeconfig YAML with a fresh short-lived credential (raises ClusterUnavailable)."""
        ...

    def issue_merged_kubeconfig(self, grants: Sequence[KubeconfigGrant]) -> str:
        """One kubeconfig with a context per grant (raises ClusterUnavailable)."""
        ...

    def read_workload(self, tenant: Tenant, *, events: int) -> Workload:
        """The namespace's pods and at most ``events`` recent events, read with a fresh short-lived token of the
        tenant's viewer identity, never Berth's (raises ClusterUnavailable or ClusterRefused)."""
        ...

    def read_pod_log(self, tenant: Tenant, query: LogQuery, *, role: str) -> PodLog:
        """A bounded read of a container's log with a fresh short-lived token of the tenant's ``role`` identity
        ("edit" or "view"), never Berth's (raises ClusterUnavailable or ClusterRefused)."""
        ...


_installed: WorkerHooks | None = None


def install(hooks: WorkerHooks) -> None:
    """Called once, by the worker app's ``ready()``."""
    global _installed
    if _installed is not None and type(_installed) is not type(hooks):
        raise RuntimeError(f"Worker hooks are already installed ({type(_installed).__name__}).")
    _installed = hooks


def installed() -> WorkerHooks | None:
    """The worker's hooks, or None in a portal without the worker app (previews and checks are then skipped)."""
    return _installed


def worker() -> WorkerHooks:
    """The worker's hooks; LookupError when the worker app is not installed."""
    if _installed is None:
        raise LookupError("No worker hooks are installed: is the 'worker' app in INSTALLED_APPS?")
    return _installed
