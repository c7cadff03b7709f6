"""The dev cluster's metrics-server (devcluster/metrics_server.py): `kubectl top` through the aggregation layer."""

from __future__ import annotations

import subprocess

import pytest

from devcluster import metrics_server
from devcluster.launcher import ControlPlane
from tests.plugins.kube import wait_for


def _output(plane: ControlPlane, *args: str, containing: str = "") -> str | None:
    """kubectl's output once it succeeds and shows ``containing``, else None."""
    got = _kubectl(plane, *args)
    return got.stdout if got.returncode == 0 and containing in got.stdout else None


def _kubectl(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(plane.kubectl), f"--kubeconfig={plane.kubeconfig_path}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_api_service_trusts_the_cluster_ca_and_the_aggregated_reader_is_upstreams():
    objects = {o["kind"]: o for o in metrics_server.api_objects(host="10.243.7.1", ca_pem="PEM")}
    assert "insecureSkipTLSVerify" not in objects["APIService"]["spec"]
    assert objects["APIService"]["spec"]["caBundle"] == "UEVN"
    assert objects["EndpointSlice"]["endpoints"] == [{"addresses": ["10.243.7.1"], "conditions": {"ready": True}}]
    assert "selector" not in objects["Service"]["spec"]
    reader = next(
        o for o in metrics_server.rbac_objects() if o["metadata"]["name"] == "system:aggregated-metrics-reader"
    )
    assert set(reader["metadata"]["labels"]) == {
        f"rbac.authorization.k8s.io/aggregate-to-{role}" for role in ("view", "edit", "admin")
    }


@pytest.mark.nodes
def test_kubectl_top_shows_nodes_and_pods_and_metrics_server_holds_upstreams_rights_only(
    node_control_plane: ControlPlane,
):
    nodes = wait_for(
        lambda: _output(node_control_plane, "top", "node", "--no-headers"),
        timeout=90,
        interval=3,
        what="kubectl top node",
    )
    assert {line.split()[0] for line in nodes.splitlines()} == {node.name for node in node_control_plane.nodes}
    pods = wait_for(
        lambda: _output(node_control_plane, "top", "pod", "-n", "kube-system", containing="coredns-"),
        timeout=90,
        interval=3,
        what="kubectl top pod -n kube-system",
    )
    assert "kube-network-policies-" in pods
    for verb, resource, subresource, allowed in (
        ("get", "nodes", "metrics", "yes"),
        ("list", "pods", "", "yes"),
        ("create", "tokenreviews.authentication.k8s.io", "", "yes"),
        ("get", "nodes", "proxy", "no"),
        ("get", "secrets", "", "no"),
        ("create", "pods", "", "no"),
    ):
        answer = _kubectl(
            node_control_plane,
            "auth",
            "can-i",
            verb,
            resource,
            f"--subresource={subresource}",
            f"--as={metrics_server.USER}",
            "--all-namespaces",
        )
        assert answer.stdout.strip() == allowed, (verb, resource, subresource, answer.stderr)
