"""A team member forges an orphan: a namespace with Berth's labels, hoping an admin re-attaches it to their team
after a restore (docs/security.md, "Orphans after a restore"). Tenants cannot create or label namespaces, so there is
nothing to list; played with the attacker's own kubeconfig against the dev control plane."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client

from tenants.models import OrphanNamespace
from tests.plugins.kube import read_or_none
from tests.security.conftest import Attacker, refused
from worker import manifests, reconcile

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]


def test_a_tenant_cannot_forge_a_berth_namespace_for_an_admin_to_reattach(attacker: Attacker, kube_admin, live_cluster):
    forged_id = str(uuid.uuid4())
    name = f"{live_cluster.namespace_prefix}forged"
    labels = {**manifests.MANAGED_BY, manifests.TENANT_ID_LABEL: forged_id, "berth.dev/team": "team-a"}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    assert refused(attacker.run("create", "-f", "-", kubeconfig=attacker.kubeconfig, input=json.dumps(namespace)))
    # Nor can it relabel its own namespace with another tenant's id, or drop its own.
    own = attacker.tenant.namespace
    relabel = ("label", "namespace", own, f"{manifests.TENANT_ID_LABEL}={forged_id}", "--overwrite")
    assert refused(attacker.run(*relabel, kubeconfig=attacker.kubeconfig))
    core = client.CoreV1Api(kube_admin)
    assert read_or_none(lambda: core.read_namespace(name)) is None
    assert (core.read_namespace(own).metadata.labels or {})[manifests.TENANT_ID_LABEL] == str(attacker.tenant.pk)
    result = reconcile.reconcile_cluster(live_cluster)
    assert result.orphans == [] and not OrphanNamespace.objects.exists()
