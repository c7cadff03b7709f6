"""The Helm chart's RBAC is enough for Berth, and no more: proven on the dev control plane with the real helm.

The chart (RBAC only) is installed with the real helm. A real Celery worker whose only cluster credential is a
token of the chart's worker ServiceAccount provisions, reconciles and decommissions a tenant; this test process,
playing the web, holds only a token of the chart's web ServiceAccount and issues the kubeconfig. Then
`kubectl auth can-i`, as each ServiceAccount, shows what they cannot do, and real requests show that what RBAC
cannot express (labels) is refused by the chart's confinement policy.

The worker gets its own Redis database as broker, so no other worker of the run can take its tasks.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import secrets
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from kubernetes import client

from devcluster import chart_rbac
from devcluster.chart_rbac import Release
from devcluster.process import Component, berth_watcher, wait_until
from portal.celery import app
from tenants import services
from tenants.audit import AuditContext
from tenants.models import AuditEvent, Cluster, Tenant, TenantRequest, Tier
from tests.plugins.kube import manifest, read_or_none, wait_for
from tests.plugins.worker import (
    OUTPUT,
    ROOT,
    assert_passes_but_packets_unproven,
    django_process_env,
    fetch_kubeconfig,
    wait_status,
)
from tests.worker import sleep_workloads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]

CREDENTIAL_VARIABLE = "BERTH_LEAST_PRIVILEGE_KUBECONFIG"
SEED = importlib.import_module("tenants.migrations.0002_seed_tiers").TIERS


@pytest.fixture(scope="module")
def release(helm_bin, control_plane, kube_admin) -> Iterator[Release]:
    rel = Release(f"berth-lp{secrets.token_hex(3)}", f"berth-lp-{secrets.token_hex(3)}")
    done = chart_rbac.install(helm_bin, control_plane, rel)
    assert done.returncode == 0, done.stderr
    try:
        yield rel
    finally:
        chart_rbac.uninstall(helm_bin, control_plane, rel)
        read_or_none(lambda: client.CoreV1Api(kube_admin).delete_namespace(rel.namespace))


@pytest.fixture(scope="module")
def kubeconfigs(release, control_plane, tmp_path_factory) -> dict[str, Path]:
    """A kubeconfig per identity, each with nothing but its ServiceAccount's token."""
    return chart_rbac.kubeconfigs(control_plane, release, tmp_path_factory.mktemp("least-privilege"))


def _send_to(url: str | None) -> None:
    """Point this process's Celery app at ``url``, dropping its pooled connections to the old broker.

    Celery reads CELERY_BROKER_URL from the environment before its configuration, so both change.
    """
    if url is None:
        os.environ.pop("CELERY_BROKER_URL", None)
    else:
        os.environ["CELERY_BROKER_URL"] = url
    app.conf.update(broker_url=url)
    # What Celery itself resets after a fork; there is no public way to drop the pools.
    app._pool = None  # type: ignore[attr-defined]
    app.amqp._producer_pool = None  # type: ignore[attr-defined]


@contextlib.contextmanager
def _broker(url: str) -> Iterator[None]:
    previous = os.environ.get("CELERY_BROKER_URL")
    _send_to(url)
    try:
        yield
    finally:
        _send_to(previous if previous is not None else settings.CELERY_BROKER_URL)


@pytest.fixture(scope="module")
def confined_worker(release, kubeconfigs, django_db_setup, django_db_blocker) -> Iterator[str]:
    """A real Celery worker whose only cluster credential is the worker ServiceAccount's token; its broker URL."""
    broker = settings.CELERY_BROKER_URL.rsplit("/", 1)[0] + "/7"
    OUTPUT.mkdir(exist_ok=True)
    log = OUTPUT / "celery-worker-least-privilege.log"
    env = {
        **django_process_env(),
        "CELERY_BROKER_URL": broker,
        **chart_rbac.process_env(release, CREDENTIAL_VARIABLE, kubeconfigs["worker"]),
    }
    env.pop("KUBECONFIG", None)
    argv = [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool=prefork", "--concurrency=2"]
    argv += ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO", "-n", "least-privilege@%h"]
    worker = Component("celery worker (least privilege)", argv, log, cwd=ROOT, env=env)
    worker.start()
    try:
        wait_until(lambda: b"ready." in log.read_bytes(), timeout=60, watched=[worker], what="the confined worker")
        yield broker
    finally:
        worker.stop(grace_seconds=20)


@pytest.fixture
def confined_watcher(release, kubeconfigs, confined_worker, lp_cluster) -> Iterator[Path]:
    """The watcher (manage.py berth_watch) whose only cluster credential is the watcher ServiceAccount's token,
    sending its repairs to the confined worker; its log."""
    log = OUTPUT / "watcher-least-privilege.log"
    env = {
        **django_process_env(),
        "CELERY_BROKER_URL": confined_worker,
        **chart_rbac.process_env(release, CREDENTIAL_VARIABLE, kubeconfigs["watcher"]),
        "BERTH_WATCH_COALESCE_SECONDS": "0.5",
    }
    env.pop("KUBECONFIG", None)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    watcher = berth_watcher(log, cwd=ROOT, env=env, clusters=[lp_cluster.name], name="watcher (least privilege)")
    watcher.start()
    try:
        wait_until(
            lambda: b"; watching" in log.read_bytes(), timeout=60, watched=[watcher], what="the confined watcher"
        )
        yield log
    finally:
        watcher.stop(grace_seconds=5)


@pytest.fixture
def as_web(release, kubeconfigs, confined_worker, monkeypatch) -> Iterator[None]:
    """This process plays the web: the web ServiceAccount's token, the chart's grants, the confined worker's broker."""
    monkeypatch.setenv(CREDENTIAL_VARIABLE, kubeconfigs["web"].read_text())
    monkeypatch.setattr(settings, "BERTH_NAMESPACE_GRANTS", release.grants.split(","))
    with _broker(confined_worker):
        yield


@pytest.fixture
def every_rule_tier(db) -> Tier:
    """Every rule the tenant Role can carry, and a FlowSchema: the worker must be able to grant them all."""
    medium = next(t for t in SEED if t["name"] == "medium")
    return Tier.objects.create(
        **{
            **medium,
            "name": f"lp-{secrets.token_hex(3)}",
            "allow_manual_endpoints": True,
            "api_fairness": "workload-low",
        }
    )


@pytest.fixture
def lp_cluster(control_plane, every_rule_tier) -> Cluster:
    """The dev control plane, registered with the least-privilege credential (per process: web or worker)."""
    prefix = f"lp{secrets.token_hex(2)}-"
    registered = Cluster.objects.create(
        name=f"lp-{prefix[:-1]}",
        display_name="Dev control plane, least privilege",
        api_url=control_plane.api_url,
        ca_pem=control_plane.ca_cert_pem,
        credential_ref=f"env:{CREDENTIAL_VARIABLE}",
        public_endpoint=control_plane.api_url,
        namespace_prefix=prefix,
        kinds=["namespace"],
    )
    registered.tiers.set([every_rule_tier])
    return registered


def _can(kubectl, kubeconfig: Path) -> Callable[..., str]:
    def can(*args: str) -> str:
        done = kubectl("auth", "can-i", *args, kubeconfig=kubeconfig)
        answer = done.stdout.strip()
        assert answer in ("yes", "no"), done.stderr
        return answer

    return can


def _refused(kubectl, kubeconfig: Path, obj: dict, *verb: str) -> str:
    """Run kubectl as ``kubeconfig`` on ``obj`` (a server-side dry run: nothing persists); its refusal."""
    done = kubectl(*verb, "--dry-run=server", "-f", "-", kubeconfig=kubeconfig, input=yaml.safe_dump(obj))
    assert done.returncode != 0, f"{' '.join(verb)} {obj['kind']}/{obj['metadata']['name']} was allowed"
    return done.stderr


def _until_confinement_is_enforced(kubectl, release, kubeconfigs) -> None:
    """A new admission policy is enforced a moment after it is created."""
    binding = _grant_binding(release, "kube-system")
    wait_for(
        lambda: (
            "managed-by=berth"
            in kubectl(
                "create", "--dry-run=server", "-f", "-", kubeconfig=kubeconfigs["worker"], input=yaml.safe_dump(binding)
            ).stderr
        ),
        timeout=30,
        what="the confinement policy to be enforced",
    )


def _grant_binding(release, namespace: str) -> dict:
    """What a compromised worker would write to give itself its namespace rights somewhere else."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "berth-takeover", "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": f"{release.name}-worker-namespace",
        },
        "subjects": [{"kind": "ServiceAccount", "name": release.worker_sa, "namespace": release.namespace}],
    }


def _requested(alice, team_a, tier, cluster, name: str) -> TenantRequest:
    """alice's request for a tenant ``name`` on the least-privilege cluster."""
    return services.request_submit(
        actor=alice,
        action=TenantRequest.Action.CREATE,
        team=team_a,
        tier=tier,
        cluster=cluster,
        name=name,
        purpose="least privilege",
    )


def _ready(alice, carol, team_a, tier, cluster, name: str) -> Tenant:
    """alice's tenant ``name``, approved by carol and provisioned by the confined worker."""
    request = _requested(alice, team_a, tier, cluster, name)
    services.request_approve(tenant_request=request, actor=carol, comment="ok")
    wait_status(request.tenant, "ready", timeout=120)
    return request.tenant


def test_tenant_lifecycle_with_the_charts_rbac_only(
    as_web, release, kubeconfigs, lp_cluster, every_rule_tier, kube_admin, kubectl, alice, carol, team_a, tmp_path
):
    # Provision: submitted, approved by someone else, provisioned by the confined worker.
    tenant = _ready(alice, carol, team_a, every_rule_tier, lp_cluster, "web")
    ns = tenant.namespace
    core, rbac = client.CoreV1Api(kube_admin), client.RbacAuthorizationV1Api(kube_admin)
    assert (core.read_namespace(ns).metadata.labels or {})["berth.dev/tenant-id"] == str(tenant.pk)
    assert rbac.read_namespaced_role("berth-tenant", ns).rules  # granted without escalate
    grants = {b.metadata.name: b.subjects or [] for b in rbac.list_namespaced_role_binding(ns).items}
    assert [s.name for s in grants[f"{release.name}-worker-namespace"]] == [release.worker_sa]
    assert [s.name for s in grants[f"{release.name}-web-namespace"]] == [release.web_sa]
    assert client.FlowcontrolApiserverV1Api(kube_admin).read_flow_schema(f"berth-{ns}")

    # The isolation report, run by the worker with the tenant's own token.
    wait_for(lambda: Tenant.objects.get(pk=tenant.pk).isolation_report, timeout=90, what="the isolation report")
    # Every check passes with the chart's RBAC; the packet checks find no node to run on here (the chart lets the
    # worker list nodes to find out), so they say not proven.
    assert_passes_but_packets_unproven(Tenant.objects.get(pk=tenant.pk).isolation_report)

    # Reconcile repairs hand edits, even the deletion of the worker's own grant.
    client.NetworkingV1Api(kube_admin).delete_namespaced_network_policy("berth-default-deny", ns)
    rbac.delete_namespaced_role_binding(f"{release.name}-worker-namespace", ns)
    # The job that repairs a ready tenant (the watcher sends it on seeing drift); a provision job finds nothing owed.
    app.send_task("worker.tasks.repair_tenant", args=[str(tenant.pk)])
    wait_for(
        lambda: AuditEvent.objects.filter(action="tenant.drift_repaired", object_id=str(tenant.pk)).exists(),
        timeout=60,
        what="the reconcile to repair the tenant",
    )
    repaired = AuditEvent.objects.get(action="tenant.drift_repaired", object_id=str(tenant.pk)).after["repaired"]
    assert f"RoleBinding/{release.name}-worker-namespace was missing" in repaired
    assert "NetworkPolicy/berth-default-deny was missing" in repaired
    assert client.NetworkingV1Api(kube_admin).read_namespaced_network_policy("berth-default-deny", ns)

    # A kubeconfig, issued by the web's identity, that works and is limited.
    path, _ = fetch_kubeconfig(alice, tenant, tmp_path, lifetime_seconds=900)
    tenant_can = _can(kubectl, Path(path))
    assert tenant_can("create", "deployments", "-n", ns) == "yes"
    assert tenant_can("list", "namespaces") == "no"

    # Sleep and wake, applied by the confined worker: its namespace grant covers the tenant's workloads.
    Tier.objects.filter(pk=every_rule_tier.pk).update(sleep_allowed=True)
    client.AppsV1Api(kube_admin).create_namespaced_deployment(ns, manifest(sleep_workloads.deployment("api", 2)))
    client.BatchV1Api(kube_admin).create_namespaced_cron_job(
        ns, manifest(sleep_workloads.cronjob("nightly", suspend=False))
    )

    def becomes(wanted: str) -> None:
        wait_for(
            lambda: services.sleep_state(Tenant.objects.get(pk=tenant.pk)) == wanted or None,
            timeout=60,
            what=f"the confined worker to make the tenant {wanted}",
        )

    services.tenant_sleep(tenant=Tenant.objects.get(pk=tenant.pk), actor=alice)
    becomes("asleep")
    assert sleep_workloads.state(kube_admin, ns) == {"Deployment/api": (0, "2"), "CronJob/nightly": (True, "false")}
    services.tenant_wake(tenant=Tenant.objects.get(pk=tenant.pk), actor=alice)
    becomes("awake")
    assert sleep_workloads.state(kube_admin, ns) == {"Deployment/api": (2, None), "CronJob/nightly": (False, None)}

    # What each of Berth's identities can and cannot do, in the tenant's namespace and outside it.
    worker_can, web_can = _can(kubectl, kubeconfigs["worker"]), _can(kubectl, kubeconfigs["web"])
    assert worker_can("get", "secrets", "-n", ns) == "yes"
    assert worker_can("delete", f"namespace/{ns}", "-n", ns) == "yes"
    assert web_can("create", "serviceaccounts/berth-tenant", "--subresource=token", "-n", ns) == "yes"
    assert web_can("get", "secrets", "-n", ns) == "no"
    assert web_can("create", "serviceaccounts/berth-tenant", "--subresource=token", "-n", "kube-system") == "no"

    # Decommission: the namespace goes, and the worker's rights there with it.
    services.tenant_decommission(tenant=tenant, actor=alice, reason="done", ctx=AuditContext())
    wait_status(tenant, "deleted", timeout=120)
    assert read_or_none(lambda: core.read_namespace(ns)) is None
    assert worker_can("get", "secrets", "-n", ns) == "no"
    assert worker_can("delete", f"namespace/{ns}", "-n", ns) == "no"


NOT_BERTHS = ["kube-system", "default", "kube-public"]


@pytest.mark.parametrize("namespace", NOT_BERTHS)
def test_the_worker_cannot_read_secrets_or_act_outside_berth_namespaces(release, kubeconfigs, kubectl, namespace):
    can = _can(kubectl, kubeconfigs["worker"])
    for args in (
        ("get", "secrets"),
        ("list", "secrets"),
        ("get", "configmaps"),
        ("create", "pods"),
        ("delete", "deployments"),
        ("patch", "deployments"),
        ("patch", "statefulsets"),
        ("patch", "cronjobs"),
        ("patch", "serviceaccounts"),
        ("create", "serviceaccounts", "--subresource=token"),
        ("patch", "resourcequotas"),
        ("delete", "networkpolicies"),
        ("delete", "rolebindings"),
        ("patch", "roles"),
    ):
        assert can(*args, "-n", namespace) == "no", f"worker can {' '.join(args)} in {namespace}"
    # A request on a Namespace object carries that namespace's name as its namespace (RoleBindings in it apply).
    assert can("delete", f"namespace/{namespace}", "-n", namespace) == "no"
    assert can("patch", f"namespace/{namespace}", "-n", namespace) == "no"


def test_the_worker_holds_nothing_cluster_wide_that_berth_does_not_manage(release, kubeconfigs, kubectl):
    can = _can(kubectl, kubeconfigs["worker"])
    assert can("list", "secrets", "--all-namespaces") == "no"
    assert can("list", "pods", "--all-namespaces") == "no"
    assert can("list", "namespaces") == "no"
    assert can("delete", "clusterrole/cluster-admin") == "no"
    assert can("bind", "clusterrole/cluster-admin") == "no"
    assert can("escalate", "clusterroles") == "no"
    assert can("escalate", "roles", "-n", "kube-system") == "no"
    assert can("impersonate", "users") == "no"
    assert can("impersonate", "groups") == "no"
    assert can("create", "clusterrolebindings") == "no"
    assert can("create", "customresourcedefinitions") == "no"
    assert can("delete", "validatingadmissionpolicy/berth-no-external-ips") == "no"
    assert can("patch", f"validatingadmissionpolicy/{release.name}-confinement") == "no"
    assert can("patch", "validatingadmissionpolicy/berth-no-external-ips") == "yes"  # its own guard, by name
    assert can("bind", f"clusterrole/{release.name}-worker-namespace") == "yes"  # the one role it grants itself
    web = _can(kubectl, kubeconfigs["web"])
    assert web("create", "namespaces") == "no"
    assert web("create", "rolebindings", "-n", "kube-system") == "no"
    assert web("list", "secrets", "--all-namespaces") == "no"


def test_the_watcher_reads_berths_kinds_and_nothing_else_and_writes_nothing(release, kubeconfigs, kubectl):
    can = _can(kubectl, kubeconfigs["watcher"])
    for resource in (
        "namespaces",
        "serviceaccounts",
        "resourcequotas",
        "limitranges",
        "networkpolicies",
        "roles",
        "rolebindings",
        "flowschemas",
    ):
        for verb in ("get", "list", "watch"):
            assert can(verb, resource, "--all-namespaces") == "yes", f"watcher cannot {verb} {resource}"
        for verb in ("create", "update", "patch", "delete", "deletecollection"):
            assert can(verb, resource, "--all-namespaces") == "no", f"watcher can {verb} {resource}"
            assert can(verb, resource, "-n", "kube-system") == "no", f"watcher can {verb} {resource} in kube-system"
    for namespace in NOT_BERTHS:
        assert can("get", "secrets", "-n", namespace) == "no"
        assert can("list", "secrets", "-n", namespace) == "no"
        assert can("get", "configmaps", "-n", namespace) == "no"
    assert can("list", "secrets", "--all-namespaces") == "no"
    assert can("watch", "secrets", "--all-namespaces") == "no"
    assert can("list", "pods", "--all-namespaces") == "no"
    assert can("create", "serviceaccounts", "--subresource=token", "-n", "kube-system") == "no"
    assert can("impersonate", "users") == "no"
    assert can("escalate", "clusterroles") == "no"
    assert can("create", "leases", "-n", release.namespace) == "no"  # leader election is a database lock


def test_the_confined_watcher_has_a_hand_edit_repaired_without_a_pass(
    as_web,
    release,
    kubeconfigs,
    kubectl,
    lp_cluster,
    every_rule_tier,
    kube_admin,
    alice,
    carol,
    team_a,
    confined_watcher,
):
    """The watcher with nothing but its chart identity lists and watches; the confined worker repairs. No task is
    sent by hand, no pass runs. Once the tenant is decommissioned its Secrets were never readable to the watcher."""
    tenant = _ready(alice, carol, team_a, every_rule_tier, lp_cluster, "watched")
    ns = tenant.namespace
    net = client.NetworkingV1Api(kube_admin)
    net.delete_namespaced_network_policy("berth-default-deny", ns)
    client.CoreV1Api(kube_admin).patch_namespaced_resource_quota(
        "berth-quota", ns, {"spec": {"hard": {"pods": "4242"}}}
    )
    wait_for(
        lambda: AuditEvent.objects.filter(action="tenant.drift_repaired", object_id=str(tenant.pk)).exists(),
        timeout=30,
        what="the watcher and the confined worker to repair the tenant",
    )
    repaired = AuditEvent.objects.get(action="tenant.drift_repaired", object_id=str(tenant.pk)).after["repaired"]
    assert sorted(repaired) == ["NetworkPolicy/berth-default-deny was missing", "ResourceQuota/berth-quota was changed"]
    assert net.read_namespaced_network_policy("berth-default-deny", ns)
    watcher_can = _can(kubectl, kubeconfigs["watcher"])
    assert watcher_can("get", "secrets", "-n", ns) == "no"  # a Berth namespace too
    assert watcher_can("patch", "resourcequotas", "-n", ns) == "no"
    services.tenant_decommission(tenant=tenant, actor=alice, reason="done", ctx=AuditContext())
    wait_status(tenant, "deleted", timeout=120)


def test_what_rbac_cannot_scope_the_confinement_policy_refuses(release, kubeconfigs, kubectl, make_namespace):
    """RoleBindings outside Berth namespaces, namespaces without Berth's label, and FlowSchemas that are not
    Berth's: RBAC allows the verbs; the chart's admission policy refuses them, for real (server-side dry runs)."""
    _until_confinement_is_enforced(kubectl, release, kubeconfigs)
    worker = kubeconfigs["worker"]
    foreign = make_namespace("not-berth")
    for namespace in ("kube-system", "default", foreign):
        refusal = _refused(kubectl, worker, _grant_binding(release, namespace), "create")
        assert f"{release.name}-confinement" in refusal and "managed-by=berth" in refusal, refusal
    unlabelled = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"sneaky-{secrets.token_hex(3)}"}}
    assert "managed-by=berth" in _refused(kubectl, worker, unlabelled, "create")
    assert kubectl("get", "flowschema", "global-default").returncode == 0  # the API server's own
    for verb in (
        ("patch", "flowschema", "global-default", "--type=merge", "-p", '{"spec":{"matchingPrecedence":9001}}'),
        ("delete", "flowschema", "global-default"),
    ):
        done = kubectl(*verb, "--dry-run=server", kubeconfig=worker)
        assert done.returncode != 0 and "managed-by=berth" in done.stderr, f"{verb[0]}: {done.stderr}"
    mine = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": "berth-not-labelled"},
        "spec": {"priorityLevelConfiguration": {"name": "workload-low"}, "matchingPrecedence": 900},
    }
    assert "managed-by=berth" in _refused(kubectl, worker, mine, "create")


def test_a_namespace_someone_else_made_meanwhile_is_never_taken_over(
    as_web, release, lp_cluster, every_rule_tier, kube_admin, alice, carol, team_a
):
    """Between the request (name free) and the approval, someone creates the namespace: the worker refuses it."""
    request = _requested(alice, team_a, every_rule_tier, lp_cluster, "squat")
    tenant = request.tenant
    core = client.CoreV1Api(kube_admin)
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=tenant.namespace, labels={"owner": "someone-else"}))
    )
    try:
        services.request_approve(tenant_request=request, actor=carol, comment="ok")
        wait_status(tenant, "failed", timeout=60)
        tenant.refresh_from_db()
        assert "never adopts" in tenant.status_reason
        theirs = core.read_namespace(tenant.namespace)
        assert theirs.metadata.labels == {"owner": "someone-else", "kubernetes.io/metadata.name": tenant.namespace}
        assert not client.RbacAuthorizationV1Api(kube_admin).list_namespaced_role_binding(tenant.namespace).items
    finally:
        core.delete_namespace(tenant.namespace)


def test_a_ready_tenants_deleted_namespace_is_not_recreated_by_the_confined_worker(
    as_web, release, lp_cluster, every_rule_tier, kube_admin, alice, carol, team_a
):
    """As after a restore of the database from a dump older than a decommission. Without the cluster-wide lists the
    pass reconciles tenant by tenant; the worker could once POST a bare namespace with Berth's labels back before
    its apply failed on the recorded UID. Now the tenant diverges and the name stays free."""
    tenant = _ready(alice, carol, team_a, every_rule_tier, lp_cluster, "gone")
    core = client.CoreV1Api(kube_admin)
    uid = str(core.read_namespace(tenant.namespace).metadata.uid)
    core.delete_namespace(tenant.namespace)
    wait_for(lambda: read_or_none(lambda: core.read_namespace(tenant.namespace)) is None, timeout=60, what="deletion")
    app.send_task("worker.tasks.reconcile_cluster", args=[str(lp_cluster.pk)])
    wait_status(tenant, "diverged", timeout=60)
    assert f"(UID {uid}) is missing" in tenant.status_reason
    assert read_or_none(lambda: core.read_namespace(tenant.namespace)) is None
