"""vcluster tenants: a vcluster in its own host namespace, installed with helm, Flux or Cluster API.

The host side is a namespace tenant without any team access (quota, limits, default deny,
plus one NetworkPolicy opening the control plane's API port). The chart values are rendered
from tier and cluster by ``worker.vcluster_values``; the installer named in the cluster's
``virtual_config["vcluster"]`` puts them on the host:

- ``helm``: the worker runs ``helm upgrade --install`` against the configured chart repository;
- ``flux``: a HelmRepository and a HelmRelease for Flux's helm-controller;
- ``capi``: a cluster.x-k8s.io Cluster whose control plane and infrastructure are a
  cluster-api-provider-vcluster VCluster.

Ready means the control plane reports ready and its admin kubeconfig Secret exists
(``vc-<name>``/``config``, or ``<name>-kubeconfig``/``value`` for Cluster API); that
kubeconfig is used inside the worker only (see ``worker.backends.virtual``).
"""

from __future__ import annotations

from typing import Any

import yaml

from worker import helm, kube, manifests, sleep
from worker.backends.namespace import NamespaceBackend
from worker.backends.virtual import VirtualClusterBackend, asleep, kubeconfig_from_secret, with_server
from worker.cluster_settings import ClusterConfigError
from worker.kube import Kube, KubePermanentError, Manifest
from worker.ownership import TopLevel
from worker.sleep import SleepResult
from worker.vcluster_values import (
    CHART_NAME,
    VClusterConfig,
    check_fits_tier,
    control_plane_policy,
    parse_config,
    public_endpoint,
    public_host,
    render_values,
    service_address,
)

HELM_REPOSITORY = "berth-vcluster"
# The kinds an installer may have left on the host, in the order they are deleted.
INSTALLER_KINDS = ("Cluster", "VCluster", "HelmRelease")


def _api_version(kind: str) -> str:
    return kube.KINDS[kind].api_version


def kubeconfig_secret(tenant: Any, config: VClusterConfig) -> tuple[str, str]:
    """(Secret name, key) where the control plane's admin kubeconfig appears on the host."""
    if config.installer == "capi":
        return f"{tenant.name}-kubeconfig", "value"  # Cluster API's convention
    return f"vc-{tenant.name}", "config"  # the chart's default (exportKubeConfig.secret unset)


def helm_repository(tenant: Any, config: VClusterConfig) -> Manifest:
    """Flux's source for the chart: in the tenant's namespace, or shared in ``flux_namespace``."""
    cluster = tenant.cluster
    if config.flux_namespace:
        # Shared by every tenant of this cluster, so it carries the cluster rather than a tenant id.
        meta = {
            "name": f"{HELM_REPOSITORY}-{cluster.name}",
            "namespace": config.flux_namespace,
            "labels": {**manifests.MANAGED_BY, "berth.dev/cluster": cluster.name},
        }
    else:
        meta = {"name": HELM_REPOSITORY, "namespace": tenant.namespace, "labels": manifests.labels(tenant, tenant.tier)}
    spec: dict[str, Any] = {"url": config.chart_repo, "interval": "1h"}
    if config.oci:
        spec["type"] = "oci"
    return {"apiVersion": _api_version("HelmRepository"), "kind": "HelmRepository", "metadata": meta, "spec": spec}


def flux_objects(tenant: Any, tier: Any, config: VClusterConfig, values: Manifest) -> list[Manifest]:
    repository = helm_repository(tenant, config)
    release = {
        "apiVersion": _api_version("HelmRelease"),
        "kind": "HelmRelease",
        "metadata": {"name": tenant.name, "namespace": tenant.namespace, "labels": manifests.labels(tenant, tier)},
        "spec": {
            "interval": "10m",
            "releaseName": tenant.name,
            "chart": {
                "spec": {
                    "chart": CHART_NAME,
                    "version": config.chart_version,
                    "sourceRef": {
                        "kind": "HelmRepository",
                        "name": repository["metadata"]["name"],
                        "namespace": repository["metadata"]["namespace"],
                    },
                }
            },
            "install": {"remediation": {"retries": 3}},
            "upgrade": {"remediation": {"retries": 3}},
            "values": values,
        },
    }
    return [repository, release]


def capi_objects(tenant: Any, tier: Any, config: VClusterConfig, values: Manifest) -> list[Manifest]:
    """cluster-api-provider-vcluster: the VCluster is both the Cluster's control plane and its infrastructure."""
    meta = {"name": tenant.name, "namespace": tenant.namespace, "labels": manifests.labels(tenant, tier)}
    # cluster.x-k8s.io/v1beta2 references by API group (v1beta1, deprecated, named an apiVersion).
    ref = {"apiGroup": _api_version("VCluster").split("/")[0], "kind": "VCluster", "name": tenant.name}
    vcluster = {
        "apiVersion": _api_version("VCluster"),
        "kind": "VCluster",
        "metadata": meta,
        "spec": {
            "controlPlaneEndpoint": {"host": public_host(config, tenant), "port": config.public_port},
            "helmRelease": {
                "chart": {"name": CHART_NAME, "repo": config.chart_repo, "version": config.chart_version},
                "values": yaml.safe_dump(values, sort_keys=False),
            },
        },
    }
    cluster = {
        "apiVersion": _api_version("Cluster"),
        "kind": "Cluster",
        "metadata": dict(meta),
        "spec": {"controlPlaneRef": ref, "infrastructureRef": dict(ref)},
    }
    return [vcluster, cluster]


def helm_preview(tenant: Any, config: VClusterConfig, values: Manifest) -> Manifest:
    """What the worker will run helm with (the approver's preview; helm creates no object of Berth's own)."""
    return {
        "helmRelease": {
            "name": tenant.name,
            "namespace": tenant.namespace,
            "chart": CHART_NAME,
            "repository": config.chart_repo,
            "version": config.chart_version,
            "values": values,
        }
    }


def host_kubeconfig(cluster: Any) -> Manifest | None:
    """The portal's kubeconfig for the host, for helm (None: in-cluster identity); never stored, never logged."""
    if cluster.credential_ref == "incluster":
        return None
    config = kube.load_credential(cluster.credential_ref)
    return with_server(config, cluster.api_url.rstrip("/")) if cluster.api_url else config


def _condition(obj: Manifest, kind: str) -> dict[str, Any]:
    return next((dict(c) for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


class VClusterHost(NamespaceBackend):
    """The host namespace: the tier's quota, limits and default deny, no team access, and the control plane's
    opening."""

    def __init__(self) -> None:
        super().__init__(team_access=False)

    def preview(self, tenant: Any, tier: Any) -> list[Manifest]:
        config = parse_config(tenant.cluster)
        objs = _with_public_host(super().preview(tenant, tier), config, tenant)
        return [*objs, control_plane_policy(tenant, tier, tenant.cluster, config)]

    def render(self, tenant: Any, k: Kube) -> list[Manifest]:
        config = parse_config(tenant.cluster)
        objs = _with_public_host(super().render(tenant, k), config, tenant)
        return [*objs, control_plane_policy(tenant, tenant.tier, tenant.cluster, config)]


def _with_public_host(objs: list[Manifest], config: VClusterConfig, tenant: Any) -> list[Manifest]:
    """The host namespace's Ingress domains include the control plane's public host (its Ingress, if exposed
    so)."""
    host = public_host(config, tenant)
    if not host:
        return objs  # the Service's own address: no Ingress, no domain
    annotations = objs[0]["metadata"]["annotations"]
    domains = [d for d in annotations.get(manifests.INGRESS_DOMAINS_ANNOTATION, "").split(",") if d]
    annotations[manifests.INGRESS_DOMAINS_ANNOTATION] = ",".join([*domains, host])
    return objs


class VClusterControlPlane:
    """A vcluster in the tenant's host namespace, installed by helm, Flux or Cluster API."""

    def parse_settings(self, cluster: Any) -> VClusterConfig:
        return parse_config(cluster)

    def objects(self, tenant: Any, tier: Any, config: VClusterConfig) -> list[Manifest]:
        check_fits_tier(config, tier, tenant.cluster)
        values = render_values(tenant, tier, tenant.cluster, config)
        if config.installer == "flux":
            return flux_objects(tenant, tier, config, values)
        if config.installer == "capi":
            return capi_objects(tenant, tier, config, values)
        return []  # helm installs through the helm binary, not through objects of Berth's

    def preview(self, tenant: Any, tier: Any, config: VClusterConfig) -> list[Manifest]:
        if config.installer == "helm":
            check_fits_tier(config, tier, tenant.cluster)
            return [helm_preview(tenant, config, render_values(tenant, tier, tenant.cluster, config))]
        return self.objects(tenant, tier, config)

    def install(self, tenant: Any, host: Kube, config: VClusterConfig) -> None:
        if config.installer != "helm":
            host.apply(self.objects(tenant, tenant.tier, config))
            return
        helm.upgrade_install(
            release=tenant.name,
            namespace=tenant.namespace,
            repo=config.chart_repo,
            chart=CHART_NAME,
            version=config.chart_version,
            values=render_values(tenant, tenant.tier, tenant.cluster, config),
            kubeconfig=host_kubeconfig(tenant.cluster),
        )

    def ready(self, tenant: Any, host: Kube, config: VClusterConfig) -> bool:
        if asleep(tenant):
            return self.replicas(tenant, host) == 0  # scaled to zero on purpose (sleep_pass)
        if config.installer == "capi":
            return self._capi_ready(tenant, host)
        if config.installer == "flux":
            release = host.get("HelmRelease", tenant.name, namespace=tenant.namespace) or {}
            stalled = _condition(release, "Stalled")
            if stalled.get("status") == "True":
                raise KubePermanentError(
                    f"Flux gave up on HelmRelease {tenant.namespace}/{tenant.name}: "
                    f"{stalled.get('reason', '')}: {stalled.get('message', '')}"
                )
        sts = host.get("StatefulSet", tenant.name, namespace=tenant.namespace) or {}
        return int((sts.get("status") or {}).get("readyReplicas") or 0) >= 1

    def _capi_ready(self, tenant: Any, host: Kube) -> bool:
        vcluster = host.get("VCluster", tenant.name, namespace=tenant.namespace) or {}
        status = vcluster.get("status") or {}
        if status.get("phase") == "Failed":
            raise KubePermanentError(
                f"VCluster {tenant.namespace}/{tenant.name} failed: "
                f"{status.get('reason', '')} {status.get('message', '')}".strip()
            )
        cluster = (host.get("Cluster", tenant.name, namespace=tenant.namespace) or {}).get("status") or {}
        initialization = cluster.get("initialization") or {}
        return bool(status.get("ready")) and (
            cluster.get("phase") == "Provisioned" or bool(initialization.get("controlPlaneInitialized"))
        )

    def replicas(self, tenant: Any, host: Kube) -> int | None:
        """The control plane StatefulSet's wanted replicas; None while there is none."""
        sts = host.get("StatefulSet", tenant.name, namespace=tenant.namespace)
        return None if sts is None else int((sts.get("spec") or {}).get("replicas", 1))

    def admin_kubeconfig(self, tenant: Any, host: Kube, config: VClusterConfig) -> Manifest | None:
        name, key = kubeconfig_secret(tenant, config)
        admin = kubeconfig_from_secret(host, namespace=tenant.namespace, name=name, key=key)
        if admin is None:
            return None
        # The operator may write an in-cluster address; tenants and the worker use the public endpoint.
        address = ""
        if not public_host(config, tenant):
            address = service_address(config, host.get("Service", tenant.name, namespace=tenant.namespace))
            if not address:
                return None  # the load balancer has not given the Service an address yet
        return with_server(admin, public_endpoint(config, tenant, address))

    def top_level(self, tenant: Any) -> list[TopLevel]:
        return []  # everything lives in the host namespace, which is the tenant's

    def uninstall(self, tenant: Any, host: Kube) -> bool:
        """Delete what any installer left, wait for its finalizers, uninstall a helm release; True once all is
        gone."""
        ns, name = tenant.namespace, tenant.name
        present = {kind: obj for kind in INSTALLER_KINDS if (obj := host.get(kind, name, namespace=ns)) is not None}
        for kind, obj in present.items():
            if not obj["metadata"].get("deletionTimestamp"):
                host.delete(kind, name, namespace=ns)
        if present:
            return False  # their controllers uninstall the chart, then drop their finalizers
        if _installer(tenant) == "helm" and host.list("Secret", namespace=ns, label_selector=f"owner=helm,name={name}"):
            helm.uninstall(release=name, namespace=ns, kubeconfig=host_kubeconfig(tenant.cluster))
            return False
        return host.get("StatefulSet", name, namespace=ns) is None


def _installer(tenant: Any) -> str | None:
    # Decommissioning must work even after an admin broke the settings: without them, the namespace deletion
    # cleans up.
    try:
        return parse_config(tenant.cluster).installer
    except ClusterConfigError:
        return None


# Namespaces inside a vcluster whose workloads sleep: all but these, where nothing of the team's runs. kube-system
# sleeps too: its CoreDNS runs on the host like any synced pod (the syncer puts it back when it starts).
QUIET_NAMESPACES = ("kube-public", "kube-node-lease")


def sleep_pass(tenant: Any, host: Kube) -> SleepResult:
    """One pass of putting a vcluster to sleep or waking it (``tenant.sleeping`` says which); the caller holds the
    tenant's lock and passes again while the result waits for something.

    Falling asleep: the workloads inside are scaled to zero as a namespace's are (worker.sleep, the annotations on
    the objects inside), so the syncer removes their pods from the host; once none is left, the control plane is
    scaled to zero through the installer (the values say ``replicas: 0`` while the tenant sleeps, so a reconcile
    keeps it so). Its volume stays, with everything the team created inside. Waking: the control plane is scaled
    back up, and once it answers, the workloads inside are restored.
    """
    plane = VClusterControlPlane()
    config = parse_config(tenant.cluster)
    result = SleepResult()
    replicas = plane.replicas(tenant, host)
    if tenant.sleeping:
        if replicas == 0:
            return result  # asleep (a reconcile pass finds nothing to do)
        inside = _inside(plane, tenant, host, config)
        if inside is None:
            result.waiting.append("the virtual cluster's API server, to scale its workloads to zero")
            return result
        for namespace in _namespaces(inside):
            result.add(sleep.sleep_namespace(inside, namespace))
        synced = host.list("Pod", namespace=tenant.namespace, label_selector=f"{SYNCED_LABEL}={tenant.name}")
        if result.conflicts or synced:
            if synced:
                result.waiting.append(f"{len(synced)} synced pod(s) to stop")
            return result
        plane.install(tenant, host, config)  # the values say replicas 0 now
        result.changed.append(f"StatefulSet/{tenant.name}")
        return result
    if replicas == 0:
        plane.install(tenant, host, config)  # the values say replicas 1 again
        result.changed.append(f"StatefulSet/{tenant.name}")
    inside = _inside(plane, tenant, host, config)
    if inside is None:
        result.waiting.append("the virtual cluster's API server to start")
        return result
    for namespace in _namespaces(inside):
        result.add(sleep.wake_namespace(inside, namespace, max_replicas=tenant.tier.max_pods))
    return result


SYNCED_LABEL = "vcluster.loft.sh/managed-by"  # on every pod the syncer puts on the host, naming the vcluster


def _inside(plane: VClusterControlPlane, tenant: Any, host: Kube, config: VClusterConfig) -> Kube | None:
    """An admin client inside the vcluster, or None while its control plane is not up."""
    if not plane.ready(tenant, host, config):  # the installer's own readiness (helm, Flux or Cluster API)
        return None
    admin = plane.admin_kubeconfig(tenant, host, config)
    if admin is None:
        return None
    inside = Kube.from_kubeconfig_dict(admin)
    return inside if inside.healthy() else None


def _namespaces(inside: Kube) -> list[str]:
    return [
        str(ns["metadata"]["name"]) for ns in inside.list("Namespace") if ns["metadata"]["name"] not in QUIET_NAMESPACES
    ]


def backend() -> VirtualClusterBackend[VClusterConfig]:
    return VirtualClusterBackend(kind="vcluster", control_plane=VClusterControlPlane(), host=VClusterHost())
