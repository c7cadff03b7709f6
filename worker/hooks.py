"""What the worker lends the portal (``tenants.hooks.WorkerHooks``), installed once by ``worker.apps``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from tenants.errors import ClusterRefused, ClusterUnavailable
from tenants.hooks import ClusterLookup, KubeconfigGrant, LogQuery, PodLog, Workload
from worker import backends, credentials, kube, workload
from worker.cluster_settings import ClusterConfigError
from worker.kube import KubeError, KubePermanentError

if TYPE_CHECKING:
    from tenants.models import Cluster, Tenant, Tier

T = TypeVar("T")
logger = logging.getLogger(__name__)
# A look at the cluster happens while a person waits for a form: never long.
LOOKUP_TIMEOUT_SECONDS = 3.0


def _reaching_the_cluster(call: Callable[[], T]) -> T:
    """Kubernetes trouble (or a cluster record the kind cannot use) reaches the portal as ClusterUnavailable, with
    the message."""
    try:
        return call()
    except (KubeError, ClusterConfigError) as exc:
        raise ClusterUnavailable(str(exc)) from None


def _as_the_team(call: Callable[[], T]) -> T:
    """Like ``_reaching_the_cluster``, but what the API server refuses the team's identity is ClusterRefused."""
    try:
        return call()
    except KubePermanentError as exc:
        if exc.status in (400, 403, 404):
            raise ClusterRefused(str(exc), status=exc.status) from None
        raise ClusterUnavailable(str(exc)) from None
    except (KubeError, ClusterConfigError) as exc:
        raise ClusterUnavailable(str(exc)) from None


class PortalHooks:
    def manifest_preview(self, tenant: Tenant, *, tier: Tier | None = None) -> str:
        return backends.preview_yaml(tenant, tier=tier)

    def cluster_config_errors(self, cluster: Cluster) -> dict[str, str]:
        return backends.cluster_config_errors(cluster)

    def cluster_lookup(self, cluster: Cluster, *, kind: str = "", namespace: str = "") -> ClusterLookup:
        try:
            k = kube.for_cluster(cluster).with_timeout(LOOKUP_TIMEOUT_SECONDS)
            identity = kube.cluster_identity(k)
            exists = backends.top_level_exists(k, kind=kind, name=namespace) if kind and namespace else None
        except Exception as exc:  # unknown is an answer here: the worker checks again before applying
            logger.info("cluster %s could not be looked at: %s", cluster.name, type(exc).__name__)
            return ClusterLookup()
        return ClusterLookup(identity=identity, name_exists=exists)

    def issue_kubeconfig(self, grant: KubeconfigGrant) -> str:
        return _reaching_the_cluster(lambda: credentials.kubeconfig([grant]))

    def issue_merged_kubeconfig(self, grants: Sequence[KubeconfigGrant]) -> str:
        return _reaching_the_cluster(lambda: credentials.kubeconfig(grants))

    def read_workload(self, tenant: Tenant, *, events: int) -> Workload:
        return _as_the_team(lambda: workload.read_workload(tenant, events=events))

    def read_pod_log(self, tenant: Tenant, query: LogQuery, *, role: str) -> PodLog:
        return _as_the_team(lambda: workload.read_pod_log(tenant, query, role=role))
