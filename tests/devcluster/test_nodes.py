"""Real nodes of the dev control plane (devcluster/nodes.py): they run pods, and stopping leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

import pytest

from devcluster.launcher import ControlPlane
from devcluster.nodes import CGROUP_ROOT
from tests.devcluster.host_traces import WEB_POD, mounts_under, process_identity, survivors
from tests.plugins.kube import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.nodes]


def _kubectl(plane: ControlPlane, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(plane.kubectl), f"--kubeconfig={plane.kubeconfig_path}", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _pod(plane: ControlPlane) -> dict | None:
    got = _kubectl(plane, "get", "pod", "web", "-o", "json")
    return json.loads(got.stdout) if got.returncode == 0 else None


def _host_state() -> tuple[str, str, str]:
    """The host's network namespaces, links and nftables tables: a stopped cluster must leave them as found."""
    return tuple(  # type: ignore[return-value]
        subprocess.run(command, capture_output=True, text=True).stdout
        for command in (["ip", "netns", "list"], ["ip", "-br", "link"], ["nft", "list", "tables"])
    )


def test_a_node_runs_a_pod_and_stopping_leaves_no_process_mount_link_rule_or_cgroup() -> None:
    before = _host_state()
    plane = ControlPlane(name="berth-node-stop", nodes=1).start()
    try:
        (node,) = plane.nodes
        network = plane.network
        assert network is not None
        # Everything of the node lives in its own network namespace, the host holds only the bridge.
        assert node.link.netns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        in_node = subprocess.run(
            ["ip", "netns", "exec", node.link.netns, "nft", "list", "tables"], capture_output=True, text=True
        )
        assert "kube-proxy" in in_node.stdout
        created = _kubectl(plane, "apply", "-f", "-", input=json.dumps(WEB_POD))
        assert created.returncode == 0, created.stderr
        pod = wait_for(
            lambda: (p := _pod(plane)) and p["status"].get("phase") == "Running" and p,
            timeout=60,
            what="the pod to run",
        )
        assert pod["spec"]["nodeName"] == "shared-1"
        with urllib.request.urlopen(f"http://{pod['status']['podIP']}:8080/", timeout=5) as response:
            assert response.read() == b"berth busybox\n"
        logs = _kubectl(plane, "exec", "web", "--", "hostname")
        assert logs.returncode == 0 and logs.stdout == "web\n", logs.stderr
        processes = {
            process_identity(pid) for pid in [*plane.pids().values(), *node._shim_pids(), *node._cgroup_pids()]
        }
        data_dir = plane.data_dir
        assert data_dir is not None and mounts_under(data_dir)
    finally:
        plane.stop()

    assert survivors(processes) == []
    assert mounts_under(data_dir) == []
    assert not data_dir.exists()
    assert subprocess.run(["ip", "link", "show", network.bridge], capture_output=True).returncode != 0
    assert not Path(f"/run/netns/{node.link.netns}").exists()
    assert not list(CGROUP_ROOT.glob(f"*/{node.cgroup_root.lstrip('/')}"))
    # No namespace, interface or nftables table of this run is left (other runs' may come and go meanwhile).
    after = _host_state()
    for found_before, found_after in zip(before, after, strict=True):
        assert set(found_after.splitlines()) - set(found_before.splitlines()) == set()
