"""Cluster-wide admission guards for every Berth namespace: pure rendering, applied once per cluster.

RBAC says which verbs a tenant has on which resources; it cannot look inside an object.
These ValidatingAdmissionPolicies close the known escapes that RBAC leaves open to a
tenant allowed to create Services, Ingresses and Pods in its own namespace:

- CVE-2020-8554: a Service with ``externalIPs`` intercepts traffic meant for those IPs;
- CVE-2021-25740: an ``ExternalName`` Service, or hand-written Endpoints/EndpointSlices,
  sends traffic (and an ingress controller's or a proxy's privileges) to other namespaces
  or to the API server;
- Ingress hosts outside the tenant's assigned domain take other teams' traffic;
- a projected ServiceAccount token with a long ``expirationSeconds``, or a pod running as
  Berth's own ServiceAccounts, outlives the short-lived kubeconfigs the portal hands out;
- tolerating another pool's taints puts pods on nodes another tier paid for;
- a PersistentVolumeClaim in a storage class the tier does not allow (the tier's quota can zero only the classes
  that existed when it was rendered; this bounds a class created later from its first second);
- a ``kubernetes.io/service-account-token`` Secret is a credential that never expires.

Each guard is one policy and one binding, bound to namespaces labelled
``app.kubernetes.io/managed-by=berth``. Where a real platform might allow the thing for a
tier, the tier's namespace carries an opt-out label (``berth.dev/allow-<guard>``) that the
binding's selector excludes; per-tenant parameters (token lifetime, ingress domains, node
pool tolerations) are namespace annotations. Only Berth writes its namespaces' labels and
annotations: tenants can read their namespace, never change it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.manifests import (
    INGRESS_DOMAINS_ANNOTATION,
    MANAGED_BY,
    MAX_TOKEN_ANNOTATION,
    STORAGE_CLASSES_ANNOTATION,
    TENANT_SA,
    TOLERATIONS_ANNOTATION,
    VIEWER_SA,
    opt_out_label,
)

API_VERSION = "admissionregistration.k8s.io/v1"
# The token the ServiceAccount admission plugin mounts into every pod asks for this lifetime.
INJECTED_TOKEN_SECONDS = 3607
INJECTED_TOKEN_VOLUME = "kube-api-access-"
# Tolerations admission plugins add on their own, by key and effect: DefaultTolerationSeconds gives every pod the
# first two, PodTolerationRestriction gives pods that are not BestEffort the third. None reaches a tier's pool.
DEFAULT_TOLERATIONS = (
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
)
_DEFAULT_TOLERATION_ENTRIES = [f"{key}:{effect}" for key, effect in DEFAULT_TOLERATIONS]


@dataclass(frozen=True)
class Guard:
    name: str  # the policy's and binding's name
    rules: tuple[dict[str, Any], ...]  # admission resource rules
    expressions: tuple[tuple[str, str], ...]  # (CEL expression that must hold, message when it does not)
    variables: tuple[tuple[str, str], ...] = ()
    match_conditions: tuple[tuple[str, str], ...] = ()
    opt_out: str = ""  # the tier option whose namespace label lifts this guard, if any


def _rule(group: str, resource: str, operations: tuple[str, ...] = ("CREATE", "UPDATE")) -> dict[str, Any]:
    return {"apiGroups": [group], "apiVersions": ["*"], "operations": list(operations), "resources": [resource]}


def _annotation(name: str, default: str) -> str:
    """CEL for a namespace annotation's value, or ``default`` when it is not set."""
    return (
        f"(has(namespaceObject.metadata.annotations) && '{name}' in namespaceObject.metadata.annotations"
        f" ? namespaceObject.metadata.annotations['{name}'] : {default})"
    )


_IN_DOMAINS = "variables.domains.exists(d, d != '' && ({host} == d || {host}.endsWith('.' + d)))"
_TOKEN_SECONDS = "(has(s.serviceAccountToken.expirationSeconds) ? s.serviceAccountToken.expirationSeconds : 3600)"
# A claim must name an allowed class when it is created (the DefaultStorageClass admission plugin has filled in the
# cluster's default by then; without one, a class-less claim could bind a class-less volume). A class can be set
# once more, by an update of a claim made without one (the retroactive default class): that is checked too. Any
# other update (a resize, a finalizer removed on deletion) is left alone, so claims made before a tier was narrowed
# can still be changed and deleted.
_ALLOWED_CLASS = "(object.spec.storageClassName != '' && object.spec.storageClassName in variables.allowed)"
_CLAIM_CLASS = (
    "request.operation == 'UPDATE'"
    f" ? (has(oldObject.spec.storageClassName) || !has(object.spec.storageClassName) || {_ALLOWED_CLASS})"
    f" : (has(object.spec.storageClassName) && {_ALLOWED_CLASS})"
)
_TOLERATION = "((has(t.operator) && t.operator == 'Exists') ? t.key : t.key + '=' + (has(t.value) ? t.value : ''))"

GUARDS: tuple[Guard, ...] = (
    Guard(
        "berth-no-long-lived-tokens",
        (_rule("", "secrets"),),
        (
            (
                "object.type != 'kubernetes.io/service-account-token'",
                "Long-lived ServiceAccount token Secrets are not allowed in Berth tenants: "
                "download a short-lived kubeconfig from the portal instead.",
            ),
        ),
    ),
    Guard(
        "berth-no-external-ips",
        (_rule("", "services"),),
        (
            (
                "!has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0",
                "Services with externalIPs can intercept other tenants' traffic (CVE-2020-8554); "
                "this tier does not allow them.",
            ),
        ),
        opt_out="external-ips",
    ),
    Guard(
        "berth-no-external-name",
        (_rule("", "services"),),
        (
            (
                "object.spec.type != 'ExternalName'",
                "ExternalName Services can point other workloads at another namespace or the API server "
                "(CVE-2021-25740); this tier does not allow them.",
            ),
        ),
        opt_out="external-name",
    ),
    Guard(
        "berth-no-manual-endpoints",
        (_rule("", "endpoints"), _rule("discovery.k8s.io", "endpointslices")),
        (
            (
                "false",
                "Hand-written Endpoints and EndpointSlices can send a Service's traffic anywhere "
                "(CVE-2021-25740); only the cluster's controllers write them in Berth namespaces.",
            ),
        ),
        match_conditions=(
            (
                "not-a-cluster-controller",
                "!request.userInfo.username.startsWith('system:serviceaccount:kube-system:')"
                " && request.userInfo.username != 'system:kube-controller-manager'",
            ),
        ),
        opt_out="manual-endpoints",
    ),
    Guard(
        "berth-ingress-hosts",
        (_rule("networking.k8s.io", "ingresses"),),
        (
            (
                "!has(object.spec.defaultBackend)",
                "A default backend would take every host's traffic; name hosts under your tenant's domain.",
            ),
            (
                "!has(object.spec.rules) || object.spec.rules.all(r, has(r.host) && "
                + _IN_DOMAINS.format(host="r.host")
                + ")",
                "Ingress hosts must be named and lie under this tenant's domain(s) (see the namespace's "
                f"{INGRESS_DOMAINS_ANNOTATION} annotation); other teams' hosts are theirs.",
            ),
            (
                "!has(object.spec.tls) || object.spec.tls.all(t, !has(t.hosts) || t.hosts.all(h, "
                + _IN_DOMAINS.format(host="h")
                + "))",
                "TLS hosts must lie under this tenant's domain(s).",
            ),
        ),
        variables=(("domains", _annotation(INGRESS_DOMAINS_ANNOTATION, "''") + ".split(',')"),),
        opt_out="any-ingress-host",
    ),
    Guard(
        "berth-projected-token-lifetime",
        (_rule("", "pods", ("CREATE",)),),
        (
            (
                "!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.projected) || "
                "!has(v.projected.sources) || v.projected.sources.all(s, !has(s.serviceAccountToken) || "
                f"{_TOKEN_SECONDS} <= variables.maxSeconds || (v.name.startsWith('{INJECTED_TOKEN_VOLUME}') && "
                f"{_TOKEN_SECONDS} == {INJECTED_TOKEN_SECONDS})))",
                "Projected ServiceAccount tokens may not outlive this tier's maximum credential lifetime "
                f"(the namespace's {MAX_TOKEN_ANNOTATION} annotation).",
            ),
        ),
        variables=(("maxSeconds", "int(" + _annotation(MAX_TOKEN_ANNOTATION, "'3600'") + ")"),),
    ),
    Guard(
        "berth-no-berth-service-accounts",
        (_rule("", "pods", ("CREATE",)),),
        (
            (
                f"!has(object.spec.serviceAccountName) || !(object.spec.serviceAccountName in ['{TENANT_SA}', "
                f"'{VIEWER_SA}'])",
                "Pods cannot run as Berth's own ServiceAccounts: their tokens are for the portal's short-lived "
                "kubeconfigs only.",
            ),
        ),
    ),
    Guard(
        "berth-node-pool-tolerations",
        (_rule("", "pods"),),
        (
            (
                "!has(object.spec.tolerations) || object.spec.tolerations.all(t, has(t.key) && t.key != '' && ("
                f"(has(t.effect) && t.key + ':' + t.effect in {_DEFAULT_TOLERATION_ENTRIES}) || "
                f"{_TOLERATION} in variables.allowed))",
                "Pods may tolerate only their tier's own node pool taints (the namespace's "
                f"{TOLERATIONS_ANNOTATION} annotation).",
            ),
        ),
        variables=(("allowed", _annotation(TOLERATIONS_ANNOTATION, "''") + ".split(',')"),),
    ),
    Guard(
        "berth-storage-classes",
        (_rule("", "persistentvolumeclaims"),),
        (
            (
                _CLAIM_CLASS,
                "PersistentVolumeClaims must name a storage class this tier allows (the namespace's "
                f"{STORAGE_CLASSES_ANNOTATION} annotation).",
            ),
        ),
        variables=(("allowed", _annotation(STORAGE_CLASSES_ANNOTATION, "''") + ".split(',')"),),
        opt_out="any-storage-class",
    ),
)
GUARD_NAMES = tuple(guard.name for guard in GUARDS)


def _policy(guard: Guard) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [dict(rule) for rule in guard.rules]},
        "validations": [{"expression": expr, "message": message} for expr, message in guard.expressions],
    }
    if guard.variables:
        spec["variables"] = [{"name": name, "expression": expr} for name, expr in guard.variables]
    if guard.match_conditions:
        spec["matchConditions"] = [{"name": name, "expression": expr} for name, expr in guard.match_conditions]
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": guard.name, "labels": dict(MANAGED_BY)},
        "spec": spec,
    }


def _binding(guard: Guard) -> dict[str, Any]:
    selector: dict[str, Any] = {"matchLabels": dict(MANAGED_BY)}
    if guard.opt_out:
        selector["matchExpressions"] = [{"key": opt_out_label(guard.opt_out), "operator": "DoesNotExist"}]
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": guard.name, "labels": dict(MANAGED_BY)},
        "spec": {
            "policyName": guard.name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": selector},
        },
    }


def cluster_guards() -> list[dict[str, Any]]:
    """Every guard's policy, then its binding (a binding to a missing policy would fail closed)."""
    return [obj for guard in GUARDS for obj in (_policy(guard), _binding(guard))]


# --- Are the guards in force? ------------------------------------------------------------------------------
# An API server enforces a new or changed admission policy only once its informers have seen it, a moment
# after the apply returns. Until then a tenant must not get credentials, so readiness waits for each guard
# to refuse a canonical violation (a server-side dry run: nothing is persisted).

_RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _probe_pod(namespace: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "berth-guard-probe", "securityContext": _RESTRICTED}
    meta = {"name": "berth-guard-probe", "namespace": namespace}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container], **spec}}


def _probe_service(namespace: str, **spec: Any) -> dict[str, Any]:
    meta = {"name": "berth-guard-probe", "namespace": namespace}
    body = {"ports": [{"port": 80}], "selector": {"app": "berth-guard-probe"}, **spec}
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": body}


def violations(namespace: str) -> dict[str, dict[str, Any]]:
    """For each guard, an object its policy must refuse in a Berth namespace (and nothing else would)."""
    meta = {"name": "berth-guard-probe", "namespace": namespace}
    backend = {"service": {"name": "berth-guard-probe", "port": {"number": 80}}}
    rule = {
        "host": "berth-guard-probe.invalid",
        "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]},
    }
    token = {"serviceAccountToken": {"path": "t", "expirationSeconds": 10 * 365 * 24 * 3600}}
    return {
        "berth-no-long-lived-tokens": {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": {**meta, "annotations": {"kubernetes.io/service-account.name": "default"}},
        },
        "berth-no-external-ips": _probe_service(namespace, externalIPs=["192.0.2.1"]),
        "berth-no-external-name": _probe_service(namespace, type="ExternalName", externalName="example.invalid"),
        "berth-no-manual-endpoints": {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": meta,
            "subsets": [{"addresses": [{"ip": "192.0.2.1"}], "ports": [{"port": 80}]}],
        },
        "berth-ingress-hosts": {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": meta,
            "spec": {"rules": [rule]},
        },
        "berth-projected-token-lifetime": _probe_pod(
            namespace, volumes=[{"name": "t", "projected": {"sources": [token]}}]
        ),
        "berth-no-berth-service-accounts": _probe_pod(namespace, serviceAccountName=TENANT_SA),
        "berth-node-pool-tolerations": _probe_pod(
            namespace, tolerations=[{"key": "berth-guard-probe", "operator": "Exists"}]
        ),
        "berth-storage-classes": {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": meta,
            "spec": {
                "storageClassName": "berth-guard-probe",
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Mi"}},
            },
        },
    }


def applicable(namespace_labels: dict[str, str]) -> list[Guard]:
    """The guards bound to a namespace with these labels (a tier's opt-out lifts its guard)."""
    return [g for g in GUARDS if not (g.opt_out and namespace_labels.get(opt_out_label(g.opt_out)) == "true")]
