"""kcp tenants end to end: services → a real Celery worker → the "kcp server" → the workspace stand-in → the
workspace's API server.

The registered cluster plays the kcp server holding the parent workspace (the Workspace CRD installed on
the dev control plane, cluster-scoped); the stand-in (tests/worker/backends/standin_adapters.py) plays kcp's
workspace controllers and makes the virtual plane the new workspace. Everything Berth does is real.
"""

from __future__ import annotations

import html
from collections.abc import Iterator

import pytest
from django.test import Client
from django.urls import reverse
from kubernetes import client

from tenants import services
from tenants.audit import AuditContext
from tenants.models import KIND_NOTES, TenantKind
from tests.plugins.kube import read_or_none, wait_for
from tests.plugins.worker import fetch_kubeconfig, wait_status
from tests.worker.backends.conftest import as_object, install_crds
from tests.worker.backends.standin_adapters import (
    WORKSPACE,
    KcpStandIn,
    approved,
    assert_admin_inside_and_refused_by_host,
    custom_object,
    delete_prefixed_namespaces,
    existing_object,
    register_cluster,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]


@pytest.fixture
def kcp_cluster(control_plane, kube_admin, small, medium, large) -> Iterator:
    install_crds(kube_admin, "workspace")
    cluster = register_cluster(
        control_plane, kind="kcp", config={"parent_workspace": "root:teams"}, tiers=[small, medium, large]
    )
    yield cluster
    delete_prefixed_namespaces(kube_admin, cluster.namespace_prefix)


def test_kcp_workspace_tenant_lives_its_whole_life_without_a_host_namespace(
    celery_worker,
    kcp_cluster,
    control_plane,
    virtual_plane,
    kube_admin,
    kubectl,
    alice,
    carol,
    team_a,
    medium,
    tmp_path,
):
    core = client.CoreV1Api(kube_admin)
    with KcpStandIn(host=control_plane, virtual=virtual_plane, prefix=kcp_cluster.namespace_prefix) as operator:
        tenant = approved(kind="kcp", alice=alice, carol=carol, team=team_a, tier=medium, cluster=kcp_cluster)
        wait_status(tenant, "ready", timeout=180)

        ws = existing_object(kube_admin, WORKSPACE, tenant.namespace)
        assert ws["spec"]["type"] == {"name": "universal"}
        assert ws["spec"]["URL"] == virtual_plane.api_url and ws["status"]["phase"] == "Ready"
        assert ws["metadata"]["labels"]["berth.dev/tenant-id"] == str(tenant.pk)
        assert ws["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "berth"
        # kcp runs no pods: nothing was made on the host besides the Workspace.
        assert read_or_none(lambda: core.read_namespace(tenant.namespace)) is None
        tenant.refresh_from_db()
        assert tenant.quota_usage == {}

        path, config = fetch_kubeconfig(alice, tenant, tmp_path)
        assert config["clusters"][0]["cluster"]["server"] == ws["spec"]["URL"]
        assert_admin_inside_and_refused_by_host(
            kubectl, path, virtual=virtual_plane, host=control_plane, tag=f"hello-{tenant.namespace}"
        )

        def report():
            tenant.refresh_from_db()
            return tenant.isolation_report

        wait_for(report, timeout=120, what="the isolation report")
        assert tenant.isolation_report["passed"], tenant.isolation_report
        assert [c["id"] for c in tenant.isolation_report["checks"]] == [
            "virtual-cluster-admin",
            "virtual-no-host-credentials",
        ]

        page_client = Client()
        page_client.force_login(alice)
        page = page_client.get(reverse("tenant-detail", args=[tenant.pk]))
        assert page.status_code == 200 and KIND_NOTES[TenantKind.KCP] in html.unescape(page.content.decode())

        services.tenant_decommission(tenant=tenant, actor=alice, reason="done", ctx=AuditContext())
        wait_status(tenant, "deleted", timeout=180)
        assert custom_object(kube_admin, WORKSPACE, tenant.namespace) is None
        assert f"workspaces/{tenant.namespace}" in operator.cleaned
    assert operator.errors == []


def test_a_parent_workspace_that_disagrees_with_the_api_url_fails_the_tenant(
    celery_worker, kcp_cluster, kube_admin, alice, carol, team_a, medium
):
    kcp_cluster.virtual_config = {"kcp": {"parent_workspace": "root:teams"}}
    kcp_cluster.api_url = f"{kcp_cluster.api_url}/clusters/root:other"
    kcp_cluster.save()
    tenant = approved(kind="kcp", alice=alice, carol=carol, team=team_a, tier=medium, cluster=kcp_cluster)
    wait_status(tenant, "failed", timeout=120)
    assert (
        "the API URL serves workspace root:other, but virtual_config.kcp.parent_workspace is root:teams"
        in tenant.status_reason
    )
    assert custom_object(kube_admin, WORKSPACE, tenant.namespace) is None


def test_a_workspace_someone_else_made_is_never_adopted_nor_deleted(
    celery_worker, kcp_cluster, kube_admin, alice, carol, team_a, medium
):
    """The attack: the name a team asks for is a Workspace that exists in the parent (made after the request)."""
    req = services.request_submit(
        actor=alice, action="create", kind="kcp", team=team_a, tier=medium, cluster=kcp_cluster, name="taken"
    )
    custom = client.CustomObjectsApi(kube_admin)
    theirs = as_object(
        custom.create_cluster_custom_object(
            WORKSPACE.group,
            WORKSPACE.version,
            WORKSPACE.plural,
            {
                "apiVersion": "tenancy.kcp.io/v1alpha1",
                "kind": "Workspace",
                "metadata": {"name": req.tenant.namespace},
                "spec": {"type": {"name": "universal"}},
            },
        )
    )
    services.request_approve(tenant_request=req, actor=carol)
    tenant = wait_status(req.tenant, "failed")
    assert f"Workspace {tenant.namespace} already exists" in tenant.status_reason
    services.tenant_decommission(tenant=tenant, actor=alice)
    wait_status(tenant, "deleted")
    ws = existing_object(kube_admin, WORKSPACE, tenant.namespace)
    assert ws["metadata"]["uid"] == theirs["metadata"]["uid"] and not ws["metadata"].get("labels")
    custom.delete_cluster_custom_object(WORKSPACE.group, WORKSPACE.version, WORKSPACE.plural, tenant.namespace)
