"""Storage classes a tier does not allow, refused at admission with the tenant's own kubeconfig.

The tier's quota zeroes the classes that existed when it was rendered; a class an admin creates after the
tenant was provisioned has no line there until a reconcile. The guard (berth-storage-classes) bounds it from
its first second.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from worker import provisioning

from .conftest import StorageAttacker, refused

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]


def claim(name: str, storage_class: str) -> dict[str, Any]:
    spec = {
        "storageClassName": storage_class,
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
    }
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}


def claims(kube_admin, namespace: str) -> set[str]:
    found = client.CoreV1Api(kube_admin).list_namespaced_persistent_volume_claim(namespace).items
    return {str(c.metadata.name) for c in found}


def test_a_claim_in_a_class_created_after_the_tenant_is_refused_from_its_first_second(
    storage_attacker: StorageAttacker, storage_class, kube_admin
):
    late = storage_class("late")  # an admin adds a class; no reconcile has run since
    result = storage_attacker.apply(claim("hoard", late))
    assert refused(result), result.stderr
    assert "berth-storage-classes" in result.stderr
    assert claims(kube_admin, storage_attacker.tenant.namespace) == set()


def test_a_claim_in_a_class_the_tier_does_not_list_is_refused_and_an_allowed_one_is_not(
    storage_attacker: StorageAttacker, kube_admin
):
    for other in ("existing-and-unlisted", ""):
        result = storage_attacker.apply(claim("other", other))
        assert refused(result), (other, result.stderr)
    made = storage_attacker.apply(claim("mine", storage_attacker.allowed_class))
    assert made.returncode == 0, made.stderr
    assert claims(kube_admin, storage_attacker.tenant.namespace) == {"mine"}


def test_the_report_says_other_classes_are_refused(storage_attacker: StorageAttacker):
    report = provisioning.isolation_report(str(storage_attacker.tenant.pk))
    assert report is not None
    check = next(c for c in report["checks"] if c["id"] == "berth-storage-classes")
    assert check["passed"], check["detail"]
    assert storage_attacker.allowed_class in check["detail"]
