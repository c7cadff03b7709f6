"""Dev Kubernetes control plane: etcd + kube-apiserver + kube-controller-manager on 127.0.0.1.

    with ControlPlane() as cp:
        subprocess.run([cp.kubectl, "--kubeconfig", cp.kubeconfig_path, "get", "ns"])

or from a shell: `python -m devcluster.launcher` (runs until Ctrl-C / SIGTERM).

By default there is no scheduler and no kubelet, so Pods are admitted and then
stay Pending; ``ControlPlane(nodes=2)`` (``--nodes 2``) adds kube-scheduler and
real nodes (devcluster/nodes.py) on which they run. Binaries come from
`devcluster/build.sh` (instant once built) or from the directory named by
BERTH_DEVCLUSTER_BIN. The same script builds `helm` and
`promtool`: `helm_binary()` and `promtool_binary()` find them.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import hashlib
import http.client
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType

from devcluster import addons, metrics_server
from devcluster import prometheus as dev_prometheus
from devcluster.alertmanager import Alertmanager
from devcluster.images import CLUSTER_IMAGES, VCLUSTER_IMAGES, ImageSpec, build_archives
from devcluster.kubeconfig import kubeconfig, write_kubeconfig, write_private
from devcluster.loadbalancer import LoadBalancer
from devcluster.network import ClusterNetwork, NetworkError
from devcluster.nodes import Node, NodeSpec, missing_packages, pick_subnets
from devcluster.pki import CertificateAuthority, new_service_account_key
from devcluster.process import Component, ComponentFailed, wait_until

BUILD_SCRIPT = Path(__file__).resolve().parent / "build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl", "kube-proxy")
# build.sh's targets: the binaries each one builds, and the variable naming a directory to use instead.
TARGETS: dict[str, tuple[tuple[str, ...], str]] = {
    "kubernetes": (BINARIES, "BERTH_DEVCLUSTER_BIN"),
    "virtual-kubernetes": (
        ("kube-apiserver", "kube-controller-manager", "kube-scheduler"),
        "BERTH_DEVCLUSTER_VIRTUAL_BIN",
    ),
    "helm": (("helm",), "BERTH_DEVCLUSTER_HELM_BIN"),
    "promtool": (("promtool",), "BERTH_DEVCLUSTER_PROMTOOL_BIN"),
    "coredns": (("coredns",), "BERTH_DEVCLUSTER_COREDNS_BIN"),
    "local-path": (("local-path-provisioner",), "BERTH_DEVCLUSTER_LOCAL_PATH_BIN"),
    "netpol": (("netpol",), "BERTH_DEVCLUSTER_NETPOL_BIN"),
    "e2e": (("e2e.test", "agnhost"), "BERTH_DEVCLUSTER_E2E_BIN"),
    "vcluster": (("vcluster",), "BERTH_DEVCLUSTER_VCLUSTER_BIN"),
    "kine": (("kine",), "BERTH_DEVCLUSTER_KINE_BIN"),
    "prometheus": (("prometheus",), "BERTH_DEVCLUSTER_PROMETHEUS_BIN"),
    "alertmanager": (("alertmanager",), "BERTH_DEVCLUSTER_ALERTMANAGER_BIN"),
    "prom-label-proxy": (("prom-label-proxy",), "BERTH_DEVCLUSTER_PROM_LABEL_PROXY_BIN"),
    "metrics-server": (("metrics-server",), "BERTH_DEVCLUSTER_METRICS_SERVER_BIN"),
}

# The longest a ServiceAccount token may live on the dev control plane (--service-account-max-token-expiration).
SERVICE_ACCOUNT_MAX_TOKEN_EXPIRATION = "24h"
ADMISSION_PLUGINS = (
    "NamespaceLifecycle,LimitRanger,ServiceAccount,ResourceQuota,PodSecurity,PodNodeSelector,"
    # Merges a namespace's scheduler.alpha.kubernetes.io/defaultTolerations into its pods, as hardened
    # clusters do; which tolerations a tenant may use is Berth's tolerations guard's job (worker/guards.py).
    "PodTolerationRestriction,"
    # Harmless without nodes or storage, and they are on in real clusters.
    "NodeRestriction,Priority,DefaultTolerationSeconds,DefaultStorageClass"
)
# Controllers the portal relies on, plus cheap ones that make workloads look normal.
# Canonical names (kube-controller-manager --help lists them).
CONTROLLERS = (
    "namespace-controller,garbage-collector-controller,serviceaccount-controller,"
    "serviceaccount-token-controller,resourcequota-controller,root-ca-certificate-publisher-controller,"
    "clusterrole-aggregation-controller,deployment-controller,replicaset-controller,"
    "service-cidr-controller"
)
# With nodes (ControlPlane(nodes=...)): every controller a cluster runs by default (StatefulSet, DaemonSet, Job,
# CronJob, EndpointSlice, volumes, node lifecycle...), as in a kubeadm cluster.
NODE_CONTROLLERS = "*"
# kube-controller-manager's client rate limit (--kube-api-qps, and the same burst). Upstream's default, 20 with a
# burst of 30, is shared by every controller in the process: a burst of writes to many namespaces (a repair storm
# touching hundreds of ResourceQuotas) queues the quota controller's status writes behind it, and a tenant approved
# meanwhile waits seconds for its quota to be counted. 100 is what upstream's own 5,000-node scalability jobs run
# the controller-manager with (CONTROLLER_MANAGER_TEST_ARGS in kubernetes/test-infra); docs/deployment.md tells
# operators of a big fleet the same. ControlPlane(controller_api_qps=None) runs it as upstream ships it.
CONTROLLER_API_QPS = 100


def controller_rate_args(qps: int | None) -> list[str]:
    """kube-controller-manager's client rate flags: ``qps`` for both, or none (upstream's 20/30) for None."""
    return [] if qps is None else [f"--kube-api-qps={qps}", f"--kube-api-burst={qps}"]


POOL_LABEL = "berth.dev/pool"
# The shared pool, then the large tier's dedicated pool (its tier selects berth.dev/pool=dedicated).
NODE_SPECS = (
    NodeSpec(name="shared-1", labels={POOL_LABEL: "shared"}),
    NodeSpec(name="dedicated-1", labels={POOL_LABEL: "dedicated"}),
)
# Pods of namespaces without a node selector of their own (every tier but the pooled ones) go to the shared
# pool, so the dedicated pool needs no taint, and the tier stays as seeded (a selector, no toleration).
CLUSTER_DEFAULT_NODE_SELECTOR = f"{POOL_LABEL}=shared"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SECURE_PORT = 6443  # the API server's port on the node network
# The cluster DNS Service's ClusterIP (kube-dns in kube-system; the kubelets' clusterDNS), as kubeadm picks it.
CLUSTER_DNS_IP = "10.96.0.10"
IN_CLUSTER_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
ADMIN_USER = "berth-admin"
FRONT_PROXY_CLIENT = "front-proxy-client"
KUBELET_CLIENT = "kube-apiserver-kubelet-client"
START_TIMEOUT = 120.0
KUBELET_PORT = 10250  # each node has an address of its own
_PORT_ATTEMPTS = 3


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or reconfigured."""


@dataclass(frozen=True)
class OIDCIssuer:
    """One JWT authenticator of the API server (an OIDC provider it trusts).

    Prefixes default to "oidc:" so a token claiming the group "system:masters"
    cannot become cluster-admin; pass "" deliberately if you want bare names.
    """

    url: str
    audience: str
    ca_pem: str | None = None  # None: the control plane's own CA
    username_claim: str = "sub"
    groups_claim: str = "groups"
    username_prefix: str = "oidc:"
    groups_prefix: str = "oidc:"

    def as_jwt_authenticator(self, default_ca_pem: str) -> dict:
        return {
            "issuer": {
                "url": self.url,
                "audiences": [self.audience],
                "certificateAuthority": self.ca_pem or default_ca_pem,
            },
            "claimMappings": {
                "username": {"claim": self.username_claim, "prefix": self.username_prefix},
                "groups": {"claim": self.groups_claim, "prefix": self.groups_prefix},
            },
        }


IssuerSpec = OIDCIssuer | Mapping[str, str]


def _as_issuer(spec: IssuerSpec) -> OIDCIssuer:
    return spec if isinstance(spec, OIDCIssuer) else OIDCIssuer(**spec)


def _build(target: str) -> Path:
    """The directory ``build.sh <target>`` builds into (or built into already)."""
    # stderr is inherited so a cold build shows its progress.
    result = subprocess.run([str(BUILD_SCRIPT), target], stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise ControlPlaneError(f"{BUILD_SCRIPT} {target} failed with exit code {result.returncode}")
    return Path(result.stdout.strip().splitlines()[-1])


def find_bin_dir(target: str = "kubernetes") -> Path:
    """The directory holding ``target``'s binaries (see TARGETS): the directory its variable names if set,
    else whatever ``build.sh <target>`` builds (or already built)."""
    binaries, variable = TARGETS[target]
    configured = os.environ.get(variable)
    bin_dir = Path(configured) if configured else _build(target)
    missing = [name for name in binaries if not os.access(bin_dir / name, os.X_OK)]
    if missing:
        raise ControlPlaneError(f"{bin_dir} lacks {', '.join(missing)}")
    return bin_dir


def helm_binary() -> Path:
    """A real helm (helm.sh/helm/v3 at devcluster/gobuild-helm's pin), built on first use."""
    return find_bin_dir("helm") / "helm"


def promtool_binary() -> Path:
    """A real promtool (Prometheus at devcluster/gobuild-prometheus's pin), built on first use."""
    return find_bin_dir("promtool") / "promtool"


def monitoring_crds() -> list[Path]:
    """prometheus-operator's PrometheusRule and ServiceMonitor CRDs (build.sh crds), for dry runs of the chart."""
    return sorted(_build("crds").glob("*.yaml"))


def free_port() -> int:
    """A port nobody listens on right now (the caller retries if it is taken meanwhile)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _https_get(
    port: int, path: str, context: ssl.SSLContext, timeout: float = 3.0, host: str = "127.0.0.1"
) -> tuple[int, bytes] | None:
    """(status, body), or None when nothing answers yet."""
    connection = http.client.HTTPSConnection(host, port, context=context, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


class ControlPlane:
    """etcd, kube-apiserver and kube-controller-manager in a temporary directory; with ``nodes``, also
    kube-scheduler and that many nodes of NODE_SPECS (shared pool, then dedicated pool).

    The CA exists from construction on, so an OIDC provider can get a serving
    certificate (`cp.ca.issue_serving_cert([...])`) before the API server starts.
    With ``audit_policy`` (an audit.k8s.io/v1 Policy) the API server writes the
    events it selects to ``audit_log_path``, one JSON object a line (bench/fleet.py).
    Several instances can run at once; each picks its own free ports.
    Start it from a long-lived thread (see devcluster.process._die_with_parent).
    """

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        oidc_issuers: Iterable[IssuerSpec] = (),
        ca: CertificateAuthority | None = None,
        apiserver_port: int | None = None,
        keep_data: bool = False,
        name: str = "berth-devcluster",
        nodes: int = 0,
        extra_images: Iterable[ImageSpec] = (),
        prometheus: bool = False,
        audit_policy: Mapping | None = None,
        controller_api_qps: int | None = CONTROLLER_API_QPS,
    ) -> None:
        if not 0 <= nodes <= len(NODE_SPECS):
            raise ControlPlaneError(f"nodes must be between 0 and {len(NODE_SPECS)}")
        if prometheus and not nodes:
            raise ControlPlaneError("Prometheus scrapes the nodes' kubelets: it needs nodes")
        self.name = name
        self.node_count = nodes
        self.nodes: list[Node] = []
        self.network: ClusterNetwork | None = None
        self.load_balancer: LoadBalancer | None = None
        self._with_prometheus = prometheus
        # An audit.k8s.io/v1 Policy: the API server writes the events it selects to audit_log_path (JSON lines).
        self._audit_policy = dict(audit_policy) if audit_policy is not None else None
        if controller_api_qps is not None and controller_api_qps < 1:
            raise ControlPlaneError("controller_api_qps must be at least 1, or None for upstream's default")
        self.controller_api_qps = controller_api_qps
        # With prometheus=True: the real server (devcluster/prometheus.py), scraping every kubelet, and the
        # Alertmanager its tenant alerts go to (devcluster/alertmanager.py).
        self.prometheus: dev_prometheus.Prometheus | None = None
        self.alertmanager: Alertmanager | None = None
        self._extra_images = tuple(extra_images)  # imported into every node beside the cluster's own
        self.ca = ca or CertificateAuthority(f"{name}-ca")
        # Separate on purpose: whoever holds a cert from the request-header CA may
        # assert any identity in X-Remote-User, so it must not be the general CA.
        self._front_proxy_ca = CertificateAuthority(f"{name}-front-proxy-ca")
        self._bin_dir = bin_dir
        self._oidc_issuers = [_as_issuer(spec) for spec in oidc_issuers]
        self._requested_apiserver_port = apiserver_port
        self._keep_data = keep_data
        self._components: list[Component] = []
        self.data_dir: Path | None = None
        self.apiserver_port = 0
        self.etcd_port = 0
        self.start_to_ready_seconds: float | None = None

    # -- what callers use -------------------------------------------------

    @property
    def ca_cert_pem(self) -> str:
        return self.ca.cert_pem

    @property
    def bin_dir(self) -> Path:
        if self._bin_dir is None:
            self._bin_dir = find_bin_dir()
        return self._bin_dir

    @property
    def kubectl(self) -> Path:
        return self.bin_dir / "kubectl"

    @property
    def api_host(self) -> str:
        """Where the API server listens: loopback, or with nodes the host's address on the node network (so
        pods reach it through the ``kubernetes`` Service), which is this run's alone."""
        return self.network.host_ip if self.network else "127.0.0.1"

    @property
    def api_url(self) -> str:
        return f"https://{self.api_host}:{self.apiserver_port}"

    @property
    def ca_file(self) -> Path:
        return self._dir / "pki" / "ca.crt"

    @property
    def kubeconfig_path(self) -> Path:
        """The admin (system:masters) kubeconfig, CA and client certificate embedded."""
        return self._dir / "admin.kubeconfig"

    @property
    def authentication_config_path(self) -> Path:
        return self._dir / "authentication-config.yaml"

    @property
    def audit_log_path(self) -> Path | None:
        """The API server's audit log (one JSON event a line), when started with an ``audit_policy``."""
        return self._dir / "audit.log" if self._audit_policy is not None else None

    def _all_components(self) -> list[Component]:
        return [*self._components, *(c for node in self.nodes for c in node.components)]

    def pids(self) -> dict[str, int]:
        return {c.name: c.pid for c in self._all_components() if c.pid is not None}

    def logs(self) -> dict[str, Path]:
        return {c.name: c.log_path for c in self._all_components() if c.log_path is not None}

    def component(self, name: str) -> Component:
        """A running component by name ("etcd", "kube-apiserver", "kubelet dedicated-1", ...): fault tests stop,
        pause and restart it in place (same argv, ports and data)."""
        for component in self._all_components():
            if component.name == name:
                return component
        raise ControlPlaneError(f"no component {name!r}; there are {sorted(c.name for c in self._all_components())}")

    def write_kubeconfig(
        self,
        path: Path,
        *,
        user: str,
        token: str | None = None,
        client_cert_pem: str | None = None,
        client_key_pem: str | None = None,
        namespace: str | None = None,
    ) -> Path:
        """A kubeconfig for this API server with a bearer token or a client certificate."""
        config = kubeconfig(
            server=self.api_url,
            ca_pem=self.ca_cert_pem,
            user=user,
            token=token,
            client_cert_pem=client_cert_pem,
            client_key_pem=client_key_pem,
            namespace=namespace,
            cluster_name=self.name,
        )
        return write_kubeconfig(Path(path), config)

    def failed_component(self) -> ComponentFailed | None:
        """Why the control plane broke after start (a component exited), else None."""
        for component in self._all_components():
            code = component.exited()
            if code is not None:
                return ComponentFailed(component, f"{component.name} exited with code {code}")
        return None

    # -- lifecycle -------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        if self._components:
            raise ControlPlaneError("already started")
        bin_dir = self.bin_dir  # may build; not part of start-to-ready
        began = time.monotonic()
        self.data_dir = Path(tempfile.mkdtemp(prefix=f"{self.name}-"))
        atexit.register(self.stop)
        if self.node_count:
            self._create_network()
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            try:
                self._start_once(bin_dir)
                break
            except ComponentFailed as failure:
                self._stop_components()
                # Free ports are picked before they are bound, so a parallel start may win one;
                # a port the caller fixed would only clash again.
                if failure.port_conflict and self._requested_apiserver_port is None and attempt < _PORT_ATTEMPTS:
                    continue
                self._destroy_network()
                atexit.unregister(self.stop)  # keep the logs the message points to
                raise ControlPlaneError(f"{failure}\n(data kept in {self.data_dir})") from failure
            except BaseException:
                self.stop()
                raise
        self.start_to_ready_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Stop components in reverse order and remove the data directory. Idempotent."""
        atexit.unregister(self.stop)
        self._stop_components()
        self._destroy_network()
        if self.data_dir and not self._keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _stop_components(self) -> None:
        if self.prometheus is not None:
            self.prometheus.stop()
            self.prometheus = None
        if self.alertmanager is not None:
            self.alertmanager.stop()
            self.alertmanager = None
        if self.load_balancer is not None:
            self.load_balancer.stop()
            self.load_balancer = None
        for node in reversed(self.nodes):
            node.stop()
        self.nodes = []
        for component in reversed(self._components):
            component.stop()
        self._components = []

    def _create_network(self) -> None:
        missing = missing_packages()
        if missing:
            raise ControlPlaneError(f"nodes need the Debian packages {' '.join(missing)} (make deps)")
        try:
            self.network = ClusterNetwork(SERVICE_CLUSTER_IP_RANGE)
            self.network.create()
        except NetworkError as error:
            self._destroy_network()
            raise ControlPlaneError(f"the nodes' network: {error}") from error
        except BaseException:
            self._destroy_network()
            raise

    def _destroy_network(self) -> None:
        if self.network is not None:
            self.network.destroy()
            self.network = None

    @property
    def _dir(self) -> Path:
        if self.data_dir is None:
            raise ControlPlaneError("not started")
        return self.data_dir

    def _start_once(self, bin_dir: Path) -> None:
        etcd_port, etcd_peer_port, kcm_port = free_port(), free_port(), free_port()
        # With nodes the API server has an address of this run's alone, so it takes the port real clusters use: the
        # NetworkPolicies that let a pod reach it (vcluster's control plane, the chart's own policy) name 443 and
        # 6443, which the `kubernetes` Service's endpoint then is.
        self.apiserver_port = self._requested_apiserver_port or (SECURE_PORT if self.network else free_port())
        # etcd remembers its peer URL; a retry with new ports needs a fresh member.
        shutil.rmtree(self._dir / "etcd", ignore_errors=True)
        self._write_pki()
        self._write_authentication_config()
        (self._dir / "logs").mkdir(exist_ok=True)

        self.etcd_port = etcd_port
        etcd = self._component("etcd", self._etcd_argv(bin_dir, etcd_port, etcd_peer_port))
        etcd_client = self._tls_context("apiserver-etcd-client")
        wait_until(
            lambda: _https_get(etcd_port, "/health", etcd_client) is not None,
            timeout=START_TIMEOUT,
            watched=[etcd],
            what="etcd /health",
        )

        apiserver = self._component("kube-apiserver", self._apiserver_argv(bin_dir, etcd_port))
        admin = self._tls_context("admin")
        wait_until(
            lambda: self._api_get("/readyz", admin) == (200, b"ok"),
            timeout=START_TIMEOUT,
            watched=[etcd, apiserver],
            what="kube-apiserver /readyz",
        )
        write_kubeconfig(self.kubeconfig_path, self._client_kubeconfig("admin", ADMIN_USER))
        write_kubeconfig(
            self._dir / "controller-manager.kubeconfig",
            self._client_kubeconfig("controller-manager", "system:kube-controller-manager"),
        )

        controller_manager = self._component(
            "kube-controller-manager", self._controller_manager_argv(bin_dir, kcm_port)
        )
        everything = [etcd, apiserver, controller_manager]
        verify_only = ssl.create_default_context(cadata=self.ca_cert_pem)
        wait_until(
            lambda: _https_get(kcm_port, "/healthz", verify_only) == (200, b"ok"),
            timeout=START_TIMEOUT,
            watched=everything,
            what="kube-controller-manager /healthz",
        )
        # Ready means usable: Pods are refused until their namespace has a default ServiceAccount.
        default_sa = "/api/v1/namespaces/default/serviceaccounts/default"
        wait_until(
            lambda: (self._api_get(default_sa, admin) or (0,))[0] == 200,
            timeout=START_TIMEOUT,
            watched=everything,
            what="the default ServiceAccount",
        )
        if self.node_count:
            self._start_nodes(bin_dir, everything)

    def _start_nodes(self, bin_dir: Path, control_plane: list[Component]) -> None:
        """kube-scheduler, then containerd, a kubelet and kube-proxy per node; ready once every node is Ready and
        untainted."""
        write_kubeconfig(
            self._dir / "scheduler.kubeconfig", self._client_kubeconfig("scheduler", "system:kube-scheduler")
        )
        scheduler_port = free_port()
        scheduler = self._component("kube-scheduler", self._scheduler_argv(bin_dir, scheduler_port))
        watched = [*control_plane, scheduler]
        verify_only = ssl.create_default_context(cadata=self.ca_cert_pem)
        wait_until(
            lambda: _https_get(scheduler_port, "/healthz", verify_only) == (200, b"ok"),
            timeout=START_TIMEOUT,
            watched=watched,
            what="kube-scheduler /healthz",
        )
        network = self.network
        if network is None:
            raise ControlPlaneError("nodes need the cluster network")
        network.remove_nodes()  # from a start attempt that failed
        proxy = self.ca.issue_client_cert("system:kube-proxy")  # bound to system:node-proxier by default RBAC
        specs = NODE_SPECS[: self.node_count]
        for spec, subnet in zip(specs, pick_subnets(len(specs)), strict=True):
            link = network.add_node(spec.name, subnet)
            node = Node(
                spec=spec,
                name=spec.name,
                directory=self._dir / "nodes" / spec.name,
                link=link,
                bin_dir=bin_dir,
                ca_file=self.ca_file,
                cluster_dns=CLUSTER_DNS_IP,
            )
            self.nodes.append(node)
            client = self.ca.issue_client_cert(f"system:node:{node.name}", ("system:nodes",))
            node.write_files(
                kubeconfig=self._node_kubeconfig(f"system:node:{node.name}", client),
                proxy_kubeconfig=self._node_kubeconfig("system:kube-proxy", proxy),
                serving_pair=self.ca.issue_serving_cert([node.node_ip, node.name]),
                kubelet_port=KUBELET_PORT,
            )
        network.route_between_nodes()
        network.route_load_balancers()
        archives = build_archives(self._dir / "images", [*CLUSTER_IMAGES, *self._extra_images], find_bin_dir)
        for node in self.nodes:
            containerd = node.containerd_component()
            node.components.append(containerd)
            containerd.start()
            node.wait_for_containerd(containerd, archives)
            for component in (node.kubelet_component(), node.kube_proxy_component()):
                node.components.append(component)
                component.start()
        admin = self._tls_context("admin")
        watched = [*watched, *(c for node in self.nodes for c in node.components)]
        wait_until(
            lambda: self._nodes_ready(admin),
            timeout=START_TIMEOUT,
            watched=watched,
            what="the nodes to be Ready without the not-ready taint",
            interval=0.5,
        )
        self._start_addons(watched)

    def _start_addons(self, watched: list[Component]) -> None:
        """CoreDNS, local-path-provisioner and the NetworkPolicy engine (devcluster/addons.py); ready once each
        runs, so no pod of a caller's ever starts on a node that does not enforce NetworkPolicy yet."""
        objects = addons.manifests(
            cluster_dns_ip=CLUSTER_DNS_IP,
            node_paths={node.name: node.dir / "local-path" for node in self.nodes},
        )
        addons.apply(self.kubectl, self.kubeconfig_path, objects)
        wait_until(
            lambda: (
                addons.ready(self.kubectl, self.kubeconfig_path, len(self.nodes))
                and all(node.enforces_network_policy() for node in self.nodes)
            ),
            timeout=START_TIMEOUT,
            watched=watched,
            what="CoreDNS, local-path-provisioner and kube-network-policies",
            interval=1.0,
        )
        assert self.network is not None
        self.load_balancer = LoadBalancer(
            host=self.api_host,
            port=self.apiserver_port,
            context=self._tls_context("admin"),
            pool=self.network.load_balancer_pool,
        )
        self.load_balancer.start()
        self._start_metrics_server(watched)
        if self._with_prometheus:
            self._start_prometheus(watched)

    def _start_metrics_server(self, watched: list[Component]) -> None:
        """metrics-server on the host (devcluster/metrics_server.py); ready once the aggregator reaches it. Its first
        metrics follow within a resolution or two; callers that need them wait for them."""
        addons.apply(self.kubectl, self.kubeconfig_path, metrics_server.rbac_objects())
        files = metrics_server.Files(
            kubeconfig=self._dir / "metrics-server.kubeconfig",
            cert_file=self._pki_path("metrics-server-serving.crt"),
            key_file=self._pki_path("metrics-server-serving.key"),
            ca_file=self.ca_file,
            front_proxy_ca_file=self._pki_path("front-proxy-ca.crt"),
        )
        write_kubeconfig(files.kubeconfig, self._client_kubeconfig("metrics-server", metrics_server.USER))
        argv = metrics_server.argv(
            find_bin_dir("metrics-server"), host=self.api_host, files=files, front_proxy_client=FRONT_PROXY_CLIENT
        )
        component = self._component("metrics-server", argv)
        watched = [*watched, component]
        verify_only = ssl.create_default_context(cadata=self.ca_cert_pem)
        wait_until(
            lambda: _https_get(metrics_server.PORT, "/livez", verify_only, host=self.api_host) == (200, b"ok"),
            timeout=START_TIMEOUT,
            watched=watched,
            what="metrics-server /livez",
        )
        addons.apply(
            self.kubectl, self.kubeconfig_path, metrics_server.api_objects(host=self.api_host, ca_pem=self.ca_cert_pem)
        )
        admin = self._tls_context("admin")
        path = f"/apis/apiregistration.k8s.io/v1/apiservices/{metrics_server.API_SERVICE}"
        wait_until(
            lambda: (
                (answer := self._api_get(path, admin)) is not None
                and answer[0] == 200
                and metrics_server.available(json.loads(answer[1]))
            ),
            timeout=START_TIMEOUT,
            watched=watched,
            what=f"the APIService {metrics_server.API_SERVICE} to be Available",
        )

    def _start_prometheus(self, watched: list[Component]) -> None:
        addons.apply(self.kubectl, self.kubeconfig_path, dev_prometheus.rbac_objects())
        client = dev_prometheus.ClientFiles(
            self.ca_file, self._pki_path("prometheus.crt"), self._pki_path("prometheus.key")
        )
        self.alertmanager = Alertmanager(self._dir / "alertmanager", find_bin_dir("alertmanager"), port=free_port())
        self.alertmanager.start(watched=watched)
        self.prometheus = dev_prometheus.Prometheus(
            self._dir / "prometheus", find_bin_dir("prometheus"), client, port=free_port()
        )
        self.prometheus.start(
            [(node.name, node.node_ip) for node in self.nodes],
            kubelet_port=KUBELET_PORT,
            watched=watched,
            alertmanager=self.alertmanager.address,
        )

    def _node_kubeconfig(self, user: str, pair: tuple[str, str]) -> dict:
        return kubeconfig(
            server=self.api_url,
            ca_pem=self.ca_cert_pem,
            user=user,
            cluster_name=self.name,
            client_cert_pem=pair[0],
            client_key_pem=pair[1],
        )

    def _api_get(self, path: str, context: ssl.SSLContext, timeout: float = 3.0) -> tuple[int, bytes] | None:
        return _https_get(self.apiserver_port, path, context, timeout, host=self.api_host)

    def _nodes_ready(self, admin: ssl.SSLContext) -> bool:
        answer = self._api_get("/api/v1/nodes", admin)
        if not answer or answer[0] != 200:
            return False
        ready = set()
        for item in json.loads(answer[1])["items"]:
            conditions = {c["type"]: c["status"] for c in item.get("status", {}).get("conditions", [])}
            taints = {t["key"] for t in item.get("spec", {}).get("taints", [])}
            if conditions.get("Ready") == "True" and not any(t.startswith("node.kubernetes.io/") for t in taints):
                ready.add(item["metadata"]["name"])
        return ready >= {node.name for node in self.nodes}

    def _scheduler_argv(self, bin_dir: Path, port: int) -> list[str]:
        kubeconfig_file = self._dir / "scheduler.kubeconfig"
        return [
            str(bin_dir / "kube-scheduler"),
            f"--kubeconfig={kubeconfig_file}",
            f"--authentication-kubeconfig={kubeconfig_file}",
            f"--authorization-kubeconfig={kubeconfig_file}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self._dir / 'scheduler-certs'}",
            f"--tls-cert-file={self._pki_path('controller-manager-serving.crt')}",
            f"--tls-private-key-file={self._pki_path('controller-manager-serving.key')}",
            "--leader-elect=false",
            "--profiling=false",
        ]

    def _write_admission_config(self) -> Path:
        path = self._dir / "admission-config.json"
        config = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [
                {
                    "name": "PodNodeSelector",
                    "configuration": {
                        "podNodeSelectorPluginConfig": {"clusterDefaultNodeSelector": CLUSTER_DEFAULT_NODE_SELECTOR}
                    },
                }
            ],
        }
        path.write_text(json.dumps(config, indent=2) + "\n")
        return path

    def _component(self, name: str, argv: list[str]) -> Component:
        component = Component(name, argv, self._dir / "logs" / f"{name}.log")
        self._components.append(component)
        component.start()
        return component

    # -- files ------------------------------------------------------------------

    def _pki_path(self, name: str) -> Path:
        return self._dir / "pki" / name

    def _write_pair(self, name: str, pair: tuple[str, str]) -> None:
        write_private(self._pki_path(f"{name}.crt"), pair[0])
        write_private(self._pki_path(f"{name}.key"), pair[1])

    def _write_pki(self) -> None:
        write_private(self.ca_file, self.ca_cert_pem)
        service_ip = str(next(ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE).hosts()))
        hosts = list(dict.fromkeys(["127.0.0.1", "localhost", self.api_host, service_ip, *IN_CLUSTER_NAMES]))
        self._write_pair("apiserver", self.ca.issue_serving_cert(hosts))
        self._write_pair("etcd", self.ca.issue_peer_cert(["127.0.0.1", "localhost"]))
        self._write_pair("apiserver-etcd-client", self.ca.issue_client_cert("kube-apiserver-etcd-client"))
        self._write_pair("admin", self.ca.issue_client_cert(ADMIN_USER, ("system:masters",)))
        self._write_pair("controller-manager", self.ca.issue_client_cert("system:kube-controller-manager"))
        self._write_pair("controller-manager-serving", self.ca.issue_serving_cert(["127.0.0.1", "localhost"]))
        if self.node_count:
            self._write_pair("scheduler", self.ca.issue_client_cert("system:kube-scheduler"))
            # What the API server shows kubelets when it proxies logs, exec and port-forward.
            self._write_pair("apiserver-kubelet-client", self.ca.issue_client_cert(KUBELET_CLIENT, ("system:masters",)))
            self._write_pair("metrics-server", self.ca.issue_client_cert(metrics_server.USER))
            serving_names = [metrics_server.SERVING_NAME, self.api_host]
            self._write_pair("metrics-server-serving", self.ca.issue_serving_cert(serving_names))
        if self._with_prometheus:
            self._write_pair("prometheus", self.ca.issue_client_cert(dev_prometheus.USER))
        write_private(self._pki_path("front-proxy-ca.crt"), self._front_proxy_ca.cert_pem)
        self._write_pair("front-proxy-client", self._front_proxy_ca.issue_client_cert(FRONT_PROXY_CLIENT))
        private_pem, public_pem = new_service_account_key()
        write_private(self._pki_path("sa.key"), private_pem)
        write_private(self._pki_path("sa.pub"), public_pem)

    def _tls_context(self, client: str) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self.ca_cert_pem)
        context.load_cert_chain(self._pki_path(f"{client}.crt"), self._pki_path(f"{client}.key"))
        return context

    def _client_kubeconfig(self, pair: str, user: str) -> dict:
        return kubeconfig(
            server=self.api_url,
            ca_pem=self.ca_cert_pem,
            user=user,
            cluster_name=self.name,
            client_cert_pem=self._pki_path(f"{pair}.crt").read_text(),
            client_key_pem=self._pki_path(f"{pair}.key").read_text(),
        )

    def _authentication_config_text(self) -> str:
        config = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AuthenticationConfiguration",
            "jwt": [issuer.as_jwt_authenticator(self.ca_cert_pem) for issuer in self._oidc_issuers],
        }
        return json.dumps(config, indent=2) + "\n"

    def _write_authentication_config(self) -> str:
        """Replace the file atomically so the API server never reloads half a file."""
        text = self._authentication_config_text()
        staging = self.authentication_config_path.with_suffix(".tmp")
        write_private(staging, text)
        os.replace(staging, self.authentication_config_path)
        return text

    # -- command lines ------------------------------------------------------------

    def _etcd_argv(self, bin_dir: Path, port: int, peer_port: int) -> list[str]:
        client_url, peer_url = f"https://127.0.0.1:{port}", f"https://127.0.0.1:{peer_port}"
        cert, key, ca = self._pki_path("etcd.crt"), self._pki_path("etcd.key"), self.ca_file
        return [
            str(bin_dir / "etcd"),
            f"--name={self.name}",
            f"--data-dir={self._dir / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster={self.name}={peer_url}",
            "--initial-cluster-state=new",
            # Loopback is shared by every local user, so etcd demands client certificates.
            f"--cert-file={cert}",
            f"--key-file={key}",
            f"--trusted-ca-file={ca}",
            "--client-cert-auth",
            f"--peer-cert-file={cert}",
            f"--peer-key-file={key}",
            f"--peer-trusted-ca-file={ca}",
            "--peer-client-cert-auth",
            # Throwaway data: durability costs seconds per test run for nothing.
            "--unsafe-no-fsync",
        ]

    def _apiserver_argv(self, bin_dir: Path, etcd_port: int) -> list[str]:
        pki = self._pki_path
        return [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers=https://127.0.0.1:{etcd_port}",
            f"--etcd-cafile={self.ca_file}",
            f"--etcd-certfile={pki('apiserver-etcd-client.crt')}",
            f"--etcd-keyfile={pki('apiserver-etcd-client.key')}",
            f"--bind-address={self.api_host}",
            f"--advertise-address={self.api_host}",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self._dir / 'apiserver-certs'}",
            f"--tls-cert-file={pki('apiserver.crt')}",
            f"--tls-private-key-file={pki('apiserver.key')}",
            f"--client-ca-file={self.ca_file}",
            f"--authentication-config={self.authentication_config_path}",
            "--authorization-mode=Node,RBAC",
            # The aggregation layer, as kubeadm sets it up; it also lets the controller
            # manager's delegated authentication find a complete CA bundle.
            f"--requestheader-client-ca-file={pki('front-proxy-ca.crt')}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki('front-proxy-client.crt')}",
            f"--proxy-client-key-file={pki('front-proxy-client.key')}",
            f"--enable-admission-plugins={ADMISSION_PLUGINS}",
            # Lets PodSecurity, not the cluster-wide switch, decide about privileged Pods.
            "--allow-privileged=true",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            f"--service-account-issuer={self.api_url}",
            f"--service-account-key-file={pki('sa.pub')}",
            f"--service-account-signing-key-file={pki('sa.key')}",
            # No projected token outlives a day, whatever a pod asks for (Berth's guard holds each tier to
            # less), and the kubelet's tokens are not silently stretched to a year ("extended" tokens).
            f"--service-account-max-token-expiration={SERVICE_ACCOUNT_MAX_TOKEN_EXPIRATION}",
            "--service-account-extend-token-expiration=false",
            f"--api-audiences={self.api_url}",
            "--profiling=false",
            *self._apiserver_audit_args(),
            *self._apiserver_node_args(),
        ]

    def _apiserver_audit_args(self) -> list[str]:
        if self._audit_policy is None:
            return []
        policy = self._dir / "audit-policy.json"
        policy.write_text(json.dumps(self._audit_policy, indent=2) + "\n")
        # Blocking (the default mode): every selected event is written before its response, none is dropped. One
        # file: never rotated (the default rotates at 100 MB).
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log_path}",
            "--audit-log-format=json",
            "--audit-log-maxsize=1000000",
        ]

    def _apiserver_node_args(self) -> list[str]:
        if not self.node_count:
            # Endpoints may not point at loopback; with no Pods nobody needs them anyway.
            return ["--endpoint-reconciler-type=none"]
        pki = self._pki_path
        return [
            f"--kubelet-client-certificate={pki('apiserver-kubelet-client.crt')}",
            f"--kubelet-client-key={pki('apiserver-kubelet-client.key')}",
            # Each kubelet serves a certificate from this CA for its loopback node IP.
            f"--kubelet-certificate-authority={self.ca_file}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--admission-control-config-file={self._write_admission_config()}",
            # Aggregated APIs (metrics-server) are dialled at their Service's endpoint: the host, where the API
            # server runs, has no kube-proxy to serve a ClusterIP.
            "--enable-aggregator-routing=true",
        ]

    def _controller_manager_argv(self, bin_dir: Path, port: int) -> list[str]:
        kubeconfig_file = self._dir / "controller-manager.kubeconfig"
        return [
            str(bin_dir / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig_file}",
            f"--authentication-kubeconfig={kubeconfig_file}",
            f"--authorization-kubeconfig={kubeconfig_file}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self._dir / 'controller-manager-certs'}",
            f"--tls-cert-file={self._pki_path('controller-manager-serving.crt')}",
            f"--tls-private-key-file={self._pki_path('controller-manager-serving.key')}",
            f"--controllers={CONTROLLERS},{NODE_CONTROLLERS}" if self.node_count else f"--controllers={CONTROLLERS}",
            "--leader-elect=false",
            # Each controller acts as its own ServiceAccount with the upstream RBAC roles,
            # as in a kubeadm cluster, so permission mistakes show up here too.
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self._pki_path('sa.key')}",
            f"--root-ca-file={self.ca_file}",
            "--profiling=false",
            *controller_rate_args(self.controller_api_qps),
        ]

    # -- disruptions (the watcher's reliability tests) -------------------------------

    def restart_apiserver(self, meanwhile: Callable[[], None] | None = None) -> None:
        """Stop kube-apiserver (every watch and connection drops), run ``meanwhile``, start it again on the same
        port, and return once it is ready."""
        apiserver = next(c for c in self._components if c.name == "kube-apiserver")
        apiserver.stop()
        if meanwhile is not None:
            meanwhile()
        apiserver.start()
        admin = self._tls_context("admin")
        wait_until(
            lambda: self._api_get("/readyz", admin) == (200, b"ok"),
            timeout=START_TIMEOUT,
            watched=[apiserver],
            what="kube-apiserver /readyz after a restart",
        )

    def compact_etcd(self) -> int:
        """Write a key no one reads and compact etcd's history up to it, through etcd's JSON gateway: every
        resourceVersion before now is gone (a watch resuming from one gets 410 Gone). The revision compacted to."""
        context = self._tls_context("apiserver-etcd-client")

        def post(path: str, body: dict) -> dict:
            connection = http.client.HTTPSConnection("127.0.0.1", self.etcd_port, context=context, timeout=10)
            try:
                connection.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                answer = response.read()
                if response.status != 200:
                    raise ControlPlaneError(f"etcd {path}: {response.status} {answer[:200]!r}")
                return dict(json.loads(answer))
            finally:
                connection.close()

        key = base64.b64encode(b"/berth-devcluster/compaction-marker").decode()
        put = post("/v3/kv/put", {"key": key, "value": base64.b64encode(b"x").decode()})
        revision = int(put["header"]["revision"])
        post("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    # -- OIDC ----------------------------------------------------------------------

    def set_oidc_issuers(self, issuers: Iterable[IssuerSpec], *, wait: bool = True, timeout: float = 90.0) -> None:
        """Rewrite the authentication config; the API server reloads it without a restart.

        The API server only swaps in JWT authenticators whose discovery document it
        could fetch, so start the OIDC provider first. With wait=True this returns
        once the API server reports the new file as applied, and raises if it
        rejects it.
        """
        self._oidc_issuers = [_as_issuer(spec) for spec in issuers]
        if self.data_dir is None:
            return  # written by start()
        text = self._write_authentication_config()
        if wait:
            self._wait_for_authentication_config(text, timeout)

    def _wait_for_authentication_config(self, text: str, timeout: float) -> None:
        applied = f'hash="sha256:{hashlib.sha256(text.encode()).hexdigest()}"'
        failures_before = self._authentication_reload_failures()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            metrics = self._metrics()
            if any(
                line.startswith("apiserver_authentication_config_controller_last_config_info") and applied in line
                for line in metrics.splitlines()
            ):
                return
            if self._authentication_reload_failures() > failures_before:
                break
            time.sleep(0.5)
        log = self.logs()["kube-apiserver"].read_text(errors="replace")
        reasons = [line for line in log.splitlines() if "authentication config" in line][-5:]
        raise ControlPlaneError("kube-apiserver did not apply the new authentication config:\n" + "\n".join(reasons))

    def metrics(self) -> str:
        """The API server's own /metrics (Prometheus text), read as the admin; '' when it does not answer."""
        return self._metrics()

    def _metrics(self) -> str:
        answer = self._api_get("/metrics", self._tls_context("admin"), timeout=10.0)
        return answer[1].decode() if answer and answer[0] == 200 else ""

    def _authentication_reload_failures(self) -> float:
        pattern = re.compile(
            r'^apiserver_authentication_config_controller_automatic_reloads_total\{[^}]*status="failure"[^}]*\} (\S+)$'
        )
        return sum(float(m.group(1)) for line in self._metrics().splitlines() if (m := pattern.match(line)))


# -- command line -------------------------------------------------------------------


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _stop_on_first_signal(signum: int, frame: FrameType | None) -> None:
    """The first stop signal interrupts the launcher (waiting, or still starting) and so starts the ordered stop;
    every later one is ignored until the process exits.

    `timeout`, make and supervisors signal the launcher's whole process group, and more than once: `timeout`
    forwards its SIGTERM to the launcher and to the group again, make forwards one to its child. A second
    KeyboardInterrupt in the middle of the stop would abandon it half-way, leaving a shim with its pod, the
    pods' mounts, the nodes' namespaces and the bridge behind. Ignored rather than deferred because that is
    inherited through exec: the `umount` and `ip` the stop runs share the launcher's process group, and a later
    group signal must not kill them either. The components never see a group's signal: each runs in a session
    of its own (devcluster/process.py).
    """
    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, signal.SIG_IGN)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.launcher", description=__doc__.split("\n")[0])
    parser.add_argument("--apiserver-port", type=int, help="fixed API server port (default: any free port)")
    parser.add_argument("--kubeconfig-out", type=Path, help="also copy the admin kubeconfig here")
    parser.add_argument("--keep-data", action="store_true", help="keep the data directory (logs, etcd) on exit")
    parser.add_argument(
        "--nodes", type=int, default=0, help="real nodes to start: 1 (shared pool) or 2 (and the dedicated pool)"
    )
    parser.add_argument(
        "--prometheus",
        action="store_true",
        help="also run Prometheus, scraping every node, and Alertmanager for its alerts (needs --nodes)",
    )
    parser.add_argument(
        "--vcluster", action="store_true", help="also give the nodes vcluster's images (devcluster/images.py)"
    )
    args = parser.parse_args(argv)

    # SIGINT too: shells start background jobs with SIGINT ignored, and Python then never
    # raises KeyboardInterrupt, so `kill -INT` would be silently lost.
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop_on_first_signal)
    control_plane = ControlPlane(
        apiserver_port=args.apiserver_port,
        keep_data=args.keep_data,
        nodes=args.nodes,
        extra_images=VCLUSTER_IMAGES if args.vcluster else (),
        prometheus=args.prometheus,
    )
    try:
        with control_plane:
            kubeconfig_path = control_plane.kubeconfig_path
            if args.kubeconfig_out:
                shutil.copyfile(kubeconfig_path, args.kubeconfig_out)
                os.chmod(args.kubeconfig_out, 0o600)
                kubeconfig_path = args.kubeconfig_out
            print(
                f"devcluster: ready in {control_plane.start_to_ready_seconds:.1f}s (Ctrl-C stops it)", file=sys.stderr
            )
            print(f"API server: {control_plane.api_url}")
            print(f"kubeconfig: {kubeconfig_path}")
            print(f"data dir:   {control_plane.data_dir}")
            if control_plane.prometheus is not None:
                print(f"Prometheus: {control_plane.prometheus.url}")
            if control_plane.alertmanager is not None:
                print(f"Alertmanager: {control_plane.alertmanager.url}")
            print(f"export KUBECONFIG={kubeconfig_path}", flush=True)
            while (failure := control_plane.failed_component()) is None:
                time.sleep(1)
            print(f"devcluster: {failure}", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        print("devcluster: stopped", file=sys.stderr)
        return 0
    except ControlPlaneError as error:
        print(f"devcluster: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
