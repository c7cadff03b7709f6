"""The isolation report: what a tenant's own credentials can and cannot do, proven against the API server.

Each check is named after the multi-tenancy benchmark (MTB) profile level 1
check it covers. Writes are server-side dry runs: admission (Pod Security,
quota) and RBAC decide, nothing is persisted. The network checks send packets
from short-lived probe pods (worker/netprobe.py); a check that could not run
is *not proven*, which never counts as passed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from worker import kube, manifests, netprobe
from worker.kube import Kube, KubeForbidden, KubePermanentError

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    run: Callable[[Kube, Any], tuple[bool, str]]


def _refused(action: Callable[[], Any], what: str) -> tuple[bool, str]:
    """Passes when the server refuses ``action`` (403 from RBAC or admission, or 422 from validation)."""
    try:
        action()
    except KubeForbidden as exc:
        return True, f"refused: {exc}"
    except KubePermanentError as exc:
        if exc.status in (400, 422):
            return True, f"refused: {exc}"
        raise
    return False, f"{what} was ALLOWED"


def _pod(namespace: str, name: str, **spec_extra: Any) -> dict[str, Any]:
    container = {"name": "c", "image": PAUSE_IMAGE, **spec_extra.pop("container", {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [container], **spec_extra},
    }


def _restricted_container() -> dict[str, Any]:
    return {
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "10m", "memory": "16Mi"}},
    }


def can_create_workload(k: Kube, t: Any) -> tuple[bool, str]:
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "berth-isolation-probe", "namespace": t.namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "probe"}},
            "template": {
                "metadata": {"labels": {"app": "probe"}},
                "spec": {"containers": [{"name": "c", "image": PAUSE_IMAGE, **_restricted_container()}]},
            },
        },
    }
    try:
        k.create(deploy, dry_run=True)
    except KubePermanentError as exc:
        return False, f"could not create a Deployment in its namespace: {exc}"
    return True, "created a Deployment (dry run) in its own namespace"


def blocks_cluster_resources(k: Kube, t: Any) -> tuple[bool, str]:
    results = [
        _refused(lambda: k.list("Namespace"), "listing namespaces"),
        _refused(lambda: k.list("ClusterRole"), "listing cluster roles"),
        _refused(lambda: k.list("PriorityClass"), "listing priority classes"),
    ]
    return all(ok for ok, _ in results), "; ".join(d for _, d in results)


def blocks_other_namespaces(k: Kube, t: Any) -> tuple[bool, str]:
    results = [
        _refused(functools.partial(k.list, "ConfigMap", namespace=ns), f"reading {ns}")
        for ns in ("kube-system", "default")
    ]
    results.append(
        _refused(lambda: k.create(_pod("default", "berth-probe"), dry_run=True), "creating a pod in 'default'")
    )
    return all(ok for ok, _ in results), "; ".join(d for _, d in results)


def blocks_privileged(k: Kube, t: Any) -> tuple[bool, str]:
    return _refused(
        lambda: k.create(
            _pod(t.namespace, "berth-probe-priv", container={"securityContext": {"privileged": True}}), dry_run=True
        ),
        "a privileged container",
    )


def blocks_privilege_escalation(k: Kube, t: Any) -> tuple[bool, str]:
    return _refused(
        lambda: k.create(
            _pod(t.namespace, "berth-probe-esc", container={"securityContext": {"allowPrivilegeEscalation": True}}),
            dry_run=True,
        ),
        "a container with allowPrivilegeEscalation",
    )


def _host(field: str, value: Any) -> Callable[[Kube, Any], tuple[bool, str]]:
    def check(k: Kube, t: Any) -> tuple[bool, str]:
        if field == "hostPath":
            spec = {
                "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
                "container": {"volumeMounts": [{"name": "h", "mountPath": "/host"}]},
            }
        else:
            spec = {field: value}
        return _refused(
            lambda: k.create(_pod(t.namespace, f"berth-probe-{field.lower()}", **spec), dry_run=True),
            f"a pod with {field}",
        )

    return check


def blocks_nodeport(k: Kube, t: Any) -> tuple[bool, str]:
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "berth-probe-np", "namespace": t.namespace},
        "spec": {"type": "NodePort", "selector": {"app": "x"}, "ports": [{"port": 80}]},
    }
    return _refused(lambda: k.create(svc, dry_run=True), "a NodePort Service")


def quotas_present(k: Kube, t: Any) -> tuple[bool, str]:
    quotas = {q["metadata"]["name"]: q for q in k.list("ResourceQuota", namespace=t.namespace)}
    limits = k.list("LimitRange", namespace=t.namespace)
    hard = ((quotas.get("berth-quota") or {}).get("status") or {}).get("hard") or {}
    needed = [
        "requests.cpu",
        "limits.cpu",
        "requests.memory",
        "limits.memory",
        "pods",
        "services",
        "services.nodeports",
        "configmaps",
        "secrets",
        "persistentvolumeclaims",
    ]
    missing = [r for r in needed if r not in hard]
    ok = not missing and bool(limits)
    return ok, f"quota enforces {len(hard)} resources" + (f"; missing {', '.join(missing)}" if missing else "") + (
        "" if limits else "; no LimitRange"
    )


def blocks_quota_modification(k: Kube, t: Any) -> tuple[bool, str]:
    results = [
        _refused(
            lambda: k.patch(
                "ResourceQuota",
                "berth-quota",
                {"spec": {"hard": {"pods": "100000"}}},
                namespace=t.namespace,
                dry_run=True,
            ),
            "raising its quota",
        ),
        _refused(
            lambda: k.patch(
                "LimitRange", "berth-limits", {"spec": {"limits": []}}, namespace=t.namespace, dry_run=True
            ),
            "emptying its LimitRange",
        ),
        _refused(
            lambda: k.patch(
                "Namespace",
                t.namespace,
                {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}},
                dry_run=True,
            ),
            "relabelling its namespace",
        ),
    ]
    return all(ok for ok, _ in results), "; ".join(d for _, d in results)


def blocks_long_lived_tokens(k: Kube, t: Any) -> tuple[bool, str]:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/service-account-token",
        "metadata": {
            "name": "berth-probe-token",
            "namespace": t.namespace,
            "annotations": {"kubernetes.io/service-account.name": manifests.TENANT_SA},
        },
    }
    return _refused(lambda: k.create(secret, dry_run=True), "a long-lived ServiceAccount token Secret")


def blocks_role_escalation(k: Kube, t: Any) -> tuple[bool, str]:
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "berth-probe-escalate", "namespace": t.namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": manifests.TENANT_SA, "namespace": t.namespace}],
    }
    results = [_refused(lambda: k.create(binding, dry_run=True), "binding cluster-admin")]
    for verb, resource in (
        ("escalate", "roles"),
        ("bind", "clusterroles"),
        ("impersonate", "users"),
        ("create", "serviceaccounts/token"),
    ):
        group = "" if resource in ("users", "serviceaccounts/token") else "rbac.authorization.k8s.io"
        res, _, sub = resource.partition("/")
        allowed = k.can_i(verb=verb, resource=res, subresource=sub, group=group, namespace=t.namespace)
        results.append((not allowed, f"{verb} {resource}: {'ALLOWED' if allowed else 'denied'}"))
    return all(ok for ok, _ in results), "; ".join(d for _, d in results)


# --- Escape classes closed by the cluster-wide guards (worker/guards.py) ----------------------------------
# Each probe is otherwise admissible (restricted Pod Security, within quota), so only its guard can refuse it.


def _probe_pod(t: Any, name: str, **spec: Any) -> dict[str, Any]:
    return _pod(t.namespace, name, container=_restricted_container(), **spec)


def _probe_service(t: Any, name: str, **spec: Any) -> dict[str, Any]:
    body = {"selector": {"app": "berth-probe"}, "ports": [{"port": 80}], **spec}
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": t.namespace}, "spec": body}


def _allowed_by_tier(t: Any, option: str, what: str) -> tuple[bool, str] | None:
    """A tier may open an escape class on purpose; the report then says so instead of probing."""
    if getattr(t.tier, option):
        return True, f"not enforced: tier {t.tier.name} allows {what} ({option})"
    return None


def blocks_external_ips(k: Kube, t: Any) -> tuple[bool, str]:
    svc = _probe_service(t, "berth-probe-eip", externalIPs=["192.0.2.10"])
    opened = _allowed_by_tier(t, "allow_external_ips", "Services with externalIPs")
    return opened or _refused(lambda: k.create(svc, dry_run=True), "a Service with externalIPs")


def blocks_external_name(k: Kube, t: Any) -> tuple[bool, str]:
    svc = _probe_service(t, "berth-probe-xn", type="ExternalName", externalName="kubernetes.default.svc")
    opened = _allowed_by_tier(t, "allow_external_name", "ExternalName Services")
    return opened or _refused(lambda: k.create(svc, dry_run=True), "an ExternalName Service pointing at the API server")


def blocks_manual_endpoints(k: Kube, t: Any) -> tuple[bool, str]:
    opened = _allowed_by_tier(t, "allow_manual_endpoints", "hand-written Endpoints")
    if opened:
        return opened
    meta = {"name": "berth-probe-ep", "namespace": t.namespace}
    endpoints = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": meta,
        "subsets": [{"addresses": [{"ip": "10.96.0.1"}], "ports": [{"port": 443}]}],
    }
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {**meta, "labels": {"kubernetes.io/service-name": "berth-probe-ep"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.96.0.1"]}],
        "ports": [{"port": 443, "protocol": "TCP"}],
    }
    results = [
        _refused(lambda: k.create(endpoints, dry_run=True), "Endpoints pointing at the API server"),
        _refused(lambda: k.create(slice_, dry_run=True), "an EndpointSlice pointing at the API server"),
    ]
    return all(ok for ok, _ in results), "; ".join(d for _, d in results)


def blocks_foreign_ingress_hosts(k: Kube, t: Any) -> tuple[bool, str]:
    opened = _allowed_by_tier(t, "allow_any_ingress_host", "any Ingress host")
    if opened:
        return opened
    backend = {"service": {"name": "berth-probe", "port": {"number": 80}}}
    path = {"path": "/", "pathType": "Prefix", "backend": backend}

    def ingress(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        meta = {"name": name, "namespace": t.namespace}
        return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta, "spec": spec}

    # A host of nobody's (so of every other team's), and a host-less rule that would take every host.
    foreign = ingress("berth-probe-host", {"rules": [{"host": "berth-probe.invalid", "http": {"paths": [path]}}]})
    catch_all = ingress("berth-probe-any", {"rules": [{"http": {"paths": [path]}}]})
    results = [
        _refused(lambda: k.create(foreign, dry_run=True), "an Ingress for a host outside the tenant's domains"),
        _refused(lambda: k.create(catch_all, dry_run=True), "an Ingress rule without a host"),
    ]
    return all(ok for ok, _ in results), "; ".join(d for _, d in results)


def blocks_long_projected_tokens(k: Kube, t: Any) -> tuple[bool, str]:
    seconds = t.tier.max_credential_lifetime_seconds + 3600
    source = {"serviceAccountToken": {"path": "token", "expirationSeconds": seconds}}
    pod = _probe_pod(t, "berth-probe-token", volumes=[{"name": "token", "projected": {"sources": [source]}}])
    return _refused(lambda: k.create(pod, dry_run=True), f"a pod with a projected token valid for {seconds}s")


def blocks_berth_service_accounts(k: Kube, t: Any) -> tuple[bool, str]:
    pod = _probe_pod(t, "berth-probe-sa", serviceAccountName=manifests.TENANT_SA)
    return _refused(lambda: k.create(pod, dry_run=True), f"a pod running as {manifests.TENANT_SA}")


def blocks_other_pools(k: Kube, t: Any) -> tuple[bool, str]:
    own = manifests.toleration_entries(t.tier.tolerations or [])
    foreign = {"key": "berth.dev/pool", "operator": "Equal", "value": "berth-probe-other-pool", "effect": "NoSchedule"}
    probes = [("another pool's taint", foreign), ("every taint", {"operator": "Exists"})]
    results = []
    for what, toleration in probes:
        pod = _probe_pod(t, "berth-probe-pool", tolerations=[toleration])
        results.append(_refused(functools.partial(k.create, pod, dry_run=True), f"a pod tolerating {what}"))
    detail = "; ".join(d for _, d in results) + (f" (own pool: {', '.join(sorted(own))})" if own else "")
    return all(ok for ok, _ in results), detail


def blocks_other_storage_classes(k: Kube, t: Any) -> tuple[bool, str]:
    allowed = sorted(t.tier.allowed_storage_classes or [])
    if not allowed:
        return True, f"not enforced: tier {t.tier.name} allows any storage class"
    # A class nobody has created yet stands for one an admin adds after the tenant was provisioned: the tier's
    # quota has no line for it, so only the guard can refuse it.
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "berth-probe-class", "namespace": t.namespace},
        "spec": {
            "storageClassName": "berth-probe-unlisted-class",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }
    ok, detail = _refused(lambda: k.create(claim, dry_run=True), "a claim in a storage class the tier does not list")
    return ok, f"{detail} (allowed: {', '.join(allowed)})"


# --- Network isolation, proven with packets (worker/netprobe.py) ------------------------------------------


@dataclass(frozen=True)
class NetworkChecks:
    """The network checks of a report, all answered by one probe run. ``on_host``: the pods run in a virtual
    cluster's host namespace with the portal's identity, since the tenant's credentials reach only inside."""

    on_host: bool = False

    def results(self, k: Kube, t: Any) -> list[dict[str, Any]]:
        host = kube.for_cluster(t.cluster)
        namespace = t.namespace
        probe = netprobe.run(host if self.on_host else k, host, t, namespace)
        where = "host namespace" if self.on_host else "namespace"
        checks = [
            ("MTB-PL1-CC-NET-1", f"Default deny: another team can neither connect into the {where} nor be reached"),
            ("berth-net-same-namespace", "Pods in the same namespace reach each other"),
            ("berth-net-dns", "Cluster DNS resolves"),
            ("berth-net-api-server-egress", "Egress to the API server follows the tier"),
            ("berth-net-node-egress", "Egress to the nodes' kubelets follows the tier"),
        ]
        if t.cluster.ingress_namespace:
            checks.append(
                ("berth-net-ingress-controller", "The ingress controller's namespace reaches it as the tier says")
            )
        results = []
        for check_id, title in checks:
            outcome = _network_outcome(check_id, probe, t)
            results.append(_result(check_id, title, outcome.passed, outcome.detail, proven=outcome.proven))
        return results


def _network_outcome(check_id: str, probe: netprobe.ProbeRun, t: Any) -> netprobe.Outcome:
    if probe.not_proven:
        return netprobe.Outcome(False, f"not proven: {probe.not_proven}", proven=False)
    seen = probe.seen

    def expect(name: str, want: str, meaning: str) -> netprobe.Outcome:
        got = seen.get(name)
        if got is None:
            return netprobe.Outcome(False, f"not proven: the probe reported nothing for {name}", proven=False)
        if got == want:
            return netprobe.Outcome(True, f"{meaning}: {got}")
        return netprobe.Outcome(False, f"{meaning}: {got.upper()} (expected {want})")

    if check_id == "MTB-PL1-CC-NET-1":
        if seen.get("same-namespace") != netprobe.OPEN:
            # Everything dropped (a stopped engine failing closed) proves nothing about isolation.
            return netprobe.Outcome(
                False,
                "not proven: even traffic within the namespace was dropped, so a refusal means nothing",
                proven=False,
            )
        parts = [
            expect("ingress-from-other-team", netprobe.CLOSED, "connection in from another team's pod"),
            expect("egress-to-other-team", netprobe.CLOSED, "connection out to another team's pod"),
        ]
        outcome = _all(parts)
        if not outcome.passed and outcome.proven:
            outcome.detail += "; NetworkPolicy is NOT enforced here: the cluster needs an enforcing engine"
        return outcome
    if check_id == "berth-net-same-namespace":
        return expect("same-namespace", netprobe.OPEN, "connection between two pods of the namespace")
    if check_id == "berth-net-dns":
        return expect("dns", netprobe.RESOLVED, "kubernetes.default.svc.cluster.local")
    if check_id == "berth-net-ingress-controller":
        allowed = netprobe.ingress_controller_allowed(t.tier, t.cluster)
        want = netprobe.OPEN if allowed else netprobe.CLOSED
        return expect("ingress-controller", want, f"connection in from {t.cluster.ingress_namespace}")
    prefix = "api-server" if check_id == "berth-net-api-server-egress" else "node-"
    parts = []
    for name, target in sorted(probe.targets.items()):
        if name == prefix or (prefix == "node-" and name.startswith(prefix)):
            ip, port = target.seen_by_policy
            want = netprobe.OPEN if netprobe.egress_allowed(t.tier, ip, port) else netprobe.CLOSED
            parts.append(expect(name, want, f"{name} ({ip}:{port}) under tier {t.tier.name}"))
    if not parts:
        return netprobe.Outcome(False, "not proven: the cluster shows no such address", proven=False)
    return _all(parts)


def _all(parts: list[netprobe.Outcome]) -> netprobe.Outcome:
    return netprobe.Outcome(
        passed=all(p.passed for p in parts),
        detail="; ".join(p.detail for p in parts),
        proven=all(p.proven for p in parts),
    )


def _result(check_id: str, title: str, passed: bool, detail: str, *, proven: bool = True) -> dict[str, Any]:
    return {"id": check_id, "title": title, "passed": passed, "proven": proven, "detail": detail[:1000]}


# A report's entries: checks of their own, or the network checks that one probe run answers.
ReportCheck = Check | NetworkChecks

CHECKS: list[ReportCheck] = [
    Check("tenant-can-create-workloads", "Can create workloads in its own namespace", can_create_workload),
    Check("MTB-PL1-CC-CPI-1", "Block access to cluster resources", blocks_cluster_resources),
    Check("MTB-PL1-CC-TI-1", "Block access to other tenants' resources", blocks_other_namespaces),
    Check("MTB-PL1-BC-CPI-5", "Block privileged containers", blocks_privileged),
    Check("MTB-PL1-BC-CPI-6", "Block privilege escalation", blocks_privilege_escalation),
    Check("MTB-PL1-BC-HI-1", "Block use of host path volumes", _host("hostPath", None)),
    Check("MTB-PL1-BC-HI-2", "Block use of host networking", _host("hostNetwork", True)),
    Check("MTB-PL1-BC-HI-3", "Block use of host PID", _host("hostPID", True)),
    Check("MTB-PL1-BC-HI-4", "Block use of host IPC", _host("hostIPC", True)),
    Check("MTB-PL1-BC-HI-5", "Block NodePort services", blocks_nodeport),
    Check("MTB-PL1-CC-FNS-1", "Configure namespace resource quotas and object limits", quotas_present),
    Check("MTB-PL1-CC-FNS-2", "Block modification of resource quotas", blocks_quota_modification),
    Check("MTB-PL1-CC-CPI-2", "Block role privilege escalation", blocks_role_escalation),
    Check("berth-short-lived-credentials", "Block long-lived ServiceAccount token Secrets", blocks_long_lived_tokens),
    Check("CVE-2020-8554", "Block Services with external IPs", blocks_external_ips),
    Check("CVE-2021-25740-ExternalName", "Block ExternalName Services", blocks_external_name),
    Check("CVE-2021-25740-Endpoints", "Block hand-written Endpoints and EndpointSlices", blocks_manual_endpoints),
    Check(
        "berth-ingress-host-ownership",
        "Ingress hosts only under the tenant's own domains",
        blocks_foreign_ingress_hosts,
    ),
    Check(
        "berth-short-lived-projected-tokens",
        "Block projected ServiceAccount tokens that outlive the tier's credential lifetime",
        blocks_long_projected_tokens,
    ),
    Check(
        "berth-no-berth-service-accounts",
        "Block pods running as Berth's own ServiceAccounts",
        blocks_berth_service_accounts,
    ),
    Check("berth-node-pool-isolation", "Tolerate only the tier's own node pool", blocks_other_pools),
    Check(
        "berth-storage-classes",
        "Claims only in the tier's storage classes, including classes created later",
        blocks_other_storage_classes,
    ),
    NetworkChecks(),
]


def is_cluster_admin_inside(k: Kube, t: Any) -> tuple[bool, str]:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "probes.berth.dev"},
        "spec": {
            "group": "berth.dev",
            "scope": "Namespaced",
            "names": {"plural": "probes", "singular": "probe", "kind": "Probe"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "berth-probe"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    }
    try:
        k.create(crd, dry_run=True)
        k.create(role, dry_run=True)
    except KubePermanentError as exc:
        return False, f"not cluster-admin inside its virtual cluster: {exc}"
    return True, "created a CustomResourceDefinition and a ClusterRole (dry run) inside its virtual cluster"


def has_no_host_credentials(k: Kube, t: Any) -> tuple[bool, str]:
    host = kube.for_cluster(t.cluster).with_token(k.bearer())
    try:
        host.list("Namespace")
    except KubePermanentError as exc:
        if exc.status in (401, 403):
            return True, f"the host API server refused the tenant's token ({exc.status})"
        raise
    return False, "the tenant's token was ACCEPTED by the host API server"


def _on_host(check: Callable[[Kube, Any], tuple[bool, str]]) -> Callable[[Kube, Any], tuple[bool, str]]:
    """Run a namespace check against the host namespace with the portal's own client."""
    return lambda k, t: check(kube.for_cluster(t.cluster), t)


VIRTUAL_CHECKS: list[ReportCheck] = [
    Check("virtual-cluster-admin", "Is cluster-admin inside its virtual cluster", is_cluster_admin_inside),
    Check("virtual-no-host-credentials", "Has no credentials for the host cluster", has_no_host_credentials),
    Check("MTB-PL1-CC-FNS-1", "Host namespace has resource quotas and object limits", _on_host(quotas_present)),
    NetworkChecks(on_host=True),
]


def report(client: Kube, tenant: Any, checks: Sequence[ReportCheck]) -> dict[str, Any]:
    """Run ``checks`` as ``client`` (the tenant's own identity) and say what passed."""
    results = []
    for check in checks:
        if isinstance(check, NetworkChecks):
            results += check.results(client, tenant)
            continue
        try:
            passed, detail = check.run(client, tenant)
        except KubePermanentError as exc:  # transient errors propagate: the task retries the whole report
            passed, detail = False, f"check could not run: {exc}"
        results.append(_result(check.id, check.title, passed, detail))
    return {"passed": all(c["passed"] for c in results), "checked_at": timezone.now().isoformat(), "checks": results}
