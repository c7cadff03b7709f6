"""Network isolation, attacked with packets from the attacker's own pods, on the dev cluster with nodes.

The cluster runs kube-proxy, CoreDNS and kube-network-policies (devcluster/addons.py), so NetworkPolicy is
enforced. The attacker is a team member with the kubeconfig the portal gave them; every connection is opened
from a pod the attacker started in their own namespace, to a pod, Service, node or test host of this
cluster (nothing off this machine). Refused or dropped, nothing may get through; and the isolation report,
which proves the same with its own probe pods, must fail when the enforcement is taken away and pass again
once it is back.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devcluster.images import WORKLOAD_IMAGE
from devcluster.launcher import ControlPlane
from tenants.models import Tenant, Tier
from tests.plugins.kube import wait_for
from tests.plugins.worker import fetch_kubeconfig
from worker import kube, provisioning

from .conftest import provision

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker, pytest.mark.nodes]

RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
NETWORK_CHECKS = (
    "MTB-PL1-CC-NET-1",
    "berth-net-same-namespace",
    "berth-net-dns",
    "berth-net-api-server-egress",
    "berth-net-node-egress",
)


@dataclass
class Team:
    """A team's tenant on the node cluster and the kubeconfig the portal gave its member."""

    tenant: Tenant
    kubeconfig: str
    plane: ControlPlane

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.plane.kubectl), f"--kubeconfig={self.kubeconfig}", "-n", self.tenant.namespace, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def run_pod(self, name: str, command: list[str], labels: dict[str, str] | None = None) -> str:
        """Start a pod of the team's and return its IP once it runs."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {"app": name}},
            "spec": {
                "securityContext": RESTRICTED_POD,
                "containers": [
                    {
                        "name": "c",
                        "image": WORKLOAD_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": command,
                        "securityContext": RESTRICTED_CONTAINER,
                    }
                ],
            },
        }
        created = self.kubectl("apply", "-f", "-", input=json.dumps(pod))
        assert created.returncode == 0, created.stderr

        def ip() -> str | None:
            got = self.kubectl("get", "pod", name, "-o", "json")
            status = json.loads(got.stdout).get("status", {}) if got.returncode == 0 else {}
            return status.get("podIP") if status.get("phase") == "Running" else None

        return wait_for(ip, timeout=90, what=f"{self.tenant.namespace}/{name} to run")

    def connects(self, via: str, ip: str, port: int) -> bool:
        """Whether pod ``via`` opens a TCP connection to ip:port within 3 seconds."""
        result = self.kubectl("exec", via, "--", "sh", "-c", f"nc -w 3 {ip} {port} </dev/null >/dev/null 2>&1")
        assert "error:" not in result.stderr, result.stderr  # kubectl itself must have worked
        return result.returncode == 0


def _team(plane, user, tenant: Tenant, tmp_path: Path) -> Team:
    path, _ = fetch_kubeconfig(user, tenant, tmp_path)
    return Team(tenant, path, plane)


@pytest.fixture
def attacker(celery_worker, live_node_cluster, node_control_plane, alice, carol, team_a, small, tmp_path) -> Team:
    """Alice, owner of team-a, with a ready small-tier (isolated) namespace and her own kubeconfig."""
    tenant = provision(actor=alice, team=team_a, tier=small, cluster=live_node_cluster, approver=carol, name="evil")
    return _team(node_control_plane, alice, tenant, tmp_path)


@pytest.fixture
def victim(celery_worker, live_node_cluster, node_control_plane, bob, carol, team_b, small, tmp_path) -> Team:
    """Bob's team-b tenant with a web server and a Service in front of it."""
    tenant = provision(actor=bob, team=team_b, tier=small, cluster=live_node_cluster, approver=carol, name="bank")
    team = _team(node_control_plane, bob, tenant, tmp_path)
    team.run_pod("web", ["httpd", "-f", "-p", "8080", "-h", "/www"])
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    assert team.kubectl("apply", "-f", "-", input=json.dumps(service)).returncode == 0
    return team


def _service_ip(team: Team, name: str) -> str:
    got = team.kubectl("get", "service", name, "-o", "jsonpath={.spec.clusterIP}")
    assert got.returncode == 0, got.stderr
    return got.stdout


def test_an_attacker_cannot_connect_to_another_teams_pod_or_service(attacker: Team, victim: Team):
    web_ip = victim.run_pod("web", ["httpd", "-f", "-p", "8080", "-h", "/www"])  # already running: its IP
    victim.run_pod("neighbour", ["sleep", "3600"])
    attacker.run_pod("probe", ["sleep", "3600"])
    # The victim's own pods reach the server (the policy allows its namespace), so it is up and listening.
    assert victim.connects("neighbour", web_ip, 8080)
    assert victim.connects("neighbour", _service_ip(victim, "web"), 80)
    assert not attacker.connects("probe", web_ip, 8080)
    assert not attacker.connects("probe", _service_ip(victim, "web"), 80)


def test_an_attacker_cannot_reach_a_nodes_kubelet_or_the_api_server_from_an_isolated_tier(attacker: Team):
    attacker.run_pod("probe", ["sleep", "3600"])
    admin = kube.for_cluster(attacker.tenant.cluster)
    addresses = [
        a["address"] for node in admin.list("Node") for a in node["status"]["addresses"] if a["type"] == "InternalIP"
    ]
    assert addresses
    for address in addresses:
        assert not attacker.connects("probe", address, 10250), f"kubelet at {address} reachable"
    # The API server through its Service, and at its own address.
    assert not attacker.connects("probe", "10.96.0.1", 443)
    network = attacker.plane.network
    assert network is not None
    assert not attacker.connects("probe", network.host_ip, attacker.plane.apiserver_port)


def test_the_api_server_is_reachable_from_a_tier_whose_egress_is_open(
    celery_worker, live_node_cluster, node_control_plane, alice, carol, team_a, small, tmp_path
):
    opened = Tier.objects.get(pk=small.pk)
    opened.pk = None
    opened.name, opened.display_name, opened.network_profile = "open", "Open egress", "open-egress"
    opened.save()
    live_node_cluster.tiers.add(opened)
    tenant = provision(actor=alice, team=team_a, tier=opened, cluster=live_node_cluster, approver=carol, name="out")
    team = _team(node_control_plane, alice, tenant, tmp_path)
    team.run_pod("probe", ["sleep", "3600"])
    assert team.connects("probe", "10.96.0.1", 443)


def test_an_attacker_cannot_edit_delete_or_add_network_policies(attacker: Team, node_kube_admin):
    networking = client.NetworkingV1Api(node_kube_admin)
    before = {
        p.metadata.name: p.metadata.resource_version
        for p in networking.list_namespaced_network_policy(attacker.tenant.namespace).items
    }
    assert "berth-default-deny" in before
    open_to_all = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "let-everyone-in"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{}], "egress": [{}]},
    }
    attempts = [
        attacker.kubectl("apply", "-f", "-", input=json.dumps(open_to_all)),
        attacker.kubectl("delete", "networkpolicy", "berth-default-deny"),
        attacker.kubectl("delete", "networkpolicy", "--all"),
        attacker.kubectl(
            "patch",
            "networkpolicy",
            "berth-default-deny",
            "--type=merge",
            "-p",
            '{"spec":{"podSelector":{"matchLabels":{"x":"y"}}}}',
        ),
        attacker.kubectl("label", "networkpolicy", "berth-allow-dns", "owner=evil"),
    ]
    for attempt in attempts:
        assert attempt.returncode != 0 and "forbidden" in attempt.stderr.lower(), attempt.stderr
    after = {
        p.metadata.name: p.metadata.resource_version
        for p in networking.list_namespaced_network_policy(attacker.tenant.namespace).items
    }
    assert after == before
    # Reading them is allowed: a team sees what isolates it.
    assert attacker.kubectl("get", "networkpolicy", "berth-default-deny").returncode == 0


# --- The report proves it with packets, and fails when the enforcement goes -------------------------------


def _network_checks(tenant: Tenant) -> dict[str, dict[str, Any]]:
    report = provisioning.isolation_report(str(tenant.pk))
    assert report is not None
    return {c["id"]: c for c in report["checks"] if c["id"] in NETWORK_CHECKS}


def test_the_report_proves_isolation_with_packets_and_leaves_no_probe_pod(attacker: Team, node_kube_admin):
    # The worker runs a report of its own once the tenant is ready: let it finish, so its pods are not counted.
    wait_for(
        lambda: Tenant.objects.get(pk=attacker.tenant.pk).isolation_report, timeout=120, what="the worker's report"
    )
    checks = _network_checks(attacker.tenant)
    assert set(checks) == set(NETWORK_CHECKS)
    for check in checks.values():
        assert check["passed"] and check["proven"], check
    core = client.CoreV1Api(node_kube_admin)
    mine = f"berth.dev/probe,berth.dev/tenant-id={attacker.tenant.pk}"
    left = core.list_pod_for_all_namespaces(label_selector=mine).items
    assert [p.metadata.name for p in left if p.metadata.deletion_timestamp is None] == []


def test_the_report_fails_when_the_tenants_policies_are_deleted_and_passes_once_repaired(
    attacker: Team, node_kube_admin
):
    networking = client.NetworkingV1Api(node_kube_admin)
    namespace = attacker.tenant.namespace
    # Deleting default-deny alone opens nothing: every other Berth policy selects all pods for both directions.
    networking.delete_namespaced_network_policy("berth-default-deny", namespace)
    still = _network_checks(attacker.tenant)
    assert still["MTB-PL1-CC-NET-1"]["passed"], still["MTB-PL1-CC-NET-1"]
    for policy in networking.list_namespaced_network_policy(namespace).items:
        networking.delete_namespaced_network_policy(str(policy.metadata.name), namespace)
    opened = _network_checks(attacker.tenant)
    deny = opened["MTB-PL1-CC-NET-1"]
    assert not deny["passed"] and deny["proven"], deny
    assert "OPEN" in deny["detail"]
    # A reconcile of the tenant (what the periodic pass does) puts Berth's policies back; the packets say so.
    provisioning.provision(str(attacker.tenant.pk))
    wait_for(
        lambda: _network_checks(attacker.tenant)["MTB-PL1-CC-NET-1"]["passed"],
        timeout=120,
        interval=2,
        what="the report to pass again",
    )


def test_the_report_fails_when_the_policy_engine_is_stopped_and_passes_once_it_runs_again(
    attacker: Team, node_kube_admin
):
    apps = client.AppsV1Api(node_kube_admin)
    core = client.CoreV1Api(node_kube_admin)
    # Stopped the way an admin would: the DaemonSet no longer places its pods anywhere.
    parked = {"spec": {"template": {"spec": {"nodeSelector": {"berth.dev/nowhere": "true"}}}}}
    restore = {"spec": {"template": {"spec": {"nodeSelector": {"berth.dev/nowhere": None}}}}}
    apps.patch_namespaced_daemon_set("kube-network-policies", "kube-system", parked)
    try:
        wait_for(
            lambda: not core.list_namespaced_pod("kube-system", label_selector="app=kube-network-policies").items,
            timeout=90,
            what="the engine's pods to go",
        )
        checks = _network_checks(attacker.tenant)
        # Killed, it leaves its rules: packets of the pods it policed wait in a queue nobody reads (fail closed).
        # Pods started since, the report's probes among them, are in none of its sets and pass unpoliced: either
        # way default deny is not proven, and the report says so.
        deny = checks["MTB-PL1-CC-NET-1"]
        assert not deny["passed"], deny
        assert "OPEN" in deny["detail"] or not deny["proven"], deny
    finally:
        apps.patch_namespaced_daemon_set("kube-network-policies", "kube-system", restore)
    wait_for(
        lambda: all(c["passed"] for c in _network_checks(attacker.tenant).values()),
        timeout=180,
        interval=3,
        what="the report to pass again once the engine runs",
    )


# --- Egress by tier: a listed destination is reachable, any other is dropped ----------------------------


@dataclass
class ServerHost:
    """A server in a network namespace this test made, on the cluster's node network."""

    netns: str
    addresses: list[str]


def _listening(address: str, port: int) -> bool:
    """From the host, which sits on the node network's bridge: the test host's server answers."""
    probe = ["busybox", "nc", "-w", "1", address, str(port)]
    return subprocess.run(probe, stdin=subprocess.DEVNULL, capture_output=True).returncode == 0


@pytest.fixture
def test_hosts(node_control_plane: ControlPlane) -> Iterator[ServerHost]:
    network = node_control_plane.network
    assert network is not None
    suffix = secrets.token_hex(3)
    netns, veth = f"berth-th-{suffix}", f"bth{suffix}"
    subnet = network.subnet
    addresses = [str(subnet.network_address + 200), str(subnet.network_address + 201)]

    def sh(*command: str) -> None:
        subprocess.run(command, check=True, capture_output=True)

    sh("ip", "netns", "add", netns)
    servers: list[subprocess.Popen[bytes]] = []
    try:
        sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        sh("ip", "link", "set", veth, "master", network.bridge, "up")
        for address in addresses:
            sh("ip", "-n", netns, "addr", "add", f"{address}/{subnet.prefixlen}", "dev", "eth0")
        sh("ip", "-n", netns, "link", "set", "eth0", "up")
        sh("ip", "-n", netns, "link", "set", "lo", "up")
        # Answers go back to the pods through their nodes, as from any host on the nodes' network.
        for node in network.nodes:
            sh("ip", "-n", netns, "route", "add", str(node.pod_subnet), "via", node.ip)
        for port in (8080, 8081):
            servers.append(
                subprocess.Popen(["ip", "netns", "exec", netns, "busybox", "nc", "-ll", "-p", str(port), "-e", "true"])
            )
        for address, port in [(a, p) for a in addresses for p in (8080, 8081)]:
            wait_for(
                functools.partial(_listening, address, port),
                timeout=10,
                what=f"the test host to listen on {address}:{port}",
            )
        yield ServerHost(netns, addresses)
    finally:
        for server in servers:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "delete", veth], capture_output=True)
        subprocess.run(["ip", "netns", "delete", netns], capture_output=True)


def test_a_tiers_egress_allow_list_opens_exactly_the_listed_destination(
    celery_worker, live_node_cluster, node_control_plane, alice, carol, team_a, small, test_hosts: ServerHost, tmp_path
):
    allowed, other = test_hosts.addresses
    proxied = Tier.objects.get(pk=small.pk)
    proxied.pk = None
    proxied.name, proxied.display_name = "proxied", "Behind the proxy"
    proxied.egress_allow = [{"cidr": f"{allowed}/32", "ports": [{"protocol": "TCP", "port": 8080}]}]
    proxied.full_clean(exclude=["clusters"])
    proxied.save()
    live_node_cluster.tiers.add(proxied)
    tenant = provision(actor=alice, team=team_a, tier=proxied, cluster=live_node_cluster, approver=carol, name="px")
    team = _team(node_control_plane, alice, tenant, tmp_path)
    team.run_pod("probe", ["sleep", "3600"])
    network = node_control_plane.network
    assert network is not None and ipaddress.ip_address(allowed) in network.subnet
    assert team.connects("probe", allowed, 8080)
    assert not team.connects("probe", allowed, 8081)  # listening, but not listed
    assert not team.connects("probe", other, 8080)
    checks = _network_checks(tenant)
    assert all(checks[c]["passed"] for c in NETWORK_CHECKS), checks
