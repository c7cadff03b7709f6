"""The watcher's quota readings (worker.watcher): taken from its index, with no API request, for the usage history
and the idle clock; never held up by a slow Prometheus; and the pass takes none of its own meanwhile."""

from __future__ import annotations

import datetime as dt
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

from tenants.models import Cluster, Tenant, TenantUsageDay
from tests.worker.conftest import MakeTenant, provisioned_ready
from tests.worker.fake_kube import FakeKube
from worker import measured_usage, reconcile
from worker.backends import namespace as ns_backend
from worker.kube import WatchEvent
from worker.watcher import ClusterWatcher, usage_changes, usage_readings

HARD = {"pods": "100", "requests.cpu": "4"}


def _index(*objs: dict) -> dict[str, dict]:
    found: dict[str, dict] = {kind: {} for kind in reconcile.MANAGED_KINDS}
    for obj in objs:
        found[obj["kind"]][reconcile.key_of(obj)] = obj
    return found


def _ns(name: str, phase: str = "Active") -> dict:
    return {"kind": "Namespace", "metadata": {"name": name}, "status": {"phase": phase}}


def _quota(namespace: str, status: dict | None) -> dict:
    obj: dict = {"kind": "ResourceQuota", "metadata": {"name": "berth-quota", "namespace": namespace}}
    if status is not None:
        obj["status"] = status
    return obj


def test_a_reading_is_the_quotas_status_of_each_tenant_whose_namespace_is_active_and_quota_enforced():
    index = _index(
        _ns("dev-a"),
        _quota("dev-a", {"hard": HARD, "used": {"pods": "3"}}),
        _ns("dev-b", phase="Terminating"),
        _quota("dev-b", {"hard": HARD, "used": {}}),
        _ns("dev-c"),
        _quota("dev-c", None),  # the quota controller has not looked yet: nothing enforced
        _quota("dev-d", {"hard": HARD}),  # its namespace is not in the index
        _ns("dev-e"),
        _quota("dev-e", {"hard": HARD}),  # nothing used yet
    )
    tenants = [("a", "dev-a"), ("b", "dev-b"), ("c", "dev-c"), ("d", "dev-d"), ("e", "dev-e"), ("f", "dev-f")]
    assert usage_readings(tenants, index) == {
        "a": {"hard": HARD, "used": {"pods": "3"}},
        "e": {"hard": HARD, "used": {}},
    }


def test_what_changed_is_stored_and_a_change_in_use_since_the_last_reading_is_activity():
    readings = {
        "same": {"hard": HARD, "used": {"pods": "1"}},
        "grew": {"hard": HARD, "used": {"pods": "2"}},
        "first": {"hard": HARD, "used": {"pods": "5"}},
        "back": {"hard": HARD, "used": {"pods": "1"}},  # went up and down between two readings
        "retiered": {"hard": {"pods": "200"}, "used": {"pods": "1"}},
    }
    stored = {
        "same": {"hard": HARD, "used": {"pods": "1"}},
        "grew": {"hard": HARD, "used": {"pods": "1"}},
        "first": {},
        "back": {"hard": HARD, "used": {"pods": "1"}},
        "retiered": {"hard": HARD, "used": {"pods": "1"}},
    }
    changed, active = usage_changes(readings, stored, moved={"back", "not-a-reading"})
    assert set(changed) == {"grew", "first", "retiered"}
    assert active == ["back", "grew"]  # a first reading is no activity; nor is a new quota


def test_a_quotas_status_changing_is_not_drift():
    want: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "berth-quota", "namespace": "dev-a", "labels": {"app.kubernetes.io/managed-by": "berth"}},
        "spec": {"hard": HARD},
    }
    live = {**want, "metadata": {**want["metadata"], "resourceVersion": "9"}, "status": {"hard": HARD, "used": {}}}
    assert not ns_backend.differs(want, live)
    assert not ns_backend.differs(want, {**live, "status": {"hard": HARD, "used": {"pods": "7"}}})


# --- with the database, the index filled from an in-memory API server -------------------------------------------


def _watcher(cluster: Cluster, host: FakeKube) -> ClusterWatcher:
    watcher = ClusterWatcher(cluster, host, send=lambda *job: None)
    watcher.objects = {
        kind: {k: v for k, v in host.objects.items() if k[0] == kind} for kind in reconcile.MANAGED_KINDS
    }
    return watcher


def _samples(tenant: Tenant) -> int:
    return sum(TenantUsageDay.objects.filter(tenant=tenant).values_list("samples", flat=True))


def _used(host: FakeKube, tenant: Tenant, used: dict) -> dict:
    quota = host.objects[("ResourceQuota", tenant.namespace, "berth-quota")]
    quota["status"] = {**quota["status"], "used": used}
    return quota


@pytest.fixture
def two(make_tenant: MakeTenant, host: FakeKube) -> list[Tenant]:
    return [provisioned_ready(make_tenant(name=name), host) for name in ("ua", "ub")]


def test_the_leader_records_every_ready_tenants_reading_from_its_index_without_a_request(host, cluster, two):
    a, b = two
    _used(host, a, {"pods": "3", "requests.cpu": "1500m"})
    watcher = _watcher(cluster, host)
    before, requests = {t.pk: _samples(t) for t in two}, host.requests
    assert watcher.take_readings() == 2
    assert watcher.record_readings(time.monotonic())  # no Prometheus: nothing to wait for
    assert host.requests == requests
    assert {t.pk: _samples(t) - before[t.pk] for t in two} == {a.pk: 1, b.pk: 1}
    day = TenantUsageDay.objects.get(tenant=a, day=timezone.now().date())
    assert day.usage["pods"]["max"] == 3.0 and day.usage["requests.cpu"]["max"] == 1.5
    a.refresh_from_db()
    assert a.quota_usage["used"] == {"pods": "3", "requests.cpu": "1500m"}
    assert a.last_activity_at is not None  # what it uses changed since provisioning read it


def test_use_that_changes_and_changes_back_between_readings_restarts_the_idle_clock(host, cluster, two):
    a, b = two
    Tenant.objects.filter(pk__in=[a.pk, b.pk]).update(last_activity_at=None)
    watcher = _watcher(cluster, host)
    quota = host.objects[("ResourceQuota", a.namespace, "berth-quota")]
    for used in ({"pods": "1"}, quota["status"]["used"]):  # a job came and went
        changed = {**quota, "metadata": {**quota["metadata"]}, "status": {**quota["status"], "used": used}}
        watcher.on_event("ResourceQuota", WatchEvent(type="MODIFIED", object=changed))
    watcher.take_readings()
    watcher.record_readings(time.monotonic())
    assert (
        dict(Tenant.objects.filter(pk__in=[a.pk, b.pk]).values_list("pk", "last_activity_at").order_by())[a.pk]
        is not None
    )
    assert Tenant.objects.get(pk=b.pk).last_activity_at is None
    assert watcher.moved == set()


@pytest.fixture
def silent_prometheus() -> Iterator[str]:
    """A Prometheus that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()


def test_a_silent_prometheus_never_holds_up_the_loop_and_the_readings_go_without_it(
    host, cluster, two, settings, silent_prometheus
):
    settings.BERTH_PROMETHEUS = {"p": {"url": silent_prometheus}}
    settings.BERTH_MEASURED_USAGE_TIMEOUT = 1.0
    Cluster.objects.filter(pk=cluster.pk).update(prometheus="p")
    measured_usage._failed_at.clear()
    watcher = _watcher(cluster, host)
    before = _samples(two[0])
    watcher.take_readings()
    started = time.monotonic()
    assert not watcher.record_readings(time.monotonic())  # not answered yet: the loop goes on
    assert time.monotonic() - started < 0.5
    assert _samples(two[0]) == before
    assert watcher.pending is not None
    assert watcher.record_readings(watcher.pending.deadline)  # overdue: recorded without the measured part
    assert time.monotonic() - started < 0.5
    day = TenantUsageDay.objects.get(tenant=two[0], day=timezone.now().date())
    assert _samples(two[0]) == before + 1 and "measured.cpu" not in day.usage
    measured_usage._failed_at.clear()


def test_the_pass_takes_no_reading_of_a_tenant_the_watcher_read_lately(host, cluster, two, settings):
    settings.BERTH_WATCHER = True
    settings.BERTH_USAGE_MAX_GAP_SECONDS = 600
    a, b = two
    watcher = _watcher(cluster, host)
    watcher.take_readings()
    watcher.record_readings(time.monotonic())
    # b's watcher went quiet long ago (no watcher running): the pass reads it, as before.
    Tenant.objects.filter(pk=b.pk).update(usage_sampled_at=timezone.now() - dt.timedelta(hours=1))
    before = {t.pk: _samples(t) for t in two}
    result = reconcile.reconcile_cluster(cluster)
    assert result.in_sync == 2 and set(result.readings) == {str(b.pk)}
    assert {t.pk: _samples(t) - before[t.pk] for t in two} == {a.pk: 0, b.pk: 1}
    settings.BERTH_WATCHER = False  # without a watcher, the pass reads every tenant
    assert set(reconcile.reconcile_cluster(cluster).readings) == {str(a.pk), str(b.pk)}


def test_an_answered_measurement_goes_into_the_readings_and_an_unmeasured_namespace_goes_without(
    host, cluster, two, settings, monkeypatch
):
    a, b = two
    watcher = _watcher(cluster, host)
    watcher.take_readings()
    assert watcher.pending is not None

    class Answered:
        def ready(self) -> bool:
            return True

        def result(self) -> measured_usage.Measurement:
            # a's namespace measured; b's has no series (and its reading is not idle, or says nothing): unmeasured
            return measured_usage.Measurement(cpu={a.namespace: 0.25}, memory={a.namespace: 64 * 2**20})

    monkeypatch.setattr(watcher.pending, "measure", Answered())
    assert watcher.record_readings(time.monotonic())
    today = timezone.now().date()
    usage_a = TenantUsageDay.objects.get(tenant=a, day=today).usage
    usage_b = TenantUsageDay.objects.get(tenant=b, day=today).usage
    assert usage_a["measured.cpu"]["max"] == 0.25 and usage_a["measured.memory"]["max"] == 64 * 2**20
    assert "measured.cpu" not in usage_b
