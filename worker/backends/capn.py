"""VirtualCluster tenants: the multi-tenancy SIG's VirtualCluster, the design Cluster API Provider Nested grew from.

The upstream project is archived and unmaintained; Berth drives it only on hosts
that already run it (prefer vcluster for anything new). The host admin installs
the tenancy.x-k8s.io CRDs and vc-manager and creates a ClusterVersion. Berth
creates a VirtualCluster referencing that ClusterVersion in the tenant's host
namespace; vc-manager runs the tenant's control plane in
``status.clusterNamespace``, reports ``status.phase: Running`` and writes the
control plane's admin kubeconfig into the Secret ``admin-kubeconfig`` (same key)
in that namespace.

Settings, ``Cluster.virtual_config["virtualcluster"]``:
  cluster_version    the ClusterVersion to build from (required)
  endpoint_template  the API URL tenants use, e.g. "https://{namespace}.vc.example.com:6443", with
                     {namespace} (the tenant's host namespace), {name} (the VirtualCluster),
                     {cluster_namespace} (where vc-manager runs it) and {tenant}; empty keeps the
                     server vc-manager wrote, which is often an in-cluster address.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from worker import manifests
from worker.backends.adapters import apply_custom_resources, delete_until_gone
from worker.backends.namespace import NamespaceBackend
from worker.backends.virtual import VirtualClusterBackend, kubeconfig_from_secret, with_server
from worker.cluster_settings import DNS_LABEL, DNS_SUBDOMAIN, SettingsSection
from worker.kube import Kube, KubePermanentError, Manifest
from worker.ownership import TopLevel

KIND = "virtualcluster"
API_VERSION = "tenancy.x-k8s.io/v1alpha1"
ADMIN_SECRET = "admin-kubeconfig"  # vc-manager's Secret name, and its key
OPERATOR = "the tenancy.x-k8s.io CRDs and vc-manager (kubernetes-sigs/multi-tenancy VirtualCluster, archived)"
PLACEHOLDERS = ("namespace", "name", "cluster_namespace", "tenant")


@dataclass(frozen=True)
class CapnSettings:
    cluster_version: str
    endpoint_template: str = ""

    @classmethod
    def parse(cls, cluster: Any) -> CapnSettings:
        s = SettingsSection(cluster, KIND, known=("cluster_version", "endpoint_template"))
        version = s.text("cluster_version", required=True, pattern=DNS_SUBDOMAIN, example="cv-sample-np")
        template = s.text("endpoint_template", example="https://{namespace}.vc.example.com:6443")
        if template:
            _check_template(s, template)
        return cls(version, template)


def _check_template(s: SettingsSection, template: str) -> None:
    names = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
    try:
        url = template.format(**dict.fromkeys(PLACEHOLDERS, "sample"))
    except (KeyError, IndexError, ValueError, AttributeError):
        raise s.error(f"{s.where('endpoint_template')} {template!r} is not a URL template with only {names}") from None
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise s.error(f"{s.where('endpoint_template')} {template!r} must be an https:// URL")


def endpoint(template: str, *, tenant: Any, name: str, cluster_namespace: str) -> str:
    """The tenant-facing API URL of one VirtualCluster."""
    return template.format(
        namespace=tenant.namespace, name=name, cluster_namespace=cluster_namespace, tenant=tenant.name
    )


def virtual_cluster(tenant: Any, tier: Any, settings: CapnSettings) -> Manifest:
    """The VirtualCluster for ``tenant``: a pure function of the tenant, its tier and the cluster's settings."""
    return {
        "apiVersion": API_VERSION,
        "kind": "VirtualCluster",
        "metadata": {"name": tenant.name, "namespace": tenant.namespace, "labels": manifests.labels(tenant, tier)},
        "spec": {"clusterVersionName": settings.cluster_version},
    }


class VirtualClusterOperator:
    """The control plane vc-manager runs for a VirtualCluster in the tenant's host namespace."""

    def parse_settings(self, cluster: Any) -> CapnSettings:
        return CapnSettings.parse(cluster)

    def objects(self, tenant: Any, tier: Any, settings: CapnSettings) -> list[Manifest]:
        return [virtual_cluster(tenant, tier, settings)]

    def preview(self, tenant: Any, tier: Any, settings: CapnSettings) -> list[Manifest]:
        return self.objects(tenant, tier, settings)

    def install(self, tenant: Any, host: Kube, settings: CapnSettings) -> None:
        if host.get("ClusterVersion", settings.cluster_version) is None:
            raise KubePermanentError(
                f"ClusterVersion {settings.cluster_version} does not exist on cluster {tenant.cluster.name}: the "
                f"host admin must install {OPERATOR} and create it, or fix virtual_config.{KIND}.cluster_version."
            )
        apply_custom_resources(host, self.objects(tenant, tenant.tier, settings), operator=OPERATOR)

    def _status(self, tenant: Any, host: Kube) -> dict[str, Any]:
        live = host.get("VirtualCluster", tenant.name, namespace=tenant.namespace) or {}
        return dict(live.get("status") or {})

    def ready(self, tenant: Any, host: Kube, settings: CapnSettings) -> bool:
        status = self._status(tenant, host)
        if status.get("phase") == "Error":
            why = ": ".join(part for part in (status.get("reason"), status.get("message")) if part) or "no reason given"
            raise KubePermanentError(
                f"vc-manager reports VirtualCluster {tenant.namespace}/{tenant.name} failed: {why}"
            )
        return status.get("phase") == "Running" and bool(status.get("clusterNamespace"))

    def admin_kubeconfig(self, tenant: Any, host: Kube, settings: CapnSettings) -> Manifest | None:
        cluster_namespace = self._status(tenant, host).get("clusterNamespace") or ""
        if not cluster_namespace:
            return None
        if not DNS_LABEL.fullmatch(cluster_namespace):
            raise KubePermanentError(
                f"VirtualCluster {tenant.namespace}/{tenant.name} names an invalid clusterNamespace "
                f"{cluster_namespace!r}."
            )
        config = kubeconfig_from_secret(host, namespace=cluster_namespace, name=ADMIN_SECRET, key=ADMIN_SECRET)
        template = settings.endpoint_template
        if config is None or not template:
            return config
        return with_server(
            config, endpoint(template, tenant=tenant, name=tenant.name, cluster_namespace=cluster_namespace)
        )

    def uninstall(self, tenant: Any, host: Kube) -> bool:
        return delete_until_gone(host, [("VirtualCluster", tenant.name, tenant.namespace)])

    def top_level(self, tenant: Any) -> list[TopLevel]:
        return []  # the VirtualCluster lives in the host namespace, which is the tenant's


def backend() -> VirtualClusterBackend[CapnSettings]:
    return VirtualClusterBackend(
        kind=KIND, control_plane=VirtualClusterOperator(), host=NamespaceBackend(team_access=False)
    )
