"""Pure rendering: (tenant, tier, cluster, cluster facts) → the Kubernetes objects a namespace tenant gets.

No I/O here, so the same function feeds provisioning, drift repair, the
approver's preview and the unit tests.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import yaml

MANAGED_BY = {"app.kubernetes.io/managed-by": "berth"}
TENANT_SA = "berth-tenant"
VIEWER_SA = "berth-viewer"
TENANT_ROLE = "berth-tenant"
VIEWER_ROLE = "berth-viewer"
SYSTEM_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")

ALL_VERBS = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
READ_VERBS = ["get", "list", "watch"]


@dataclass(frozen=True)
class ClusterFacts:
    """What the renderer needs to know about the live cluster (read by the worker)."""

    storage_classes: tuple[str, ...] = ()
    priority_classes: tuple[str, ...] = SYSTEM_PRIORITY_CLASSES
    extra: dict = field(default_factory=dict)


def labels(tenant: Any, tier: Any) -> dict[str, str]:
    return {
        **MANAGED_BY,
        "berth.dev/tenant-id": str(tenant.pk),
        "berth.dev/tenant": tenant.name,
        "berth.dev/team": tenant.team.slug,
        "berth.dev/tier": tier.name,
    }


def _meta(name: str, tenant: Any, tier: Any, *, namespaced: bool = True, extra_labels: dict | None = None) -> dict:
    meta: dict[str, Any] = {"name": name, "labels": {**labels(tenant, tier), **(extra_labels or {})}}
    if namespaced:
        meta["namespace"] = tenant.namespace
    return meta


def _millis(value: int) -> str:
    return f"{value}m"


def _mib(value: int) -> str:
    return f"{value}Mi"


def namespace(tenant: Any, tier: Any) -> dict:
    level = tier.pod_security_level
    extra = {
        "pod-security.kubernetes.io/enforce": level,
        "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/audit": level,
        "pod-security.kubernetes.io/warn": level,
    }
    meta = _meta(tenant.namespace, tenant, tier, namespaced=False, extra_labels=extra)
    annotations = {"berth.dev/purpose": (tenant.purpose or "")[:500]}
    if tier.node_selector:
        # PodNodeSelector admission pins every pod of the namespace to the tier's node pool.
        annotations["scheduler.alpha.kubernetes.io/node-selector"] = ",".join(f"{k}={v}" for k, v in sorted(tier.node_selector.items()))
    if tier.tolerations:
        # Read by the PodTolerationRestriction admission plugin where the cluster enables it.
        annotations["scheduler.alpha.kubernetes.io/defaultTolerations"] = json.dumps(tier.tolerations, sort_keys=True)
    meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def resource_quotas(tenant: Any, tier: Any, facts: ClusterFacts) -> list[dict]:
    hard = {
        "requests.cpu": _millis(tier.cpu_request_millis),
        "limits.cpu": _millis(tier.cpu_limit_millis),
        "requests.memory": _mib(tier.memory_request_mib),
        "limits.memory": _mib(tier.memory_limit_mib),
        "requests.storage": f"{tier.storage_gib}Gi",
        "persistentvolumeclaims": str(tier.max_pvcs),
        "pods": str(tier.max_pods),
        "services": str(tier.max_services),
        "services.loadbalancers": str(tier.max_load_balancers),
        "services.nodeports": "0",
        "configmaps": str(tier.max_configmaps),
        "secrets": str(tier.max_secrets),
        "count/deployments.apps": str(tier.max_pods),
        "count/jobs.batch": str(tier.max_pods),
    }
    allowed_storage = set(tier.allowed_storage_classes or [])
    if allowed_storage:
        for sc in sorted(set(facts.storage_classes) - allowed_storage):
            hard[f"{sc}.storageclass.storage.k8s.io/requests.storage"] = "0"
            hard[f"{sc}.storageclass.storage.k8s.io/persistentvolumeclaims"] = "0"
    quotas = [{"apiVersion": "v1", "kind": "ResourceQuota", "metadata": _meta("berth-quota", tenant, tier), "spec": {"hard": hard}}]
    forbidden = sorted((set(facts.priority_classes) | set(SYSTEM_PRIORITY_CLASSES)) - set(tier.allowed_priority_classes or []))
    if forbidden:
        quotas.append({
            "apiVersion": "v1", "kind": "ResourceQuota", "metadata": _meta("berth-priority-classes", tenant, tier),
            "spec": {
                "hard": {"pods": "0"},
                "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": forbidden}]},
            },
        })
    return quotas


def limit_range(tenant: Any, tier: Any) -> dict:
    return {
        "apiVersion": "v1", "kind": "LimitRange", "metadata": _meta("berth-limits", tenant, tier),
        "spec": {"limits": [{
            "type": "Container",
            "default": {"cpu": _millis(tier.default_cpu_limit_millis), "memory": _mib(tier.default_memory_limit_mib)},
            "defaultRequest": {"cpu": _millis(tier.default_cpu_request_millis), "memory": _mib(tier.default_memory_request_mib)},
            "max": {"cpu": _millis(tier.cpu_limit_millis), "memory": _mib(tier.memory_limit_mib)},
        }]},
    }


def network_policies(tenant: Any, tier: Any, cluster: Any) -> list[dict]:
    def policy(name: str, spec: dict) -> dict:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(name, tenant, tier), "spec": spec}

    dns_port = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    policies = [
        policy("berth-default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        policy("berth-allow-dns", {
            "podSelector": {}, "policyTypes": ["Egress"],
            "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}], "ports": dns_port}],
        }),
        policy("berth-allow-same-namespace", {
            "podSelector": {}, "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {}}]}], "egress": [{"to": [{"podSelector": {}}]}],
        }),
    ]
    if cluster.ingress_namespace and tier.network_profile in ("ingress", "open-egress"):
        policies.append(policy("berth-allow-ingress-controller", {
            "podSelector": {}, "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": cluster.ingress_namespace}}}]}],
        }))
    if tier.network_profile == "open-egress":
        policies.append(policy("berth-allow-egress", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}))
    return policies


def tenant_role(tenant: Any, tier: Any) -> dict:
    """Admin-like inside the namespace, but quotas, limits, policies and RBAC are read-only.

    No escalate, bind or impersonate; no ServiceAccount token minting (credentials stay short-lived
    and portal-issued).
    """
    rules = [
        {"apiGroups": [""], "resources": [
            "pods", "pods/log", "pods/exec", "pods/attach", "pods/portforward", "pods/eviction", "services", "endpoints",
            "configmaps", "secrets", "persistentvolumeclaims", "serviceaccounts", "replicationcontrollers",
        ], "verbs": ALL_VERBS},
        {"apiGroups": [""], "resources": ["events", "resourcequotas", "limitranges", "pods/status"], "verbs": READ_VERBS},
        {"apiGroups": [""], "resources": ["namespaces"], "resourceNames": [tenant.namespace], "verbs": ["get"]},
        {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "replicasets", "daemonsets", "deployments/scale", "statefulsets/scale"], "verbs": ALL_VERBS},
        {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": ALL_VERBS},
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ALL_VERBS},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ALL_VERBS},
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": ALL_VERBS},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": READ_VERBS},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": READ_VERBS},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": READ_VERBS},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ALL_VERBS},
    ]
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(TENANT_ROLE, tenant, tier), "rules": rules}


def viewer_role(tenant: Any, tier: Any) -> dict:
    """Read-only, and no Secrets."""
    rules = [
        {"apiGroups": [""], "resources": [
            "pods", "pods/log", "services", "endpoints", "configmaps", "persistentvolumeclaims", "serviceaccounts",
            "events", "resourcequotas", "limitranges",
        ], "verbs": READ_VERBS},
        {"apiGroups": ["apps", "batch", "autoscaling", "policy", "networking.k8s.io"], "resources": ["*"], "verbs": READ_VERBS},
    ]
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(VIEWER_ROLE, tenant, tier), "rules": rules}


def _binding(name: str, role: str, subjects: list[dict], tenant: Any, tier: Any) -> dict:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(name, tenant, tier),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role}, "subjects": subjects,
    }


def oidc_groups(tenant: Any, cluster: Any) -> tuple[list[str], list[str]]:
    """(writer groups, viewer groups) as the API server sees them, with the cluster's groups prefix."""
    prefix, group = cluster.oidc_groups_prefix, tenant.team.oidc_group
    return [f"{prefix}{group}", f"{prefix}{group}:owner"], [f"{prefix}{group}:viewer"]


def access(tenant: Any, tier: Any, cluster: Any) -> list[dict]:
    objs = [tenant_role(tenant, tier), viewer_role(tenant, tier)]
    if cluster.access_mode == "oidc":
        writers, viewers = oidc_groups(tenant, cluster)
        group = lambda name: {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": name}  # noqa: E731
        objs += [
            _binding(TENANT_ROLE, TENANT_ROLE, [group(g) for g in writers], tenant, tier),
            _binding(VIEWER_ROLE, VIEWER_ROLE, [group(g) for g in viewers], tenant, tier),
        ]
    else:
        for sa, role in ((TENANT_SA, TENANT_ROLE), (VIEWER_SA, VIEWER_ROLE)):
            objs.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(sa, tenant, tier), "automountServiceAccountToken": False})
            objs.append(_binding(role, role, [{"kind": "ServiceAccount", "name": sa, "namespace": tenant.namespace}], tenant, tier))
    return objs


def flow_schema_name(tenant: Any) -> str:
    return f"berth-{tenant.namespace}"[:253]


def flow_schema(tenant: Any, tier: Any, cluster: Any) -> dict | None:
    """API Priority and Fairness: the tenant's identities go to the tier's priority level."""
    if not tier.api_fairness:
        return None
    if cluster.access_mode == "oidc":
        writers, viewers = oidc_groups(tenant, cluster)
        subjects = [{"kind": "Group", "group": {"name": g}} for g in writers + viewers]
    else:
        subjects = [{"kind": "ServiceAccount", "serviceAccount": {"namespace": tenant.namespace, "name": sa}} for sa in (TENANT_SA, VIEWER_SA)]
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
        "metadata": _meta(flow_schema_name(tenant), tenant, tier, namespaced=False),
        "spec": {
            "priorityLevelConfiguration": {"name": tier.api_fairness},
            "matchingPrecedence": 900,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": subjects,
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"], "clusterScope": True}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            }],
        },
    }


NO_LONG_LIVED_TOKENS = "berth-no-long-lived-tokens"


def cluster_guards() -> list[dict]:
    """Cluster-wide guards for every Berth namespace (applied once per cluster, idempotently).

    RBAC cannot tell Secret types apart, so a tenant allowed to create Secrets could create a
    ``kubernetes.io/service-account-token`` Secret and get a token that never expires. This
    ValidatingAdmissionPolicy refuses that in namespaces Berth manages: credentials stay short-lived.
    """
    meta = {"name": NO_LONG_LIVED_TOKENS, "labels": dict(MANAGED_BY)}
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": meta,
         "spec": {
             "failurePolicy": "Fail",
             "matchConstraints": {"resourceRules": [
                 {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["secrets"]}]},
             "validations": [{
                 "expression": "object.type != 'kubernetes.io/service-account-token'",
                 "message": "Long-lived ServiceAccount token Secrets are not allowed in Berth tenants: "
                            "download a short-lived kubeconfig from the portal instead.",
             }],
         }},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding", "metadata": dict(meta),
         "spec": {"policyName": NO_LONG_LIVED_TOKENS, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchLabels": dict(MANAGED_BY)}}}},
    ]


def namespace_tenant(tenant: Any, tier: Any, cluster: Any, facts: ClusterFacts | None = None, *,
                     team_access: bool = True) -> list[dict]:
    """Every object of a namespace tenant, the Namespace first.

    ``team_access=False`` leaves out the team's Roles, ServiceAccounts, bindings and FlowSchema: the
    host side of a virtual cluster, where the team must hold no credentials at all.
    """
    facts = facts or ClusterFacts()
    objs = [namespace(tenant, tier), *resource_quotas(tenant, tier, facts), limit_range(tenant, tier),
            *network_policies(tenant, tier, cluster)]
    if not team_access:
        return objs
    objs += access(tenant, tier, cluster)
    fs = flow_schema(tenant, tier, cluster)
    if fs:
        objs.append(fs)
    return objs


def to_yaml(objs: list[dict]) -> str:
    return yaml.safe_dump_all(objs, sort_keys=False, default_flow_style=False)

