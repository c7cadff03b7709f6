"""HyperShift tenants end to end: services → a real Celery worker → the host → the HyperShift stand-in → the
virtual API server.

The stand-in (tests/worker/backends/standin_adapters.py) plays the HyperShift operator; everything Berth does is real.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from kubernetes import client

from tenants import services
from tenants.audit import AuditContext
from tenants.models import TenantRequest
from tests.plugins.kube import read_or_none, wait_for
from tests.plugins.worker import assert_passes_but_packets_unproven, fetch_kubeconfig, wait_status
from tests.worker.backends.conftest import as_object, install_crds
from tests.worker.backends.standin_adapters import (
    HOSTED_CLUSTER,
    NODE_POOL,
    HyperShiftStandIn,
    approved,
    assert_admin_inside_and_refused_by_host,
    custom_object,
    delete_prefixed_namespaces,
    existing_object,
    register_cluster,
)
from worker.backends import hypershift

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]
RELEASE = "quay.io/openshift-release-dev/ocp-release:4.17.0-multi"


@pytest.fixture
def hypershift_cluster(control_plane, kube_admin, small, medium, large) -> Iterator:
    """A host running "HyperShift", with the namespace for HostedClusters and the SSH key the host admin provides."""
    install_crds(kube_admin, "hostedcluster", "nodepool")
    cluster = register_cluster(control_plane, kind="hypershift", tiers=[small, medium, large], config={})
    hosted = f"{cluster.namespace_prefix}clusters"
    cluster.virtual_config = {
        "hypershift": {
            "release_image": RELEASE,
            "base_domain": "hosted.example.test",
            "platform": "KubeVirt",
            "namespace": hosted,
            "pull_secret_name": "pull-secret",
            "ssh_key_secret_name": "ssh-key",
        }
    }
    cluster.save()
    core = client.CoreV1Api(kube_admin)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=hosted)))
    core.create_namespaced_secret(
        hosted,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="ssh-key"), string_data={"id_rsa.pub": "ssh-ed25519 AAAA test"}
        ),
    )
    yield cluster
    delete_prefixed_namespaces(kube_admin, cluster.namespace_prefix)


def test_hypershift_tenant_waits_for_the_pull_secret_then_lives_its_whole_life(
    celery_worker,
    hypershift_cluster,
    control_plane,
    virtual_plane,
    kube_admin,
    kubectl,
    alice,
    carol,
    team_a,
    small,
    medium,
    tmp_path,
):
    hosted = hypershift_cluster.virtual_config["hypershift"]["namespace"]
    core = client.CoreV1Api(kube_admin)
    with HyperShiftStandIn(
        host=control_plane, virtual=virtual_plane, prefix=hypershift_cluster.namespace_prefix
    ) as operator:
        tenant = approved(
            kind="hypershift", alice=alice, carol=carol, team=team_a, tier=medium, cluster=hypershift_cluster
        )

        # The host admin has not put the pull secret in place yet: HyperShift says so, and so does the tenant.
        def waiting_for_pull_secret():
            tenant.refresh_from_db()
            return tenant.status == "provisioning" and "pull secret pull-secret" in tenant.status_reason

        wait_for(waiting_for_pull_secret, timeout=120, what="the tenant to report HyperShift's missing pull secret")
        core.create_namespaced_secret(
            hosted,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name="pull-secret"),
                data={".dockerconfigjson": base64.b64encode(b'{"auths": {}}').decode()},
                type="kubernetes.io/dockerconfigjson",
            ),
        )
        wait_status(tenant, "ready", timeout=240)

        hc = existing_object(kube_admin, HOSTED_CLUSTER, tenant.name, hosted)
        assert hc["spec"]["release"]["image"] == RELEASE and hc["spec"]["pullSecret"] == {"name": "pull-secret"}
        assert hc["spec"]["sshKey"] == {"name": "ssh-key"} and hc["spec"]["platform"]["type"] == "KubeVirt"
        assert hc["metadata"]["labels"]["berth.dev/tenant-id"] == str(tenant.pk)
        pool = existing_object(kube_admin, NODE_POOL, tenant.name, hosted)
        assert pool["spec"]["replicas"] == 2 and pool["spec"]["clusterName"] == tenant.name  # medium: two nodes
        # What Berth sets, and what the upstream CRD defaults besides (its schema is the real one).
        compute = pool["spec"]["platform"]["kubevirt"]["compute"]
        assert compute == {"cores": 4, "memory": "8192Mi", "qosClass": "Burstable"}
        assert hc["spec"]["etcd"]["managementType"] == "Managed" and hc["spec"]["networking"]["networkType"]
        assert pool["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "berth"

        path, config = fetch_kubeconfig(alice, tenant, tmp_path)
        assert config["clusters"][0]["cluster"]["server"] == virtual_plane.api_url
        assert_admin_inside_and_refused_by_host(
            kubectl, path, virtual=virtual_plane, host=control_plane, tag=f"hello-{tenant.namespace}"
        )

        def report():
            tenant.refresh_from_db()
            return tenant.isolation_report

        wait_for(report, timeout=120, what="the isolation report")
        assert_passes_but_packets_unproven(tenant.isolation_report)

        # A smaller tier shrinks the NodePool.
        change = services.request_submit(
            actor=alice, action=TenantRequest.Action.CHANGE_TIER, tenant=tenant, tier=small
        )
        if change.status == TenantRequest.Status.PENDING:
            services.request_approve(tenant_request=change, actor=carol)
        wait_for(
            lambda: existing_object(kube_admin, NODE_POOL, tenant.name, hosted)["spec"]["replicas"] == 1,
            timeout=120,
            what="the NodePool to follow the tier change",
        )

        def applied():
            tenant.refresh_from_db()
            return tenant.applied_generation == tenant.generation

        wait_for(
            applied, timeout=120, what="the tier change to be recorded as applied"
        )  # the worker lets go of the tenant

        services.tenant_decommission(tenant=tenant, actor=alice, reason="done", ctx=AuditContext())
        wait_status(tenant, "deleted", timeout=180)
        assert custom_object(kube_admin, HOSTED_CLUSTER, tenant.name, hosted) is None
        assert custom_object(kube_admin, NODE_POOL, tenant.name, hosted) is None
        assert {f"hostedclusters/{tenant.name}", f"nodepools/{tenant.name}"} <= set(operator.cleaned)
        assert read_or_none(lambda: core.read_namespaced_secret(f"{tenant.name}-admin-kubeconfig", hosted)) is None
        assert read_or_none(lambda: core.read_namespace(tenant.namespace)) is None
    assert operator.errors == []


def test_a_hypershift_setting_missing_fails_the_tenant_before_anything_is_created(
    celery_worker,
    hypershift_cluster,
    kube_admin,
    alice,
    carol,
    team_a,
    medium,
):
    hypershift_cluster.virtual_config = {
        "hypershift": {"base_domain": "hosted.example.test", "pull_secret_name": "pull-secret"}
    }
    hypershift_cluster.save()
    tenant = approved(kind="hypershift", alice=alice, carol=carol, team=team_a, tier=medium, cluster=hypershift_cluster)
    wait_status(tenant, "failed", timeout=120)
    assert tenant.status_reason.startswith(
        f"Cluster {hypershift_cluster.name}: virtual_config.hypershift.release_image is required"
    )
    assert read_or_none(lambda: client.CoreV1Api(kube_admin).read_namespace(tenant.namespace)) is None


def test_a_hosted_cluster_someone_else_made_in_the_shared_namespace_is_never_adopted(
    celery_worker, hypershift_cluster, kube_admin, alice, carol, team_a, medium
):
    """The attack: HostedClusters of every tenant share one namespace; the team's name is taken there already."""
    hosted = hypershift_cluster.virtual_config["hypershift"]["namespace"]
    req = services.request_submit(
        actor=alice,
        action="create",
        kind="hypershift",
        team=team_a,
        tier=medium,
        cluster=hypershift_cluster,
        name="payroll",
    )
    # Someone else's HostedCluster: valid as Berth's would be, but without Berth's labels and with their secret.
    foreign = hypershift.hosted_cluster(req.tenant, medium, hypershift.HyperShiftSettings.parse(hypershift_cluster))
    foreign["metadata"].pop("labels")
    foreign["spec"]["pullSecret"] = {"name": "theirs"}
    custom = client.CustomObjectsApi(kube_admin)
    theirs = as_object(
        custom.create_namespaced_custom_object(
            HOSTED_CLUSTER.group, HOSTED_CLUSTER.version, hosted, HOSTED_CLUSTER.plural, foreign
        )
    )
    services.request_approve(tenant_request=req, actor=carol)
    tenant = wait_status(req.tenant, "failed")
    assert f"HostedCluster payroll in namespace {hosted} already exists" in tenant.status_reason
    # Nothing of the tenant's was made on the host, and the other HostedCluster is as it was.
    assert read_or_none(lambda: client.CoreV1Api(kube_admin).read_namespace(tenant.namespace)) is None
    services.tenant_decommission(tenant=tenant, actor=alice)
    wait_status(tenant, "deleted")
    hc = existing_object(kube_admin, HOSTED_CLUSTER, "payroll", hosted)
    assert hc["metadata"]["uid"] == theirs["metadata"]["uid"] and hc["spec"]["pullSecret"] == {"name": "theirs"}
