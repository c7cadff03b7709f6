"""Sleep's annotations live on objects the tenant can edit: what can a tenant holding its own kubeconfig do with
them? (worker.sleep)

The attacks, played by alice with the kubeconfig the portal gave her: while her tenant sleeps, raise a recorded
replica count to 1000; pre-record counts on new Deployments so the wake creates them for her; write another
namespace's object into the annotation; strip the annotation and scale up to wake her
workloads without Berth; annotate bob's sleeping workloads. What must hold: the restore is clamped to her tier's
pod count and, beyond that, her ResourceQuota bounds what actually runs; garbage restores nothing; the next pass
puts her back to sleep; bob's namespace is never touched, and she cannot wake his tenant.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes import client
from rest_framework.test import APIClient

from tenants import services
from tenants.models import Tenant, Tier
from tests.plugins.kube import wait_for
from tests.plugins.worker import fetch_kubeconfig
from tests.worker.sleep_workloads import apply_as, deployment, pods_of, state, wait_pods
from worker import reconcile
from worker.sleep import REPLICAS_ANNOTATION

from .conftest import provision, refused

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]
TINY_PODS = 4


@pytest.fixture
def tiny(guarded_cluster, medium) -> Tier:
    """A tier allowing sleep with room for four pods."""
    tier = Tier.objects.get(pk=medium.pk)
    tier.pk = None
    tier.name, tier.display_name, tier.max_pods, tier.sleep_allowed = "tiny", "Tiny", TINY_PODS, True
    tier.save()
    guarded_cluster.tiers.add(tier)
    Tier.objects.filter(pk=medium.pk).update(sleep_allowed=True)
    return tier


def _asleep(tenant: Tenant) -> Tenant:
    def check() -> bool:
        tenant.refresh_from_db()
        return services.sleep_state(tenant) == "asleep"

    wait_for(check, timeout=60, what=f"{tenant.name} asleep")
    return tenant


def test_a_tenant_cannot_turn_sleep_annotations_into_more_pods_or_into_another_namespace(
    celery_worker, guarded_cluster, kube_admin, kubectl, alice, bob, carol, team_a, team_b, tiny, medium, tmp_path: Path
):
    mine = provision(actor=alice, team=team_a, tier=tiny, cluster=guarded_cluster, approver=carol, name="greedy")
    theirs = provision(actor=bob, team=team_b, tier=medium, cluster=guarded_cluster, approver=carol, name="vault")
    alice_config, _ = fetch_kubeconfig(alice, mine, tmp_path)
    bob_config, _ = fetch_kubeconfig(bob, theirs, tmp_path)
    apply_as(kubectl, alice_config, deployment("web", 2), deployment("junk", 1), deployment("sneaky", 1))
    apply_as(kubectl, bob_config, deployment("ledger", 2))
    services.tenant_sleep(tenant=theirs, actor=bob)
    services.tenant_sleep(tenant=mine, actor=alice)
    _asleep(theirs)
    _asleep(mine)
    bobs = state(kube_admin, theirs.namespace)
    assert bobs == {"Deployment/ledger": (0, "2")}

    def as_alice(*args: str):
        return kubectl(*args, "-n", mine.namespace, kubeconfig=alice_config)

    # 1. Raise a recorded count far beyond the quota; 2. pre-record a count on a new, scaled-down Deployment.
    assert as_alice("annotate", "deployment/web", f"{REPLICAS_ANNOTATION}=1000", "--overwrite").returncode == 0
    apply_as(kubectl, alice_config, deployment("extra", 0, annotations={REPLICAS_ANNOTATION: "3"}))
    # 3. Garbage: the name of an object in another namespace.
    assert (
        as_alice("annotate", "deployment/junk", f"{REPLICAS_ANNOTATION}={theirs.namespace}/ledger", "--overwrite")
    ).returncode == 0
    # 4. Wake a workload without Berth: strip the annotation and scale up.
    assert as_alice("annotate", "deployment/sneaky", f"{REPLICAS_ANNOTATION}-").returncode == 0
    assert as_alice("scale", "deployment/sneaky", "--replicas=3").returncode == 0
    # 5. Reach bob's sleeping workload: her credentials cannot even read it.
    for verb in (
        ("annotate", "deployment/ledger", f"{REPLICAS_ANNOTATION}=50", "--overwrite"),
        ("scale", "deployment/ledger", "--replicas=5"),
    ):
        attempt = kubectl(*verb, "-n", theirs.namespace, kubeconfig=alice_config)
        assert refused(attempt), attempt.stderr

    # The next pass puts the stripped-and-scaled Deployment back to sleep (recording what she set). Its patch is
    # guarded by the object's resourceVersion: when the deployment controller writes the scale-up's status between
    # the pass's read and its patch, the pass reports exactly that and leaves it to the next pass (worker.sleep),
    # which the reconcile schedule runs anyway. Nothing else may happen on the way, and a few passes must do it.
    conflicted = "not yet: changed while Berth worked, retried next pass: Deployment/sneaky"
    for _ in range(5):
        done = reconcile.reconcile_cluster(guarded_cluster).asleep[str(mine.pk)]
        if done != conflicted:
            break
        time.sleep(0.5)
    assert done == "repaired: Deployment/sneaky"
    assert state(kube_admin, mine.namespace)["Deployment/sneaky"] == (0, "3")
    wait_pods(kube_admin, mine.namespace, "sneaky", 0)

    # She cannot wake bob's tenant through the portal either.
    api = APIClient()
    api.force_authenticate(alice)
    assert api.post(f"/api/v1/tenants/{theirs.pk}/wake/").status_code == 404

    services.tenant_wake(tenant=Tenant.objects.get(pk=mine.pk), actor=alice)

    def awake() -> bool:
        mine.refresh_from_db()
        return services.sleep_state(mine) == "awake"

    wait_for(awake, timeout=60, what="greedy awake")
    after = state(kube_admin, mine.namespace)
    assert after["Deployment/web"] == (TINY_PODS, None)  # 1000 clamped to the tier's pod count
    assert after["Deployment/extra"] == (3, None)  # pre-recorded: no more than she could scale to herself
    assert after["Deployment/junk"] == (0, None)  # unreadable: left at zero
    assert "unreadable" in mine.sleep_note and "Deployment/junk" in mine.sleep_note
    # Everything she asked for adds up to 4 + 3 + 3 = 10 replicas; the ResourceQuota lets 4 pods exist.
    wait_for(
        lambda: (
            sum(len(pods_of(kube_admin, mine.namespace, app)) for app in ("web", "extra", "sneaky")) == TINY_PODS
            or None
        ),
        timeout=60,
        what="the quota's four pods",
    )
    time.sleep(3)  # the ReplicaSet controller keeps trying; the quota keeps refusing
    total = sum(len(pods_of(kube_admin, mine.namespace, app)) for app in ("web", "extra", "sneaky", "junk"))
    assert total == TINY_PODS
    quota = client.CoreV1Api(kube_admin).read_namespaced_resource_quota("berth-quota", mine.namespace)
    used, hard = quota.status.used or {}, quota.status.hard or {}
    assert int(used["pods"]) <= int(hard["pods"]) == TINY_PODS

    # Bob's namespace was never touched and his tenant still sleeps.
    assert state(kube_admin, theirs.namespace) == bobs
    assert pods_of(kube_admin, theirs.namespace, "ledger") == []
    assert Tenant.objects.get(pk=theirs.pk).sleeping
