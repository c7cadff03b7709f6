"""The network of a dev cluster with nodes: a host bridge as the nodes' network, a network namespace per node.

    host ── bridge berthcK (10.243.K.1/24: the API server binds here) ──┬── veth ── node shared-1 (10.243.K.11)
                                                                         └── veth ── node dedicated-1 (10.243.K.12)

Each node is a network namespace of its own, as a real node is a machine of its own: its containerd, kubelet,
kube-proxy and pods live there, so kube-proxy's and the NetworkPolicy engine's nftables rules, the kubelet's
iptables chains, the pods' bridge and veths are the node's alone, and deleting the namespace removes them all.
Two dev clusters on one machine never share a rule, an address or an interface: the node network and the pod
/24s are picked among those no route on this machine uses.

The nodes route each other's pod /24s through their node addresses (like flannel's host-gw), and the host
routes them too (so the API server and tests reach pods). No node has a default route: a pod can reach the
cluster (pods, Services, nodes, the API server) and nothing else, so nothing a test runs sends traffic off
this machine.

The upper half of the node network (10.243.K.128/25) is the pool of the dev load balancer
(devcluster/loadbalancer.py): the host routes it through the first node, whose kube-proxy forwards a load
balancer address to its Service's endpoints.
"""

from __future__ import annotations

import ipaddress
import json
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path

NODE_NETWORKS = ipaddress.IPv4Network("10.243.0.0/16")
NETNS_DIR = Path("/run/netns")  # where `ip netns add` mounts a namespace
# What the NetworkPolicy engine and kube-proxy need of the kernel: traffic between pods of one node crosses a
# Linux bridge and only meets netfilter with br_netfilter on and bridge-nf-call-iptables=1 (per namespace).
BRIDGE_NF_CALL = "net/bridge/bridge-nf-call-iptables"


class NetworkError(RuntimeError):
    """The node network could not be set up (a missing kernel feature, no free range)."""


def run(*command: str) -> str:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise NetworkError(f"{' '.join(command)}: {result.stderr.strip()}")
    return result.stdout


def used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 destination in this machine's routing tables (other runs' bridges and pod /24s among them)."""
    routes = subprocess.run(["ip", "-4", "-j", "route", "show", "table", "all"], capture_output=True, text=True)
    used = []
    for route in json.loads(routes.stdout or "[]"):
        try:
            used.append(ipaddress.ip_network(route.get("dst", ""), strict=False))
        except ValueError:
            continue
    return [n for n in used if isinstance(n, ipaddress.IPv4Network)]


def free_subnets(within: ipaddress.IPv4Network, count: int) -> list[ipaddress.IPv4Network]:
    """``count`` /24s of ``within`` that no route here uses, x.y.0.0/24 left out."""
    used = used_networks()
    free = [
        s
        for s in within.subnets(new_prefix=24)
        if s.network_address.packed[2] != 0 and not any(s.overlaps(u) for u in used)
    ]
    if len(free) < count:
        raise NetworkError(f"no {count} free /24 left in {within}")
    return random.sample(free, count)


@dataclass
class NodeLink:
    """One node's place on the node network."""

    name: str
    netns: str
    ip: str
    pod_subnet: ipaddress.IPv4Network

    @property
    def netns_path(self) -> Path:
        return NETNS_DIR / self.netns

    def enter(self) -> list[str]:
        """The prefix that runs a command in this node's network namespace (and nothing else of it)."""
        return ["nsenter", f"--net={self.netns_path}", "--"]

    def ip_command(self, *args: str) -> str:
        return run("ip", "-n", self.netns, *args)


class ClusterNetwork:
    """The host bridge and one namespace per node; ``destroy`` removes all of it. Create it before the API
    server starts: the API server binds to ``host_ip``."""

    def __init__(self, service_range: str) -> None:
        self.service_range = service_range
        (self.subnet,) = free_subnets(NODE_NETWORKS, 1)
        self.third = self.subnet.network_address.packed[2]
        self.bridge = f"berthc{self.third}"
        self.host_ip = str(self.subnet.network_address + 1)
        self.load_balancer_pool = ipaddress.IPv4Network(f"{self.subnet.network_address + 128}/25")
        self.nodes: list[NodeLink] = []
        self._created = False

    def create(self) -> None:
        check_kernel()
        run("ip", "link", "add", self.bridge, "type", "bridge")
        self._created = True
        run("ip", "addr", "add", f"{self.host_ip}/{self.subnet.prefixlen}", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")

    def add_node(self, name: str, pod_subnet: ipaddress.IPv4Network) -> NodeLink:
        index = len(self.nodes) + 1
        link = NodeLink(
            name=name,
            netns=f"berth{self.third}-{name}",
            ip=str(self.subnet.network_address + 10 + index),
            pod_subnet=pod_subnet,
        )
        run("ip", "netns", "add", link.netns)
        self.nodes.append(link)
        host_side = f"bv{self.third}n{index}"
        run("ip", "link", "add", host_side, "type", "veth", "peer", "name", "eth0", "netns", link.netns)
        run("ip", "link", "set", host_side, "master", self.bridge, "up")
        link.ip_command("link", "set", "lo", "up")
        link.ip_command("addr", "add", f"{link.ip}/{self.subnet.prefixlen}", "dev", "eth0")
        link.ip_command("link", "set", "eth0", "up")
        # Processes of the node itself (the kubelet, hostNetwork pods) need a route to Service addresses before
        # kube-proxy's DNAT picks the endpoint; a real node has its default route for that, these have none.
        link.ip_command("route", "add", self.service_range, "via", self.host_ip)
        # A node forwards between its pods' bridge and the node network.
        run("ip", "netns", "exec", link.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        _require_bridge_netfilter(link)
        run("ip", "route", "add", str(pod_subnet), "via", link.ip)
        return link

    def route_between_nodes(self) -> None:
        """Each node reaches the other nodes' pods through their node addresses."""
        for node in self.nodes:
            for other in self.nodes:
                if other is not node:
                    node.ip_command("route", "add", str(other.pod_subnet), "via", other.ip)

    def route_load_balancers(self) -> None:
        """The host reaches the load balancer pool through the first node (more specific than the bridge's /24,
        so the host never asks the bridge who has one of those addresses)."""
        run("ip", "route", "replace", str(self.load_balancer_pool), "via", self.nodes[0].ip)

    def remove_nodes(self) -> None:
        """Delete the nodes' namespaces, with every interface, route and rule in them (their processes must have
        ended first); the host's routes through them go with their veths."""
        for node in self.nodes:
            subprocess.run(["ip", "netns", "delete", node.netns], capture_output=True)
        self.nodes = []

    def destroy(self) -> None:
        """Remove the nodes and the bridge. Idempotent."""
        self.remove_nodes()
        if self._created:
            subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True)
            self._created = False


def check_kernel() -> None:
    """Fail with the name of what is missing, rather than start a cluster that silently enforces nothing."""
    if not (Path("/proc/sys") / BRIDGE_NF_CALL).exists():
        raise NetworkError(
            "the kernel lacks br_netfilter (/proc/sys/net/bridge is missing): traffic between pods of one node "
            "would bypass NetworkPolicy; load it with `modprobe br_netfilter`"
        )
    if not Path("/proc/net/netfilter/nfnetlink_queue").exists():
        raise NetworkError(
            "the kernel lacks nfnetlink_queue (/proc/net/netfilter/nfnetlink_queue is missing): the NetworkPolicy "
            "engine decides on packets it reads from an NFQUEUE; load it with `modprobe nfnetlink_queue`"
        )


def _require_bridge_netfilter(link: NodeLink) -> None:
    """bridge-nf-call-iptables is per network namespace: turn it on in the node's and check it took."""
    key = BRIDGE_NF_CALL.replace("/", ".")
    run("ip", "netns", "exec", link.netns, "sysctl", "-qw", f"{key}=1")
    value = run("ip", "netns", "exec", link.netns, "sysctl", "-n", key).strip()
    if value != "1":
        raise NetworkError(f"{key} stays {value!r} in {link.netns}: same-node pod traffic would bypass NetworkPolicy")
