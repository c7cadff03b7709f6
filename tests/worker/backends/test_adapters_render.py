"""The adapters' pure parts: settings validation and the VirtualCluster, HostedCluster, NodePool and Workspace
renderers."""

from __future__ import annotations

import base64
from types import SimpleNamespace
from typing import Any

import pytest

from tests.fixtures import seeded_tier
from tests.worker.fake_kube import FakeKube
from worker.backends import capn, hypershift, kcp
from worker.backends.capn import CapnSettings
from worker.backends.hypershift import HyperShiftSettings
from worker.backends.kcp import KcpSettings
from worker.backends.virtual import with_server
from worker.cluster_settings import ClusterConfigError
from worker.kube import KubePermanentError, KubeTransientError

pytestmark = pytest.mark.django_db
TENANT_ID = "00000000-0000-0000-0000-000000000001"
HYPERSHIFT = {
    "release_image": "quay.io/openshift-release-dev/ocp-release:4.17.0-multi",
    "base_domain": "hosted.example.com",
    "pull_secret_name": "pull-secret",
}


def _cluster(kind: str, config, *, api_url: str = "https://kcp.example.test:6443") -> SimpleNamespace:
    return SimpleNamespace(name="dev", api_url=api_url, virtual_config={kind: config})


def _tenant(cluster, tier, *, name: str = "web", prefix: str = "dev-") -> SimpleNamespace:
    return SimpleNamespace(
        pk=TENANT_ID,
        name=name,
        namespace=prefix + name,
        team=SimpleNamespace(slug="team-a"),
        tier=tier,
        cluster=cluster,
    )


def _refused(fn, *words: str, error: type[Exception] = KubePermanentError) -> str:
    """``fn`` raises ``error`` with all of ``words`` in its message."""
    with pytest.raises(error) as caught:
        fn()
    message = str(caught.value)
    for word in words:
        assert word in message, message
    return message


def _misconfigured(fn, *words: str) -> str:
    """A mistake in the cluster's settings: ClusterConfigError, never a Kubernetes error."""
    return _refused(fn, *words, error=ClusterConfigError)


def _assert_berths(obj: dict[str, Any]) -> None:
    labels = obj["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "berth"
    assert labels["berth.dev/tenant-id"] == TENANT_ID


def _host_with(objects: dict[tuple[str, str, str], dict[str, Any]]) -> FakeKube:
    """A cluster holding exactly these objects, by (kind, namespace, name)."""
    host = FakeKube()
    host.objects.update(objects)
    return host


# --- VirtualCluster (CAPN) -------------------------------------------------------------------------


def test_virtual_cluster_references_the_cluster_version_and_lives_in_the_host_namespace():
    tier = seeded_tier("medium")
    cluster = _cluster("virtualcluster", {"cluster_version": "cv-sample-np"})
    vc = capn.virtual_cluster(_tenant(cluster, tier), tier, CapnSettings.parse(cluster))
    assert vc["apiVersion"] == "tenancy.x-k8s.io/v1alpha1" and vc["kind"] == "VirtualCluster"
    assert (vc["metadata"]["namespace"], vc["metadata"]["name"]) == ("dev-web", "web")
    assert vc["spec"] == {"clusterVersionName": "cv-sample-np"}
    _assert_berths(vc)


def test_virtual_cluster_settings_say_what_is_wrong():
    _misconfigured(
        lambda: CapnSettings.parse(_cluster("virtualcluster", {})),
        "Cluster dev",
        "virtual_config.virtualcluster.cluster_version is required",
    )
    _misconfigured(
        lambda: CapnSettings.parse(_cluster("virtualcluster", {"cluster_version": "CV_1"})),
        "cluster_version 'CV_1' is not valid",
    )
    _misconfigured(
        lambda: CapnSettings.parse(_cluster("virtualcluster", {"cluster_version": "cv", "clusterVersion": "x"})),
        "unknown setting clusterVersion",
        "known: cluster_version, endpoint_template",
    )
    _misconfigured(
        lambda: CapnSettings.parse(
            _cluster("virtualcluster", {"cluster_version": "cv", "endpoint_template": "https://{ns}.vc.example"})
        ),
        "endpoint_template",
        "{namespace}, {name}, {cluster_namespace}, {tenant}",
    )
    _misconfigured(
        lambda: CapnSettings.parse(
            _cluster("virtualcluster", {"cluster_version": "cv", "endpoint_template": "http://{namespace}.vc"})
        ),
        "must be an https:// URL",
    )
    _misconfigured(
        lambda: CapnSettings.parse(_cluster("virtualcluster", ["cluster_version"])),
        "virtual_config.virtualcluster must be an object",
    )


def test_endpoint_template_fills_in_the_tenant_and_where_vc_manager_runs_it():
    tier = seeded_tier("small")
    cluster = _cluster(
        "virtualcluster",
        {
            "cluster_version": "cv",
            "endpoint_template": "https://{namespace}.vc.example.com:6443/{tenant}/{name}/{cluster_namespace}",
        },
    )
    template = CapnSettings.parse(cluster).endpoint_template
    url = capn.endpoint(template, tenant=_tenant(cluster, tier), name="web", cluster_namespace="dev-web-1a2b3c-web")
    assert url == "https://dev-web.vc.example.com:6443/web/web/dev-web-1a2b3c-web"


def test_virtual_cluster_in_error_fails_the_tenant_with_vc_managers_reason():
    tier = seeded_tier("small")
    tenant = _tenant(_cluster("virtualcluster", {"cluster_version": "cv"}), tier)
    host = _host_with(
        {
            ("VirtualCluster", "dev-web", "web"): {
                "status": {
                    "phase": "Error",
                    "reason": "ClusterVersionNotFound",
                    "message": "clusterversion cv not found",
                }
            }
        }
    )
    _refused(
        lambda: capn.VirtualClusterOperator().ready(tenant, host, CapnSettings.parse(tenant.cluster)),
        "ClusterVersionNotFound: clusterversion cv not found",
    )
    host.objects[("VirtualCluster", "dev-web", "web")] = {"status": {"phase": "Pending"}}
    assert capn.VirtualClusterOperator().ready(tenant, host, CapnSettings.parse(tenant.cluster)) is False


# --- HyperShift ----------------------------------------------------------------------------------


def test_hosted_cluster_carries_release_dns_platform_and_secret_references():
    tier = seeded_tier("medium")
    cluster = _cluster("hypershift", {**HYPERSHIFT, "ssh_key_secret_name": "ssh-key"})
    hc = hypershift.hosted_cluster(_tenant(cluster, tier), tier, HyperShiftSettings.parse(cluster))
    assert hc["apiVersion"] == "hypershift.openshift.io/v1beta1" and hc["kind"] == "HostedCluster"
    assert (hc["metadata"]["namespace"], hc["metadata"]["name"]) == (
        "dev-web",
        "web",
    )  # default: the tenant's host namespace
    spec = hc["spec"]
    assert spec["release"] == {"image": HYPERSHIFT["release_image"]}
    assert spec["pullSecret"] == {"name": "pull-secret"} and spec["sshKey"] == {"name": "ssh-key"}
    assert spec["dns"] == {"baseDomain": "hosted.example.com"}
    assert spec["platform"] == {"type": "None"}
    assert {s["service"] for s in spec["services"]} == {"APIServer", "OAuthServer", "Konnectivity", "Ignition"}
    _assert_berths(hc)


def test_node_pool_size_follows_the_tier_and_can_be_overridden_per_tier():
    cluster = _cluster("hypershift", {**HYPERSHIFT, "namespace": "clusters"})
    settings = HyperShiftSettings.parse(cluster)
    sizes = {}
    for name in ("small", "medium", "large"):
        tier = seeded_tier(name)
        pool = hypershift.node_pool(_tenant(cluster, tier), tier, settings)
        sizes[name] = pool["spec"]["replicas"]
        assert pool["metadata"]["namespace"] == "clusters" and pool["spec"]["clusterName"] == "web"
        assert pool["spec"]["release"] == {"image": HYPERSHIFT["release_image"]} and pool["spec"]["platform"] == {
            "type": "None"
        }
        _assert_berths(pool)
    assert sizes == {"small": 1, "medium": 2, "large": 3}
    bigger = HyperShiftSettings.parse(_cluster("hypershift", {**HYPERSHIFT, "node_pool_replicas": {"medium": 5}}))
    medium = seeded_tier("medium")
    assert hypershift.node_pool(_tenant(cluster, medium), medium, bigger)["spec"]["replicas"] == 5


def test_kubevirt_nodes_share_the_tiers_cpu_and_memory():
    tier = seeded_tier("medium")  # 8 CPU, 16 GiB limits; 2 nodes
    cluster = _cluster("hypershift", {**HYPERSHIFT, "platform": "KubeVirt"})
    pool = hypershift.node_pool(_tenant(cluster, tier), tier, HyperShiftSettings.parse(cluster))
    assert pool["spec"]["platform"] == {"type": "KubeVirt", "kubevirt": {"compute": {"cores": 4, "memory": "8192Mi"}}}


def test_agent_platform_names_where_the_agents_are():
    tier = seeded_tier("small")
    _misconfigured(
        lambda: HyperShiftSettings.parse(_cluster("hypershift", {**HYPERSHIFT, "platform": "Agent"})),
        "agent_namespace is required",
    )
    cluster = _cluster("hypershift", {**HYPERSHIFT, "platform": "Agent", "agent_namespace": "agents"})
    hc = hypershift.hosted_cluster(_tenant(cluster, tier), tier, HyperShiftSettings.parse(cluster))
    assert hc["spec"]["platform"] == {"type": "Agent", "agent": {"agentNamespace": "agents"}}


def test_hypershift_settings_say_what_is_wrong():
    def settings(**config):
        return lambda: HyperShiftSettings.parse(_cluster("hypershift", config))

    _misconfigured(
        settings(base_domain="x.example", pull_secret_name="p"),
        "virtual_config.hypershift.release_image is required",
        "e.g. quay.io/",
    )
    _misconfigured(settings(**{**HYPERSHIFT, "release_image": "no tag"}), "release_image 'no tag' is not valid")
    _misconfigured(settings(**{**HYPERSHIFT, "base_domain": ""}), "base_domain is required")
    _misconfigured(settings(**{**HYPERSHIFT, "pull_secret_name": None}), "pull_secret_name must be a string")
    _misconfigured(
        settings(**{**HYPERSHIFT, "platform": "AWS"}), "platform is 'AWS'; choose one of None, KubeVirt, Agent"
    )
    _misconfigured(
        settings(**{**HYPERSHIFT, "node_pool_replicas": {"small": 0}}),
        "node_pool_replicas.small must be a whole number from 1 to 100",
    )
    _misconfigured(
        settings(**{**HYPERSHIFT, "node_pool_replicas": 3}), "node_pool_replicas must map tier names to numbers"
    )
    _misconfigured(settings(**{**HYPERSHIFT, "releaseImage": "x:y"}), "unknown setting releaseImage")


def test_a_tier_without_a_node_pool_size_is_named():
    tier = seeded_tier("small")
    tier.name = "gpu"
    cluster = _cluster("hypershift", HYPERSHIFT)
    _misconfigured(
        lambda: hypershift.node_pool(_tenant(cluster, tier), tier, HyperShiftSettings.parse(cluster)),
        "no NodePool size for tier gpu",
        "node_pool_replicas.gpu",
    )


def test_a_control_plane_namespace_longer_than_kubernetes_allows_is_refused_before_anything_is_made():
    tier = seeded_tier("small")
    cluster = _cluster("hypershift", HYPERSHIFT)
    name = "n" * 40
    _refused(
        lambda: hypershift.hosted_cluster(_tenant(cluster, tier, name=name), tier, HyperShiftSettings.parse(cluster)),
        f"namespace dev-{name}-{name}",
        "virtual_config.hypershift.namespace",
    )


def test_hypershift_conditions_decide_between_waiting_and_failing():
    tier = seeded_tier("small")
    tenant = _tenant(_cluster("hypershift", HYPERSHIFT), tier)
    control_plane = hypershift.HostedControlPlane()
    hs = HyperShiftSettings.parse(tenant.cluster)

    def host(*conditions):
        return _host_with(
            {
                ("HostedCluster", "dev-web", "web"): {
                    "status": {"conditions": [{"type": t, "status": s, "message": m} for t, s, m in conditions]}
                }
            }
        )

    with pytest.raises(KubeTransientError, match="not valid yet: pull secret missing"):
        control_plane.ready(tenant, host(("ValidConfiguration", "False", "pull secret missing")), hs)
    _refused(
        lambda: control_plane.ready(tenant, host(("ValidReleaseImage", "False", "image not found")), hs),
        "refuses the release image",
        "image not found",
    )
    assert control_plane.ready(tenant, host(("Available", "False", "")), hs) is False
    assert control_plane.ready(tenant, host(("ValidConfiguration", "True", ""), ("Available", "True", "")), hs) is True


# --- kcp -------------------------------------------------------------------------------------------


def test_workspace_is_cluster_scoped_in_the_parent_and_typed():
    tier = seeded_tier("small")
    cluster = _cluster("kcp", {"parent_workspace": "root:teams"})
    ws = kcp.workspace(_tenant(cluster, tier), tier, KcpSettings.parse(cluster))
    assert ws["apiVersion"] == "tenancy.kcp.io/v1alpha1" and ws["kind"] == "Workspace"
    assert ws["metadata"]["name"] == "dev-web" and "namespace" not in ws["metadata"]
    assert ws["spec"] == {"type": {"name": "universal"}}
    _assert_berths(ws)
    typed = _cluster("kcp", {"parent_workspace": "root:teams", "workspace_type": "root:organization"})
    assert kcp.workspace(_tenant(typed, tier), tier, KcpSettings.parse(typed))["spec"]["type"] == {
        "name": "organization",
        "path": "root",
    }


def test_kcp_settings_say_what_is_wrong():
    _misconfigured(
        lambda: KcpSettings.parse(_cluster("kcp", {})),
        "virtual_config.kcp.parent_workspace is required",
        "e.g. root:teams",
    )
    _misconfigured(
        lambda: KcpSettings.parse(_cluster("kcp", {"parent_workspace": "root/teams"})),
        "parent_workspace 'root/teams' is not valid",
    )
    _misconfigured(
        lambda: KcpSettings.parse(
            _cluster("kcp", {"parent_workspace": "root:teams"}, api_url="https://kcp.example.test/clusters/root:other")
        ),
        "the API URL serves workspace root:other, but virtual_config.kcp.parent_workspace is root:teams",
    )
    at_parent = _cluster(
        "kcp", {"parent_workspace": "root:teams"}, api_url="https://kcp.example.test/clusters/root:teams"
    )
    assert KcpSettings.parse(at_parent).parent_workspace == "root:teams"


def test_kcp_checks_are_about_the_workspace_not_a_host_namespace():
    ids = [c.id for c in kcp.backend().isolation_checks()]
    assert ids == ["virtual-cluster-admin", "virtual-no-host-credentials"]


def test_kcp_worker_credential_points_at_the_workspace_and_embeds_its_ca(tmp_path):
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    credential = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "admin",
        "clusters": [
            {"name": "other", "cluster": {"server": "https://elsewhere"}},
            {
                "name": "kcp",
                "cluster": {"server": "https://kcp.example.test/clusters/root", "certificate-authority": str(ca)},
            },
        ],
        "users": [{"name": "admin", "user": {"token": "t"}}],
        "contexts": [{"name": "admin", "context": {"cluster": "kcp", "user": "admin"}}],
    }
    config = with_server(kcp._single_context(credential, ""), "https://kcp.example.test/clusters/root:teams:dev-web")
    assert [c["cluster"]["server"] for c in config["clusters"]] == [
        "https://kcp.example.test/clusters/root:teams:dev-web"
    ]
    assert base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"]).decode() == ca.read_text()
    assert config["users"][0]["user"] == {"token": "t"}
