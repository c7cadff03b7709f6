"""HyperShift tenants: a hosted OpenShift control plane (HostedCluster) with worker nodes of its own (NodePool).

The host admin installs the HyperShift operator and puts the pull secret (and
optionally an SSH key) into the namespace where HostedClusters live; Berth only
references them by name and never reads them. Berth renders a HostedCluster and
a NodePool from the tenant's tier; the tenant is ready when the HostedCluster's
condition Available is True, and HyperShift has written the admin kubeconfig into
the Secret named in ``status.kubeconfig`` (key ``kubeconfig``).

Settings, ``Cluster.virtual_config["hypershift"]``:
  release_image        the OpenShift release image (required)
  base_domain          DNS base domain of hosted clusters (required)
  pull_secret_name     Secret holding the pull secret (required)
  ssh_key_secret_name  Secret holding an SSH public key for the nodes (optional)
  platform             None (default), KubeVirt or Agent
  agent_namespace      where the Agents wait (required for Agent)
  namespace            where HostedClusters and NodePools live (default: the tenant's host namespace)
  node_pool_replicas   worker nodes per tier name; default small 1, medium 2, large 3
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from worker import manifests, ownership
from worker.backends.adapters import apply_custom_resources, condition
from worker.backends.namespace import NamespaceBackend
from worker.backends.virtual import VirtualClusterBackend, kubeconfig_from_secret
from worker.cluster_settings import DNS_LABEL, DNS_SUBDOMAIN, ClusterConfigError, SettingsSection
from worker.kube import Kube, KubePermanentError, KubeTransientError, Manifest
from worker.ownership import TopLevel

KIND = "hypershift"
API_VERSION = "hypershift.openshift.io/v1beta1"
OPERATOR = "the HyperShift operator"
KUBECONFIG_KEY = "kubeconfig"
# Platforms whose HostedCluster and NodePool Berth can render from settings alone; the
# cloud platforms (AWS, Azure, PowerVS, OpenStack) need infrastructure Berth does not model.
PLATFORMS = ("None", "KubeVirt", "Agent")
DEFAULT_REPLICAS = {"small": 1, "medium": 2, "large": 3}
MAX_REPLICAS = 100
IMAGE = re.compile(r"[^\s:@]+[:@][^\s]+")
# HyperShift runs the control plane in the namespace "<HostedCluster namespace>-<name>".
CONTROL_PLANE_NAMESPACE_MAX = 63


@dataclass(frozen=True)
class HyperShiftSettings:
    cluster_name: str
    release_image: str
    base_domain: str
    pull_secret_name: str
    ssh_key_secret_name: str = ""
    platform: str = "None"
    agent_namespace: str = ""
    namespace: str = ""
    node_pool_replicas: dict[str, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, cluster: Any) -> HyperShiftSettings:
        s = SettingsSection(
            cluster,
            KIND,
            known=(
                "release_image",
                "base_domain",
                "pull_secret_name",
                "ssh_key_secret_name",
                "platform",
                "agent_namespace",
                "namespace",
                "node_pool_replicas",
            ),
        )
        platform = s.text("platform", default="None", choices=PLATFORMS)
        return cls(
            cluster_name=cluster.name,
            release_image=s.text(
                "release_image",
                required=True,
                pattern=IMAGE,
                example="quay.io/openshift-release-dev/ocp-release:4.17.0-multi",
            ),
            base_domain=s.text("base_domain", required=True, pattern=DNS_SUBDOMAIN, example="hosted.example.com"),
            pull_secret_name=s.text("pull_secret_name", required=True, pattern=DNS_SUBDOMAIN, example="pull-secret"),
            ssh_key_secret_name=s.text("ssh_key_secret_name", pattern=DNS_SUBDOMAIN, example="ssh-key"),
            platform=platform,
            agent_namespace=s.text(
                "agent_namespace", required=platform == "Agent", pattern=DNS_LABEL, example="agents"
            ),
            namespace=s.text("namespace", pattern=DNS_LABEL, example="clusters"),
            node_pool_replicas={**DEFAULT_REPLICAS, **s.counts("node_pool_replicas", maximum=MAX_REPLICAS)},
        )

    def namespace_for(self, tenant: Any) -> str:
        return self.namespace or tenant.namespace

    def replicas_for(self, tier: Any) -> int:
        try:
            return self.node_pool_replicas[tier.name]
        except KeyError:
            raise ClusterConfigError(
                f"Cluster {self.cluster_name}: no NodePool size for tier {tier.name}; "
                f"set virtual_config.{KIND}.node_pool_replicas.{tier.name}."
            ) from None


def hosted_namespace(tenant: Any) -> str:
    """Where the tenant's HostedCluster lives, read leniently.

    A later mistake elsewhere in the settings must not strand teardown.
    """
    section = (tenant.cluster.virtual_config or {}).get(KIND)
    configured = section.get("namespace") if isinstance(section, dict) else None
    return configured.strip() if isinstance(configured, str) and configured.strip() else tenant.namespace


def _meta(tenant: Any, tier: Any, settings: HyperShiftSettings) -> Manifest:
    namespace = settings.namespace_for(tenant)
    if len(namespace) + 1 + len(tenant.name) > CONTROL_PLANE_NAMESPACE_MAX:
        raise KubePermanentError(
            f"HyperShift would run this control plane in namespace {namespace}-{tenant.name}, longer than "
            f"{CONTROL_PLANE_NAMESPACE_MAX} characters: choose a shorter name, "
            f"or set virtual_config.{KIND}.namespace on the cluster."
        )
    return {"name": tenant.name, "namespace": namespace, "labels": manifests.labels(tenant, tier)}


def hosted_cluster(tenant: Any, tier: Any, settings: HyperShiftSettings) -> Manifest:
    """The HostedCluster: release, DNS, platform and secret references from the cluster's settings."""
    platform: dict[str, Any] = {"type": settings.platform}
    if settings.platform == "Agent":
        platform["agent"] = {"agentNamespace": settings.agent_namespace}
    spec: dict[str, Any] = {
        "release": {"image": settings.release_image},
        "pullSecret": {"name": settings.pull_secret_name},
        "dns": {"baseDomain": settings.base_domain},
        "platform": platform,
        "services": [
            {"service": "APIServer", "servicePublishingStrategy": {"type": "LoadBalancer"}},
            *(
                {"service": s, "servicePublishingStrategy": {"type": "Route"}}
                for s in ("OAuthServer", "Konnectivity", "Ignition")
            ),
        ],
    }
    if settings.ssh_key_secret_name:
        spec["sshKey"] = {"name": settings.ssh_key_secret_name}
    return {"apiVersion": API_VERSION, "kind": "HostedCluster", "metadata": _meta(tenant, tier, settings), "spec": spec}


def node_pool(tenant: Any, tier: Any, settings: HyperShiftSettings) -> Manifest:
    """The NodePool: its size follows the tier; on KubeVirt each node gets an equal share of the tier's CPU and
    memory."""
    replicas = settings.replicas_for(tier)
    platform: dict[str, Any] = {"type": settings.platform}
    if settings.platform == "KubeVirt":
        platform["kubevirt"] = {
            "compute": {
                "cores": max(1, math.ceil(tier.cpu_limit_millis / 1000 / replicas)),
                "memory": f"{math.ceil(tier.memory_limit_mib / replicas)}Mi",
            }
        }
    return {
        "apiVersion": API_VERSION,
        "kind": "NodePool",
        "metadata": _meta(tenant, tier, settings),
        "spec": {
            "clusterName": tenant.name,
            "replicas": replicas,
            "management": {"upgradeType": "Replace"},
            "platform": platform,
            "release": {"image": settings.release_image},
        },
    }


def hosted_control_plane(tenant: Any, tier: Any, settings: HyperShiftSettings) -> list[Manifest]:
    return [hosted_cluster(tenant, tier, settings), node_pool(tenant, tier, settings)]


class HostedControlPlane:
    """A HostedCluster and its NodePool, run by the HyperShift operator."""

    def parse_settings(self, cluster: Any) -> HyperShiftSettings:
        return HyperShiftSettings.parse(cluster)

    def objects(self, tenant: Any, tier: Any, settings: HyperShiftSettings) -> list[Manifest]:
        return hosted_control_plane(tenant, tier, settings)

    def preview(self, tenant: Any, tier: Any, settings: HyperShiftSettings) -> list[Manifest]:
        return hosted_control_plane(tenant, tier, settings)

    def install(self, tenant: Any, host: Kube, settings: HyperShiftSettings) -> None:
        apply_custom_resources(host, hosted_control_plane(tenant, tenant.tier, settings), operator=OPERATOR)

    def _hosted_cluster(self, tenant: Any, host: Kube) -> tuple[Manifest | None, str]:
        namespace = hosted_namespace(tenant)
        return host.get("HostedCluster", tenant.name, namespace=namespace), namespace

    def ready(self, tenant: Any, host: Kube, settings: HyperShiftSettings) -> bool:
        hc, namespace = self._hosted_cluster(tenant, host)
        where = f"HostedCluster {namespace}/{tenant.name}"
        image = condition(hc, "ValidReleaseImage")
        if image.get("status") == "False":
            raise KubePermanentError(
                f"HyperShift refuses the release image of {where}: {image.get('message') or image.get('reason')}"
            )
        config = condition(hc, "ValidConfiguration")
        if config.get("status") == "False":
            # Often a referenced secret the host admin has not created yet: HyperShift retries, so do we.
            raise KubeTransientError(
                f"HyperShift reports {where} is not valid yet: {config.get('message') or config.get('reason')}"
            )
        return condition(hc, "Available").get("status") == "True"

    def admin_kubeconfig(self, tenant: Any, host: Kube, settings: HyperShiftSettings) -> Manifest | None:
        hc, namespace = self._hosted_cluster(tenant, host)
        secret = str((((hc or {}).get("status") or {}).get("kubeconfig") or {}).get("name") or "")
        if not secret:
            return None
        if not DNS_SUBDOMAIN.fullmatch(secret):
            raise KubePermanentError(
                f"HostedCluster {namespace}/{tenant.name} names an invalid kubeconfig Secret {secret!r}."
            )
        return kubeconfig_from_secret(host, namespace=namespace, name=secret, key=KUBECONFIG_KEY)

    def top_level(self, tenant: Any) -> list[TopLevel]:
        # HostedClusters may live in a namespace shared by every tenant (virtual_config.hypershift.namespace).
        namespace = hosted_namespace(tenant)
        return [TopLevel("NodePool", tenant.name, namespace), TopLevel("HostedCluster", tenant.name, namespace)]

    def uninstall(self, tenant: Any, host: Kube) -> bool:
        gone = [ownership.delete(host, tenant, top) for top in self.top_level(tenant)]  # ask for every deletion
        return all(gone)


def backend() -> VirtualClusterBackend[HyperShiftSettings]:
    return VirtualClusterBackend(
        kind=KIND, control_plane=HostedControlPlane(), host=NamespaceBackend(team_access=False)
    )
