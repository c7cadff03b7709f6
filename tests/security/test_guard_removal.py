"""A report that cannot fail proves nothing: remove each guard by hand and its check must fail.

The report runs with the tenant's own credentials (worker.provisioning.isolation_report). Each test
takes a guard away the way a careless cluster admin would, waits for the report to notice, then puts
the guards back and waits until the report passes again, so later tests find the cluster as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from tests.plugins.kube import read_or_none, wait_for
from worker import guards, kube, provisioning

from .conftest import Attacker, StorageAttacker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]

# Report check → the admission policy that makes it pass.
CHECK_GUARDS = {
    "berth-short-lived-credentials": "berth-no-long-lived-tokens",
    "CVE-2020-8554": "berth-no-external-ips",
    "CVE-2021-25740-ExternalName": "berth-no-external-name",
    "berth-ingress-host-ownership": "berth-ingress-hosts",
    "berth-short-lived-projected-tokens": "berth-projected-token-lifetime",
    "berth-no-berth-service-accounts": "berth-no-berth-service-accounts",
    "berth-node-pool-isolation": "berth-node-pool-tolerations",
}
# A check whose tier option is open passes without probing; these need a tenant of a tier that closes it.
NARROW_TIER_CHECK_GUARDS = {"berth-storage-classes": "berth-storage-classes"}


def check(tenant_id: str, check_id: str) -> bool:
    report = provisioning.isolation_report(tenant_id)
    assert report is not None
    return next(c["passed"] for c in report["checks"] if c["id"] == check_id)


@pytest.fixture
def restore_guards(attacker: Attacker) -> Iterator[Callable[[str], None]]:
    """restore(check_id): put every guard back and wait until ``check_id`` passes again (also on failure)."""
    restored: list[str] = []

    def restore(check_id: str) -> None:
        kube.for_cluster(attacker.tenant.cluster).apply(guards.cluster_guards())
        wait_for(lambda: check(str(attacker.tenant.pk), check_id), timeout=60, what=f"{check_id} to pass again")
        restored.append(check_id)

    yield restore
    if not restored:
        kube.for_cluster(attacker.tenant.cluster).apply(guards.cluster_guards())


@pytest.mark.parametrize("check_id", sorted(CHECK_GUARDS))
def test_the_report_fails_when_the_guard_is_removed(attacker: Attacker, kube_admin, restore_guards, check_id):
    tenant_id = str(attacker.tenant.pk)
    assert check(tenant_id, check_id), "the check must pass while its guard is there"
    admission = client.AdmissionregistrationV1Api(kube_admin)
    admission.delete_validating_admission_policy_binding(CHECK_GUARDS[check_id])
    wait_for(lambda: not check(tenant_id, check_id), timeout=60, what=f"{check_id} to fail without its guard")
    restore_guards(check_id)


@pytest.mark.parametrize("check_id", sorted(NARROW_TIER_CHECK_GUARDS))
def test_the_report_fails_when_the_guard_of_a_narrowed_tier_is_removed(
    storage_attacker: StorageAttacker, kube_admin, check_id
):
    tenant_id = str(storage_attacker.tenant.pk)
    assert check(tenant_id, check_id), "the check must pass while its guard is there"
    admission = client.AdmissionregistrationV1Api(kube_admin)
    admission.delete_validating_admission_policy_binding(NARROW_TIER_CHECK_GUARDS[check_id])
    try:
        wait_for(lambda: not check(tenant_id, check_id), timeout=60, what=f"{check_id} to fail without its guard")
    finally:
        kube.for_cluster(storage_attacker.tenant.cluster).apply(guards.cluster_guards())
    wait_for(lambda: check(tenant_id, check_id), timeout=60, what=f"{check_id} to pass again")


def test_hand_written_endpoints_need_both_rbac_and_the_guard_gone_before_the_report_fails(
    attacker: Attacker, kube_admin, restore_guards
):
    tenant_id, ns = str(attacker.tenant.pk), attacker.tenant.namespace
    rbac = client.RbacAuthorizationV1Api(kube_admin)
    role = rbac.read_namespaced_role("berth-tenant", ns)
    role.rules.append(
        client.V1PolicyRule(
            api_groups=["", "discovery.k8s.io"], resources=["endpoints", "endpointslices"], verbs=["create"]
        )
    )
    rbac.replace_namespaced_role("berth-tenant", ns, role)
    # RBAC alone no longer refuses; the admission guard still does, so the claim still holds.
    assert check(tenant_id, "CVE-2021-25740-Endpoints")
    client.AdmissionregistrationV1Api(kube_admin).delete_validating_admission_policy_binding(
        "berth-no-manual-endpoints"
    )
    wait_for(lambda: not check(tenant_id, "CVE-2021-25740-Endpoints"), timeout=60, what="the Endpoints check to fail")
    role = rbac.read_namespaced_role("berth-tenant", ns)
    role.rules.pop()
    rbac.replace_namespaced_role("berth-tenant", ns, role)
    restore_guards("CVE-2021-25740-Endpoints")
    admission = client.AdmissionregistrationV1Api(kube_admin)
    assert read_or_none(lambda: admission.read_validating_admission_policy_binding("berth-no-manual-endpoints"))
