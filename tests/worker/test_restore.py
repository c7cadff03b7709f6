"""Berth's database restored from an older dump over a running test bed (docs/deployment.md, "Backup and restore").

The real PostgreSQL of the run is dumped and restored with Debian's pg_dump and pg_restore while the real worker
keeps running against it and the dev control plane keeps its namespaces. What the cluster holds that the dump does
not know is never deleted, and what the dump believes that the cluster no longer holds is never silently recreated.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from django.db import connection
from kubernetes import client

from devcluster.servers import _pg_bin
from tenants import dispatch, services
from tenants.models import AuditEvent, OrphanNamespace, Tenant
from tests.plugins.kube import read_or_none, wait_for
from tests.plugins.worker import drain_worker, wait_status
from tests.security.conftest import provision
from worker import manifests, reconcile, tasks

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]


def _libpq_args() -> list[str]:
    db = connection.settings_dict
    return ["-h", str(db["HOST"]), "-p", str(db["PORT"]), "-U", str(db["USER"]), "-d", str(db["NAME"])]


def pg_dump(path: Path) -> None:
    """The backup of docs/deployment.md: a custom-format dump of Berth's database."""
    subprocess.run([_pg_bin("pg_dump"), "-Fc", "--no-owner", "-f", str(path), *_libpq_args()], check=True)


def pg_restore(path: Path, worker_node: str) -> None:
    """The restore of docs/deployment.md, over the live database: every table dropped and loaded from the dump in
    one transaction. The worker is left idle first, as the procedure stops it; its process keeps running."""
    drain_worker(worker_node)
    connection.close()
    command = [_pg_bin("pg_restore"), "--clean", "--if-exists", "--single-transaction", "--no-owner"]
    subprocess.run([*command, *_libpq_args(), str(path)], check=True)


def _namespace(core: client.CoreV1Api, name: str) -> client.V1Namespace | None:
    return read_or_none(lambda: core.read_namespace(name))


def test_a_restore_never_deletes_newer_namespaces_nor_recreates_gone_ones(
    celery_worker, live_cluster, kube_admin, alice, bob, carol, team_a, team_b, medium, tmp_path
):
    core = client.CoreV1Api(kube_admin)
    a = provision(actor=alice, team=team_a, tier=medium, cluster=live_cluster, approver=carol, name="before")
    a_uid = str(core.read_namespace(a.namespace).metadata.uid)
    dump = tmp_path / "berth.dump"
    pg_dump(dump)

    b = provision(actor=bob, team=team_b, tier=medium, cluster=live_cluster, approver=carol, name="after")
    b_uid = core.read_namespace(b.namespace).metadata.uid
    services.tenant_decommission(tenant=a, actor=alice)
    wait_status(a, "deleted")
    assert _namespace(core, a.namespace) is None

    pg_restore(dump, celery_worker.node_name)
    assert Tenant.objects.get(pk=a.pk).status == "ready"  # the dump's belief
    assert not Tenant.objects.filter(pk=b.pk).exists()
    restored_events = AuditEvent.objects.count()

    # The beat's reconcile, run by the real worker.
    assert dispatch.send(dispatch.RECONCILE)
    a = wait_status(Tenant.objects.get(pk=a.pk), "diverged", timeout=60)
    assert "missing" in a.status_reason and a_uid in a.status_reason
    orphan = wait_for(
        lambda: OrphanNamespace.objects.filter(cluster=live_cluster, name=b.namespace).first(),
        timeout=60,
        what=f"{b.namespace} listed as an orphan",
    )
    assert orphan.uid == b_uid and orphan.tenant_id == str(b.pk)
    assert orphan.labels[manifests.TENANT_ID_LABEL] == str(b.pk) and orphan.labels["berth.dev/team"] == "team-b"
    assert orphan.created_at is not None
    drain_worker(celery_worker.node_name)

    # Another pass and a sweep, in this process, change nothing more.
    again = reconcile.reconcile_cluster(live_cluster)
    assert (again.repaired, again.failed, again.in_sync) == ({}, {}, 0)
    assert again.orphans == [b.namespace]
    swept = tasks.sweep()
    assert (swept["provision"], swept["decommission"], swept["expired"]) == (0, 0, 0)

    assert _namespace(core, a.namespace) is None  # not recreated
    kept = _namespace(core, b.namespace)
    assert kept is not None and kept.metadata.uid == b_uid and kept.metadata.deletion_timestamp is None
    assert read_or_none(lambda: core.read_namespaced_resource_quota("berth-quota", b.namespace)) is not None
    assert Tenant.objects.get(pk=a.pk).status == "diverged"
    after_restore = AuditEvent.objects.order_by("pk")[restored_events:]
    # One audited change since the restore: no repair, provisioning, decommission or deletion.
    assert [(e.action, e.object_id) for e in after_restore] == [("tenant.diverged", str(a.pk))]


def test_a_restore_that_matches_the_cluster_changes_nothing(
    celery_worker, live_cluster, kube_admin, alice, carol, team_a, medium, tmp_path
):
    core = client.CoreV1Api(kube_admin)
    a = provision(actor=alice, team=team_a, tier=medium, cluster=live_cluster, approver=carol, name="steady")
    uid = core.read_namespace(a.namespace).metadata.uid
    dump = tmp_path / "berth.dump"
    pg_dump(dump)
    pg_restore(dump, celery_worker.node_name)
    restored_events = AuditEvent.objects.count()

    result = reconcile.reconcile_cluster(live_cluster)
    assert (result.tenants, result.in_sync, result.repaired, result.diverged, result.orphans) == (1, 1, {}, {}, [])
    swept = tasks.sweep()
    assert (swept["provision"], swept["decommission"], swept["expired"]) == (0, 0, 0)
    assert Tenant.objects.get(pk=a.pk).status == "ready"
    assert core.read_namespace(a.namespace).metadata.uid == uid
    assert not OrphanNamespace.objects.exists()
    assert AuditEvent.objects.count() == restored_events


def test_after_a_restore_an_admin_reattaches_recreates_and_decommissions(
    celery_worker, live_cluster, kube_admin, alice, bob, carol, dave, team_a, team_b, medium, tmp_path
):
    core = client.CoreV1Api(kube_admin)
    a = provision(actor=alice, team=team_a, tier=medium, cluster=live_cluster, approver=carol, name="gone")
    a_uid = str(core.read_namespace(a.namespace).metadata.uid)
    dump = tmp_path / "berth.dump"
    pg_dump(dump)
    b = provision(actor=bob, team=team_b, tier=medium, cluster=live_cluster, approver=carol, name="keep")
    c = provision(actor=bob, team=team_b, tier=medium, cluster=live_cluster, approver=carol, name="drop")
    b_uid, c_uid = (str(core.read_namespace(t.namespace).metadata.uid) for t in (b, c))
    services.tenant_decommission(tenant=a, actor=alice)
    wait_status(a, "deleted")
    pg_restore(dump, celery_worker.node_name)

    found = reconcile.reconcile_cluster(live_cluster)
    assert list(found.diverged) == [str(a.pk)] and found.orphans == sorted([b.namespace, c.namespace])
    orphans = {o.name: o for o in OrphanNamespace.objects.filter(cluster=live_cluster)}

    # B goes back to its team: the very namespace, its UID recorded, its tier applied again, and its
    # ServiceAccounts made anew (tokens issued before the restore stop working).
    old_account = str(core.read_namespaced_service_account("berth-tenant", b.namespace).metadata.uid)
    reattached = services.orphan_reattach(orphan=orphans[b.namespace], team=team_b, tier=medium, actor=dave)
    assert reattached.pk == b.pk
    wait_status(reattached, "ready")
    assert core.read_namespace(b.namespace).metadata.uid == b_uid
    assert Tenant.objects.get(pk=b.pk).owned_uids[f"Namespace//{b.namespace}"] == b_uid
    assert core.read_namespaced_service_account("berth-tenant", b.namespace).metadata.uid != old_account
    assert AuditEvent.objects.filter(action="tenant.credentials_renewed", object_id=str(b.pk)).exists()

    # A is provisioned anew, in a fresh namespace.
    recreated = services.tenant_recreate(tenant=Tenant.objects.get(pk=a.pk), actor=dave)
    wait_status(recreated, "ready")
    new_uid = str(core.read_namespace(a.namespace).metadata.uid)
    assert new_uid != a_uid and Tenant.objects.get(pk=a.pk).owned_uids[f"Namespace//{a.namespace}"] == new_uid

    # C is deleted, by its UID; once it is gone the list is empty.
    services.orphan_decommission(orphan=orphans[c.namespace], actor=dave)
    wait_for(
        lambda: (ns := _namespace(core, c.namespace)) is None or ns.metadata.deletion_timestamp is not None,
        timeout=60,
        what=f"{c.namespace} deleted",
    )
    last = reconcile.reconcile_cluster(live_cluster)
    assert (last.orphans, last.diverged, last.in_sync) == ([], {}, 2)
    assert not OrphanNamespace.objects.exists()
    decisions = AuditEvent.objects.filter(actor=dave).values_list("action", flat=True).order_by("pk")
    assert list(decisions) == ["orphan.reattach", "tenant.recreate", "orphan.decommission"]
    assert AuditEvent.objects.get(action="orphan.decommission").object_id == c_uid
