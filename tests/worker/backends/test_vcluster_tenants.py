"""vcluster tenants installed by Flux and Cluster API: services → Redis → a real Celery worker → the dev control plane.

Installer ``helm`` runs real vclusters instead (tests/worker/backends/test_vcluster_real.py). The host here is
``control_plane``; a second real control plane (``virtual_plane``) is the virtual API server. The
chart is vcluster's own (third_party/upstream/vcluster-chart-0.30.0) installed by the real ``helm`` against the
upstream CRDs, so the chart's values schema checks Berth's values and the API server admits the chart's objects
(and the pod its StatefulSet makes) under the tier. What the vcluster pod, Flux and Cluster API would do after
that is played by the stand-ins in tests/worker/backends/standin_vcluster.py; everything Berth does runs for
real: render, install, wait, read the admin kubeconfig Secret, create the tenant's ServiceAccount inside, issue a
token. Every assertion about access is made with the handed-back kubeconfig itself.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tenants import services
from tenants.audit import AuditContext
from tenants.models import Cluster, Tenant
from tests.plugins.kube import read_or_none, wait_for
from tests.plugins.worker import (
    NETWORK_CHECK_IDS,
    assert_passes_but_packets_unproven,
    fetch_kubeconfig,
    wait_status,
)
from tests.worker.backends.conftest import approved_vcluster, as_object, install_crds
from tests.worker.backends.standin_vcluster import VClusterStandIn, release_secrets
from worker.vcluster_values import DEFAULT_CHART_VERSION

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]

PUBLIC_HOST = "localhost"  # in the virtual API server's certificate, and it resolves without DNS


@pytest.fixture(scope="module")
def vcluster_crds(kube_admin) -> None:
    install_crds(kube_admin, "helmrepository", "helmrelease", "capi-cluster", "vcluster")


@pytest.fixture
def vcluster_host(
    control_plane, virtual_plane, kube_admin, small, medium, large, vcluster_crds, vcluster_chart_repo
) -> Iterator[Callable[..., Cluster]]:
    """vcluster_host(installer=..., **settings): a registered Cluster on the host offering vcluster tenants.

    The worker's helm installs the packaged vendored chart (a file:// chart_repo); Flux and Cluster API keep
    the upstream repository in their objects, and their stand-ins install the same packaged chart.
    """
    prefixes: list[str] = []

    def make(**settings) -> Cluster:
        prefix = f"v{secrets.token_hex(2)}-"
        prefixes.append(prefix)
        config = {"public_host_template": PUBLIC_HOST, "public_port": virtual_plane.apiserver_port, **settings}
        if settings.get("installer") == "helm":
            config["chart_repo"] = vcluster_chart_repo
        cluster = Cluster.objects.create(
            name=f"vc-{prefix[:-1]}",
            display_name="Dev control plane (vcluster)",
            api_url=control_plane.api_url,
            ca_pem=control_plane.ca_cert_pem,
            credential_ref=f"kubeconfig:{control_plane.kubeconfig_path}",
            public_endpoint=control_plane.api_url,
            namespace_prefix=prefix,
            kinds=["namespace", "vcluster"],
            ingress_namespace="ingress-nginx",
            virtual_config={"vcluster": config},
        )
        cluster.tiers.set([small, medium, large])
        return cluster

    yield make
    core = client.CoreV1Api(kube_admin)
    for ns in core.list_namespace().items:
        name = str(ns.metadata.name)
        if any(name.startswith(p) for p in prefixes) and not ns.metadata.deletion_timestamp:
            core.delete_namespace(name)


@pytest.fixture
def standin(control_plane, virtual_plane, helm_bin, vcluster_chart_repo) -> Iterator[Callable[..., VClusterStandIn]]:
    started: list[VClusterStandIn] = []
    chart = Path(vcluster_chart_repo.removeprefix("file://")) / f"vcluster-{DEFAULT_CHART_VERSION}.tgz"

    def start(*, cluster: Cluster, installer: str, name: str = "web") -> VClusterStandIn:
        s = VClusterStandIn(
            host_kubeconfig=control_plane.kubeconfig_path,
            virtual_kubeconfig=virtual_plane.kubeconfig_path,
            namespace=f"{cluster.namespace_prefix}{name}",
            release=name,
            installer=installer,
            helm=helm_bin,
            chart=chart,
        )
        started.append(s.__enter__())
        return s

    yield start
    for s in started:
        s.__exit__(None, None, None)
    assert not [e for s in started for e in s.errors], [e for s in started for e in s.errors]


def _crd(name: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{name}s.team-a.example.com"},
            "spec": {
                "group": "team-a.example.com",
                "scope": "Namespaced",
                "names": {"plural": f"{name}s", "singular": name, "kind": name.capitalize()},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    }
                ],
            },
        }
    )


def _works_inside_and_not_on_the_host(
    tenant: Tenant, *, kubectl, control_plane, virtual_plane, alice, tmp_path
) -> dict:
    """The handed-back kubeconfig is cluster-admin in the virtual cluster, and worthless against the host."""
    path, config = fetch_kubeconfig(alice, tenant, tmp_path)
    assert config["clusters"][0]["cluster"]["server"] == f"https://{PUBLIC_HOST}:{virtual_plane.apiserver_port}"
    assert "client-key-data" not in config["users"][0]["user"] and config["users"][0]["user"]["token"]
    assert kubectl("auth", "can-i", "*", "*", kubeconfig=path).stdout.strip() == "yes"
    kind = f"probe{secrets.token_hex(3)}"
    made = kubectl("apply", "-f", "-", input=_crd(kind), kubeconfig=path)
    assert made.returncode == 0, made.stderr
    assert kubectl("delete", "crd", f"{kind}s.team-a.example.com", kubeconfig=path).returncode == 0
    refused = kubectl("get", "namespaces", f"--server={control_plane.api_url}", kubeconfig=path)
    # 401: the host does not even know the token (kubectl: "You must be logged in to the server").
    assert refused.returncode != 0 and "you must be logged in to the server" in refused.stderr.lower(), refused.stderr
    return config


def _isolation_report_passes(tenant: Tenant) -> None:
    def report():
        tenant.refresh_from_db()
        return tenant.isolation_report

    wait_for(report, timeout=90, what="the isolation report")
    assert_passes_but_packets_unproven(tenant.isolation_report)
    assert {c["id"] for c in tenant.isolation_report["checks"]} == {
        "virtual-cluster-admin",
        "virtual-no-host-credentials",
        "MTB-PL1-CC-FNS-1",
        *NETWORK_CHECK_IDS,
        "berth-net-ingress-controller",  # the cluster names an ingress namespace
    }


def _chart_runs_in_the_host_namespace_under_the_tier(kube_admin, tenant: Tenant, operator: VClusterStandIn) -> None:
    """The real chart's control plane pod was admitted in the host namespace (the tier's Pod Security level,
    quota and limits), every container with requests and limits, and the chart made nothing cluster-scoped."""
    assert f"pod admitted: {tenant.name}-0" in operator.events
    core = client.CoreV1Api(kube_admin)
    labels = core.read_namespace(tenant.namespace).metadata.labels or {}
    assert labels["pod-security.kubernetes.io/enforce"] == tenant.tier.pod_security_level
    pod = core.read_namespaced_pod(f"{tenant.name}-0", tenant.namespace)
    for container in [*(pod.spec.init_containers or []), *pod.spec.containers]:
        resources = container.resources
        assert {"cpu", "memory"} <= set(resources.requests or {}) & set(resources.limits or {}), container.name
        assert container.security_context.allow_privilege_escalation is False, container.name
    # Berth's one opening in the default deny reaches the chart's pod, on the port the chart's Service targets.
    opening = client.NetworkingV1Api(kube_admin).read_namespaced_network_policy(
        "berth-allow-vcluster-control-plane", tenant.namespace
    )
    assert opening.spec.pod_selector.match_labels.items() <= (pod.metadata.labels or {}).items()
    service = core.read_namespaced_service(tenant.name, tenant.namespace)
    assert {p.port for rule in opening.spec.ingress or [] for p in rule.ports or []} == {
        p.target_port for p in service.spec.ports or []
    }
    used = core.read_namespaced_resource_quota("berth-quota", tenant.namespace).status.used or {}
    assert used["requests.cpu"] != "0" and used["pods"] == "1"
    selector = f"release={tenant.name}"
    rbac = client.RbacAuthorizationV1Api(kube_admin)
    assert rbac.list_cluster_role(label_selector=selector).items == []
    assert rbac.list_cluster_role_binding(label_selector=selector).items == []


def _host_gives_the_team_nothing(kube_admin, tenant: Tenant) -> None:
    rbac = client.RbacAuthorizationV1Api(kube_admin)
    # The only binding is the chart's own, of the control plane's ServiceAccount to its Role.
    bindings = rbac.list_namespaced_role_binding(tenant.namespace).items
    assert [(b.metadata.name, b.role_ref.name) for b in bindings] == [(f"vc-{tenant.name}", f"vc-{tenant.name}")]
    assert [(s.kind, s.name, s.namespace) for s in bindings[0].subjects] == [
        ("ServiceAccount", f"vc-{tenant.name}", tenant.namespace)
    ]
    sas = {
        sa.metadata.name for sa in client.CoreV1Api(kube_admin).list_namespaced_service_account(tenant.namespace).items
    }
    assert "berth-tenant" not in sas and "berth-viewer" not in sas
    policies = {
        p.metadata.name
        for p in client.NetworkingV1Api(kube_admin).list_namespaced_network_policy(tenant.namespace).items
    }
    assert {"berth-default-deny", "berth-allow-same-namespace", "berth-allow-vcluster-control-plane"} <= policies


def _decommissioned(tenant: Tenant, *, alice, kube_admin) -> None:
    services.tenant_decommission(tenant=tenant, actor=alice, reason="done", ctx=AuditContext())
    wait_status(tenant, "deleted", timeout=180)
    assert read_or_none(lambda: client.CoreV1Api(kube_admin).read_namespace(tenant.namespace)) is None


def test_flux_installed_vcluster_works_end_to_end(
    celery_worker,
    vcluster_host,
    standin,
    control_plane,
    virtual_plane,
    kube_admin,
    kubectl,
    alice,
    carol,
    team_a,
    small,
    tmp_path,
):
    cluster = vcluster_host(installer="flux", expose="ClusterIP", distro="k3s")
    operator = standin(cluster=cluster, installer="flux")
    tenant = approved_vcluster(
        alice=alice, carol=carol, team=team_a, tier=small, cluster=cluster
    )  # small approves automatically
    wait_status(tenant, "ready", timeout=180)

    custom = client.CustomObjectsApi(kube_admin)
    release = as_object(
        custom.get_namespaced_custom_object("helm.toolkit.fluxcd.io", "v2", tenant.namespace, "helmreleases", "web")
    )
    assert release["spec"]["chart"]["spec"]["version"] == DEFAULT_CHART_VERSION
    assert release["spec"]["values"]["controlPlane"]["distro"]["k3s"]["enabled"] is True
    assert release["metadata"]["labels"]["berth.dev/tenant-id"] == str(tenant.pk)
    repository = as_object(
        custom.get_namespaced_custom_object(
            "source.toolkit.fluxcd.io", "v1", tenant.namespace, "helmrepositories", "berth-vcluster"
        )
    )
    assert repository["spec"]["url"] == "https://charts.loft.sh"
    # The nulls that drop the chart's own quota defaults survive the HelmRelease (its values are free-form).
    chart_quota = client.CoreV1Api(kube_admin).read_namespaced_resource_quota("vc-web", tenant.namespace)
    assert not {"count/endpoints", "requests.ephemeral-storage"} & set(chart_quota.spec.hard or {})
    # Flux installs; the worker never runs helm here: every revision in helm's storage is helm-controller's.
    assert len(release_secrets(kube_admin, release="web", namespace=tenant.namespace)) == operator.helm_installs == 1
    _chart_runs_in_the_host_namespace_under_the_tier(kube_admin, tenant, operator)
    _host_gives_the_team_nothing(kube_admin, tenant)

    _works_inside_and_not_on_the_host(
        tenant,
        kubectl=kubectl,
        control_plane=control_plane,
        virtual_plane=virtual_plane,
        alice=alice,
        tmp_path=tmp_path,
    )
    _isolation_report_passes(tenant)

    _decommissioned(tenant, alice=alice, kube_admin=kube_admin)
    assert "uninstalled" in operator.events and "finalizer removed: helmreleases/web" in operator.events


def test_cluster_api_installed_vcluster_works_end_to_end(
    celery_worker,
    vcluster_host,
    standin,
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
    cluster = vcluster_host(installer="capi", expose="ingress", ingress_class="nginx")
    operator = standin(cluster=cluster, installer="capi")
    tenant = approved_vcluster(alice=alice, carol=carol, team=team_a, tier=medium, cluster=cluster)
    wait_status(tenant, "ready", timeout=180)

    custom = client.CustomObjectsApi(kube_admin)
    capi = as_object(
        custom.get_namespaced_custom_object("cluster.x-k8s.io", "v1beta2", tenant.namespace, "clusters", "web")
    )
    ref = {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "VCluster", "name": "web"}
    assert capi["spec"]["infrastructureRef"] == capi["spec"]["controlPlaneRef"] == ref
    vcluster = as_object(
        custom.get_namespaced_custom_object(
            "infrastructure.cluster.x-k8s.io", "v1alpha1", tenant.namespace, "vclusters", "web"
        )
    )
    assert vcluster["spec"]["controlPlaneEndpoint"] == {"host": PUBLIC_HOST, "port": virtual_plane.apiserver_port}
    assert vcluster["spec"]["helmRelease"]["chart"]["version"] == DEFAULT_CHART_VERSION
    ingress = client.NetworkingV1Api(kube_admin).read_namespaced_ingress("web", tenant.namespace)
    assert ingress.spec.ingress_class_name == "nginx" and (ingress.spec.rules or [])[0].host == PUBLIC_HOST
    _chart_runs_in_the_host_namespace_under_the_tier(kube_admin, tenant, operator)
    _host_gives_the_team_nothing(kube_admin, tenant)

    _works_inside_and_not_on_the_host(
        tenant,
        kubectl=kubectl,
        control_plane=control_plane,
        virtual_plane=virtual_plane,
        alice=alice,
        tmp_path=tmp_path,
    )
    _isolation_report_passes(tenant)

    # The control plane's data volume (the stand-in made it from the chart's claim template) outlives the
    # release: the chart retains it; the namespace's deletion takes it.
    _decommissioned(tenant, alice=alice, kube_admin=kube_admin)
    assert {"uninstalled", "finalizer removed: vclusters/web", "finalizer removed: clusters/web"} <= set(
        operator.events
    )


def test_bad_vcluster_settings_fail_the_tenant_with_a_readable_reason_before_anything_is_created(
    celery_worker,
    vcluster_host,
    kube_admin,
    alice,
    team_a,
    small,
):
    typo = vcluster_host(installer="kustomize")
    tenant = approved_vcluster(alice=alice, carol=None, team=team_a, tier=small, cluster=typo)
    wait_status(tenant, "failed", timeout=90)
    assert tenant.status_reason == (
        f"Cluster {typo.name}: virtual_config.vcluster.installer is 'kustomize'; use one of helm, flux, capi."
    )
    no_room = vcluster_host(installer="helm", expose="LoadBalancer")
    tenant_two = approved_vcluster(alice=alice, carol=None, team=team_a, tier=small, cluster=no_room)
    wait_status(tenant_two, "failed", timeout=90)
    assert "tier small allows no LoadBalancer services" in tenant_two.status_reason
    core = client.CoreV1Api(kube_admin)
    for t in (tenant, tenant_two):
        # No namespace, so helm cannot have installed anything either.
        assert read_or_none(functools.partial(core.read_namespace, t.namespace)) is None
