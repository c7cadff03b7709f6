"""Network isolation proven with packets: short-lived probe pods open connections and report what got through.

One run per report. In the tenant's namespace, with the tenant's own credentials, it starts a server pod and a
client pod; in a Berth-owned namespace of the cluster (the "canary" namespace, another team as far as the
tenant's policies know) a canary server and a canary client; in the cluster's ingress namespace, when it names
one, a client. Then the clients connect:

- tenant client -> tenant server                 same namespace: must open
- tenant client -> canary server                 out to another team: must not open
- canary client -> tenant server                 in from another team: must not open
- ingress client -> tenant server                as the tier's network profile says
- tenant client -> the ``kubernetes`` Service,
  and each node's kubelet port                   as the tier's egress says
- tenant client resolves the ``kubernetes`` Service through the cluster DNS: must resolve

Every pod carries Berth's labels, asks for the smallest requests the tier's LimitRange allows, has an
``activeDeadlineSeconds`` and is deleted when the run ends, whatever happened. A run that cannot prove a
thing (no node runs the pods, the image is missing, a pod timed out, the quota is full) says *not proven*,
never *passed*: a report that passes has seen the packets.
"""

from __future__ import annotations

import ipaddress
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from worker import manifests
from worker.kube import Kube, KubeError, KubePermanentError

PORT = 8080  # the server pods' httpd
CONNECT_SECONDS = 3  # each connection attempt; a dropped SYN costs this long
# A policy engine learns of a new pod from the API server, a moment after the pod has started (kube-network-
# policies without NRI, as on the dev nodes); Calico and Cilium program it before. The clients give it this long
# before their first packet, so the run measures the policy, not the engine's start-up lag.
POLICY_SETTLE_SECONDS = 3
POD_DEADLINE_SECONDS = 120  # no probe pod lives longer, even if the run that made it died
RUN_SECONDS = 75.0  # the whole run gives up after this, and says what it could not prove
PROBE_LABEL = "berth.dev/probe"
CANARY_NAMESPACE_SUFFIX = "berth-canary"
KUBELET_PORT = 10250

# Results the client script prints: "<name> open|closed|resolved|unresolved"
OPEN, CLOSED, RESOLVED, UNRESOLVED = "open", "closed", "resolved", "unresolved"


class NotProven(Exception):
    """The probe could not run far enough to prove anything; the message says why."""


@dataclass
class Outcome:
    """One network check's result: ``passed`` is True only when the packets said so."""

    passed: bool
    detail: str
    proven: bool = True


@dataclass
class Target:
    """Where a client connects; ``policy_ip``/``policy_port`` are where NetworkPolicy sees the packet go (a
    Service's endpoint, after kube-proxy's DNAT), when that differs."""

    name: str
    ip: str
    port: int
    policy_ip: str = ""
    policy_port: int = 0

    @property
    def seen_by_policy(self) -> tuple[str, int]:
        return (self.policy_ip or self.ip, self.policy_port or self.port)


@dataclass
class ProbeRun:
    """What one run saw, by connection name (see the module docstring); empty when nothing could run."""

    seen: dict[str, str] = field(default_factory=dict)
    not_proven: str = ""  # why nothing was proven, when that is so
    targets: dict[str, Target] = field(default_factory=dict)


def canary_namespace(cluster: Any) -> str:
    return f"{cluster.namespace_prefix}{CANARY_NAMESPACE_SUFFIX}"


def _labels(tenant: Any, run_id: str) -> dict[str, str]:
    return {**manifests.MANAGED_BY, manifests.TENANT_ID_LABEL: str(tenant.pk), PROBE_LABEL: run_id}


def _security() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "runAsUser": 65534,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


# Asked for explicitly: a tier's LimitRange defaults may be far more than a probe needs, and its quota counts them.
RESOURCES = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "10m", "memory": "16Mi"}}


def _pod(name: str, namespace: str, labels: dict[str, str], command: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": POD_DEADLINE_SECONDS,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "probe",
                    "image": settings.BERTH_ISOLATION_PROBE_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": command,
                    "securityContext": _security(),
                    "resources": RESOURCES,
                }
            ],
        },
    }


def _server(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return _pod(name, namespace, labels, ["httpd", "-f", "-p", str(PORT), "-h", "/www"])


def client_script(connects: list[Target], lookup: str = "") -> str:
    """A POSIX shell script for busybox: one line per connection (and the lookup), then exit 0. The attempts run
    side by side, so a run costs one connect timeout, not one per dropped connection."""
    lines = [f"sleep {POLICY_SETTLE_SECONDS}"]
    for target in connects:
        lines.append(
            f"(if nc -w {CONNECT_SECONDS} {target.ip} {target.port} </dev/null >/dev/null 2>&1;"
            f" then echo '{target.name} {OPEN}'; else echo '{target.name} {CLOSED}'; fi) &"
        )
    if lookup:
        lines.append(
            f"(if nslookup {lookup} >/dev/null 2>&1; then echo 'dns {RESOLVED}'; else echo 'dns {UNRESOLVED}'; fi) &"
        )
    lines += ["wait", "echo done"]
    return "\n".join(lines)


def parse(output: str) -> dict[str, str]:
    seen = {}
    for line in output.splitlines():
        name, _, result = line.strip().partition(" ")
        if result in (OPEN, CLOSED, RESOLVED, UNRESOLVED):
            seen[name] = result
    return seen


class _Pods:
    """The pods of one run, each created with the client that may create it there; all deleted at the end."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.made: list[tuple[Kube, str, str]] = []

    def create(self, k: Kube, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        try:
            k.create(body)
        except KubePermanentError as exc:
            raise NotProven(f"could not start probe pod {meta['namespace']}/{meta['name']}: {exc}") from None
        self.made.append((k, meta["namespace"], meta["name"]))

    def wait(self, k: Kube, namespace: str, name: str, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        while True:
            pod = k.get("Pod", name, namespace=namespace, fresh=True) or {}
            if done(pod):
                return pod
            why = _stuck(pod)
            if why:
                raise NotProven(f"probe pod {namespace}/{name} {why}")
            if time.monotonic() > self.deadline:
                raise NotProven(f"probe pod {namespace}/{name} did not get there in time ({_phase(pod)})")
            time.sleep(0.5)

    def remove(self) -> None:
        for k, namespace, name in self.made:
            try:
                k.delete("Pod", name, namespace=namespace)
            except KubeError:
                # activeDeadlineSeconds ends it within minutes, so it holds no quota; in the canary namespace the
                # tenant's next run deletes it (remove_leftovers).
                continue
        self.made = []


def remove_leftovers(k: Kube, namespace: str, tenant: Any) -> None:
    """Delete this tenant's probe pods that an earlier run could not (its worker died) from the canary
    namespace, where only Berth creates pods. Elsewhere nothing is deleted by label: a tenant may put any label
    on its own pods, and Berth never deletes what it did not create."""
    selector = f"{PROBE_LABEL},{manifests.TENANT_ID_LABEL}={tenant.pk}"
    for pod in k.list("Pod", namespace=namespace, label_selector=selector):
        k.delete("Pod", pod["metadata"]["name"], namespace=namespace, uid=pod["metadata"].get("uid", ""))


def _phase(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"not scheduled: {condition.get('message', '')}"
    return str(status.get("phase") or "not created")


def _stuck(pod: dict[str, Any]) -> str:
    """Why a pod will never run, as far as its status says (a missing image, say)."""
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in ("ErrImageNeverPull", "ImagePullBackOff", "ErrImagePull", "InvalidImageName"):
            return f"cannot start: {waiting['reason']} ({settings.BERTH_ISOLATION_PROBE_IMAGE})"
    if (pod.get("status") or {}).get("phase") == "Failed" and not _finished(pod):
        return "failed before it ran"
    return ""


def _running_ip(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and bool(status.get("podIP"))


def _finished(pod: dict[str, Any]) -> bool:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        if (container.get("state") or {}).get("terminated"):
            return True
    return False


def _output(pod: dict[str, Any]) -> str:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (container.get("state") or {}).get("terminated") or {}
        if terminated:
            return str(terminated.get("message") or "")
    return ""


def _client(name: str, namespace: str, labels: dict[str, str], script: str) -> dict[str, Any]:
    # The results go to the termination message, which the pod's status carries: no log reading needed.
    body = _pod(name, namespace, labels, ["sh", "-c", f"({script}) > /dev/termination-log"])
    body["spec"]["containers"][0]["terminationMessagePolicy"] = "File"
    return body


def _ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def cluster_targets(host: Kube) -> list[Target]:
    """The ``kubernetes`` Service and each node's kubelet port: what a tier's egress may or may not reach.
    A cluster without a Ready node cannot run a probe: that is said at once, not after a timeout."""
    nodes = host.list("Node")
    if not any(_ready(node) for node in nodes):
        raise NotProven("the cluster has no Ready node to run probe pods on")
    targets = []
    service = host.get("Service", "kubernetes", namespace="default") or {}
    cluster_ip = (service.get("spec") or {}).get("clusterIP")
    endpoints = host.get("Endpoints", "kubernetes", namespace="default") or {}
    subsets = endpoints.get("subsets") or [{}]
    address = ((subsets[0].get("addresses") or [{}])[0]).get("ip", "")
    port = int(((subsets[0].get("ports") or [{}])[0]).get("port") or 0)
    if cluster_ip:
        targets.append(Target("api-server", str(cluster_ip), 443, policy_ip=str(address), policy_port=port))
    for node in nodes:
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                targets.append(Target(f"node-{node['metadata']['name']}", str(address["address"]), KUBELET_PORT))
    return targets


def ensure_canary_namespace(host: Kube, cluster: Any) -> str:
    """The Berth-owned namespace the canaries run in, with Berth's own grants in it (a least-privilege
    credential holds its rights inside Berth's namespaces through them); one that exists without Berth's label
    is not ours, and is never used."""
    name = canary_namespace(cluster)
    found = host.get("Namespace", name)
    if found is None:
        labels = {**manifests.MANAGED_BY, "pod-security.kubernetes.io/enforce": "restricted"}
        _create_if_missing(
            host, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
        )
    elif ((found.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/managed-by") != "berth":
        raise NotProven(f"namespace {name} exists and is not Berth's: the canary cannot run there")
    granted = [_create_if_missing(host, binding) for binding in _canary_grants(name)]
    if any(granted):
        # A grant reaches the API server's authorizer a moment after it is written.
        deadline = time.monotonic() + 10
        while not host.can_i(verb="create", resource="pods", namespace=name) and time.monotonic() < deadline:
            time.sleep(0.5)
    return name


def _canary_grants(namespace: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": grant.cluster_role, "namespace": namespace, "labels": dict(manifests.MANAGED_BY)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": grant.cluster_role},
            "subjects": [{"kind": "ServiceAccount", "name": grant.service_account, "namespace": grant.namespace}],
        }
        for grant in manifests.parse_grants(settings.BERTH_NAMESPACE_GRANTS)
    ]


def _create_if_missing(k: Kube, body: dict[str, Any]) -> bool:
    """Create ``body``; False when it exists already."""
    try:
        k.create(body)
    except KubePermanentError as exc:
        if exc.status == 409:
            return False
        raise
    return True


def run(tenant_kube: Kube, host: Kube, tenant: Any, namespace: str) -> ProbeRun:
    """One probe run for ``tenant``, whose pods live in ``namespace`` (the tenant's, or a virtual cluster's host
    namespace); ``tenant_kube`` acts there, ``host`` (the portal's identity) in the canary and ingress
    namespaces."""
    pods = _Pods(deadline=time.monotonic() + RUN_SECONDS)
    result = ProbeRun()
    run_id = secrets.token_hex(4)
    labels = _labels(tenant, run_id)
    try:
        egress = cluster_targets(host)
        canary_ns = ensure_canary_namespace(host, tenant.cluster)
        remove_leftovers(host, canary_ns, tenant)
        server, canary = f"berth-probe-srv-{run_id}", f"berth-probe-canary-{run_id}"
        pods.create(tenant_kube, _server(server, namespace, labels))
        pods.create(host, _server(canary, canary_ns, labels))
        server_ip = pods.wait(tenant_kube, namespace, server, _running_ip)["status"]["podIP"]
        canary_ip = pods.wait(host, canary_ns, canary, _running_ip)["status"]["podIP"]
        into_tenant = Target("same-namespace", server_ip, PORT)
        out_to_canary = Target("egress-to-other-team", canary_ip, PORT)
        result.targets = {t.name: t for t in [into_tenant, out_to_canary, *egress]}
        clients = [
            (
                tenant_kube,
                namespace,
                client_script([into_tenant, out_to_canary, *egress], lookup="kubernetes.default.svc.cluster.local"),
            ),
            (host, canary_ns, client_script([Target("ingress-from-other-team", server_ip, PORT)])),
        ]
        ingress_ns = tenant.cluster.ingress_namespace
        if ingress_ns:
            clients.append((host, ingress_ns, client_script([Target("ingress-controller", server_ip, PORT)])))
        names = []
        for index, (k, ns, script) in enumerate(clients):
            name = f"berth-probe-client-{run_id}-{index}"
            pods.create(k, _client(name, ns, labels, script))
            names.append((k, ns, name))
        for k, ns, name in names:
            result.seen.update(parse(_output(pods.wait(k, ns, name, _finished))))
    except NotProven as exc:
        result.not_proven = str(exc)
    except KubeError as exc:
        result.not_proven = f"the cluster did not answer: {exc}"
    finally:
        pods.remove()
    return result


# --- what the tier expects ---------------------------------------------------------------------------------


def egress_allowed(tier: Any, ip: str, port: int) -> bool:
    """Whether the tier's policies let a tenant's pod open a connection to ``ip:port`` outside the cluster's
    pods (the API server, a node): open egress, or a listed CIDR and port."""
    if tier.network_profile == "open-egress":
        return True
    address = ipaddress.ip_address(ip)
    for rule in getattr(tier, "egress_allow", None) or []:
        if address in ipaddress.ip_network(rule["cidr"], strict=False) and _port_listed(rule, port):
            return True
    return False


def _port_listed(rule: dict[str, Any], port: int) -> bool:
    ports = rule.get("ports") or []
    return not ports or any(int(p["port"]) == port and p.get("protocol", "TCP") == "TCP" for p in ports)


def ingress_controller_allowed(tier: Any, cluster: Any) -> bool:
    return bool(cluster.ingress_namespace) and tier.network_profile in ("ingress", "open-egress")
