"""VirtualCluster (CAPN) tenants end to end: services → a real Celery worker → the host → the vc-manager stand-in →
the virtual API server.

The stand-in (tests/worker/backends/standin_adapters.py) plays vc-manager; everything Berth does is real. Access is
asserted with the handed-back kubeconfig itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tenants import services
from tenants.audit import AuditContext
from tenants.models import AuditEvent
from tests.plugins.kube import read_or_none, wait_for
from tests.plugins.worker import NETWORK_CHECK_IDS, assert_passes_but_packets_unproven, fetch_kubeconfig, wait_status
from tests.worker.backends.conftest import as_object, install_crds
from tests.worker.backends.standin_adapters import (
    CLUSTER_VERSION,
    VIRTUAL_CLUSTER,
    VirtualClusterStandIn,
    approved,
    assert_admin_inside_and_refused_by_host,
    custom_object,
    delete_prefixed_namespaces,
    existing_object,
    register_cluster,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]
CLUSTER_VERSION_NAME = "cv-berth-test"


@pytest.fixture
def capn_cluster(control_plane, kube_admin, small, medium, large) -> Iterator:
    """A host running "vc-manager": the CRDs and the ClusterVersion the host admin installs first."""
    install_crds(kube_admin, "clusterversion", "virtualcluster")
    custom = client.CustomObjectsApi(kube_admin)
    if custom_object(kube_admin, CLUSTER_VERSION, CLUSTER_VERSION_NAME) is None:
        custom.create_cluster_custom_object(
            CLUSTER_VERSION.group,
            CLUSTER_VERSION.version,
            CLUSTER_VERSION.plural,
            {
                "apiVersion": "tenancy.x-k8s.io/v1alpha1",
                "kind": "ClusterVersion",
                "metadata": {"name": CLUSTER_VERSION_NAME},
                "spec": {"apiServer": {}, "controllerManager": {}, "etcd": {}},
            },
        )
    cluster = register_cluster(
        control_plane,
        kind="virtualcluster",
        config={"cluster_version": CLUSTER_VERSION_NAME},
        tiers=[small, medium, large],
    )
    yield cluster
    delete_prefixed_namespaces(kube_admin, cluster.namespace_prefix)


def _isolation_report(tenant) -> dict[str, Any]:
    def report():
        tenant.refresh_from_db()
        return tenant.isolation_report

    return as_object(wait_for(report, timeout=120, what="the isolation report"))


def test_virtualcluster_tenant_lives_its_whole_life_through_vc_manager(
    celery_worker,
    capn_cluster,
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
    with VirtualClusterStandIn(
        host=control_plane, virtual=virtual_plane, prefix=capn_cluster.namespace_prefix
    ) as operator:
        tenant = approved(
            kind="virtualcluster", alice=alice, carol=carol, team=team_a, tier=medium, cluster=capn_cluster
        )
        wait_status(tenant, "ready", timeout=180)

        vc = existing_object(kube_admin, VIRTUAL_CLUSTER, tenant.name, tenant.namespace)
        assert vc["spec"]["clusterVersionName"] == CLUSTER_VERSION_NAME
        assert vc["metadata"]["labels"]["berth.dev/tenant-id"] == str(tenant.pk)
        assert vc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "berth"
        assert vc["status"]["phase"] == "Running"
        cluster_namespace = vc["status"]["clusterNamespace"]
        # The host side is a namespace tenant: the tier's quota bounds what runs there.
        core = client.CoreV1Api(kube_admin)
        hard = core.read_namespaced_resource_quota("berth-quota", tenant.namespace).status.hard or {}
        assert hard["limits.cpu"] == "8"

        path, config = fetch_kubeconfig(alice, tenant, tmp_path)
        assert (
            config["clusters"][0]["cluster"]["server"] == virtual_plane.api_url
        )  # no endpoint_template: vc-manager's server
        assert_admin_inside_and_refused_by_host(
            kubectl, path, virtual=virtual_plane, host=control_plane, tag=f"hello-{tenant.namespace}"
        )
        token = config["users"][0]["user"]["token"]
        assert token not in str(list(AuditEvent.objects.values_list("before", "after")))

        report = _isolation_report(tenant)
        assert_passes_but_packets_unproven(report)
        assert {c["id"] for c in report["checks"]} == {
            "virtual-cluster-admin",
            "virtual-no-host-credentials",
            "MTB-PL1-CC-FNS-1",
            *NETWORK_CHECK_IDS,
        }

        services.tenant_decommission(tenant=tenant, actor=alice, reason="done", ctx=AuditContext())
        wait_status(tenant, "deleted", timeout=180)
        assert custom_object(kube_admin, VIRTUAL_CLUSTER, tenant.name, tenant.namespace) is None
        assert read_or_none(lambda: core.read_namespace(tenant.namespace)) is None
        assert f"virtualclusters/{tenant.name}" in operator.cleaned  # Berth waited for vc-manager's finalizer
        control_plane_ns = read_or_none(lambda: core.read_namespace(cluster_namespace))
        assert control_plane_ns is None or (
            isinstance(control_plane_ns, client.V1Namespace) and control_plane_ns.metadata.deletion_timestamp
        )
    assert operator.errors == []


def test_virtualcluster_server_is_rewritten_to_the_endpoint_template(
    celery_worker,
    capn_cluster,
    control_plane,
    virtual_plane,
    kubectl,
    alice,
    carol,
    team_a,
    medium,
    tmp_path,
):
    # vc-manager writes an in-cluster address that nothing outside the host resolves; the cluster's template
    # says where tenants (and the worker) reach the virtual API server instead.
    public = f"https://localhost:{virtual_plane.apiserver_port}"
    capn_cluster.virtual_config = {
        "virtualcluster": {"cluster_version": CLUSTER_VERSION_NAME, "endpoint_template": public}
    }
    capn_cluster.save()
    with VirtualClusterStandIn(
        host=control_plane,
        virtual=virtual_plane,
        prefix=capn_cluster.namespace_prefix,
        advertised_server="https://apiserver-svc.{cluster_namespace}.svc:6443",
    ) as operator:
        tenant = approved(
            kind="virtualcluster", alice=alice, carol=carol, team=team_a, tier=medium, cluster=capn_cluster, name="edge"
        )
        wait_status(tenant, "ready", timeout=180)
        path, config = fetch_kubeconfig(alice, tenant, tmp_path)
        assert config["clusters"][0]["cluster"]["server"] == public
        assert_admin_inside_and_refused_by_host(
            kubectl, path, virtual=virtual_plane, host=control_plane, tag=f"hello-{tenant.namespace}"
        )
        services.tenant_decommission(tenant=tenant, actor=alice, reason="done", ctx=AuditContext())
        wait_status(tenant, "deleted", timeout=180)
    assert operator.errors == []


def test_a_missing_cluster_version_fails_the_tenant_with_a_reason(
    celery_worker,
    capn_cluster,
    kube_admin,
    alice,
    carol,
    team_a,
    medium,
):
    capn_cluster.virtual_config = {"virtualcluster": {"cluster_version": "cv-nobody-made"}}
    capn_cluster.save()
    tenant = approved(kind="virtualcluster", alice=alice, carol=carol, team=team_a, tier=medium, cluster=capn_cluster)
    wait_status(tenant, "failed", timeout=120)
    assert "ClusterVersion cv-nobody-made does not exist" in tenant.status_reason
    assert custom_object(kube_admin, VIRTUAL_CLUSTER, tenant.name, tenant.namespace) is None
