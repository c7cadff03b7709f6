"""The dev cluster's metrics-server (build.sh metrics-server): the ``metrics.k8s.io`` API behind ``kubectl top``,
served through the API server's aggregation layer.

It runs on the host as one Component (as Prometheus does), listening on the API server's node-network address,
and the cluster finds it as upstream's manifests publish it: the APIService ``v1beta1.metrics.k8s.io`` names the
Service ``kube-system/metrics-server``. That Service has no selector; its EndpointSlice points at the host address,
and the API server runs with ``--enable-aggregator-routing=true`` so it dials that endpoint rather than the
ClusterIP, which only the nodes' kube-proxy serves.

- Identity: the user ``berth-dev-metrics-server`` (a client certificate from the cluster CA), bound to upstream's
  roles: ``system:metrics-server`` (kubelet metrics, nodes and pods), ``system:auth-delegator`` (TokenReview and
  SubjectAccessReview for its own callers) and ``extension-apiserver-authentication-reader`` (the client CA in
  ``kube-system/extension-apiserver-authentication``).
- Callers: the aggregator's front-proxy requests, authenticated by the request-header CA and the allowed name
  ``front-proxy-client``; each user's rights are checked by the API server (SubjectAccessReview). Upstream's
  ``system:aggregated-metrics-reader`` adds pods and nodes metrics to the view, edit and admin ClusterRoles.
- Kubelets: ``/metrics/resource`` at each node's InternalIP, verified against the cluster CA.
- Trust: its serving certificate is from the cluster CA for ``metrics-server.kube-system.svc`` (the name the
  aggregator checks), and the APIService's caBundle is that CA.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

USER = "berth-dev-metrics-server"
NAMESPACE = "kube-system"
SERVICE = "metrics-server"
API_SERVICE = "v1beta1.metrics.k8s.io"
SERVING_NAME = f"{SERVICE}.{NAMESPACE}.svc"  # the aggregator's TLS server name for the Service
PORT = 10250  # upstream's components.yaml port, on the API server's own node-network address
RESOLUTION = "15s"
_RBAC = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class Files:
    """What metrics-server reads: its kubeconfig (client certificate), its serving pair, and the CAs."""

    kubeconfig: Path
    cert_file: Path
    key_file: Path
    ca_file: Path  # the cluster CA: kubelets' serving certificates
    front_proxy_ca_file: Path  # the request-header CA: the aggregator's client certificate


def argv(bin_dir: Path, *, host: str, files: Files, front_proxy_client: str) -> list[str]:
    return [
        str(bin_dir / "metrics-server"),
        f"--kubeconfig={files.kubeconfig}",
        f"--authentication-kubeconfig={files.kubeconfig}",
        f"--authorization-kubeconfig={files.kubeconfig}",
        f"--bind-address={host}",
        f"--secure-port={PORT}",
        f"--tls-cert-file={files.cert_file}",
        f"--tls-private-key-file={files.key_file}",
        f"--requestheader-client-ca-file={files.front_proxy_ca_file}",
        f"--requestheader-allowed-names={front_proxy_client}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--kubelet-certificate-authority={files.ca_file}",
        "--kubelet-preferred-address-types=InternalIP",
        "--kubelet-use-node-status-port",
        f"--metric-resolution={RESOLUTION}",
        "--profiling=false",
    ]


def _binding(kind: str, name: str, role_kind: str, role: str, namespace: str | None = None) -> dict:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": f"{_RBAC}/v1",
        "kind": kind,
        "metadata": metadata,
        "roleRef": {"apiGroup": _RBAC, "kind": role_kind, "name": role},
        "subjects": [{"apiGroup": _RBAC, "kind": "User", "name": USER}],
    }


def rbac_objects() -> list[dict]:
    """Upstream's manifests/base/rbac.yaml (v0.8.0), bound to the host process's user instead of a ServiceAccount."""
    return [
        {
            "apiVersion": f"{_RBAC}/v1",
            "kind": "ClusterRole",
            "metadata": {
                "name": "system:aggregated-metrics-reader",
                "labels": {
                    f"{_RBAC}/aggregate-to-view": "true",
                    f"{_RBAC}/aggregate-to-edit": "true",
                    f"{_RBAC}/aggregate-to-admin": "true",
                },
            },
            "rules": [
                {"apiGroups": ["metrics.k8s.io"], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]}
            ],
        },
        _binding(
            "RoleBinding", "metrics-server-auth-reader", "Role", "extension-apiserver-authentication-reader", NAMESPACE
        ),
        _binding("ClusterRoleBinding", "metrics-server:system:auth-delegator", "ClusterRole", "system:auth-delegator"),
        {
            "apiVersion": f"{_RBAC}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:metrics-server"},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]},
            ],
        },
        _binding("ClusterRoleBinding", "system:metrics-server", "ClusterRole", "system:metrics-server"),
    ]


def api_objects(*, host: str, ca_pem: str) -> list[dict]:
    """The selectorless Service, its EndpointSlice at ``host``, and the APIService trusting the cluster CA."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": NAMESPACE},
            "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP", "appProtocol": "https"}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": SERVICE,
                "namespace": NAMESPACE,
                # Not the EndpointSlice controller's (it owns only slices of Services with a selector).
                "labels": {
                    "kubernetes.io/service-name": SERVICE,
                    "endpointslice.kubernetes.io/managed-by": "berth-devcluster",
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [host], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": PORT, "protocol": "TCP", "appProtocol": "https"}],
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": API_SERVICE},
            "spec": {
                "service": {"name": SERVICE, "namespace": NAMESPACE, "port": 443},
                "group": "metrics.k8s.io",
                "version": "v1beta1",
                "caBundle": base64.b64encode(ca_pem.encode()).decode(),
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        },
    ]


def available(api_service: dict) -> bool:
    """Whether the aggregator reached metrics-server (the APIService's Available condition)."""
    conditions = api_service.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)
