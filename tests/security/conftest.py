"""Attackers with their own credentials against the real services: a ready tenant each, and its kubeconfig.

Every attack here is played end to end: the portal's API hands the attacker a kubeconfig, kubectl uses
it against the dev control plane, and the assertions look at the cluster with the admin client to make
sure nothing changed.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tenants import services
from tenants.models import Cluster, Team, Tenant, TenantRequest, Tier, User
from tests.plugins.kube import manifest
from tests.plugins.worker import fetch_kubeconfig, wait_status

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]

INGRESS_DOMAIN = "{namespace}.apps.berth.test"


@dataclass
class Attacker:
    """A team member holding the kubeconfig the portal gave them for their own tenant."""

    user: User
    tenant: Tenant
    kubeconfig: str
    run: Callable[..., subprocess.CompletedProcess[str]]

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.run(*args, "-n", self.tenant.namespace, kubeconfig=self.kubeconfig, input=input)

    def apply(self, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        """Create ``obj`` for real (no dry run): the attack as the attacker would type it."""
        obj = {**obj, "metadata": {**obj["metadata"], "namespace": self.tenant.namespace}}
        return self.kubectl("create", "-f", "-", input=json.dumps(obj))


def refused(result: subprocess.CompletedProcess[str]) -> bool:
    text = result.stderr.lower()
    return result.returncode != 0 and ("forbidden" in text or "denied" in text or "invalid" in text)


@pytest.fixture
def guarded_cluster(live_cluster: Cluster) -> Cluster:
    """The dev cluster, with an Ingress domain per tenant as a real platform assigns one."""
    Cluster.objects.filter(pk=live_cluster.pk).update(ingress_domains=[INGRESS_DOMAIN])
    live_cluster.refresh_from_db()
    return live_cluster


def provision(*, actor: User, team: Team, tier: Tier, cluster: Cluster, approver: User, name: str) -> Tenant:
    req = services.request_submit(
        actor=actor, action=TenantRequest.Action.CREATE, team=team, tier=tier, cluster=cluster, name=name
    )
    if req.status == TenantRequest.Status.PENDING:
        services.request_approve(tenant_request=req, actor=approver, comment="ok")
    return wait_status(req.tenant, "ready")


@pytest.fixture
def attacker(celery_worker, guarded_cluster, kubectl, alice, carol, team_a, medium, tmp_path: Path) -> Attacker:
    """Alice, owner of team-a, with a ready medium-tier namespace and her own kubeconfig for it."""
    tenant = provision(actor=alice, team=team_a, tier=medium, cluster=guarded_cluster, approver=carol, name="shop")
    path, _ = fetch_kubeconfig(alice, tenant, tmp_path)
    return Attacker(alice, tenant, path, kubectl)


@pytest.fixture
def victim(celery_worker, guarded_cluster, bob, carol, team_b, medium) -> Tenant:
    """Bob's team-b tenant on the same cluster: what an attacker in team-a must not reach."""
    return provision(actor=bob, team=team_b, tier=medium, cluster=guarded_cluster, approver=carol, name="bank")


@pytest.fixture
def storage_class(kube_admin) -> Iterator[Callable[[str], str]]:
    """storage_class("fast") -> the name of a new StorageClass (static volumes only); each is deleted afterwards."""
    storage = client.StorageV1Api(kube_admin)
    made: list[str] = []

    def make(prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        body = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name}}
        storage.create_storage_class(manifest({**body, "provisioner": "kubernetes.io/no-provisioner"}))
        made.append(name)
        return name

    yield make
    for name in made:
        storage.delete_storage_class(name)


@dataclass
class StorageAttacker(Attacker):
    allowed_class: str = ""


@pytest.fixture
def storage_attacker(
    celery_worker, guarded_cluster, kubectl, alice, carol, team_a, medium, storage_class, tmp_path: Path
) -> StorageAttacker:
    """Alice with a ready tenant of a tier that allows one storage class (another class exists already)."""
    allowed = storage_class("allowed")
    storage_class("existing")
    Tier.objects.filter(pk=medium.pk).update(allowed_storage_classes=[allowed])
    medium.refresh_from_db()
    tenant = provision(actor=alice, team=team_a, tier=medium, cluster=guarded_cluster, approver=carol, name="data")
    path, _ = fetch_kubeconfig(alice, tenant, tmp_path)
    return StorageAttacker(alice, tenant, path, kubectl, allowed_class=allowed)
