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
from worker.backends.adapters import DNS_LABEL, DNS_SUBDOMAIN, Settings, apply_custom_resources, delete_until_gone
from worker.backends.virtual import VirtualClusterBackend, kubeconfig_from_secret, with_server
from worker.kube import Kube, KubePermanentError

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
    def of(cls, cluster: Any) -> CapnSettings:
        s = Settings(cluster, KIND, known=("cluster_version", "endpoint_template"))
        version = s.text("cluster_version", required=True, pattern=DNS_SUBDOMAIN, example="cv-sample-np")
        template = s.text("endpoint_template", example="https://{namespace}.vc.example.com:6443")
        if template:
            _check_template(s, template)
        return cls(version, template)


def _check_template(s: Settings, template: str) -> None:
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


def virtual_cluster(tenant: Any, tier: Any, settings: CapnSettings) -> dict:
    """The VirtualCluster for ``tenant``: a pure function of the tenant, its tier and the cluster's settings."""
    return {
        "apiVersion": API_VERSION,
        "kind": "VirtualCluster",
        "metadata": {"name": tenant.name, "namespace": tenant.namespace, "labels": manifests.labels(tenant, tier)},
        "spec": {"clusterVersionName": settings.cluster_version},
    }


class CapnBackend(VirtualClusterBackend):
    kind = KIND

    def check_cluster(self, cluster: Any) -> None:
        CapnSettings.of(cluster)

    def apply(self, tenant: Any, host: Kube, *, detect_drift: bool) -> list[str]:
        CapnSettings.of(tenant.cluster)  # a bad cluster record fails the tenant before anything is created
        return super().apply(tenant, host, detect_drift=detect_drift)

    def control_plane_objects(self, tenant: Any, host: Kube) -> list[dict]:
        return [virtual_cluster(tenant, tenant.tier, CapnSettings.of(tenant.cluster))]

    def control_plane_preview(self, tenant: Any, tier: Any) -> list[dict]:
        return [virtual_cluster(tenant, tier, CapnSettings.of(tenant.cluster))]

    def install(self, tenant: Any, host: Kube) -> None:
        settings = CapnSettings.of(tenant.cluster)
        if host.get("ClusterVersion", settings.cluster_version) is None:
            raise KubePermanentError(
                f"ClusterVersion {settings.cluster_version} does not exist on cluster {tenant.cluster.name}: the host admin must "
                f"install {OPERATOR} and create it, or fix virtual_config.{KIND}.cluster_version."
            )
        apply_custom_resources(host, [virtual_cluster(tenant, tenant.tier, settings)], operator=OPERATOR)

    def _status(self, tenant: Any, host: Kube) -> dict:
        return (host.get("VirtualCluster", tenant.name, namespace=tenant.namespace) or {}).get("status") or {}

    def control_plane_ready(self, tenant: Any, host: Kube) -> bool:
        status = self._status(tenant, host)
        if status.get("phase") == "Error":
            why = ": ".join(part for part in (status.get("reason"), status.get("message")) if part) or "no reason given"
            raise KubePermanentError(
                f"vc-manager reports VirtualCluster {tenant.namespace}/{tenant.name} failed: {why}"
            )
        return status.get("phase") == "Running" and bool(status.get("clusterNamespace"))

    def admin_kubeconfig(self, tenant: Any, host: Kube) -> dict | None:
        cluster_namespace = self._status(tenant, host).get("clusterNamespace") or ""
        if not cluster_namespace:
            return None
        if not DNS_LABEL.fullmatch(cluster_namespace):
            raise KubePermanentError(
                f"VirtualCluster {tenant.namespace}/{tenant.name} names an invalid clusterNamespace {cluster_namespace!r}."
            )
        config = kubeconfig_from_secret(host, namespace=cluster_namespace, name=ADMIN_SECRET, key=ADMIN_SECRET)
        template = CapnSettings.of(tenant.cluster).endpoint_template
        if config is None or not template:
            return config
        return with_server(
            config, endpoint(template, tenant=tenant, name=tenant.name, cluster_namespace=cluster_namespace)
        )

    def uninstall(self, tenant: Any, host: Kube) -> bool:
        return delete_until_gone(host, [("VirtualCluster", tenant.name, tenant.namespace)])
