"""Adapter kinds as the portal sees them: offered only where enabled, previewed for approvers, refused with a
reason when misconfigured."""

from __future__ import annotations

import html

import pytest
import yaml
from django.urls import reverse
from kubernetes import client
from rest_framework.test import APIClient

from tenants.models import KIND_NOTES, Tenant, TenantKind
from tests.plugins.kube import read_or_none
from tests.worker.backends.standin_adapters import approved, register_cluster
from worker import provisioning
from worker.backends import preview_yaml

pytestmark = pytest.mark.django_db(transaction=True)
HYPERSHIFT = {
    "release_image": "quay.io/openshift-release-dev/ocp-release:4.17.0-multi",
    "base_domain": "hosted.example.test",
    "pull_secret_name": "pull-secret",
}


@pytest.mark.parametrize("kind", ["virtualcluster", "hypershift", "kcp"])
def test_a_kind_the_cluster_does_not_offer_is_a_field_error(cluster, alice, team_a, medium, kind):
    assert kind not in cluster.kinds
    api = APIClient()
    api.force_authenticate(alice)
    resp = api.post(
        "/api/v1/requests/",
        {"kind": kind, "name": "web", "team": "team-a", "tier": "medium", "cluster": cluster.name},
        format="json",
    )
    assert resp.status_code == 400, resp.content
    assert f"does not offer {kind} tenants" in str(resp.json()["kind"])
    assert not Tenant.objects.exists()


@pytest.mark.parametrize(
    ("kind", "config", "reason"),
    [
        (
            "virtualcluster",
            {"cluster_version": "cv", "endpoint_template": "http://{namespace}.vc.example.test"},
            "virtual_config.virtualcluster.endpoint_template 'http://{namespace}.vc.example.test' "
            "must be an https:// URL",
        ),
        (
            "hypershift",
            {**HYPERSHIFT, "platform": "AWS"},
            "virtual_config.hypershift.platform is 'AWS'; choose one of None, KubeVirt, Agent",
        ),
        (
            "kcp",
            {"parent_workspace": "root:teams", "type": "universal"},
            "unknown setting type in virtual_config.kcp (known: parent_workspace, workspace_type)",
        ),
    ],
)
def test_bad_settings_fail_the_tenant_with_a_readable_reason_and_create_nothing(
    control_plane,
    kube_admin,
    alice,
    carol,
    team_a,
    small,
    medium,
    large,
    dispatched,
    kind,
    config,
    reason,
):
    cluster = register_cluster(control_plane, kind=kind, config=config, tiers=[small, medium, large])
    tenant = approved(kind=kind, alice=alice, carol=carol, team=team_a, tier=medium, cluster=cluster)
    assert provisioning.provision(str(tenant.pk)).outcome == "failed"
    tenant.refresh_from_db()
    assert tenant.status == "failed"
    assert tenant.status_reason == f"Cluster {cluster.name}: {reason}."
    assert read_or_none(lambda: client.CoreV1Api(kube_admin).read_namespace(tenant.namespace)) is None


@pytest.mark.parametrize(
    ("kind", "config", "custom_resources", "host_namespace"),
    [
        ("virtualcluster", {"cluster_version": "cv"}, ["VirtualCluster"], True),
        ("hypershift", HYPERSHIFT, ["HostedCluster", "NodePool"], True),
        (
            "kcp",
            {"parent_workspace": "root:teams"},
            ["Workspace"],
            False,
        ),  # kcp runs no pods: no namespace, quota or policies
    ],
)
def test_the_approver_previews_what_approval_creates(
    control_plane, alice, team_a, small, medium, large, dispatched, kind, config, custom_resources, host_namespace
):
    cluster = register_cluster(control_plane, kind=kind, config=config, tiers=[small, medium, large])
    tenant = approved(
        kind=kind, alice=alice, carol=None, team=team_a, tier=small, cluster=cluster
    )  # small is auto-approved
    previewed = [o["kind"] for o in yaml.safe_load_all(preview_yaml(tenant))]
    assert previewed[-len(custom_resources) :] == custom_resources
    if host_namespace:
        assert previewed[0] == "Namespace" and "ResourceQuota" in previewed and "NetworkPolicy" in previewed
    else:
        assert previewed == custom_resources


def test_the_request_form_says_virtualcluster_is_archived_and_kcp_runs_no_pods(
    client, control_plane, alice, small, medium, large
):
    register_cluster(
        control_plane, kind="virtualcluster", config={"cluster_version": "cv"}, tiers=[small, medium, large]
    )
    register_cluster(control_plane, kind="kcp", config={"parent_workspace": "root:teams"}, tiers=[small, medium, large])
    client.force_login(alice)
    page = html.unescape(client.get(reverse("request-new")).content.decode())
    assert "archived" in KIND_NOTES[TenantKind.VIRTUALCLUSTER] and KIND_NOTES[TenantKind.VIRTUALCLUSTER] in page
    assert "runs no pods" in KIND_NOTES[TenantKind.KCP] and KIND_NOTES[TenantKind.KCP] in page
    assert KIND_NOTES[TenantKind.HYPERSHIFT] not in page  # no cluster offers it
