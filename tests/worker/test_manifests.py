"""The pure renderer: what a namespace tenant gets, as a function of tenant, tier and cluster."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.fixtures import seeded_tier
from worker import guards, manifests
from worker.manifests import ClusterFacts

pytestmark = pytest.mark.django_db


def _tenant(tier, *, access_mode="token", ingress_namespace="", prefix="") -> SimpleNamespace:
    cluster = SimpleNamespace(
        name="dev",
        access_mode=access_mode,
        ingress_namespace=ingress_namespace,
        ingress_domains=["{namespace}.apps.example.test"],
        oidc_groups_prefix="oidc:",
        namespace_prefix=prefix,
    )
    team = SimpleNamespace(slug="team-a", oidc_group="team-a")
    return SimpleNamespace(
        pk="00000000-0000-0000-0000-000000000001",
        name="web",
        namespace=prefix + "web",
        team=team,
        tier=tier,
        cluster=cluster,
        purpose="shop",
    )


def _by_kind_name(objs):
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def test_every_object_is_labelled_as_berths_and_the_namespace_comes_first():
    tier = seeded_tier("medium")
    objs = manifests.namespace_tenant(_tenant(tier), tier, _tenant(tier).cluster)
    assert objs[0]["kind"] == "Namespace"
    for obj in objs:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "berth"
        assert labels["berth.dev/tenant-id"] == "00000000-0000-0000-0000-000000000001"


def test_pod_security_and_node_pool_come_from_the_tier():
    tier = seeded_tier("large")
    ns = manifests.namespace(_tenant(tier), tier)
    for mode in ("enforce", "audit", "warn"):
        assert ns["metadata"]["labels"][f"pod-security.kubernetes.io/{mode}"] == tier.pod_security_level
    assert ns["metadata"]["annotations"]["scheduler.alpha.kubernetes.io/node-selector"] == "berth.dev/pool=dedicated"
    small = seeded_tier("small")
    assert (
        "scheduler.alpha.kubernetes.io/node-selector"
        not in manifests.namespace(_tenant(small), small)["metadata"]["annotations"]
    )


def test_quota_forbids_node_ports_and_disallowed_storage_and_priority_classes():
    tier = seeded_tier("large")
    tier.allowed_storage_classes = ["fast"]
    facts = ClusterFacts(
        storage_classes=("fast", "slow"), priority_classes=("berth-high", "batch", "system-node-critical")
    )
    quota, priority = manifests.resource_quotas(_tenant(tier), tier, facts)
    hard = quota["spec"]["hard"]
    assert hard["services.nodeports"] == "0"
    assert hard["limits.cpu"] == "32000m" and hard["requests.memory"] == "32768Mi"
    assert hard["slow.storageclass.storage.k8s.io/requests.storage"] == "0"
    assert "fast.storageclass.storage.k8s.io/requests.storage" not in hard
    values = priority["spec"]["scopeSelector"]["matchExpressions"][0]["values"]
    assert values == ["batch", "system-cluster-critical", "system-node-critical"]  # berth-high is allowed by the tier


def test_network_policies_deny_by_default_and_open_ingress_only_when_configured():
    tier = seeded_tier("medium")
    plain = _by_kind_name(manifests.network_policies(_tenant(tier), tier, _tenant(tier).cluster))
    deny = plain[("NetworkPolicy", "berth-default-deny")]["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    assert ("NetworkPolicy", "berth-allow-ingress-controller") not in plain
    with_ingress = _tenant(tier, ingress_namespace="ingress-nginx")
    opened = _by_kind_name(manifests.network_policies(with_ingress, tier, with_ingress.cluster))
    rule = opened[("NetworkPolicy", "berth-allow-ingress-controller")]["spec"]["ingress"][0]["from"][0]
    assert rule["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "ingress-nginx"}


def test_tenant_role_cannot_escalate_or_touch_quotas_or_rbac():
    tier = seeded_tier("small")
    role = manifests.tenant_role(_tenant(tier), tier)
    for rule in role["rules"]:
        assert not {"escalate", "bind", "impersonate", "*"} & set(rule["verbs"])
        writes = set(rule["verbs"]) - set(manifests.READ_VERBS)
        if writes:
            assert not {
                "resourcequotas",
                "limitranges",
                "roles",
                "rolebindings",
                "networkpolicies",
                "serviceaccounts/token",
            } & set(rule["resources"])
        if "namespaces" in rule["resources"]:
            assert rule["verbs"] == ["get"] and rule["resourceNames"] == ["web"]


def test_tenant_and_viewer_roles_read_their_pods_metrics_and_never_the_nodes():
    tier = seeded_tier("small")
    tenant = _tenant(tier)
    for role in (manifests.tenant_role(tenant, tier), manifests.viewer_role(tenant, tier)):
        metrics = [rule for rule in role["rules"] if "metrics.k8s.io" in rule["apiGroups"]]
        assert metrics == [{"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["get", "list"]}]
        assert not any("nodes" in rule["resources"] or "*" in rule["apiGroups"] for rule in role["rules"])


def _reads_logs(role) -> bool:
    return any("pods/log" in rule["resources"] and "get" in rule["verbs"] for rule in role["rules"])


def test_viewers_read_pod_logs_only_where_the_tier_lets_them_and_members_always_do():
    tier = seeded_tier("small")
    assert not tier.viewers_read_logs
    assert not _reads_logs(manifests.viewer_role(_tenant(tier), tier))
    assert _reads_logs(manifests.tenant_role(_tenant(tier), tier))
    tier.viewers_read_logs = True
    viewer = manifests.viewer_role(_tenant(tier), tier)
    assert _reads_logs(viewer)
    assert {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]} in viewer["rules"]


def test_token_mode_binds_service_accounts_and_oidc_mode_binds_the_teams_groups():
    tier = seeded_tier("small")
    token = _by_kind_name(manifests.access(_tenant(tier), tier, _tenant(tier).cluster))
    assert token[("RoleBinding", "berth-tenant")]["subjects"] == [
        {"kind": "ServiceAccount", "name": "berth-tenant", "namespace": "web"}
    ]
    assert ("ServiceAccount", "berth-viewer") in token
    oidc_tenant = _tenant(tier, access_mode="oidc")
    oidc = _by_kind_name(manifests.access(oidc_tenant, tier, oidc_tenant.cluster))
    assert not any(kind == "ServiceAccount" for kind, _ in oidc)
    assert [s["name"] for s in oidc[("RoleBinding", "berth-tenant")]["subjects"]] == [
        "oidc:team-a",
        "oidc:team-a:owner",
    ]
    assert [s["name"] for s in oidc[("RoleBinding", "berth-viewer")]["subjects"]] == ["oidc:team-a:viewer"]


def test_flow_schema_only_when_the_tier_sets_a_fairness_level():
    small, medium = seeded_tier("small"), seeded_tier("medium")
    schema = manifests.flow_schema(_tenant(small), small, _tenant(small).cluster)
    assert schema is not None
    assert schema["spec"]["priorityLevelConfiguration"] == {"name": "workload-low"}
    assert manifests.flow_schema(_tenant(medium), medium, _tenant(medium).cluster) is None


def test_rendering_is_deterministic():
    tier = seeded_tier("medium")
    first = manifests.to_yaml(manifests.namespace_tenant(_tenant(tier), tier, _tenant(tier).cluster))
    assert first == manifests.to_yaml(manifests.namespace_tenant(_tenant(tier), tier, _tenant(tier).cluster))


def test_every_guard_is_a_fail_closed_policy_bound_to_berth_namespaces():
    objs = guards.cluster_guards()
    policies = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert list(policies) == list(bindings) == list(guards.GUARD_NAMES)
    for name, policy in policies.items():
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert bindings[name]["spec"]["policyName"] == name
        assert bindings[name]["spec"]["validationActions"] == ["Deny"]
        selector = bindings[name]["spec"]["matchResources"]["namespaceSelector"]
        assert selector["matchLabels"] == {"app.kubernetes.io/managed-by": "berth"}
    tokens = policies["berth-no-long-lived-tokens"]["spec"]["validations"][0]
    assert tokens["expression"] == "object.type != 'kubernetes.io/service-account-token'"
    # A tier's opt-out label lifts exactly its own guard.
    opted = {n: b["spec"]["matchResources"]["namespaceSelector"].get("matchExpressions") for n, b in bindings.items()}
    assert opted["berth-no-external-ips"] == [{"key": "berth.dev/allow-external-ips", "operator": "DoesNotExist"}]
    assert opted["berth-no-berth-service-accounts"] is None and opted["berth-projected-token-lifetime"] is None


def test_the_namespace_carries_the_guards_parameters_for_its_tier():
    tier = seeded_tier("large")
    tier.tolerations = [
        {"key": "berth.dev/pool", "operator": "Equal", "value": "dedicated", "effect": "NoSchedule"},
        {"key": "", "operator": "Exists"},
    ]
    tier.allow_external_name = True
    ns = manifests.namespace(_tenant(tier), tier)
    annotations, labels = ns["metadata"]["annotations"], ns["metadata"]["labels"]
    assert annotations["berth.dev/max-token-seconds"] == str(tier.max_credential_lifetime_seconds)
    assert annotations["berth.dev/ingress-domains"] == "web.apps.example.test"
    # A key-less toleration would tolerate every taint: it never reaches the allowed list.
    assert annotations["berth.dev/tolerations"] == "berth.dev/pool=dedicated"
    assert labels["berth.dev/allow-external-name"] == "true"
    assert "berth.dev/allow-external-ips" not in labels


def test_tenants_only_read_endpoints_unless_their_tier_allows_writing_them():
    tier = seeded_tier("medium")
    rules = manifests.tenant_role(_tenant(tier), tier)["rules"]
    endpoint_rules = [r for r in rules if "endpoints" in r["resources"]]
    assert [r["verbs"] for r in endpoint_rules] == [["get", "list", "watch"]]
    tier.allow_manual_endpoints = True
    rules = manifests.tenant_role(_tenant(tier), tier)["rules"]
    assert "create" in next(r for r in rules if "endpoints" in r["resources"])["verbs"]


GRANTS = ("berth-worker-namespace=berth-system/berth-worker", "berth-web-namespace=berth-system/berth-web")


def test_namespace_grants_bind_berths_own_service_accounts_right_after_the_namespace():
    tier = seeded_tier("medium")
    tenant = _tenant(tier, prefix="t-")
    objs = manifests.namespace_tenant(tenant, tier, tenant.cluster, grants=manifests.parse_grants(GRANTS))
    assert [o["kind"] for o in objs[:3]] == ["Namespace", "RoleBinding", "RoleBinding"]
    worker = objs[1]
    assert worker["metadata"]["namespace"] == "t-web"
    assert worker["metadata"]["labels"]["berth.dev/tenant-id"] == tenant.pk
    assert worker["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "berth-worker-namespace",
    }
    assert worker["subjects"] == [{"kind": "ServiceAccount", "name": "berth-worker", "namespace": "berth-system"}]
    assert objs[2]["subjects"][0]["name"] == "berth-web"


def test_without_grants_nothing_changes():
    """A cluster-admin credential needs no grants: the objects are exactly what they were."""
    tier = seeded_tier("medium")
    tenant = _tenant(tier)
    assert manifests.namespace_tenant(tenant, tier, tenant.cluster, grants=manifests.parse_grants(["", " "])) == (
        manifests.namespace_tenant(tenant, tier, tenant.cluster)
    )
    assert not [
        o
        for o in manifests.namespace_tenant(tenant, tier, tenant.cluster)
        if o["kind"] == "RoleBinding" and o["roleRef"]["kind"] == "ClusterRole"
    ]


@pytest.mark.parametrize(
    "entry",
    [
        "berth-worker-namespace",
        "=berth/berth-worker",
        "role=berth",
        "role=Berth/worker",
        "role=berth/worker/x",
        "a b=c/d",
    ],
)
def test_a_malformed_grant_is_refused_with_its_text(entry):
    with pytest.raises(ValueError, match="ClusterRole=namespace/serviceaccount"):
        manifests.parse_grants([entry])


def test_a_tiers_egress_allow_list_becomes_one_policy_of_ip_blocks():
    tier = seeded_tier("small")
    tier.egress_allow = [
        {"cidr": "10.20.0.0/16", "ports": [{"protocol": "TCP", "port": 5432}]},
        {"cidr": "192.0.2.7/32"},
    ]
    policies = _by_kind_name(manifests.network_policies(_tenant(tier), tier, _tenant(tier).cluster))
    spec = policies[("NetworkPolicy", "berth-allow-egress-listed")]["spec"]
    assert spec == {
        "podSelector": {},
        "policyTypes": ["Egress"],
        "egress": [
            {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"protocol": "TCP", "port": 5432}]},
            {"to": [{"ipBlock": {"cidr": "192.0.2.7/32"}}]},
        ],
    }
    tier.egress_allow = []
    plain = _by_kind_name(manifests.network_policies(_tenant(tier), tier, _tenant(tier).cluster))
    assert ("NetworkPolicy", "berth-allow-egress-listed") not in plain


def test_the_namespace_names_the_tiers_storage_classes_or_opts_out_when_it_allows_any():
    tier = seeded_tier("large")
    tier.allowed_storage_classes = ["standard", "fast"]
    ns = manifests.namespace(_tenant(tier), tier)
    assert ns["metadata"]["annotations"]["berth.dev/storage-classes"] == "fast,standard"
    assert "berth.dev/allow-any-storage-class" not in ns["metadata"]["labels"]
    tier.allowed_storage_classes = []
    ns = manifests.namespace(_tenant(tier), tier)
    assert ns["metadata"]["labels"]["berth.dev/allow-any-storage-class"] == "true"
    assert [g.name for g in guards.applicable(ns["metadata"]["labels"])].count("berth-storage-classes") == 0


def test_the_storage_class_guard_checks_claims_as_they_get_their_class_and_has_a_probe():
    policy = next(o for o in guards.cluster_guards() if o["metadata"]["name"] == "berth-storage-classes")
    assert policy["kind"] == "ValidatingAdmissionPolicy"
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [
        {
            "apiGroups": [""],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["persistentvolumeclaims"],
        }
    ]
    probe = guards.violations("ns")["berth-storage-classes"]
    assert probe["kind"] == "PersistentVolumeClaim" and probe["spec"]["storageClassName"] == "berth-guard-probe"
