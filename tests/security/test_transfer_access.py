"""A tenant moved to another team: the old team keeps nothing, not even the kubeconfig it was given before.

The attacker is amir, a member of team-a, who fetched a kubeconfig for team-a's tenant (a TokenRequest token of
its ServiceAccount, valid for 15 more minutes) just before an owner gave the tenant to team-b. Afterwards he
tries it against the real API server, and asks the portal's API for the tenant and a fresh kubeconfig.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes import client
from rest_framework.test import APIClient

from tenants import services
from tenants.models import AuditEvent, Tenant
from tests.plugins.kube import wait_for
from tests.plugins.worker import fetch_kubeconfig

from .conftest import provision

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]


def _renewed(tenant: Tenant) -> Tenant | None:
    tenant.refresh_from_db()
    done = tenant.applied_credential_epoch == tenant.credential_epoch and tenant.applied_generation == tenant.generation
    return tenant if done else None


def test_the_old_teams_kubeconfig_is_refused_by_the_api_server_after_a_transfer(
    celery_worker, guarded_cluster, kubectl, kube_admin, alice, amir, bob, carol, team_a, team_b, small, tmp_path: Path
):
    tenant = provision(actor=alice, team=team_a, tier=small, cluster=guarded_cluster, approver=carol, name="move")
    ns = tenant.namespace
    old_path, _ = fetch_kubeconfig(amir, tenant, tmp_path)
    before = kubectl("get", "configmaps", "-n", ns, kubeconfig=old_path)
    assert before.returncode == 0, before.stderr  # it works for amir before the transfer
    core = client.CoreV1Api(kube_admin)
    old_uid = core.read_namespaced_service_account("berth-tenant", ns).metadata.uid

    req = services.transfer_ask(tenant=tenant, target_team=team_b, actor=alice, purpose="reorg")
    services.transfer_accept(tenant_request=req, actor=bob)  # small: within budget and automatic
    tenant = wait_for(lambda: _renewed(tenant), timeout=90, what="the transfer to reach the cluster")

    # The ServiceAccount is a new one, and recorded as Berth's.
    account = core.read_namespaced_service_account("berth-tenant", ns)
    assert account.metadata.uid != old_uid
    assert tenant.owned_uids[f"ServiceAccount/{ns}/berth-tenant"] == account.metadata.uid
    assert (account.metadata.labels or {})["berth.dev/team"] == "team-b"
    assert (core.read_namespace(ns).metadata.labels or {})["berth.dev/team"] == "team-b"

    # The API server refuses the token it accepted a minute ago: it is bound to the deleted ServiceAccount's UID.
    # The server keeps a token it authenticated in a cache for up to 10 seconds (kube-apiserver's token cache).
    def refused() -> bool:
        result = kubectl("get", "configmaps", "-n", ns, kubeconfig=old_path)
        return result.returncode != 0 and "unauthorized" in result.stderr.lower()

    renewed_at = time.monotonic()
    wait_for(refused, timeout=20, interval=1, what="the old token to be refused")
    print(f"old token refused {time.monotonic() - renewed_at:.1f} s after the renewal was recorded")
    after = kubectl("get", "configmaps", "-n", ns, kubeconfig=old_path)
    assert after.returncode != 0 and "unauthorized" in after.stderr.lower(), after.stderr
    made = kubectl("create", "configmap", "left-behind", "-n", ns, kubeconfig=old_path)
    assert made.returncode != 0 and "left-behind" not in kubectl("get", "configmaps", "-n", ns).stdout

    # The portal: the tenant is not amir's (nor alice's) to see or to get credentials for.
    for old in (amir, alice):
        api = APIClient()
        api.force_authenticate(old)
        assert api.get(f"/api/v1/tenants/{tenant.pk}/").status_code == 404
        assert api.post(f"/api/v1/tenants/{tenant.pk}/kubeconfig/", {}, format="json").status_code == 404

    # The new team's kubeconfig works.
    new_path, _ = fetch_kubeconfig(bob, tenant, tmp_path)
    works = kubectl("create", "configmap", "moved-in", "-n", ns, kubeconfig=new_path)
    assert works.returncode == 0, works.stderr
    actions = set(AuditEvent.objects.filter(object_id=str(tenant.pk)).values_list("action", flat=True))
    assert {"transfer.complete", "tenant.credentials_renewed"} <= actions
