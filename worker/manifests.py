"""Pure rendering: (tenant, tier, cluster, cluster facts) → the Kubernetes objects a namespace tenant gets.

No I/O here, so the same function feeds provisioning, drift repair, the
approver's preview and the unit tests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

MANAGED_BY = {"app.kubernetes.io/managed-by": "berth"}
TENANT_ID_LABEL = "berth.dev/tenant-id"
TENANT_SA = "berth-tenant"
VIEWER_SA = "berth-viewer"
TENANT_ROLE = "berth-tenant"
VIEWER_ROLE = "berth-viewer"
# Namespace labels and annotations that parameterise the cluster-wide guards (worker/guards.py) per tier.
ALLOW_LABEL = "berth.dev/allow-{guard}"
MAX_TOKEN_ANNOTATION = "berth.dev/max-token-seconds"
INGRESS_DOMAINS_ANNOTATION = "berth.dev/ingress-domains"
TOLERATIONS_ANNOTATION = "berth.dev/tolerations"
STORAGE_CLASSES_ANNOTATION = "berth.dev/storage-classes"
SYSTEM_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")

ALL_VERBS = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]
READ_VERBS = ["get", "list", "watch"]


@dataclass(frozen=True)
class ClusterFacts:
    """What the renderer needs to know about the live cluster (read by the worker)."""

    storage_classes: tuple[str, ...] = ()
    priority_classes: tuple[str, ...] = SYSTEM_PRIORITY_CLASSES
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NamespaceGrant:
    """A ClusterRole that one of Berth's own ServiceAccounts holds inside each tenant namespace, and nowhere else."""

    cluster_role: str
    namespace: str
    service_account: str


_GRANT = re.compile(r"^(?P<role>[a-z0-9][a-z0-9.:-]*)=(?P<ns>[a-z0-9][a-z0-9-]*)/(?P<sa>[a-z0-9][a-z0-9.-]*)$")


def parse_grants(entries: Iterable[str]) -> tuple[NamespaceGrant, ...]:
    """``ClusterRole=namespace/serviceaccount`` entries (BERTH_NAMESPACE_GRANTS); ValueError names a bad one."""
    grants = []
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        match = _GRANT.match(entry)
        if match is None:
            raise ValueError(f"BERTH_NAMESPACE_GRANTS: {entry!r} is not ClusterRole=namespace/serviceaccount")
        grants.append(NamespaceGrant(match["role"], match["ns"], match["sa"]))
    return tuple(grants)


def labels(tenant: Any, tier: Any) -> dict[str, str]:
    return {
        **MANAGED_BY,
        TENANT_ID_LABEL: str(tenant.pk),
        "berth.dev/tenant": tenant.name,
        "berth.dev/team": tenant.team.slug,
        "berth.dev/tier": tier.name,
    }


def _meta(
    name: str, tenant: Any, tier: Any, *, namespaced: bool = True, extra_labels: dict[str, Any] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {**labels(tenant, tier), **(extra_labels or {})}}
    if namespaced:
        meta["namespace"] = tenant.namespace
    return meta


def _millis(value: int) -> str:
    return f"{value}m"


def _mib(value: int) -> str:
    return f"{value}Mi"


def opt_out_label(option: str) -> str:
    return ALLOW_LABEL.format(guard=option)


def namespace_parameters(tenant: Any, tier: Any) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) of a tenant's namespace that parameterise the guards for its tier."""
    labels = {
        opt_out_label(option): "true"
        for option, allowed in (
            ("external-ips", tier.allow_external_ips),
            ("external-name", tier.allow_external_name),
            ("manual-endpoints", tier.allow_manual_endpoints),
            ("any-ingress-host", tier.allow_any_ingress_host),
            ("any-storage-class", not tier.allowed_storage_classes),
        )
        if allowed
    }
    annotations = {
        MAX_TOKEN_ANNOTATION: str(tier.max_credential_lifetime_seconds),
        INGRESS_DOMAINS_ANNOTATION: ",".join(ingress_domains(tenant)),
        TOLERATIONS_ANNOTATION: ",".join(sorted(toleration_entries(tier.tolerations or []))),
        STORAGE_CLASSES_ANNOTATION: ",".join(sorted(tier.allowed_storage_classes or [])),
    }
    return labels, annotations


def ingress_domains(tenant: Any) -> list[str]:
    """The DNS suffixes whose hosts this tenant's Ingresses may use, from the cluster's templates."""
    fields = {"namespace": tenant.namespace, "tenant": tenant.name, "team": tenant.team.slug}
    return [template.format(**fields).lower() for template in tenant.cluster.ingress_domains or []]


def toleration_entries(tolerations: list[dict[str, Any]]) -> set[str]:
    """The tier's tolerations as the guard compares them: 'key=value' (Equal) or 'key' (Exists)."""
    entries = set()
    for toleration in tolerations:
        key = str(toleration.get("key") or "")
        if not key:
            continue  # a key-less toleration tolerates everything: never allowed to tenants
        exists = toleration.get("operator") == "Exists"
        entries.add(key if exists else f"{key}={toleration.get('value') or ''}")
    return entries


def namespace(tenant: Any, tier: Any) -> dict[str, Any]:
    level = tier.pod_security_level
    extra = {
        "pod-security.kubernetes.io/enforce": level,
        "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/audit": level,
        "pod-security.kubernetes.io/warn": level,
    }
    guard_labels, guard_annotations = namespace_parameters(tenant, tier)
    meta = _meta(tenant.namespace, tenant, tier, namespaced=False, extra_labels={**extra, **guard_labels})
    annotations = {"berth.dev/purpose": (tenant.purpose or "")[:500], **guard_annotations}
    if tier.node_selector:
        # PodNodeSelector admission pins every pod of the namespace to the tier's node pool.
        annotations["scheduler.alpha.kubernetes.io/node-selector"] = ",".join(
            f"{k}={v}" for k, v in sorted(tier.node_selector.items())
        )
    if tier.tolerations:
        # Read by the PodTolerationRestriction admission plugin where the cluster enables it.
        annotations["scheduler.alpha.kubernetes.io/defaultTolerations"] = json.dumps(tier.tolerations, sort_keys=True)
    meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def resource_quotas(tenant: Any, tier: Any, facts: ClusterFacts) -> list[dict[str, Any]]:
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
    quotas = [
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": _meta("berth-quota", tenant, tier),
            "spec": {"hard": hard},
        }
    ]
    forbidden = sorted(
        (set(facts.priority_classes) | set(SYSTEM_PRIORITY_CLASSES)) - set(tier.allowed_priority_classes or [])
    )
    if forbidden:
        quotas.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": _meta("berth-priority-classes", tenant, tier),
                "spec": {
                    "hard": {"pods": "0"},
                    "scopeSelector": {
                        "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": forbidden}]
                    },
                },
            }
        )
    return quotas


def limit_range(tenant: Any, tier: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": _meta("berth-limits", tenant, tier),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": {
                        "cpu": _millis(tier.default_cpu_limit_millis),
                        "memory": _mib(tier.default_memory_limit_mib),
                    },
                    "defaultRequest": {
                        "cpu": _millis(tier.default_cpu_request_millis),
                        "memory": _mib(tier.default_memory_request_mib),
                    },
                    "max": {"cpu": _millis(tier.cpu_limit_millis), "memory": _mib(tier.memory_limit_mib)},
                }
            ]
        },
    }


def network_policies(tenant: Any, tier: Any, cluster: Any) -> list[dict[str, Any]]:
    def policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta(name, tenant, tier),
            "spec": spec,
        }

    dns_port = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    policies = [
        policy("berth-default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        policy(
            "berth-allow-dns",
            {
                "podSelector": {},
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}],
                        "ports": dns_port,
                    }
                ],
            },
        ),
        policy(
            "berth-allow-same-namespace",
            {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"podSelector": {}}]}],
                "egress": [{"to": [{"podSelector": {}}]}],
            },
        ),
    ]
    if cluster.ingress_namespace and tier.network_profile in ("ingress", "open-egress"):
        policies.append(
            policy(
                "berth-allow-ingress-controller",
                {
                    "podSelector": {},
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {
                            "from": [
                                {
                                    "namespaceSelector": {
                                        "matchLabels": {"kubernetes.io/metadata.name": cluster.ingress_namespace}
                                    }
                                }
                            ]
                        }
                    ],
                },
            )
        )
    if tier.network_profile == "open-egress":
        policies.append(policy("berth-allow-egress", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}))
    elif tier.egress_allow:
        policies.append(policy("berth-allow-egress-listed", _listed_egress(tier.egress_allow)))
    return policies


def _listed_egress(rules: list[dict[str, Any]]) -> dict[str, Any]:
    """The tier's egress allow-list (tenants.validation.egress_rule_errors checked it) as one policy."""
    egress = []
    for rule in rules:
        entry: dict[str, Any] = {"to": [{"ipBlock": {"cidr": rule["cidr"]}}]}
        ports = [{"protocol": p.get("protocol", "TCP"), "port": p["port"]} for p in rule.get("ports") or []]
        if ports:
            entry["ports"] = ports
        egress.append(entry)
    return {"podSelector": {}, "policyTypes": ["Egress"], "egress": egress}


def _pod_metrics_rule() -> dict[str, Any]:
    """`kubectl top pod` in the namespace (metrics.k8s.io, served by metrics-server through the aggregation layer).
    Pods only: node metrics show other teams' load (and a Role cannot grant cluster-scoped nodes anyway);
    metrics-server serves no watch."""
    return {"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["get", "list"]}


def tenant_role(tenant: Any, tier: Any) -> dict[str, Any]:
    """Admin-like inside the namespace, but quotas, limits, policies and RBAC are read-only.

    No escalate, bind or impersonate; no ServiceAccount token minting (credentials stay short-lived
    and portal-issued).
    """
    # Endpoints are written by the cluster's controllers from Services; hand-written ones are an escape
    # (CVE-2021-25740), so tenants only read them unless the tier allows it.
    endpoint_verbs = ALL_VERBS if tier.allow_manual_endpoints else READ_VERBS
    endpoints = {"apiGroups": [""], "resources": ["endpoints"], "verbs": endpoint_verbs}
    rules = [
        endpoints,
        {
            "apiGroups": [""],
            "resources": [
                "pods",
                "pods/log",
                "pods/exec",
                "pods/attach",
                "pods/portforward",
                "pods/eviction",
                "services",
                "configmaps",
                "secrets",
                "persistentvolumeclaims",
                "serviceaccounts",
                "replicationcontrollers",
            ],
            "verbs": ALL_VERBS,
        },
        {
            "apiGroups": [""],
            "resources": ["events", "resourcequotas", "limitranges", "pods/status"],
            "verbs": READ_VERBS,
        },
        {"apiGroups": [""], "resources": ["namespaces"], "resourceNames": [tenant.namespace], "verbs": ["get"]},
        {
            "apiGroups": ["apps"],
            "resources": [
                "deployments",
                "statefulsets",
                "replicasets",
                "daemonsets",
                "deployments/scale",
                "statefulsets/scale",
            ],
            "verbs": ALL_VERBS,
        },
        {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": ALL_VERBS},
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ALL_VERBS},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ALL_VERBS},
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": ALL_VERBS},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": READ_VERBS},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": READ_VERBS},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": READ_VERBS},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ALL_VERBS},
        _pod_metrics_rule(),
    ]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(TENANT_ROLE, tenant, tier),
        "rules": rules,
    }


def viewer_role(tenant: Any, tier: Any) -> dict[str, Any]:
    """Read-only, and no Secrets; pod logs only where the tier lets viewers read them (logs can carry what a
    viewer should not see, so a tier opts in)."""
    rules = [
        {
            "apiGroups": [""],
            "resources": [
                "pods",
                "services",
                "endpoints",
                "configmaps",
                "persistentvolumeclaims",
                "serviceaccounts",
                "events",
                "resourcequotas",
                "limitranges",
            ],
            "verbs": READ_VERBS,
        },
        {
            "apiGroups": ["apps", "batch", "autoscaling", "policy", "networking.k8s.io"],
            "resources": ["*"],
            "verbs": READ_VERBS,
        },
        _pod_metrics_rule(),
    ]
    if tier.viewers_read_logs:
        rules.append({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]})
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(VIEWER_ROLE, tenant, tier),
        "rules": rules,
    }


def _binding(name: str, role: str, subjects: list[dict[str, Any]], tenant: Any, tier: Any) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(name, tenant, tier),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": subjects,
    }


def namespace_grants(tenant: Any, tier: Any, grants: Iterable[NamespaceGrant]) -> list[dict[str, Any]]:
    """RoleBindings that give Berth's own ServiceAccounts their rights inside this namespace (least privilege)."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(grant.cluster_role, tenant, tier),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": grant.cluster_role},
            "subjects": [{"kind": "ServiceAccount", "name": grant.service_account, "namespace": grant.namespace}],
        }
        for grant in grants
    ]


def oidc_groups(tenant: Any, cluster: Any) -> tuple[list[str], list[str]]:
    """(writer groups, viewer groups) as the API server sees them, with the cluster's groups prefix."""
    prefix, group = cluster.oidc_groups_prefix, tenant.team.oidc_group
    return [f"{prefix}{group}", f"{prefix}{group}:owner"], [f"{prefix}{group}:viewer"]


def access(tenant: Any, tier: Any, cluster: Any) -> list[dict[str, Any]]:
    objs = [tenant_role(tenant, tier), viewer_role(tenant, tier)]
    if cluster.access_mode == "oidc":
        writers, viewers = oidc_groups(tenant, cluster)

        def group(name: str) -> dict[str, Any]:
            return {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": name}

        objs += [
            _binding(TENANT_ROLE, TENANT_ROLE, [group(g) for g in writers], tenant, tier),
            _binding(VIEWER_ROLE, VIEWER_ROLE, [group(g) for g in viewers], tenant, tier),
        ]
    else:
        for sa, role in ((TENANT_SA, TENANT_ROLE), (VIEWER_SA, VIEWER_ROLE)):
            objs.append(
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": _meta(sa, tenant, tier),
                    "automountServiceAccountToken": False,
                }
            )
            objs.append(
                _binding(
                    role, role, [{"kind": "ServiceAccount", "name": sa, "namespace": tenant.namespace}], tenant, tier
                )
            )
    return objs


def flow_schema_name(tenant: Any) -> str:
    return f"berth-{tenant.namespace}"[:253]


def flow_schema(tenant: Any, tier: Any, cluster: Any) -> dict[str, Any] | None:
    """API Priority and Fairness: the tenant's identities go to the tier's priority level."""
    if not tier.api_fairness:
        return None
    if cluster.access_mode == "oidc":
        writers, viewers = oidc_groups(tenant, cluster)
        subjects = [{"kind": "Group", "group": {"name": g}} for g in writers + viewers]
    else:
        subjects = [
            {"kind": "ServiceAccount", "serviceAccount": {"namespace": tenant.namespace, "name": sa}}
            for sa in (TENANT_SA, VIEWER_SA)
        ]
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": _meta(flow_schema_name(tenant), tenant, tier, namespaced=False),
        "spec": {
            "priorityLevelConfiguration": {"name": tier.api_fairness},
            "matchingPrecedence": 900,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": subjects,
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "namespaces": ["*"],
                            "clusterScope": True,
                        }
                    ],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }


def namespace_tenant(
    tenant: Any,
    tier: Any,
    cluster: Any,
    facts: ClusterFacts | None = None,
    *,
    team_access: bool = True,
    grants: Iterable[NamespaceGrant] = (),
) -> list[dict[str, Any]]:
    """Every object of a namespace tenant, the Namespace first and Berth's own grants next.

    ``team_access=False`` leaves out the team's Roles, ServiceAccounts, bindings and FlowSchema: the
    host side of a virtual cluster, where the team must hold no credentials at all.
    """
    facts = facts or ClusterFacts()
    objs = [
        namespace(tenant, tier),
        *namespace_grants(tenant, tier, grants),
        *resource_quotas(tenant, tier, facts),
        limit_range(tenant, tier),
        *network_policies(tenant, tier, cluster),
    ]
    if not team_access:
        return objs
    objs += access(tenant, tier, cluster)
    fs = flow_schema(tenant, tier, cluster)
    if fs:
        objs.append(fs)
    return objs


def to_yaml(objs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(objs, sort_keys=False, default_flow_style=False)
