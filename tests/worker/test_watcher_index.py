"""What the watcher does from its index besides repairs (worker.watcher): a provisioning tenant's next step taken
as soon as its quota is counted, the periodic relist that stands in for the pass, and the orphans it records.
Against an in-memory API server; the same against the dev control plane is in test_watcher_cluster.py."""

from __future__ import annotations

import copy
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

from tenants.models import Cluster, OrphanNamespace, Tenant
from tests.worker.conftest import MakeTenant, provisioned_ready
from tests.worker.fake_kube import FakeKube
from worker import manifests, provisioning, reconcile
from worker.kube import WatchEvent
from worker.provisioning import Outcome
from worker.watcher import LOOK_DELAY_SECONDS, ClusterWatcher


def _watcher(cluster: Cluster, host: FakeKube, looks: list[str]) -> ClusterWatcher:
    watcher = ClusterWatcher(cluster, host, send=lambda *job: None, send_look=looks.append)
    watcher.objects = {
        kind: {k: copy.deepcopy(v) for k, v in host.objects.items() if k[0] == kind} for kind in reconcile.MANAGED_KINDS
    }
    return watcher


def _quota(host: FakeKube, tenant: Tenant, status: dict[str, Any] | None) -> dict[str, Any]:
    quota = copy.deepcopy(host.objects[("ResourceQuota", tenant.namespace, "berth-quota")])
    quota["status"] = status or {}
    return quota


def test_a_provisioning_tenants_quota_counted_has_its_next_step_taken_once(make_tenant: MakeTenant, host, cluster):
    tenant = make_tenant()
    assert provisioning.provision(str(tenant.pk)).outcome == Outcome.NOT_YET  # applied; quota not counted
    looks: list[str] = []
    watcher = _watcher(cluster, host, looks)
    hard = {"hard": {"pods": "20"}, "used": {"pods": "0"}}
    watcher.on_event("ResourceQuota", WatchEvent("MODIFIED", _quota(host, tenant, hard)))
    now = time.monotonic()
    assert watcher.looks.flush(now) == [] and looks == []  # a moment for the step that applied it to finish
    watcher.looks.flush(now + LOOK_DELAY_SECONDS)
    assert looks == [str(tenant.pk)]
    # What it uses changing later is no new look; nor is a quota that was counted already when it was listed.
    watcher.on_event("ResourceQuota", WatchEvent("MODIFIED", _quota(host, tenant, {**hard, "used": {"pods": "1"}})))
    watcher.looks.flush(time.monotonic() + LOOK_DELAY_SECONDS)
    assert looks == [str(tenant.pk)]


def test_a_tenant_its_own_step_made_ready_meanwhile_gets_no_look(make_tenant: MakeTenant, host, cluster):
    tenant = make_tenant()
    assert provisioning.provision(str(tenant.pk)).outcome == Outcome.NOT_YET
    looks: list[str] = []
    watcher = _watcher(cluster, host, looks)
    watcher.on_event("ResourceQuota", WatchEvent("MODIFIED", _quota(host, tenant, {"hard": {"pods": "20"}})))
    host.observe_quotas()
    assert provisioning.provision(str(tenant.pk), 1).outcome == Outcome.READY  # the step, within the moment
    watcher.looks.flush(time.monotonic() + LOOK_DELAY_SECONDS)
    assert looks == []


def test_no_look_for_a_ready_tenant_another_clusters_or_an_object_without_a_tenant(
    make_tenant: MakeTenant, host, cluster, small, medium, large
):
    other_cluster = Cluster.objects.create(name="other", api_url="https://127.0.0.1:6444", kinds=["namespace"])
    other_cluster.tiers.set([small, medium, large])
    ready = provisioned_ready(make_tenant(name="ready"), host)
    elsewhere = make_tenant(name="far", on=other_cluster)
    assert provisioning.provision(str(elsewhere.pk)).outcome == Outcome.NOT_YET
    looks: list[str] = []
    watcher = _watcher(cluster, host, looks)
    hard = {"hard": {"pods": "20"}}
    for tenant in (ready, elsewhere):
        watcher.objects["ResourceQuota"][("ResourceQuota", tenant.namespace, "berth-quota")]["status"] = {}
        watcher.on_event("ResourceQuota", WatchEvent("MODIFIED", _quota(host, tenant, hard)))
    forged = _quota(host, ready, hard)
    forged["metadata"] = {**forged["metadata"], "name": "berth-quota", "namespace": "theirs", "uid": "x"}
    forged["metadata"]["labels"] = {**forged["metadata"]["labels"], manifests.TENANT_ID_LABEL: "not-a-tenant"}
    watcher.on_event("ResourceQuota", WatchEvent("ADDED", forged))
    watcher.looks.flush(time.monotonic() + LOOK_DELAY_SECONDS)
    assert looks == []


class _EndingWatch:
    """A client whose watches end at once with nothing to say (the server's timeout)."""

    server = "fake"

    def __init__(self) -> None:
        self.watches = 0

    def watch(self, kind: str, **kwargs: object) -> Iterator[WatchEvent]:
        self.watches += 1
        return iter(())


def test_a_watch_ending_once_the_pass_interval_has_passed_asks_for_a_relist(cluster, settings):
    settings.BERTH_RECONCILE_SECONDS = 0.0
    k = _EndingWatch()
    watcher = ClusterWatcher(cluster, k)  # type: ignore[arg-type]
    thread = threading.Thread(target=watcher.stream, args=("RoleBinding",), daemon=True)
    thread.start()
    kind, event = watcher.events.get(timeout=5)
    assert (kind, event) == ("RoleBinding", None)  # ``run`` lists the kind again, then the stream goes on
    watcher.stop.set()
    watcher._relisted["RoleBinding"].set()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_a_watch_ending_within_the_pass_interval_resumes_without_a_relist(cluster, settings):
    settings.BERTH_RECONCILE_SECONDS = 3600.0
    k = _EndingWatch()
    watcher = ClusterWatcher(cluster, k)  # type: ignore[arg-type]
    watcher.listed_at["RoleBinding"] = 1e12  # listed just now, as far as the clock goes
    thread = threading.Thread(target=watcher.stream, args=("RoleBinding",), daemon=True)
    thread.start()
    try:
        try:
            got = watcher.events.get(timeout=0.5)
        except queue.Empty:
            got = None
        assert got is None and k.watches > 1  # resumed again and again, never asked to list
    finally:
        watcher.stop.set()
        thread.join(timeout=5)


def test_the_resync_records_the_orphans_its_index_holds(make_tenant: MakeTenant, host, cluster):
    tenant = provisioned_ready(make_tenant(name="kept"), host)
    labels = {**manifests.MANAGED_BY, manifests.TENANT_ID_LABEL: "0b1c2d3e-0000-4000-8000-000000000001"}
    host.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dev-newer", "uid": "u", "labels": labels}})
    watcher = _watcher(cluster, host, [])
    requests = host.requests
    watcher.resync()
    assert host.requests == requests  # from memory
    assert list(OrphanNamespace.objects.filter(cluster=cluster).values_list("name", flat=True)) == ["dev-newer"]
    assert not OrphanNamespace.objects.filter(name=tenant.namespace).exists()


def test_an_event_that_changes_only_the_status_is_not_compared(make_tenant: MakeTenant, host, cluster, monkeypatch):
    """A quota counting what the tenant uses is the commonest event, and never drift: the tenant is not rendered for
    it. A change of what Berth renders, in the very next event, is."""
    tenant = provisioned_ready(make_tenant(name="busy"), host)
    watcher = _watcher(cluster, host, [])
    rendered: list[str] = []
    desired = watcher.desired

    def counted(t: Tenant) -> dict:
        rendered.append(t.name)
        return desired(t)

    monkeypatch.setattr(watcher, "desired", counted)
    marked: list[str] = []
    monkeypatch.setattr(watcher.coalescer, "mark", lambda tid, now, key: marked.append(tid))
    quota = _quota(host, tenant, {"hard": {"pods": "20"}, "used": {"pods": "4"}})
    quota["metadata"]["resourceVersion"] = "77"
    watcher.on_event("ResourceQuota", WatchEvent("MODIFIED", quota))
    assert rendered == [] and marked == []
    edited = copy.deepcopy(quota)
    edited["spec"]["hard"]["pods"] = "9999"
    edited["metadata"]["resourceVersion"] = "78"
    watcher.on_event("ResourceQuota", WatchEvent("MODIFIED", edited))
    assert rendered == ["busy"] and marked == [str(tenant.pk)]


def test_a_repair_is_sent_naming_the_objects_that_drifted(make_tenant: MakeTenant, host, cluster):
    """From an event (the object it brought) and from a check of the whole tenant (each object that differs), so the
    repair job reads those alone."""
    tenant = provisioned_ready(make_tenant(name="edited"), host)
    sent: list[tuple] = []
    watcher = _watcher(cluster, host, [])
    watcher.coalescer.send = lambda *job: sent.append(job)
    quota = ("ResourceQuota", tenant.namespace, "berth-quota")
    deny = ("NetworkPolicy", tenant.namespace, "berth-default-deny")
    edited = copy.deepcopy(watcher.objects["ResourceQuota"][quota])
    edited["spec"]["hard"]["pods"] = "9999"
    edited["metadata"]["resourceVersion"] = "91"
    watcher.on_event("ResourceQuota", WatchEvent("MODIFIED", edited))
    watcher.on_event("NetworkPolicy", WatchEvent("DELETED", watcher.objects["NetworkPolicy"][deny]))
    watcher.coalescer.flush(time.monotonic() + 60)
    assert sent == [(str(tenant.pk), sorted([quota, deny]))]
    limits = ("LimitRange", tenant.namespace, "berth-limits")
    del watcher.objects["LimitRange"][limits]  # gone while nobody watched
    watcher.check_tenant(tenant)
    watcher.coalescer.flush(time.monotonic() + 60)
    # Nothing was repaired meanwhile: the quota and the policy are still as the events left them in the index.
    assert sent[-1] == (str(tenant.pk), sorted([quota, deny, limits]))


def test_a_batch_of_events_reads_its_tenants_in_one_query_and_marks_as_one_by_one_would(
    make_tenant: MakeTenant, host, cluster, django_assert_max_num_queries
):
    tenants = [provisioned_ready(make_tenant(name=f"b{i}"), host) for i in range(4)]
    sent: list[tuple] = []
    watcher = _watcher(cluster, host, [])
    watcher.coalescer.send = lambda *job: sent.append(job)
    batch: list = []
    for i, tenant in enumerate(tenants):
        key = ("ResourceQuota", tenant.namespace, "berth-quota")
        edited = copy.deepcopy(watcher.objects["ResourceQuota"][key])
        edited["metadata"]["resourceVersion"] = f"9{i}"
        if i % 2 == 0:
            edited["spec"]["hard"]["pods"] = "9999"  # drift
        else:
            edited["metadata"]["annotations"] = {"someone": "else"}  # not something Berth renders: no drift
        batch.append(("ResourceQuota", WatchEvent("MODIFIED", edited)))
    deny = ("NetworkPolicy", tenants[1].namespace, "berth-default-deny")
    batch.append(("NetworkPolicy", WatchEvent("DELETED", watcher.objects["NetworkPolicy"][deny])))
    with django_assert_max_num_queries(1):
        watcher.handle(batch)
    watcher.coalescer.flush(time.monotonic() + 60)
    quota = lambda t: ("ResourceQuota", t.namespace, "berth-quota")  # noqa: E731
    assert sorted(sent) == sorted(
        [
            (str(tenants[0].pk), [quota(tenants[0])]),
            (str(tenants[1].pk), [deny]),
            (str(tenants[2].pk), [quota(tenants[2])]),
        ]
    )
