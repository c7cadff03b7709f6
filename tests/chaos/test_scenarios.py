"""Chaos: each part of Berth broken in the middle of a burst of approvals, tier changes and decommissions from
three teams, then everything checked (tests/chaos/burst.py says what). `make chaos` runs them all and prints the
table; the two marked ``chaos_quick`` also run in `make test`.

Each scenario has a bed of its own (tests/chaos/bed.py): its own PostgreSQL, Redis, portal, worker and beat.
The control-plane scenarios break the run's dev control plane (no other test runs meanwhile; it is back, same
ports and data, before the scenario ends); the kubelet scenario uses the control plane with nodes.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from kubernetes.client import CoreV1Api

from tests.chaos.bed import Bed, chaos_bed
from tests.chaos.burst import Burst, Lane
from tests.chaos.results import annotate
from tests.chaos.runner import database_away_answers, restart, run, sigkill, wait_api_server


@pytest.fixture
def bed(request: pytest.FixtureRequest, control_plane, kube_admin) -> Iterator[Bed]:
    with chaos_bed(request.node.name.removeprefix("test_"), control_plane, kube_admin) as made:
        yield made


@pytest.mark.chaos_quick
def test_worker_pool_sigkilled_mid_burst(bed: Bed) -> None:
    """The worker's parent and its prefork children die mid-task (OOM kill, node loss); its Deployment starts
    it again 5 s later. Jobs it held are lost with it: the sweep sends them again."""

    def inject(bed: Bed, burst: Burst) -> None:
        bed.kill_worker()
        time.sleep(5)
        bed.start_worker()

    run(bed, "worker pool SIGKILLed, back after 5 s", inject)


@pytest.mark.chaos_quick
def test_postgresql_restarted_under_portal_and_worker(bed: Bed) -> None:
    """PostgreSQL's fast shutdown, 10 s away, started again on the same data. Meanwhile the portal answers 503
    with a body that says so (API and pages), never a 500; clients retry; the worker's jobs resume."""

    def inject(bed: Bed, burst: Burst) -> None:
        bed.postgres.stop()
        time.sleep(2)
        problems = database_away_answers(bed)
        time.sleep(8)
        bed.postgres.start()
        bed.notes.extend(problems)
        assert not problems, problems

    run(bed, "PostgreSQL restarted (fast shutdown, 10 s away)", inject)


def test_redis_restarted(bed: Bed) -> None:
    """Redis (broker and cache, no persistence) stopped for 10 s and started empty: queued jobs are gone, the
    worker and beat reconnect, the sweep sends lost work again."""

    def inject(bed: Bed, burst: Burst) -> None:
        bed.redis.stop()
        time.sleep(10)
        bed.redis.start()

    run(bed, "Redis restarted empty (10 s away)", inject)


def test_api_server_sigkilled_and_restarted_after_20s(bed: Bed) -> None:
    def inject(bed: Bed, burst: Burst) -> None:
        apiserver = bed.plane.component("kube-apiserver")
        sigkill(apiserver)
        time.sleep(20)
        restart(apiserver, bed, "chaos")
        wait_api_server(bed)

    run(bed, "kube-apiserver SIGKILLed, restarted after 20 s", inject)


def test_etcd_stopped_for_30s(bed: Bed) -> None:
    def inject(bed: Bed, burst: Burst) -> None:
        etcd = bed.plane.component("etcd")
        assert etcd.pid is not None
        os.kill(etcd.pid, signal.SIGSTOP)
        try:
            time.sleep(30)
        finally:
            os.kill(etcd.pid, signal.SIGCONT)
        wait_api_server(bed)

    run(bed, "etcd SIGSTOPped for 30 s", inject)


@pytest.fixture
def node_bed(node_control_plane, node_kube_admin) -> Iterator[Bed]:
    with chaos_bed("kubelet_stopped", node_control_plane, node_kube_admin) as made:
        yield made


def _node_ready(bed: Bed, name: str) -> bool:
    node = CoreV1Api(bed.kube).read_node(name)
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def test_a_nodes_kubelet_stopped(node_bed: Bed) -> None:
    """The shared pool's only kubelet (where medium tenants' pods run) stops (SIGSTOP) until its node is NotReady,
    while tenants are made and isolation checks are asked for. Namespace tenants need no node to be ready; the
    isolation report says what it could not prove (not proven, never passed, never a proven failure), nothing is
    marked failed, and once the node is back a new check proves everything."""
    bed = node_bed
    node = "shared-1"
    checked: list[Lane] = []
    before: dict[str, object] = {}
    away: dict[str, dict] = {}

    def inject(bed: Bed, burst: Burst) -> None:
        kubelet = bed.plane.component(f"kubelet {node}")
        assert kubelet.pid is not None
        os.kill(kubelet.pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 120
            while _node_ready(bed, node):
                assert time.monotonic() < deadline, f"{node} still Ready 120 s after its kubelet stopped"
                time.sleep(2)
            bed.notes.append(f"{node} NotReady after {120 - (deadline - time.monotonic()):.0f} s")
            ready = [lane for lane in burst.lanes if lane.kind == "keep" and lane.tenant_id]
            for lane in ready[:2]:
                _wait_status(bed, lane.tenant_id, "ready", 120)
                before[lane.tenant_id] = _report_at(bed, lane.tenant_id)
                owner = burst.clients[lane.team]
                answer = owner.call("POST", f"/api/v1/tenants/{lane.tenant_id}/isolation-check/", {})
                assert answer.status_code in (200, 202), answer.text[:300]
                checked.append(lane)
            for lane in checked:  # the reports made while the node is away, as they were then
                _wait_report(bed, lane.tenant_id, before[lane.tenant_id], 240)
                away[lane.tenant_id] = _report(bed, lane.tenant_id)
        finally:
            os.kill(kubelet.pid, signal.SIGCONT)
        deadline = time.monotonic() + 120
        while not _node_ready(bed, node):
            assert time.monotonic() < deadline, f"{node} not Ready again 120 s after its kubelet resumed"
            time.sleep(2)

    burst = run(bed, f"kubelet of {node} stopped until NotReady", inject, bound=180)
    assert checked, "no ready tenant to check while the node was away"
    unproven_ids: set[str] = set()
    for lane in checked:
        report = away[lane.tenant_id]
        wrong = [c for c in report["checks"] if c.get("proven", True) and not c["passed"]]
        assert not wrong, f"checks that failed as proven while {node} was away: {wrong}"
        unproven = [c for c in report["checks"] if c.get("proven") is False]
        for check in unproven:
            assert not check["passed"] and "not proven" in check["detail"], check
        assert report["passed"] is (not unproven), report
        unproven_ids |= {c["id"] for c in unproven}
    annotate(f"not proven while {node} was away: {', '.join(sorted(unproven_ids)) or 'nothing'}")
    for lane in checked:  # the node back: a new check proves what could not be proven
        previous = _report_at(bed, lane.tenant_id)
        answer = burst.clients[lane.team].call("POST", f"/api/v1/tenants/{lane.tenant_id}/isolation-check/", {})
        assert answer.status_code in (200, 202), answer.text[:300]
        _wait_report(bed, lane.tenant_id, previous, 240)
        report = _report(bed, lane.tenant_id)
        assert report["passed"], [c for c in report["checks"] if not c["passed"]]


def _report(bed: Bed, tenant_id: str) -> dict:
    rows = bed.sql("SELECT isolation_report FROM tenants_tenant WHERE id = %s", (tenant_id,))
    return rows[0][0] or {}


def _report_at(bed: Bed, tenant_id: str) -> object:
    return bed.sql("SELECT isolation_report_at FROM tenants_tenant WHERE id = %s", (tenant_id,))[0][0]


def _wait_report(bed: Bed, tenant_id: str, previous: object, timeout: float) -> None:
    """Until a report newer than ``previous`` is recorded."""
    deadline = time.monotonic() + timeout
    while _report_at(bed, tenant_id) == previous:
        assert time.monotonic() < deadline, f"no isolation report for {tenant_id} within {timeout:.0f} s"
        time.sleep(2)


def _wait_status(bed: Bed, tenant_id: str, status: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while bed.sql("SELECT status FROM tenants_tenant WHERE id = %s", (tenant_id,))[0][0] != status:
        assert time.monotonic() < deadline, f"tenant {tenant_id} not {status} within {timeout:.0f} s"
        time.sleep(1)
