"""Sleep and wake on the dev control plane, with real Deployments, StatefulSets and CronJobs the tenant made
with its own kubeconfig: services → Redis → a real Celery worker (worker.tasks.apply_sleep) → kube-apiserver.

The control plane runs the deployment and ReplicaSet controllers, so a Deployment's pods really exist (Pending:
no nodes here) and really go away when it is scaled to zero. The reconcile pass and a re-provision run in this
process, as the worker runs them.
"""

from __future__ import annotations

import subprocess
import time

import pytest
from kubernetes import client

from devcluster.images import WORKLOAD_IMAGE
from tenants import services
from tenants.models import AuditEvent, Tenant, TenantRequest, TenantSleepPeriod
from tests.plugins.kube import manifest, wait_for
from tests.plugins.worker import fetch_kubeconfig, wait_status
from tests.worker.sleep_workloads import (
    apply_as,
    cronjob,
    deployment,
    pods_of,
    state,
    statefulset,
    wait_pods,
    wait_settled,
)
from worker import kube, provisioning, reconcile
from worker.sleep import CHANGED_UNDER, REPLICAS_ANNOTATION

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]


@pytest.fixture
def sleepy(medium):
    medium.sleep_allowed = True
    medium.save()
    return medium


def _ready(*, alice, carol, team_a, tier, cluster, name: str) -> Tenant:
    tenant = services.request_submit(
        actor=alice, action=TenantRequest.Action.CREATE, team=team_a, tier=tier, cluster=cluster, name=name
    ).tenant
    if tenant.status == "requested":
        services.request_approve(tenant_request=tenant.requests.get(), actor=carol, comment="ok")
    return wait_status(tenant, "ready")


def _wait_state(tenant: Tenant, wanted: str) -> Tenant:
    def check() -> bool:
        tenant.refresh_from_db()
        return services.sleep_state(tenant) == wanted

    wait_for(check, timeout=60, what=f"{tenant.name} to be {wanted} (note: {tenant.sleep_note!r})")
    return tenant


def test_sleep_scales_to_zero_reconcile_keeps_it_asleep_and_wake_restores_exactly(
    celery_worker, live_cluster, kube_admin, kubectl, make_namespace, alice, carol, team_a, sleepy, tmp_path
):
    tenant = _ready(alice=alice, carol=carol, team_a=team_a, tier=sleepy, cluster=live_cluster, name="sleepy")
    ns = tenant.namespace
    config, _ = fetch_kubeconfig(alice, tenant, tmp_path)
    apply_as(
        kubectl,
        config,
        deployment("web", 3),
        deployment("idle", 0),
        statefulset("db", 2),
        cronjob("nightly", suspend=False),
        cronjob("paused", suspend=True),
    )
    wait_pods(kube_admin, ns, "web", 3)
    # Someone else's namespace with a Deployment: never touched, whatever happens to the tenant.
    other = make_namespace("other")
    client.AppsV1Api(kube_admin).create_namespaced_deployment(other, manifest(deployment("bystander", 2)))
    bystander_before = state(kube_admin, other)
    before = state(kube_admin, ns)
    assert before == {
        "Deployment/web": (3, None),
        "Deployment/idle": (0, None),
        "StatefulSet/db": (2, None),
        "CronJob/nightly": (False, None),
        "CronJob/paused": (True, None),
    }

    services.tenant_sleep(tenant=tenant, actor=alice)
    tenant = _wait_state(tenant, "asleep")
    asleep = {
        "Deployment/web": (0, "3"),
        "Deployment/idle": (0, "0"),
        "StatefulSet/db": (0, "2"),
        "CronJob/nightly": (True, "false"),
        "CronJob/paused": (True, "true"),
    }
    assert state(kube_admin, ns) == asleep
    wait_pods(kube_admin, ns, "web", 0)  # the ReplicaSet controller removed the pods

    # The reconcile pass and a re-provision of the tenant do not wake it.
    result = reconcile.reconcile_cluster(live_cluster)
    assert str(tenant.pk) in result.asleep and str(tenant.pk) not in result.failed
    assert provisioning.provision(str(tenant.pk)).outcome in (
        provisioning.Outcome.IN_SYNC,
        provisioning.Outcome.REPAIRED,
    )
    assert state(kube_admin, ns) == asleep

    # While asleep the tenant scales a workload up, un-suspends a CronJob and creates a new Deployment: the next
    # pass puts them to sleep too, keeping the counts the old ones had when the tenant fell asleep.
    scaled = kubectl("scale", "deployment/web", "--replicas=2", kubeconfig=config)
    assert scaled.returncode == 0, scaled.stderr
    patched = kubectl("patch", "cronjob/nightly", "-p", '{"spec":{"suspend":false}}', kubeconfig=config)
    assert patched.returncode == 0, patched.stderr
    apply_as(kubectl, config, deployment("late", 1))
    # Each patch is guarded by the object's resourceVersion: when the deployment controller writes the scale-up's
    # status between the pass's read and its patch, the pass says so and leaves that object to the next pass
    # (worker.sleep), as the reconcile schedule would. Nothing else may be said on the way; a few passes do it.
    changed_under = f"{provisioning.Outcome.NOT_YET}: {CHANGED_UNDER}"
    left: list[str] = []  # what the last conflicting pass left to the next
    for _ in range(5):
        done = reconcile.reconcile_cluster(live_cluster).asleep[str(tenant.pk)]
        if not done.startswith(changed_under):
            break
        left = done.removeprefix(changed_under).split(", ")
        time.sleep(0.5)
    assert done.startswith(f"{provisioning.Outcome.REPAIRED}: "), done
    repaired = done.removeprefix(f"{provisioning.Outcome.REPAIRED}: ").split(", ")
    assert set(left or ["Deployment/web", "Deployment/late"]) <= set(repaired), done
    assert state(kube_admin, ns) == {**asleep, "Deployment/late": (0, "1")}
    wait_pods(kube_admin, ns, "web", 0)
    assert Tenant.objects.get(pk=tenant.pk).sleeping

    services.tenant_wake(tenant=Tenant.objects.get(pk=tenant.pk), actor=alice)
    tenant = _wait_state(tenant, "awake")
    assert state(kube_admin, ns) == {**before, "Deployment/late": (1, None)}
    wait_pods(kube_admin, ns, "web", 3)
    assert len(pods_of(kube_admin, ns, "late")) <= 1
    assert state(kube_admin, other) == bystander_before

    actions = list(AuditEvent.objects.filter(object_id=str(tenant.pk)).values_list("action", flat=True))
    assert {"tenant.slept", "tenant.woke"} <= set(actions)
    period = TenantSleepPeriod.objects.get(tenant=tenant)
    assert period.reason == "owner" and period.ended_at is not None


class _EditedUnderTheFirstPatch(kube.Kube):
    """The worker's real client, with an admin editing ``victim`` after the pass listed it and before its first
    patch: the guarded patch of ``victim`` then meets a real 409 from the API server."""

    def __init__(self, real: kube.Kube, admin, namespace: str, victim: str) -> None:
        super().__init__(real._api, server=real.server)
        self._admin, self._namespace, self._victim, self.edited = admin, namespace, victim, False

    def patch(self, kind, name, patch, *, namespace=None, dry_run=False):
        if not self.edited:
            self.edited = True
            client.AppsV1Api(self._admin).patch_namespaced_deployment(
                self._victim, self._namespace, {"metadata": {"labels": {"edited": "meanwhile"}}}
            )
        return super().patch(kind, name, patch, namespace=namespace, dry_run=dry_run)


def test_a_wake_that_takes_two_passes_still_says_what_it_left_at_zero(
    celery_worker, live_cluster, kube_admin, kubectl, alice, carol, team_a, sleepy, tmp_path
):
    tenant = _ready(alice=alice, carol=carol, team_a=team_a, tier=sleepy, cluster=live_cluster, name="twopass")
    ns = tenant.namespace
    config, _ = fetch_kubeconfig(alice, tenant, tmp_path)
    apply_as(kubectl, config, deployment("junk", 1), deployment("late", 2))
    services.tenant_sleep(tenant=tenant, actor=alice)
    _wait_state(tenant, "asleep")
    garbled = kubectl("annotate", "deployment/junk", f"{REPLICAS_ANNOTATION}=lots", "--overwrite", kubeconfig=config)
    assert garbled.returncode == 0, garbled.stderr
    wait_settled(kube_admin, ns)  # so that the admin's edit below is the only write under the passes

    # The passes run here, holding the tenant's lock as the worker does (its own task finds it taken and waits).
    with provisioning.tenant_lock(str(tenant.pk)) as got:
        assert got
        services.tenant_wake(tenant=Tenant.objects.get(pk=tenant.pk), actor=alice)
        k = _EditedUnderTheFirstPatch(kube.for_cluster(live_cluster), kube_admin, ns, "late")
        first = provisioning.enforce_sleep(Tenant.objects.select_related("tier").get(pk=tenant.pk), k)
        assert first.outcome == provisioning.Outcome.NOT_YET and k.edited
        noted = Tenant.objects.get(pk=tenant.pk).sleep_note
        assert "retried next pass: Deployment/late" in noted and "unreadable" in noted
        # The first pass consumed junk's annotation: the second no longer sees it, and completes the wake.
        assert state(kube_admin, ns)["Deployment/junk"] == (0, None)
        second = provisioning.enforce_sleep(Tenant.objects.select_related("tier").get(pk=tenant.pk), k)
        assert second.outcome == provisioning.Outcome.REPAIRED

    tenant = _wait_state(tenant, "awake")
    assert state(kube_admin, ns) == {"Deployment/junk": (0, None), "Deployment/late": (2, None)}
    assert tenant.sleep_note == f"left at zero, unreadable {REPLICAS_ANNOTATION}: Deployment/junk"


@pytest.mark.nodes
def test_on_real_nodes_running_pods_stop_while_asleep_and_serve_again_after_wake(
    celery_worker, live_node_cluster, node_control_plane, node_kube_admin, alice, carol, team_a, sleepy, tmp_path
):
    tenant = _ready(alice=alice, carol=carol, team_a=team_a, tier=sleepy, cluster=live_node_cluster, name="napper")
    ns = tenant.namespace
    config, _ = fetch_kubeconfig(alice, tenant, tmp_path)

    def kubectl(*args: str, kubeconfig: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        command = [str(node_control_plane.kubectl), f"--kubeconfig={kubeconfig}", *args]
        return subprocess.run(command, input=input, capture_output=True, text=True, timeout=60, check=False)

    httpd = ["httpd", "-f", "-p", "8080", "-h", "/www"]
    apply_as(kubectl, config, deployment("web", 2, image=WORKLOAD_IMAGE, command=httpd))
    core = client.CoreV1Api(node_kube_admin)

    def running(count: int) -> list[client.V1Pod]:
        def check() -> list[client.V1Pod] | None:
            pods = [p for p in pods_of(node_kube_admin, ns, "web") if p.status.phase == "Running"]
            ready = [p for p in pods if all(c.ready for c in p.status.container_statuses or [])]
            return ready if len(ready) == count else None

        return wait_for(check, timeout=120, what=f"{count} running pods in {ns}")

    def serves(pods: list[client.V1Pod]) -> None:
        """Each pod answers a page, asked from a pod of the namespace (NetworkPolicy keeps the host out)."""
        for pod in pods:
            url = f"http://{pod.status.pod_ip}:8080/"
            got = kubectl(
                "-n", ns, "exec", str(pods[0].metadata.name), "--", "wget", "-q", "-O", "-", url, kubeconfig=config
            )
            assert (got.returncode, got.stdout) == (0, "berth busybox\n"), got.stderr

    serves(running(2))

    services.tenant_sleep(tenant=tenant, actor=alice)
    _wait_state(tenant, "asleep")
    # Not one pod left, not even a terminating one: the containers stopped on the node.
    wait_for(
        lambda: core.list_namespaced_pod(ns, label_selector="app=web").items == [] or None,
        timeout=90,
        what=f"every pod of {ns} gone",
    )

    services.tenant_wake(tenant=Tenant.objects.get(pk=tenant.pk), actor=alice)
    _wait_state(tenant, "awake")
    serves(running(2))
