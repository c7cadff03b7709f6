"""Real nodes for the dev control plane: containerd + runc + the CNI bridge + kubelet + kube-proxy, per node.

Each node is a network namespace of its own on the cluster's node network (devcluster/network.py): its
kubelet serves on the node's address there (its InternalIP), its pods live in one /24 of 10.244.0.0/16 on the
node's own bridge, and its kube-proxy programs Services in nftables for that namespace alone. Everything a node
writes on disk lives under its own directory (containerd's root, state and socket, the kubelet's root, pod
logs, CNI config and IP leases, pod network namespaces), its cgroups under a root of its own.
``Node.stop`` kills the pods, the shims, kube-proxy, containerd and the kubelet, and removes the mounts,
cgroups and log links it made; the cluster network then deletes the node's namespace with all its interfaces
and rules. Nothing is downloaded: images come from devcluster/images.py.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from devcluster.images import SANDBOX_IMAGE
from devcluster.kubeconfig import write_kubeconfig, write_private
from devcluster.network import NodeLink, free_subnets
from devcluster.process import Component, wait_until

CNI_BIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
POD_NETWORK = ipaddress.IPv4Network("10.244.0.0/16")
CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTAINER_LOG_LINKS = Path("/var/log/containers")  # the kubelet's fixed place for log symlinks
START_TIMEOUT = 120.0
CLUSTER_DOMAIN = "cluster.local"
NETPOL_TABLE = "kube-network-policies"  # the engine's nftables table (devcluster/addons.py)


class NodeError(RuntimeError):
    """A node could not be set up (missing packages, no free subnet)."""


@dataclass(frozen=True)
class NodeSpec:
    """One node: its name suffix, labels and taints (``key=value:Effect``)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[str, ...] = ()


def missing_packages() -> list[str]:
    """The Debian packages a node needs that this machine lacks (``make deps`` installs them)."""
    needs = {
        "containerd": shutil.which("containerd"),
        "runc": shutil.which("runc"),
        "containernetworking-plugins": (CNI_BIN_DIR / "bridge").exists(),
        "busybox-static": Path("/bin/busybox").exists(),
        "iproute2": shutil.which("ip"),
        "nftables": shutil.which("nft"),  # kube-proxy's nftables mode drives the nft command
    }
    return [package for package, found in needs.items() if not found]


def pick_subnets(count: int) -> list[ipaddress.IPv4Network]:
    """``count`` /24s of 10.244.0.0/16 that no route on this machine uses (other runs route theirs)."""
    return free_subnets(POD_NETWORK, count)


class Node:
    """containerd + kubelet for one node; components are started by the control plane's start order."""

    def __init__(
        self,
        *,
        spec: NodeSpec,
        name: str,
        directory: Path,
        link: NodeLink,
        bin_dir: Path,
        ca_file: Path,
        cluster_dns: str,
    ) -> None:
        self.spec = spec
        self.name = name
        self.dir = directory
        self.link = link
        self.subnet = link.pod_subnet
        self.bin_dir = bin_dir
        self.ca_file = ca_file
        self.cluster_dns = cluster_dns
        self.node_ip = link.ip
        self.bridge = "cni0"  # in the node's own namespace
        self.pod_gateway = str(next(self.subnet.hosts()))  # the bridge's address
        self.cgroup_root = f"/berth-{name}-{link.netns}"
        self.kubelet_port = 0
        self.components: list[Component] = []

    # -- paths ---------------------------------------------------------------------

    @property
    def containerd_socket(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    @property
    def pod_logs_dir(self) -> Path:
        return self.dir / "pod-logs"

    # -- start ---------------------------------------------------------------------

    def write_files(
        self, *, kubeconfig: dict, proxy_kubeconfig: dict, serving_pair: tuple[str, str], kubelet_port: int
    ) -> None:
        self.kubelet_port = kubelet_port
        for sub in ("containerd", "cni", "kubelet", "pod-logs", "logs", "pki", "volume-plugins"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        write_kubeconfig(self.dir / "kubelet.kubeconfig", kubeconfig)
        write_kubeconfig(self.dir / "kube-proxy.kubeconfig", proxy_kubeconfig)
        (self.dir / "kube-proxy-config.json").write_text(json.dumps(self._kube_proxy_config(), indent=2))
        write_private(self.dir / "pki" / "kubelet.crt", serving_pair[0])
        write_private(self.dir / "pki" / "kubelet.key", serving_pair[1])
        (self.dir / "containerd" / "config.toml").write_text(self._containerd_config())
        (self.dir / "cni" / "10-berth.conflist").write_text(json.dumps(self._cni_config(), indent=2))
        (self.dir / "kubelet-config.json").write_text(json.dumps(self._kubelet_config(), indent=2))

    def _containerd_config(self) -> str:
        state = self.dir / "containerd"
        return f"""version = 2
root = "{state / "root"}"
state = "{state / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{state / "containerd.sock.ttrpc"}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  # The VM refuses negative oom_score_adj (no CAP_SYS_RESOURCE): without this runc fails every sandbox with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  # Network namespaces under our state dir, not /run/netns, so a stop finds exactly ours.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{self.dir / "cni"}"
    max_conf_num = 1
"""

    def _cni_config(self) -> dict:
        return {
            "cniVersion": "1.0.0",
            "name": self.bridge,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": True,
                    # No masquerading and no portmap: pods need no way out of the cluster here.
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(self.dir / "cni" / "leases"),
                        "ranges": [[{"subnet": str(self.subnet), "gateway": self.pod_gateway}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "loopback"},
            ],
        }

    def _kubelet_config(self) -> dict:
        pki = self.dir / "pki"
        endpoint = f"unix://{self.containerd_socket}"
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.node_ip,
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzPort": 0,
            "tlsCertFile": str(pki / "kubelet.crt"),
            "tlsPrivateKeyFile": str(pki / "kubelet.key"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.ca_file)},
            },
            "authorization": {"mode": "Webhook"},
            "containerRuntimeEndpoint": endpoint,
            "imageServiceEndpoint": endpoint,
            # cgroup v1 VM without systemd as init.
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "cgroupRoot": self.cgroup_root,
            "failSwapOn": False,
            "podLogsDir": str(self.pod_logs_dir),
            "volumePluginDir": str(self.dir / "volume-plugins"),
            "registerWithTaints": [_taint(t) for t in self.spec.taints],
            # Two kubelets share one disk and one memory: neither evicts or garbage-collects images.
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            # Pods resolve through the cluster's CoreDNS (devcluster/addons.py); the host's resolv.conf would
            # lead off this machine.
            "clusterDNS": [self.cluster_dns],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": "",
            "maxPods": 50,
            "nodeStatusUpdateFrequency": "5s",
            "syncFrequency": "10s",
        }

    def _kube_proxy_config(self) -> dict:
        return {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.dir / "kube-proxy.kubeconfig")},
            # nftables: the mode upstream develops now; its rules are one table per namespace, gone with it.
            "mode": "nftables",
            "clusterCIDR": str(POD_NETWORK),
            "hostnameOverride": self.name,
            "nodePortAddresses": ["primary"],
            # In the node's namespace: these ports collide with nothing on the host or on the other node.
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            # Leave the kernel's conntrack table size and timeouts alone: they are the host's, not the node's.
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }

    def containerd_component(self) -> Component:
        self.dir.mkdir(parents=True, exist_ok=True)
        return Component(
            f"containerd {self.name}",
            [*self.link.enter(), "containerd", "--config", str(self.dir / "containerd" / "config.toml")],
            self.dir / "logs" / "containerd.log",
        )

    def kube_proxy_component(self) -> Component:
        return Component(
            f"kube-proxy {self.name}",
            [*self.link.enter(), str(self.bin_dir / "kube-proxy"), f"--config={self.dir / 'kube-proxy-config.json'}"],
            self.dir / "logs" / "kube-proxy.log",
        )

    def wait_for_containerd(self, containerd: Component, archives: Sequence[Path]) -> None:
        """Wait until containerd answers, then import the images in ``archives`` (devcluster/images.py)."""
        wait_until(
            lambda: self._ctr("version").returncode == 0,
            timeout=START_TIMEOUT,
            watched=[containerd],
            what=f"containerd of {self.name}",
            interval=0.3,
        )
        for archive in archives:
            imported = self._ctr("images", "import", str(archive))
            if imported.returncode != 0:
                raise NodeError(f"ctr images import of {archive.name} failed: {imported.stderr.strip()}")

    def kubelet_component(self) -> Component:
        self._make_cgroup_root()
        labels = ",".join(f"{k}={v}" for k, v in sorted(self.spec.labels.items()))
        argv = [
            *self.link.enter(),
            str(self.bin_dir / "kubelet"),
            f"--config={self.dir / 'kubelet-config.json'}",
            f"--kubeconfig={self.dir / 'kubelet.kubeconfig'}",
            f"--root-dir={self.dir / 'kubelet'}",
            f"--cert-dir={self.dir / 'pki'}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.node_ip}",
            "--v=1",
        ]
        if labels:
            argv.append(f"--node-labels={labels}")
        return Component(f"kubelet {self.name}", argv, self.dir / "logs" / "kubelet.log")

    def enforces_network_policy(self) -> bool:
        """Whether the NetworkPolicy engine has programmed this node (its nftables table exists here)."""
        table = ["nft", "list", "table", "inet", NETPOL_TABLE]
        return subprocess.run([*self.link.enter(), *table], capture_output=True).returncode == 0

    def _ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "--address", str(self.containerd_socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    # -- cgroups -------------------------------------------------------------------

    def _hierarchies(self) -> list[Path]:
        """Where this node's cgroup root lives: every v1 hierarchy (or the one v2 tree)."""
        if (CGROUP_ROOT / "cgroup.controllers").exists():
            return [CGROUP_ROOT]
        return [p for p in sorted(CGROUP_ROOT.iterdir()) if p.is_dir() and not p.is_symlink() and os.path.ismount(p)]

    def _make_cgroup_root(self) -> None:
        for hierarchy in self._hierarchies():
            (hierarchy / self.cgroup_root.lstrip("/")).mkdir(exist_ok=True)

    def _cgroup_pids(self) -> set[int]:
        pids: set[int] = set()
        for hierarchy in self._hierarchies():
            # os.walk, not rglob: a pod's cgroup removed by runc while this looks is skipped, not an error.
            for directory, _, files in os.walk(hierarchy / self.cgroup_root.lstrip("/")):
                if "cgroup.procs" not in files:
                    continue
                try:
                    pids.update(int(line) for line in (Path(directory) / "cgroup.procs").read_text().split())
                except OSError:
                    continue
        return pids

    def _remove_cgroups(self) -> None:
        for hierarchy in self._hierarchies():
            root = hierarchy / self.cgroup_root.lstrip("/")
            if not root.exists():
                continue
            for directory, subdirectories, _ in os.walk(root, topdown=False):  # children before parents
                for name in subdirectories:
                    _rmdir(Path(directory) / name)
            _rmdir(root)

    # -- stop ----------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the kubelet, every container, the shims, kube-proxy and containerd; remove what they left.
        Idempotent; the node's network namespace is the cluster network's to delete."""
        kubelet = [c for c in self.components if c.name.startswith("kubelet")]
        for component in kubelet:
            component.stop()
        _kill_all(self._cgroup_pids)
        _kill_all(self._shim_pids)
        for component in self.components:
            component.stop()
        self.components = []
        self._unmount_all()
        self._remove_cgroups()
        self._remove_log_links()

    def _shim_pids(self) -> set[int]:
        """containerd's shims detach into their own sessions; their command line names our socket."""
        needle = str(self.containerd_socket).encode()
        return {pid for pid, cmdline in _cmdlines().items() if b"containerd-shim" in cmdline and needle in cmdline}

    def _unmount_all(self) -> None:
        """Network namespaces, volumes, overlay rootfs and shm mounts under the node's directory, deepest first."""
        prefix = str(self.dir) + "/"
        for _ in range(3):
            mounts = [m for m in _mount_points() if m.startswith(prefix)]
            if not mounts:
                return
            for mount in sorted(mounts, key=len, reverse=True):
                subprocess.run(["umount", "--lazy", mount], capture_output=True)

    def _remove_log_links(self) -> None:
        if not CONTAINER_LOG_LINKS.is_dir():
            return
        prefix = str(self.pod_logs_dir) + "/"
        for link in CONTAINER_LOG_LINKS.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(prefix):
                link.unlink(missing_ok=True)


def _cmdlines() -> dict[int, bytes]:
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            found[int(proc.name)] = (proc / "cmdline").read_bytes()
        except OSError:
            continue
    return found


def _taint(text: str) -> dict[str, str]:
    key_value, effect = text.rsplit(":", 1)
    key, _, value = key_value.partition("=")
    return {"key": key, "value": value, "effect": effect}


def _mount_points() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        # Field 5 is the mount point, with spaces and the like octal-escaped.
        points.append(line.split()[4].encode().decode("unicode_escape"))
    return points


def _kill_all(find: Callable[[], set[int]]) -> None:
    """SIGKILL what ``find()`` returns until nothing is left (pods can fork while we kill)."""
    deadline = time.monotonic() + 15
    while (pids := find()) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)


def _rmdir(directory: Path) -> None:
    deadline = time.monotonic() + 5
    while True:
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.1)
