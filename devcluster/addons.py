"""What makes the dev nodes a whole cluster, as in-cluster workloads from local images (devcluster/images.py):

- CoreDNS, the cluster DNS: the ``kube-dns`` Service in kube-system at the kubelets' ``clusterDNS``;
- local-path-provisioner, the ``local-path`` StorageClass: a claim becomes a directory under the node's
  directory, made by a helper pod on the node the claim's pod runs on;
- kube-network-policies, the NetworkPolicy engine: a privileged hostNetwork DaemonSet, as its upstream
  ``install.yaml`` runs it, so it reaches the API server through the ``kubernetes`` Service with its own
  ServiceAccount and its upstream RBAC, and programs nftables in each node's network namespace.

The manifests follow each project's own (kubeadm's CoreDNS, local-path-provisioner's deploy/, kube-network-
policies' install.yaml) with local images and the dev cluster's paths. CoreDNS forwards nothing: names outside
``cluster.local`` fail, as nothing here may be resolved or reached off this machine.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from devcluster.images import COREDNS, LOCAL_PATH_PROVISIONER, NETWORK_POLICIES

KUBE_SYSTEM = "kube-system"
LOCAL_PATH_NAMESPACE = "local-path-storage"
STORAGE_CLASS = "local-path"
NETPOL_QUEUE = 98  # upstream install.yaml's --nfqueue-id
# The API server's PodNodeSelector gives every pod without a selector of its own the shared pool's; the
# system namespaces opt out, so DaemonSets and local-path's helper pods run on every node.
NO_DEFAULT_NODE_SELECTOR = {"scheduler.alpha.kubernetes.io/node-selector": ""}

COREFILE = """.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    prometheus 127.0.0.1:9153
    cache 30
    reload
    loadbalance
}
"""


def _meta(name: str, namespace: str | None = None, **extra: Any) -> dict:
    meta: dict[str, Any] = {"name": name, **extra}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _cluster_role(name: str, rules: list[dict], subject: tuple[str, str]) -> list[dict]:
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": _meta(name), "rules": rules},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": subject[1], "namespace": subject[0]}],
        },
    ]


def _deployment(name: str, namespace: str, labels: dict[str, str], pod_spec: dict) -> dict:
    """One replica of ``pod_spec``, selected by ``labels``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, namespace, labels=labels),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def _service_account(namespace: str, name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, namespace)}


def namespaces() -> list[dict]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(name, annotations=NO_DEFAULT_NODE_SELECTOR)}
        for name in (KUBE_SYSTEM, LOCAL_PATH_NAMESPACE)
    ]


def coredns(cluster_dns_ip: str) -> list[dict]:
    labels = {"k8s-app": "kube-dns"}
    container = {
        "name": "coredns",
        "image": COREDNS.tags[0],
        "imagePullPolicy": "Never",
        "args": ["-conf", "/etc/coredns/Corefile"],
        "ports": [
            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
        ],
        "resources": {"requests": {"cpu": "50m", "memory": "40Mi"}, "limits": {"memory": "170Mi"}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
        "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 10},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
    }
    return [
        _service_account(KUBE_SYSTEM, "coredns"),
        *_cluster_role(
            "system:coredns",
            [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
            ],
            (KUBE_SYSTEM, "coredns"),
        ),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta("coredns", KUBE_SYSTEM),
            "data": {"Corefile": COREFILE},
        },
        _deployment(
            "coredns",
            KUBE_SYSTEM,
            labels,
            {
                "serviceAccountName": "coredns",
                "priorityClassName": "system-cluster-critical",
                "dnsPolicy": "Default",
                "containers": [container],
                "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
            },
        ),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta("kube-dns", KUBE_SYSTEM, labels={**labels, "kubernetes.io/name": "CoreDNS"}),
            "spec": {
                "selector": labels,
                "clusterIP": cluster_dns_ip,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP"},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                ],
            },
        },
    ]


def local_path(node_paths: dict[str, Path]) -> list[dict]:
    sa = "local-path-provisioner-service-account"
    config = {"nodePathMap": [{"node": node, "paths": [str(path)]} for node, path in sorted(node_paths.items())]}
    helper_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "helper-pod"},
        "spec": {
            "priorityClassName": "system-node-critical",
            "tolerations": [{"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"}],
            # Makes and removes the claim's directory under the node's directory, as root (the image's user).
            "containers": [{"name": "helper-pod", "image": LOCAL_PATH_PROVISIONER.tags[0], "imagePullPolicy": "Never"}],
        },
    }
    labels = {"app": "local-path-provisioner"}
    return [
        _service_account(LOCAL_PATH_NAMESPACE, sa),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta("local-path-provisioner-role", LOCAL_PATH_NAMESPACE),
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods"],
                    "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta("local-path-provisioner-bind", LOCAL_PATH_NAMESPACE),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "local-path-provisioner-role"},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": LOCAL_PATH_NAMESPACE}],
        },
        *_cluster_role(
            "local-path-provisioner-role",
            [
                {
                    "apiGroups": [""],
                    "resources": ["nodes", "persistentvolumeclaims", "configmaps", "pods", "pods/log"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": [""],
                    "resources": ["persistentvolumes"],
                    "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
                },
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
                {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get", "list", "watch"]},
            ],
            (LOCAL_PATH_NAMESPACE, sa),
        ),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta("local-path-config", LOCAL_PATH_NAMESPACE),
            "data": {
                "config.json": json.dumps(config, indent=2),
                "setup": '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n',
                "teardown": '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n',
                "helperPod.yaml": json.dumps(helper_pod, indent=2),
            },
        },
        _deployment(
            "local-path-provisioner",
            LOCAL_PATH_NAMESPACE,
            labels,
            {
                "serviceAccountName": sa,
                "containers": [
                    {
                        "name": "local-path-provisioner",
                        "image": LOCAL_PATH_PROVISIONER.tags[0],
                        "imagePullPolicy": "Never",
                        "command": [
                            "local-path-provisioner",
                            "--debug",
                            "start",
                            "--config",
                            "/etc/config/config.json",
                            "--helper-image",
                            LOCAL_PATH_PROVISIONER.tags[0],
                        ],
                        "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/config/"}],
                        "env": [
                            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                            {"name": "CONFIG_MOUNT_PATH", "value": "/etc/config/"},
                        ],
                    }
                ],
                "volumes": [{"name": "config-volume", "configMap": {"name": "local-path-config"}}],
            },
        ),
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": _meta(STORAGE_CLASS, annotations={"storageclass.kubernetes.io/is-default-class": "true"}),
            "provisioner": "rancher.io/local-path",
            "volumeBindingMode": "WaitForFirstConsumer",
            "reclaimPolicy": "Delete",
        },
    ]


def network_policies() -> list[dict]:
    name = "kube-network-policies"
    labels = {"app": name, "k8s-app": name, "tier": "node"}
    container = {
        "name": name,
        "image": NETWORK_POLICIES.tags[0],
        "imagePullPolicy": "Never",
        "args": [
            "/bin/netpol",
            "--hostname-override=$(MY_NODE_NAME)",
            "--v=2",
            f"--nfqueue-id={NETPOL_QUEUE}",
            # Debian's containerd 1.6 has no NRI; pod IPs come from the API server instead.
            "--disable-nri",
            # Not needed on kernels 6.12+ (the upstream flag's own words); this one is newer.
            "--netfilter-bug-1766-fix=false",
            # In the node's network namespace, beside nothing else of ours.
            "--metrics-bind-address=127.0.0.1:9080",
        ],
        "resources": {"requests": {"cpu": "100m", "memory": "50Mi"}},
        "securityContext": {"privileged": True, "capabilities": {"add": ["NET_ADMIN"]}},
        "env": [{"name": "MY_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
    }
    return [
        _service_account(KUBE_SYSTEM, name),
        *_cluster_role(
            name,
            [
                {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["list", "watch"]},
                {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["list", "watch"]},
            ],
            (KUBE_SYSTEM, name),
        ),
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": _meta(name, KUBE_SYSTEM, labels=labels),
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "hostNetwork": True,
                        "dnsPolicy": "ClusterFirst",
                        "priorityClassName": "system-node-critical",
                        "nodeSelector": {"kubernetes.io/os": "linux"},
                        "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
                        "serviceAccountName": name,
                        "containers": [container],
                    },
                },
            },
        },
    ]


def manifests(*, cluster_dns_ip: str, node_paths: dict[str, Path]) -> list[dict]:
    """Everything above, in the order it applies."""
    return [*namespaces(), *network_policies(), *coredns(cluster_dns_ip), *local_path(node_paths)]


def apply(kubectl: Path, kubeconfig: Path, objects: list[dict]) -> None:
    document = {"apiVersion": "v1", "kind": "List", "items": objects}
    result = subprocess.run(
        [
            str(kubectl),
            f"--kubeconfig={kubeconfig}",
            "apply",
            "--server-side",
            "--field-manager=berth-devcluster",
            "-f",
            "-",
        ],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl apply of the cluster add-ons failed: {result.stderr.strip()}")


def _get(kubectl: Path, kubeconfig: Path, namespace: str, *names: str) -> list[dict]:
    result = subprocess.run(
        [str(kubectl), f"--kubeconfig={kubeconfig}", "get", *names, "-n", namespace, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if result.returncode != 0:
        return []
    found = json.loads(result.stdout)
    return found.get("items", [found]) if found.get("kind") == "List" else [found]


def ready(kubectl: Path, kubeconfig: Path, nodes: int) -> bool:
    """Every add-on answers: the engine runs on every node, CoreDNS and the provisioner are available."""
    items = [
        *_get(kubectl, kubeconfig, KUBE_SYSTEM, "daemonset/kube-network-policies", "deployment/coredns"),
        *_get(kubectl, kubeconfig, LOCAL_PATH_NAMESPACE, "deployment/local-path-provisioner"),
    ]
    if len(items) != 3:
        return False
    for item in items:
        status = item.get("status", {})
        wanted = nodes if item["kind"] == "DaemonSet" else 1
        if status.get("numberReady" if item["kind"] == "DaemonSet" else "availableReplicas", 0) < wanted:
            return False
    return True
