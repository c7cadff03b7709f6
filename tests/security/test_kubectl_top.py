"""`kubectl top` attacked with the attacker's own kubeconfig: metrics-server (devcluster/metrics_server.py) behind the
dev API server's aggregation layer, on the cluster with nodes.

The tenant's Roles grant pods metrics in its own namespace (worker/manifests.py); the victim's pod's metrics exist
(cluster-admin reads them), and the attacker asks for them by every route kubectl and the raw API offer, for every
namespace at once, and for the nodes' metrics, which show every team's load. Then the attacker skips the
aggregator and talks to metrics-server itself with their own token and with the front proxy's identity headers
forged: it must check who is asking just as the API server does.
"""

from __future__ import annotations

import http.client
import ssl
import subprocess
import uuid

import pytest
from kubernetes import client

from devcluster import metrics_server
from devcluster.images import WORKLOAD_IMAGE
from devcluster.launcher import ControlPlane
from tests.plugins.kube import manifest, wait_for
from tests.plugins.worker import fetch_kubeconfig

from .conftest import provision

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker, pytest.mark.nodes]

METRICS_API = "/apis/metrics.k8s.io/v1beta1"


def _run_pod(kube: client.ApiClient, namespace: str, name: str) -> None:
    container = {
        "name": "c",
        "image": WORKLOAD_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sleep", "3600"],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "50m", "memory": "32Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    security = {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}
    spec = {"securityContext": security, "containers": [container]}
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    client.CoreV1Api(kube).create_namespaced_pod(namespace, manifest(body))


def _kubectl(plane: ControlPlane, config: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(plane.kubectl), f"--kubeconfig={config}", *args], capture_output=True, text=True, timeout=60, check=False
    )


def _direct_get(plane: ControlPlane, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """GET ``path`` from metrics-server itself, past the aggregator, trusting the cluster CA."""
    context = ssl.create_default_context(cadata=plane.ca_cert_pem)
    connection = http.client.HTTPSConnection(plane.api_host, metrics_server.PORT, context=context, timeout=10)
    try:
        connection.request("GET", path, headers=headers)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def test_an_attacker_cannot_read_another_teams_or_the_nodes_metrics(
    celery_worker,
    live_node_cluster,
    node_control_plane,
    node_kube_admin,
    alice,
    bob,
    carol,
    team_a,
    team_b,
    small,
    tmp_path,
):
    own = provision(actor=alice, team=team_a, tier=small, cluster=live_node_cluster, approver=carol, name="peek")
    theirs = provision(actor=bob, team=team_b, tier=small, cluster=live_node_cluster, approver=carol, name="safe")
    secret_pod = f"vault-{uuid.uuid4().hex[:6]}"
    _run_pod(node_kube_admin, theirs.namespace, secret_pod)
    config, parsed = fetch_kubeconfig(alice, own, tmp_path)
    admin = str(node_control_plane.kubeconfig_path)
    # There is something to steal: cluster-admin sees the victim's pod's metrics through the same API.
    wait_for(
        lambda: _kubectl(node_control_plane, admin, "top", "pod", secret_pod, "-n", theirs.namespace).returncode == 0,
        timeout=90,
        interval=3,
        what=f"metrics of {theirs.namespace}/{secret_pod}",
    )
    stolen = (theirs.namespace.encode(), secret_pod.encode())

    attempts = [
        ("top", "pod", "-n", theirs.namespace),
        ("top", "pod", secret_pod, "-n", theirs.namespace),
        ("top", "pod", "--all-namespaces"),
        ("top", "node"),
        ("top", "node", "shared-1"),
        ("get", "--raw", f"{METRICS_API}/pods"),
        ("get", "--raw", f"{METRICS_API}/namespaces/{theirs.namespace}/pods"),
        ("get", "--raw", f"{METRICS_API}/namespaces/{theirs.namespace}/pods/{secret_pod}"),
        ("get", "--raw", f"{METRICS_API}/nodes"),
        ("get", "--raw", f"{METRICS_API}/nodes/shared-1"),
        ("get", "pods.metrics.k8s.io", "-n", theirs.namespace),
        ("get", "nodes.metrics.k8s.io"),
    ]
    for attempt in attempts:
        result = _kubectl(node_control_plane, config, *attempt)
        assert result.returncode != 0, attempt
        assert "forbidden" in result.stderr.lower(), (attempt, result.stderr)
        assert not any(name in result.stdout.encode() for name in stolen), attempt

    # Its own namespace's list, with a selector naming the victim's namespace, stays in its own namespace.
    selected = _kubectl(
        node_control_plane,
        config,
        "get",
        "--raw",
        f"{METRICS_API}/namespaces/{own.namespace}/pods?fieldSelector=metadata.namespace%3D{theirs.namespace}",
    )
    assert not any(name in selected.stdout.encode() for name in stolen), selected.stdout

    # Past the aggregator: metrics-server itself authenticates the caller (TokenReview) and asks the API server
    # (SubjectAccessReview); identity headers count only with the front proxy's client certificate.
    token = parsed["users"][0]["user"]["token"]
    forged = {"X-Remote-User": "berth-admin", "X-Remote-Group": "system:masters"}
    for path in (f"{METRICS_API}/namespaces/{theirs.namespace}/pods", f"{METRICS_API}/pods", f"{METRICS_API}/nodes"):
        for headers in ({"Authorization": f"Bearer {token}"}, {"Authorization": f"Bearer {token}", **forged}, forged):
            status, body = _direct_get(node_control_plane, path, headers)
            assert status in (401, 403), (path, headers.keys(), status, body[:200])
            assert secret_pod.encode() not in body, path  # the refusal repeats the namespace asked for, no more
