"""vcluster chart values as a pure function of tenant, tier and cluster, checked against the pinned chart line's
schema."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
import yaml

from tenants.models import Tier
from tests.fixtures import seeded_tier
from tests.worker.backends.conftest import VCLUSTER_CHART
from worker.backends import vcluster
from worker.cluster_settings import ClusterConfigError
from worker.kube import KubeError
from worker.vcluster_values import (
    DEFAULT_CHART_VERSION,
    check_fits_tier,
    control_plane_policy,
    parse_config,
    public_endpoint,
    render_values,
    schema_path,
    service_address,
    supported_chart_lines,
)

pytestmark = pytest.mark.django_db

HOST_TEMPLATE = "{namespace}.vc.example.com"


def _cluster(ingress_namespace: str = "ingress-nginx", **settings) -> SimpleNamespace:
    return SimpleNamespace(
        name="dev",
        access_mode="token",
        ingress_namespace=ingress_namespace,
        ingress_domains=[],
        oidc_groups_prefix="",
        namespace_prefix="dev-",
        virtual_config={"vcluster": {"public_host_template": HOST_TEMPLATE, **settings}},
    )


def _tenant(tier, cluster) -> SimpleNamespace:
    return SimpleNamespace(
        pk="00000000-0000-0000-0000-0000000000aa",
        name="web",
        namespace="dev-web",
        tier=tier,
        cluster=cluster,
        team=SimpleNamespace(slug="team-a", oidc_group="team-a"),
        purpose="platform experiments",
    )


def _values(tier_name: str = "medium", **settings) -> tuple[dict[str, Any], Tier]:
    tier = seeded_tier(tier_name)
    cluster = _cluster(**settings)
    tenant = _tenant(tier, cluster)
    config = parse_config(cluster)
    check_fits_tier(config, tier, cluster)
    return render_values(tenant, tier, cluster, config), tier


UPSTREAM_SCHEMA = jsonschema.Draft202012Validator(json.loads((VCLUSTER_CHART / "values.schema.json").read_text()))


def _validator(line: str = "0.30") -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(schema_path(line).read_text()))


def test_the_pinned_schema_subset_is_a_valid_schema_for_the_default_chart_version():
    schema = json.loads(schema_path("0.30").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert "vcluster-docs" in schema["$comment"] and "0.30.0" in schema["$comment"]
    assert DEFAULT_CHART_VERSION.startswith("0.30.") and supported_chart_lines() == ["0.30"]


@pytest.mark.parametrize(
    ("tier_name", "expose"),
    [
        ("small", "ingress"),
        ("small", "ClusterIP"),
        ("medium", "LoadBalancer"),
        ("medium", "ingress"),
        ("large", "LoadBalancer"),
    ],
)
@pytest.mark.parametrize("distro", ["k8s", "k3s"])
def test_values_for_every_tier_and_exposure_validate_against_the_pinned_schema(tier_name, expose, distro):
    values, _ = _values(tier_name, expose=expose, distro=distro, ingress_class="nginx")
    _validator().validate(values)
    # And against the chart's own values.schema.json (vendored unchanged), which helm checks them with.
    UPSTREAM_SCHEMA.validate(values)
    # What helm, Flux and Cluster API receive is the same document once serialized.
    assert yaml.safe_load(yaml.safe_dump(values)) == values


@pytest.mark.parametrize("tier_name", ["small", "medium", "large"])
def test_quota_limits_and_pod_security_inside_are_the_tiers(tier_name):
    values, tier = _values(tier_name, expose="ingress")
    policies = values["policies"]
    quota = policies["resourceQuota"]
    assert quota["enabled"] is True
    assert quota["quota"] == {
        # The chart's own defaults no tier sets, removed (a null drops a chart default in helm's values).
        "requests.ephemeral-storage": None,
        "limits.ephemeral-storage": None,
        "count/endpoints": None,
        "requests.cpu": f"{tier.cpu_request_millis}m",
        "limits.cpu": f"{tier.cpu_limit_millis}m",
        "requests.memory": f"{tier.memory_request_mib}Mi",
        "limits.memory": f"{tier.memory_limit_mib}Mi",
        "requests.storage": f"{tier.storage_gib}Gi",
        "count/pods": str(tier.max_pods),
        "count/services": str(tier.max_services),
        "services.loadbalancers": str(tier.max_load_balancers),
        "services.nodeports": "0",
        "count/persistentvolumeclaims": str(tier.max_pvcs),
        "count/configmaps": str(tier.max_configmaps),
        "count/secrets": str(tier.max_secrets),
    }
    limits = policies["limitRange"]
    assert limits["default"] == {
        "ephemeral-storage": None,
        "cpu": f"{tier.default_cpu_limit_millis}m",
        "memory": f"{tier.default_memory_limit_mib}Mi",
    }
    assert limits["defaultRequest"] == {
        "ephemeral-storage": None,
        "cpu": f"{tier.default_cpu_request_millis}m",
        "memory": f"{tier.default_memory_request_mib}Mi",
    }
    assert limits["max"] == {"cpu": f"{tier.cpu_limit_millis}m", "memory": f"{tier.memory_limit_mib}Mi"}
    assert policies["podSecurityStandard"] == tier.pod_security_level == "restricted"
    assert policies["networkPolicy"] == {"enabled": False}
    assert (
        "labels" not in quota and "labels" not in limits
    )  # or Berth's prune of its own quotas would delete the chart's
    assert values["sync"]["toHost"]["ingresses"]["enabled"] is (tier.network_profile != "isolated")


def test_the_public_host_is_a_san_and_the_exported_server_is_the_public_endpoint():
    values, _ = _values(expose="LoadBalancer")
    assert values["controlPlane"]["proxy"]["extraSANs"] == ["dev-web.vc.example.com"]
    assert values["exportKubeConfig"] == {
        "server": "https://dev-web.vc.example.com",
        "context": "dev-web",
        "insecure": False,
    }
    values, _ = _values(
        expose="LoadBalancer", public_port=6443, public_host_template="{tenant}-{team}.{cluster}.example.com"
    )
    assert values["controlPlane"]["proxy"]["extraSANs"] == ["web-team-a.dev.example.com"]
    assert values["exportKubeConfig"]["server"] == "https://web-team-a.dev.example.com:6443"


def test_an_ip_address_works_as_the_public_host():
    cluster = _cluster(public_host_template="fd00::10", public_port=8443)
    assert public_endpoint(parse_config(cluster), _tenant(seeded_tier("small"), cluster)) == "https://[fd00::10]:8443"


def test_load_balancer_exposure_asks_for_no_node_ports():
    values, _ = _values(expose="LoadBalancer")
    cp = values["controlPlane"]
    assert cp["service"] == {"enabled": True, "spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": False}}
    assert cp["ingress"] == {"enabled": False}


def test_ingress_exposure_keeps_a_cluster_ip_service_behind_an_ingress_for_the_public_host():
    values, _ = _values(expose="ingress", ingress_class="nginx")
    cp = values["controlPlane"]
    assert cp["service"]["spec"] == {"type": "ClusterIP"}
    assert cp["ingress"] == {"enabled": True, "host": "dev-web.vc.example.com", "spec": {"ingressClassName": "nginx"}}


@pytest.mark.parametrize("distro", ["k8s", "k3s"])
def test_exactly_the_chosen_distro_is_enabled(distro):
    values, _ = _values(distro=distro, expose="ClusterIP")
    assert list(values["controlPlane"]["distro"]) == [distro]
    chosen = values["controlPlane"]["distro"][distro]
    assert chosen["enabled"] is True
    # The distro's init container has no security context unless given one, and restricted Pod Security refuses
    # the pod then (found by the API server admitting the real chart's pod).
    assert chosen["securityContext"] == values["controlPlane"]["statefulSet"]["security"]["containerSecurityContext"]


def test_the_chart_makes_nothing_cluster_scoped_on_the_host():
    values, _ = _values(expose="ClusterIP")
    assert values["rbac"] == {"clusterRole": {"enabled": False}, "enableVolumeSnapshotRules": {"enabled": False}}


@pytest.mark.parametrize("tier_name", ["small", "medium", "large"])
def test_the_control_plane_runs_as_non_root_within_the_tiers_limits(tier_name):
    values, tier = _values(tier_name, expose="ingress")
    sts = values["controlPlane"]["statefulSet"]
    container = sts["security"]["containerSecurityContext"]
    assert container["runAsNonRoot"] is True and container["allowPrivilegeEscalation"] is False
    assert container["capabilities"] == {"drop": ["ALL"]} and container["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sts["security"]["podSecurityContext"]["runAsNonRoot"] is True
    assert values["controlPlane"]["coredns"]["security"] == sts["security"]
    limits = sts["resources"]["limits"]
    assert int(limits["cpu"].removesuffix("m")) <= tier.cpu_limit_millis
    assert int(limits["memory"].removesuffix("Mi")) <= tier.memory_limit_mib
    assert sts["labels"]["berth.dev/tenant-id"] == "00000000-0000-0000-0000-0000000000aa"
    assert sts.get("scheduling", {}).get("nodeSelector", {}) == tier.node_selector


def test_the_schema_refuses_what_the_chart_would_not_take():
    values, _ = _values(expose="ClusterIP")
    validator = _validator()
    for broken in (
        {**values, "controlPlane": {**values["controlPlane"], "distro": {"k9s": {"enabled": True}}}},
        {**values, "exportKubeConfig": {"server": "http://insecure.example.com"}},
        {**values, "policies": {**values["policies"], "podSecurityStandard": "strict"}},
        {**values, "controlPlan": {}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(broken)


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"installer": "kustomize"}, "virtual_config.vcluster.installer is 'kustomize'; use one of helm, flux, capi"),
        ({"instaler": "helm"}, "unknown key(s) instaler"),
        ({"chart_version": "0.30"}, "is not an exact chart version"),
        ({"chart_version": "0.30.x"}, "is not an exact chart version"),
        ({"chart_version": "0.19.5"}, "chart line(s) 0.30.x only"),
        ({"chart_repo": "ftp://charts.example.com"}, "must be an https:// chart repository, an oci:// registry path"),
        ({"chart_repo": "file://charts"}, "must name an absolute, normalised directory"),
        ({"chart_repo": "file:///opt/charts/../etc"}, "must name an absolute, normalised directory"),
        ({"chart_repo": "file:///opt/charts", "installer": "flux"}, "which only installer helm reads"),
        ({"chart_repo": "file:///opt/charts", "installer": "capi"}, "which only installer helm reads"),
        ({"distro": "eks"}, "distro is 'eks'; use one of k8s, k3s"),
        ({"expose": "HostPort"}, "expose is 'HostPort'"),
        ({"public_host_template": "", "installer": "capi"}, "public_host_template is required (for installer capi"),
        ({"public_host_template": "", "expose": "ingress"}, "public_host_template is required (for installer helm"),
        ({"image_registry": "https://registry.example.com"}, "image_registry 'https://registry.example.com' is not"),
        ({"syncer_image": "ghcr.io/loft-sh/vcluster-oss"}, "syncer_image 'ghcr.io/loft-sh/vcluster-oss' must be"),
        ({"kubernetes_image": "loft-sh/kubernetes:v1.34.4;rm"}, "kubernetes_image 'loft-sh/kubernetes:v1.34.4;rm'"),
        ({"public_port": "443"}, "public_port '443' must be a port number"),
        ({"public_port": 70000}, "public_port 70000 must be a port number"),
        ({"flux_namespace": "Flux System"}, "flux_namespace 'Flux System' is not a namespace name"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(settings, says):
    with pytest.raises(ClusterConfigError) as raised:
        parse_config(_cluster(**settings))
    assert says in str(raised.value) and str(raised.value).startswith("Cluster dev: virtual_config.vcluster")
    assert not isinstance(raised.value, KubeError)  # a mistake in the record, not something a cluster said


def test_a_file_chart_repo_is_a_local_directory_for_helm():
    config = parse_config(_cluster(chart_repo="file:///opt/charts/", chart_version="0.30.0"))
    assert config.local and config.chart_repo == "file:///opt/charts"
    assert not parse_config(_cluster()).local


def test_ingress_exposure_needs_the_clusters_ingress_namespace():
    with pytest.raises(ClusterConfigError, match="no ingress_namespace"):
        parse_config(_cluster(ingress_namespace="", expose="ingress"))


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("{project}.vc.example.com", "cannot be filled in"),
        ("{namespace}_vc.example.com", "neither a DNS name nor an IP address"),
    ],
)
def test_a_bad_host_template_is_refused_when_rendering(template, says):
    cluster = _cluster(public_host_template=template, expose="ClusterIP")
    with pytest.raises(ClusterConfigError, match=says):
        render_values(_tenant(seeded_tier("small"), cluster), seeded_tier("small"), cluster, parse_config(cluster))


@pytest.mark.parametrize(
    ("tier_name", "expose", "says"),
    [
        ("medium", "NodePort", "allows no node ports"),
        ("small", "LoadBalancer", "tier small allows no LoadBalancer services"),
    ],
)
def test_exposures_the_tier_cannot_hold_are_refused(tier_name, expose, says):
    cluster = _cluster(expose=expose)
    with pytest.raises(ClusterConfigError, match=says):
        check_fits_tier(parse_config(cluster), seeded_tier(tier_name), cluster)


def test_the_control_plane_policy_opens_only_the_api_port_and_the_host_api():
    tier = seeded_tier("medium")
    for expose, sources in (
        ("LoadBalancer", None),
        ("ingress", [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}]),
    ):
        cluster = _cluster(expose=expose)
        policy = control_plane_policy(_tenant(tier, cluster), tier, cluster, parse_config(cluster))
        spec = policy["spec"]
        assert spec["podSelector"] == {"matchLabels": {"app": "vcluster", "release": "web"}}
        assert spec["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 8443}]
        assert spec["ingress"][0].get("from") == sources
        assert spec["egress"] == [{"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]}]
        assert policy["metadata"]["labels"]["berth.dev/tenant-id"] == "00000000-0000-0000-0000-0000000000aa"


def _preview(installer: str, **settings) -> dict[tuple[str, str], dict]:
    tier = seeded_tier("medium")
    tenant = _tenant(tier, _cluster(installer=installer, expose="ingress", **settings))
    objs = vcluster.backend().preview(tenant, tier)
    return {(o.get("kind", "helm"), o.get("metadata", {}).get("name", "")): o for o in objs}


def test_the_host_side_gives_the_team_no_access_and_keeps_the_tiers_isolation():
    objs = _preview("helm")
    kinds = {kind for kind, _ in objs}
    assert not kinds & {"Role", "RoleBinding", "ServiceAccount", "FlowSchema"}
    assert {
        ("Namespace", "dev-web"),
        ("ResourceQuota", "berth-quota"),
        ("LimitRange", "berth-limits"),
        ("NetworkPolicy", "berth-default-deny"),
        ("NetworkPolicy", "berth-allow-vcluster-control-plane"),
    } <= set(objs)
    release = objs[("helm", "")]["helmRelease"]
    assert release["version"] == DEFAULT_CHART_VERSION and release["repository"] == "https://charts.loft.sh"
    _validator().validate(release["values"])


def test_flux_gets_a_helm_repository_and_a_pinned_helm_release():
    objs = _preview("flux")
    repository, release = objs[("HelmRepository", "berth-vcluster")], objs[("HelmRelease", "web")]
    assert repository["metadata"]["namespace"] == "dev-web" and repository["spec"]["url"] == "https://charts.loft.sh"
    chart = release["spec"]["chart"]["spec"]
    assert chart == {
        "chart": "vcluster",
        "version": DEFAULT_CHART_VERSION,
        "sourceRef": {"kind": "HelmRepository", "name": "berth-vcluster", "namespace": "dev-web"},
    }
    _validator().validate(release["spec"]["values"])
    shared = _preview("flux", flux_namespace="flux-system", chart_repo="oci://ghcr.io/loft-sh/charts")
    repository = shared[("HelmRepository", "berth-vcluster-dev")]
    assert repository["metadata"]["namespace"] == "flux-system" and repository["spec"]["type"] == "oci"
    assert "berth.dev/tenant-id" not in repository["metadata"]["labels"]
    assert shared[("HelmRelease", "web")]["spec"]["chart"]["spec"]["sourceRef"]["namespace"] == "flux-system"


def test_cluster_api_gets_a_cluster_whose_control_plane_and_infrastructure_are_the_vcluster():
    objs = _preview("capi")
    cluster, vcluster = objs[("Cluster", "web")], objs[("VCluster", "web")]
    assert cluster["apiVersion"] == "cluster.x-k8s.io/v1beta2"
    ref = {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "VCluster", "name": "web"}
    assert cluster["spec"] == {"controlPlaneRef": ref, "infrastructureRef": ref}
    assert vcluster["spec"]["controlPlaneEndpoint"] == {"host": "dev-web.vc.example.com", "port": 443}
    assert vcluster["spec"]["helmRelease"]["chart"] == {
        "name": "vcluster",
        "repo": "https://charts.loft.sh",
        "version": DEFAULT_CHART_VERSION,
    }
    _validator().validate(yaml.safe_load(vcluster["spec"]["helmRelease"]["values"]))


def test_without_a_public_host_the_services_address_is_the_endpoint():
    cluster = _cluster(public_host_template="")
    config = parse_config(cluster)
    tenant = _tenant(seeded_tier("medium"), cluster)
    values = render_values(tenant, tenant.tier, cluster, config)
    # vcluster puts the Service's cluster IP and load balancer address into its serving certificate itself.
    assert values["controlPlane"]["proxy"]["extraSANs"] == []
    assert "server" not in values["exportKubeConfig"]
    balanced = {"spec": {"clusterIP": "10.96.3.4"}, "status": {"loadBalancer": {"ingress": [{"ip": "10.243.7.129"}]}}}
    assert service_address(config, balanced) == "10.243.7.129"
    assert service_address(config, {"spec": {"clusterIP": "10.96.3.4"}, "status": {}}) == ""  # not assigned yet
    assert public_endpoint(config, tenant, "10.243.7.129") == "https://10.243.7.129"
    cluster_ip = parse_config(_cluster(public_host_template="", expose="ClusterIP"))
    assert service_address(cluster_ip, balanced) == "10.96.3.4"
    with pytest.raises(ClusterConfigError, match="No address"):
        public_endpoint(config, tenant)


def test_local_images_come_from_the_settings_and_telemetry_is_always_off():
    cluster = _cluster(
        image_registry="berth.local",
        syncer_image="loft-sh/vcluster-oss:0.30.0",
        kubernetes_image="loft-sh/kubernetes:v1.34.4",
    )
    tenant = _tenant(seeded_tier("medium"), cluster)
    values = render_values(tenant, tenant.tier, cluster, parse_config(cluster))
    control_plane = values["controlPlane"]
    assert control_plane["advanced"] == {"defaultImageRegistry": "berth.local"}
    assert control_plane["statefulSet"]["image"] == {"repository": "loft-sh/vcluster-oss", "tag": "0.30.0"}
    assert control_plane["distro"]["k8s"]["image"] == {"repository": "loft-sh/kubernetes", "tag": "v1.34.4"}
    assert values["telemetry"] == {"enabled": False}
    plain = render_values(tenant, tenant.tier, _cluster(), parse_config(_cluster()))
    assert "advanced" not in plain["controlPlane"] and "image" not in plain["controlPlane"]["statefulSet"]
    assert plain["telemetry"] == {"enabled": False}
