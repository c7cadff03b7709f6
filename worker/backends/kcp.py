"""kcp tenants: a Workspace under a configured parent workspace.

Here the registered Cluster *is* the kcp server: its API URL is the parent
workspace's URL (kcp serves it at ``…/clusters/<parent path>``) and its
credential a kubeconfig allowed to create workspaces there. Berth creates a
Workspace (cluster-scoped in the parent); kcp schedules it, sets ``spec.URL`` and
reports ``status.phase: Ready``. The worker reaches the new workspace with the same
credential at ``spec.URL`` (kcp authenticates it in every workspace), creates the
tenant's ServiceAccounts inside, and tenants get short-lived tokens for those at
``spec.URL``.

kcp runs no pods, so there is no host namespace, quota or network policy: none
is created, and the isolation report checks what matters for a workspace.

Settings, ``Cluster.virtual_config["kcp"]``:
  parent_workspace  the parent's logical path, e.g. root:teams (required)
  workspace_type    the WorkspaceType, e.g. universal (default) or root:universal (path:name)
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from worker import isolation, kube, manifests, ownership
from worker.backends.adapters import apply_custom_resources
from worker.backends.virtual import ControlPlaneAccess, VirtualClusterBackend, with_server
from worker.cluster_settings import ClusterConfigError, SettingsSection
from worker.kube import Kube, Manifest
from worker.ownership import TopLevel

KIND = "kcp"
API_VERSION = "tenancy.kcp.io/v1alpha1"
OPERATOR = "kcp (register the kcp server itself, at the parent workspace's URL, as this cluster)"
LOGICAL_PATH = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(:[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

KCP_CHECKS = [
    isolation.Check(
        "virtual-cluster-admin", "Is cluster-admin inside its kcp workspace", isolation.is_cluster_admin_inside
    ),
    isolation.Check(
        "virtual-no-host-credentials", "Has no credentials for the parent workspace", isolation.has_no_host_credentials
    ),
]


@dataclass(frozen=True)
class KcpSettings:
    parent_workspace: str
    workspace_type: str = "universal"

    @classmethod
    def parse(cls, cluster: Any) -> KcpSettings:
        s = SettingsSection(cluster, KIND, known=("parent_workspace", "workspace_type"))
        parent = s.text("parent_workspace", required=True, pattern=LOGICAL_PATH, example="root:teams")
        workspace_type = s.text("workspace_type", default="universal", pattern=LOGICAL_PATH, example="universal")
        served = _served_path(cluster.api_url)
        if served and served != parent:
            raise s.error(
                f"the API URL serves workspace {served}, but virtual_config.{KIND}.parent_workspace is {parent}"
            )
        return cls(parent, workspace_type)


def _served_path(api_url: str) -> str:
    """The logical path in a kcp URL (https://kcp.example.com/clusters/root:teams → root:teams), else ''."""
    _, found, rest = urlsplit(api_url).path.partition("/clusters/")
    return unquote(rest.strip("/")) if found else ""


def workspace(tenant: Any, tier: Any, settings: KcpSettings) -> Manifest:
    """The Workspace: cluster-scoped in the parent, named like the tenant's namespace (the cluster's prefix plus
    its name)."""
    path, _, name = settings.workspace_type.rpartition(":")
    type_ref = {"name": name, **({"path": path} if path else {})}
    return {
        "apiVersion": API_VERSION,
        "kind": "Workspace",
        "metadata": {"name": tenant.namespace, "labels": manifests.labels(tenant, tier)},
        "spec": {"type": type_ref},
    }


def _single_context(config: Manifest, ca_pem: str) -> Manifest:
    """The credential's current context alone, with its CA embedded (it is handed to tenants as whom to trust)."""
    contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
    context = contexts.get(config.get("current-context")) or next(iter(contexts.values()), None)
    if context is None:
        raise ClusterConfigError("The kcp credential kubeconfig has no context.")
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    cluster = dict(cluster)
    if not cluster.get("certificate-authority-data"):
        path = cluster.pop("certificate-authority", "")
        pem = ca_pem
        if not pem and path:
            with open(path) as fh:
                pem = fh.read()
        if pem:
            cluster["certificate-authority-data"] = base64.b64encode(pem.encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "kcp",
        "clusters": [{"name": "kcp", "cluster": cluster}],
        "users": [{"name": "kcp", "user": user}],
        "contexts": [{"name": "kcp", "context": {"cluster": "kcp", "user": "kcp"}}],
    }


class KcpWorkspace:
    """A Workspace in the parent workspace; kcp serves it at ``spec.URL`` once Ready."""

    def parse_settings(self, cluster: Any) -> KcpSettings:
        return KcpSettings.parse(cluster)

    def objects(self, tenant: Any, tier: Any, settings: KcpSettings) -> list[Manifest]:
        return [workspace(tenant, tier, settings)]

    def preview(self, tenant: Any, tier: Any, settings: KcpSettings) -> list[Manifest]:
        return self.objects(tenant, tier, settings)

    def install(self, tenant: Any, host: Kube, settings: KcpSettings) -> None:
        apply_custom_resources(host, self.objects(tenant, tenant.tier, settings), operator=OPERATOR)

    def _url(self, tenant: Any, host: Kube) -> str:
        """spec.URL once kcp reports the workspace Ready, else ''."""
        ws = host.get("Workspace", tenant.namespace) or {}
        ready = (ws.get("status") or {}).get("phase") == "Ready"
        return str((ws.get("spec") or {}).get("URL", "")) if ready else ""

    def ready(self, tenant: Any, host: Kube, settings: KcpSettings) -> bool:
        return bool(self._url(tenant, host))

    def admin_kubeconfig(self, tenant: Any, host: Kube, settings: KcpSettings) -> Manifest | None:
        url = self._url(tenant, host)
        if not url:
            return None
        cluster = tenant.cluster
        if cluster.credential_ref == "incluster":
            raise ClusterConfigError(
                f"Cluster {cluster.name}: kcp needs a kubeconfig credential (kubeconfig: or env:), not incluster."
            )
        return with_server(_single_context(kube.load_credential(cluster.credential_ref), cluster.ca_pem), url)

    def top_level(self, tenant: Any) -> list[TopLevel]:
        return [TopLevel("Workspace", tenant.namespace)]

    def uninstall(self, tenant: Any, host: Kube) -> bool:
        return ownership.delete(host, tenant, TopLevel("Workspace", tenant.namespace))


def backend() -> VirtualClusterBackend[KcpSettings]:
    """No host namespace (kcp runs no pods): the workspace is all there is. kcp serves no /readyz per workspace."""
    return VirtualClusterBackend(
        kind=KIND,
        control_plane=KcpWorkspace(),
        host=None,
        inside=ControlPlaneAccess(probe_health=False),
        checks=KCP_CHECKS,
    )
