"""Pure rendering for vcluster tenants: the cluster's ``virtual_config["vcluster"]``, checked, and the chart values.

No I/O, so the same functions feed provisioning, the approver's preview and the unit
tests. The values follow the chart's ``vcluster.yaml`` layout of the pinned chart line;
``worker/schemas/vcluster-<line>.json`` writes down the part of the chart's values schema
Berth relies on (the unit tests validate every rendering against it).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from worker import manifests
from worker.cluster_settings import ClusterConfigError

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
DEFAULT_CHART_REPO = "https://charts.loft.sh"
DEFAULT_CHART_VERSION = "0.30.0"
CHART_NAME = "vcluster"
INSTALLERS = ("helm", "flux", "capi")
DISTROS = ("k8s", "k3s")
EXPOSURES = ("LoadBalancer", "NodePort", "ClusterIP", "ingress")
KEYS = (
    "installer",
    "chart_repo",
    "chart_version",
    "distro",
    "expose",
    "public_host_template",
    "public_port",
    "ingress_class",
    "flux_namespace",
    "image_registry",
    "syncer_image",
    "kubernetes_image",
)
TEMPLATE_FIELDS = ("namespace", "tenant", "team", "cluster")
# The control plane's own port inside its pod (the chart's Service maps 443 to it); not configurable upstream.
PROXY_PORT = 8443
# The control plane runs as this unprivileged user, the id vcluster's docs use for rootless mode.
NON_ROOT_ID = 12345
# What the control plane asks for; the tier must have room for it.
CONTROL_PLANE_REQUESTS = {"cpu": 200, "memory": 256}  # millicores, MiB
# Defaults of the chart's own quota and LimitRange (chart line 0.30, values.yaml) that no tier sets. A null in
# helm's values removes a chart default, so the chart's vc-<name> quota and limits are exactly the tier's (its
# count/endpoints: 40 would cap a tier allowing more services; its ephemeral-storage defaults would make every
# synced pod ask for 3Gi).
CHART_QUOTA_DEFAULTS_NOT_IN_TIERS = ("requests.ephemeral-storage", "limits.ephemeral-storage", "count/endpoints")
CHART_LIMIT_DEFAULTS_NOT_IN_TIERS = ("ephemeral-storage",)
COREDNS_RESOURCES = {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "170Mi"}}

_EXACT_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A registry host (with an optional port and path), e.g. registry.example.com:5000/mirror; and repository:tag.
_REGISTRY = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:\d{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*$")
_IMAGE = re.compile(
    r"^(?P<repository>[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*):(?P<tag>\w[\w.-]{0,127})$"
)


@dataclass(frozen=True)
class VClusterConfig:
    installer: str
    chart_repo: str
    chart_version: str
    distro: str
    expose: str
    public_host_template: str
    public_port: int
    ingress_class: str
    flux_namespace: str
    image_registry: str = ""  # controlPlane.advanced.defaultImageRegistry: "" keeps upstream's registries
    syncer_image: str = ""  # repository:tag of the control plane's image; "" keeps the chart's
    kubernetes_image: str = ""  # repository:tag of the k8s distro's binaries image; "" keeps the chart's

    @property
    def oci(self) -> bool:
        return self.chart_repo.startswith("oci://")

    @property
    def local(self) -> bool:
        """A directory on the worker holding the packaged chart (helm installs ``<dir>/vcluster-<version>.tgz``)."""
        return self.chart_repo.startswith("file://")


def supported_chart_lines() -> list[str]:
    """Chart lines whose values layout is written down in worker/schemas (e.g. ["0.30"])."""
    return sorted(p.stem.removeprefix("vcluster-") for p in SCHEMA_DIR.glob("vcluster-*.json"))


def schema_path(chart_line: str) -> Path:
    return SCHEMA_DIR / f"vcluster-{chart_line}.json"


def parse_config(cluster: Any) -> VClusterConfig:
    """The cluster's ``virtual_config["vcluster"]`` with defaults filled in; ClusterConfigError names what is wrong."""
    raw = (cluster.virtual_config or {}).get("vcluster", {})
    where = f"Cluster {cluster.name}: virtual_config.vcluster"
    if not isinstance(raw, dict):
        raise ClusterConfigError(f"{where} must be a mapping of settings.")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise ClusterConfigError(f"{where} has unknown key(s) {', '.join(unknown)}; allowed: {', '.join(KEYS)}.")

    def choice(key: str, allowed: tuple[str, ...], default: str) -> str:
        value = raw.get(key, default)
        if value not in allowed:
            raise ClusterConfigError(f"{where}.{key} is {value!r}; use one of {', '.join(allowed)}.")
        return str(value)

    def text(key: str, default: str = "") -> str:
        value = raw.get(key, default)
        if not isinstance(value, str):
            raise ClusterConfigError(f"{where}.{key} must be a string.")
        return value.strip()

    chart_repo = text("chart_repo", DEFAULT_CHART_REPO).rstrip("/")
    if not chart_repo.startswith(("https://", "oci://", "file://")):
        raise ClusterConfigError(
            f"{where}.chart_repo {chart_repo!r} must be an https:// chart repository, an oci:// registry path "
            "or a file:// directory of packaged charts on the worker."
        )
    if chart_repo.startswith("file://"):
        directory = chart_repo.removeprefix("file://")
        if not directory.startswith("/") or PurePosixPath(directory).as_posix() != directory or ".." in directory:
            raise ClusterConfigError(
                f"{where}.chart_repo {chart_repo!r} must name an absolute, normalised directory, "
                "e.g. file:///opt/charts."
            )
    chart_version = text("chart_version", DEFAULT_CHART_VERSION)
    if not _EXACT_VERSION.match(chart_version):
        raise ClusterConfigError(
            f"{where}.chart_version {chart_version!r} is not an exact chart version such as {DEFAULT_CHART_VERSION}: "
            "Berth pins the chart, it never floats."
        )
    line = ".".join(chart_version.split(".")[:2])
    if not schema_path(line).exists():
        raise ClusterConfigError(
            f"{where}.chart_version {chart_version}: Berth renders the values layout of chart line(s) "
            f"{', '.join(f'{s}.x' for s in supported_chart_lines())} only."
        )
    port = raw.get("public_port", 443)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ClusterConfigError(f"{where}.public_port {port!r} must be a port number (1-65535).")
    template = text("public_host_template")
    flux_namespace = text("flux_namespace")
    if flux_namespace and not _DNS_LABEL.match(flux_namespace):
        raise ClusterConfigError(f"{where}.flux_namespace {flux_namespace!r} is not a namespace name.")
    ingress_class = text("ingress_class")
    if ingress_class and not _DNS_NAME.match(ingress_class):
        raise ClusterConfigError(f"{where}.ingress_class {ingress_class!r} is not an IngressClass name.")
    image_registry = text("image_registry")
    if image_registry and not _REGISTRY.match(image_registry):
        raise ClusterConfigError(
            f"{where}.image_registry {image_registry!r} is not a registry such as registry.example.com/mirror."
        )
    images = {}
    for key in ("syncer_image", "kubernetes_image"):
        images[key] = text(key)
        if images[key] and not _IMAGE.match(images[key]):
            raise ClusterConfigError(
                f"{where}.{key} {images[key]!r} must be repository:tag without a registry "
                "(image_registry names the registry), e.g. loft-sh/vcluster-oss:0.30.0."
            )
    config = VClusterConfig(
        installer=choice("installer", INSTALLERS, "helm"),
        chart_repo=chart_repo,
        chart_version=chart_version,
        distro=choice("distro", DISTROS, "k8s"),
        expose=choice("expose", EXPOSURES, "LoadBalancer"),
        public_host_template=template,
        public_port=port,
        ingress_class=ingress_class,
        flux_namespace=flux_namespace,
        image_registry=image_registry,
        **images,
    )
    if not template and (config.installer == "capi" or config.expose not in ("LoadBalancer", "ClusterIP")):
        raise ClusterConfigError(
            f"{where}.public_host_template is required (for installer {config.installer}, expose "
            f"{config.expose}): the DNS name (or address) tenants reach their virtual cluster at, e.g. "
            "'{namespace}.vc.example.com'. Only helm and flux with expose LoadBalancer or ClusterIP may leave it "
            "empty, to use the address the Service gets."
        )
    if config.local and config.installer != "helm":
        raise ClusterConfigError(
            f"{where}.chart_repo {chart_repo!r} is a directory on the worker, which only installer helm reads; "
            f"{config.installer} fetches the chart itself from an https:// or oci:// repository."
        )
    if config.expose == "ingress" and not cluster.ingress_namespace:
        raise ClusterConfigError(
            f"{where}.expose is 'ingress' but the cluster has no ingress_namespace: Berth must know where "
            "the ingress controller runs to let it reach the control plane."
        )
    return config


def check_fits_tier(config: VClusterConfig, tier: Any, cluster: Any) -> None:
    """The exposure and the control plane must be possible inside the tier's quota and limits."""
    where = f"Cluster {cluster.name}: virtual_config.vcluster"
    if config.expose == "NodePort":
        raise ClusterConfigError(
            f"{where}.expose is 'NodePort', but every tier's quota allows no node ports "
            "(services.nodeports: 0); use LoadBalancer, ingress or ClusterIP."
        )
    if config.expose == "LoadBalancer" and tier.max_load_balancers < 1:
        raise ClusterConfigError(
            f"{where}.expose is 'LoadBalancer', but tier {tier.name} allows no LoadBalancer services; "
            "choose a tier with one, or expose the virtual clusters through ingress."
        )
    if (
        tier.cpu_request_millis < CONTROL_PLANE_REQUESTS["cpu"]
        or tier.memory_request_mib < CONTROL_PLANE_REQUESTS["memory"]
    ):
        raise ClusterConfigError(
            f"Tier {tier.name} is too small for a vcluster control plane (it requests "
            f"{CONTROL_PLANE_REQUESTS['cpu']}m CPU and {CONTROL_PLANE_REQUESTS['memory']}Mi memory)."
        )


def public_host(config: VClusterConfig, tenant: Any) -> str:
    """The host tenants reach their virtual cluster at; "" when it is the address the control plane's Service
    gets (no ``public_host_template``: the load balancer's address, or the cluster IP)."""
    if not config.public_host_template:
        return ""
    fields = {
        "namespace": tenant.namespace,
        "tenant": tenant.name,
        "team": tenant.team.slug,
        "cluster": tenant.cluster.name,
    }
    where = f"Cluster {tenant.cluster.name}: virtual_config.vcluster.public_host_template"
    try:
        host = config.public_host_template.format(**fields).lower()
    except (KeyError, IndexError, ValueError) as exc:
        raise ClusterConfigError(
            f"{where} {config.public_host_template!r} cannot be filled in ({exc}); "
            f"it may use {', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)}."
        ) from None
    if not (_is_ip(host) or _DNS_NAME.match(host)):
        raise ClusterConfigError(f"{where} gives {host!r}, which is neither a DNS name nor an IP address.")
    return host


def public_endpoint(config: VClusterConfig, tenant: Any, service_address: str = "") -> str:
    """The URL tenants' kubeconfigs use: https://host[:port]; ``service_address`` is the host when the cluster
    names none (see ``public_host``)."""
    host = public_host(config, tenant) or service_address
    if not host:
        raise ClusterConfigError(f"No address for {tenant.name}'s virtual cluster yet.")
    if _is_ip(host) and ipaddress.ip_address(host).version == 6:
        host = f"[{host}]"
    return f"https://{host}" if config.public_port == 443 else f"https://{host}:{config.public_port}"


def service_address(config: VClusterConfig, service: dict[str, Any] | None) -> str:
    """The address the control plane's Service gives tenants when the cluster names no public host: the load
    balancer's (IP or host name) or the cluster IP; "" while there is none yet."""
    if not service:
        return ""
    if config.expose == "LoadBalancer":
        for ingress in ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []:
            if ingress.get("ip") or ingress.get("hostname"):
                return str(ingress.get("ip") or ingress.get("hostname"))
        return ""
    cluster_ip = (service.get("spec") or {}).get("clusterIP") or ""
    return "" if cluster_ip == "None" else str(cluster_ip)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _image(reference: str) -> dict[str, str]:
    match = _IMAGE.match(reference)
    assert match is not None  # parse_config checked it
    return {"repository": match["repository"], "tag": match["tag"]}


def _share(limit: int, *, floor: int, ceiling: int) -> int:
    """The control plane's limit: a quarter of the tier's, between ``floor`` and ``ceiling``, never above the tier's."""
    return min(limit, max(floor, min(ceiling, limit // 4)))


def _security() -> dict[str, Any]:
    """Non-root, no privilege escalation, no capabilities, RuntimeDefault seccomp: admitted under restricted Pod
    Security."""
    seccomp = {"type": "RuntimeDefault"}
    return {
        "podSecurityContext": {
            "runAsNonRoot": True,
            "runAsUser": NON_ROOT_ID,
            "runAsGroup": NON_ROOT_ID,
            "fsGroup": NON_ROOT_ID,
            "seccompProfile": seccomp,
        },
        "containerSecurityContext": {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "runAsUser": NON_ROOT_ID,
            "runAsGroup": NON_ROOT_ID,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": seccomp,
        },
    }


def _quota(tier: Any) -> dict[str, str | None]:
    """The tier's ResourceQuota, in the chart's key names (the same limits Berth's berth-quota sets), and nothing
    else."""
    return {
        **dict.fromkeys(CHART_QUOTA_DEFAULTS_NOT_IN_TIERS),
        "requests.cpu": f"{tier.cpu_request_millis}m",
        "limits.cpu": f"{tier.cpu_limit_millis}m",
        "requests.memory": f"{tier.memory_request_mib}Mi",
        "limits.memory": f"{tier.memory_limit_mib}Mi",
        "requests.storage": f"{tier.storage_gib}Gi",
        "count/pods": str(tier.max_pods),
        "count/services": str(tier.max_services),
        "services.loadbalancers": str(tier.max_load_balancers),
        "services.nodeports": "0",
        "count/persistentvolumeclaims": str(tier.max_pvcs),
        "count/configmaps": str(tier.max_configmaps),
        "count/secrets": str(tier.max_secrets),
    }


def render_values(tenant: Any, tier: Any, cluster: Any, config: VClusterConfig) -> dict[str, Any]:
    """The chart values for ``tenant`` at ``tier``: pure, and valid against the pinned chart line's schema."""
    host = public_host(config, tenant)
    # Not the team's label: the chart restarts the control plane when its values change (their hash is a pod
    # annotation), and a transfer should not take the team's API away.
    labels = {key: value for key, value in manifests.labels(tenant, tier).items() if key != "berth.dev/team"}
    service_spec: dict[str, Any] = {"type": "ClusterIP" if config.expose == "ingress" else config.expose}
    if config.expose == "LoadBalancer":
        # Every tier's quota allows no node ports, and a LoadBalancer Service allocates them unless told not to.
        service_spec["allocateLoadBalancerNodePorts"] = False
    ingress: dict[str, Any] = {"enabled": config.expose == "ingress"}
    if config.expose == "ingress":
        ingress["host"] = host
        if config.ingress_class:
            ingress["spec"] = {"ingressClassName": config.ingress_class}
    scheduling: dict[str, Any] = {}
    if tier.node_selector:
        scheduling["nodeSelector"] = dict(tier.node_selector)
    if tier.tolerations:
        scheduling["tolerations"] = list(tier.tolerations)
    stateful_set: dict[str, Any] = {
        "labels": labels,
        "pods": {"labels": labels},
        "resources": {
            "requests": {"cpu": f"{CONTROL_PLANE_REQUESTS['cpu']}m", "memory": f"{CONTROL_PLANE_REQUESTS['memory']}Mi"},
            "limits": {
                "cpu": f"{_share(tier.cpu_limit_millis, floor=500, ceiling=1000)}m",
                "memory": f"{_share(tier.memory_limit_mib, floor=512, ceiling=2048)}Mi",
            },
        },
        "security": _security(),
    }
    if scheduling:
        stateful_set["scheduling"] = scheduling
    if config.syncer_image:
        stateful_set["image"] = _image(config.syncer_image)
    if getattr(tenant, "sleeping", False):
        # Asleep (worker.backends.vcluster.sleep_pass): no control plane pod; its volume keeps the cluster's state.
        stateful_set["highAvailability"] = {"replicas": 0}
    # The distro's init container copies the Kubernetes binaries; the chart gives it no security context of its
    # own, and restricted Pod Security refuses the pod without one.
    distro: dict[str, Any] = {"enabled": True, "securityContext": _security()["containerSecurityContext"]}
    if config.kubernetes_image and config.distro == "k8s":
        distro["image"] = _image(config.kubernetes_image)
    control_plane: dict[str, Any] = {
        "distro": {config.distro: distro},
        "service": {"enabled": True, "spec": service_spec},
        "ingress": ingress,
        # Without a public host vcluster puts the Service's cluster IP and load balancer address in its certificate.
        "proxy": {"extraSANs": [host] if host else []},
        "statefulSet": stateful_set,
        "coredns": {"security": _security(), "deployment": {"resources": COREDNS_RESOURCES}},
    }
    if config.image_registry:
        # Every image vcluster runs (its own, the distro's, CoreDNS, the hosts rewriter of synced pods) comes from
        # this registry, under upstream's repository names.
        control_plane["advanced"] = {"defaultImageRegistry": config.image_registry}
    return {
        "controlPlane": control_plane,
        "policies": {
            # Also enforced inside the virtual cluster, so a tenant learns of a refused pod there, not only on the host.
            "podSecurityStandard": tier.pod_security_level,
            # The chart's own vc-<name> quota and limits, unlabelled: Berth prunes what carries its tenant label.
            "resourceQuota": {"enabled": True, "quota": _quota(tier)},
            "limitRange": {
                "enabled": True,
                "default": {
                    **dict.fromkeys(CHART_LIMIT_DEFAULTS_NOT_IN_TIERS),
                    "cpu": f"{tier.default_cpu_limit_millis}m",
                    "memory": f"{tier.default_memory_limit_mib}Mi",
                },
                "defaultRequest": {
                    **dict.fromkeys(CHART_LIMIT_DEFAULTS_NOT_IN_TIERS),
                    "cpu": f"{tier.default_cpu_request_millis}m",
                    "memory": f"{tier.default_memory_request_mib}Mi",
                },
                "max": {"cpu": f"{tier.cpu_limit_millis}m", "memory": f"{tier.memory_limit_mib}Mi"},
            },
            # Berth's own NetworkPolicies in the host namespace decide traffic; the chart's would open internet egress.
            "networkPolicy": {"enabled": False},
        },
        "sync": {"toHost": {"ingresses": {"enabled": tier.network_profile in ("ingress", "open-egress")}}},
        # Nothing cluster-scoped on the host: by default (volume snapshot rules "auto") the chart binds the
        # control plane to a ClusterRole that may read every PersistentVolume and create or delete any tenant's
        # VolumeSnapshotContents. Without it, volume snapshots do not sync; everything else works in the namespace.
        "rbac": {"clusterRole": {"enabled": False}, "enableVolumeSnapshotRules": {"enabled": False}},
        "exportKubeConfig": {
            # Without a public host vcluster exports its own address; the worker replaces it (admin_kubeconfig).
            **({"server": public_endpoint(config, tenant)} if host else {}),
            "context": f"{cluster.name}-{tenant.name}",
            "insecure": False,
        },
        # Nothing about a team's cluster leaves for vcluster's usage statistics.
        "telemetry": {"enabled": False},
    }


def control_plane_policy(tenant: Any, tier: Any, cluster: Any, config: VClusterConfig) -> dict[str, Any]:
    """The one opening in the host namespace's default deny: the control plane's API port in, the host API out.

    Everything else the control plane needs (its synced workloads, CoreDNS) is in its own
    namespace, which berth-allow-same-namespace already allows.
    """
    api_in: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": PROXY_PORT}]}
    if config.expose == "ingress":
        api_in["from"] = [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": cluster.ingress_namespace}}}
        ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "berth-allow-vcluster-control-plane",
            "namespace": tenant.namespace,
            "labels": manifests.labels(tenant, tier),
        },
        "spec": {
            # The chart's labels on the control plane pods; synced workloads carry vcluster's own labels instead.
            "podSelector": {"matchLabels": {"app": "vcluster", "release": tenant.name}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [api_in],
            # The syncer talks to the host API server, on whichever of these ports the cluster serves it (as the
            # chart's own policy allows).
            "egress": [{"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]}],
        },
    }
