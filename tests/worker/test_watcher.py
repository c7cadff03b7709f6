"""Pure logic of the watcher: coalescing marks into one repair per tenant, reading a watch stream, the heartbeat."""

from __future__ import annotations

import json
import threading
import time

import pytest

from worker import kube, watcher
from worker.kube import KubeGone, KubeTransientError
from worker.watcher import Coalescer


def test_a_burst_of_marks_on_one_tenant_becomes_one_repair_after_the_window():
    sent: list[str] = []
    coalescer = Coalescer(send=sent.append, window=1.0)
    for at in (0.0, 0.2, 0.9):
        coalescer.mark("alice", at)
    coalescer.mark("bob", 0.5)
    assert coalescer.flush(0.99) == [] and sent == []
    assert coalescer.flush(1.0) == ["alice"]
    assert coalescer.flush(1.5) == ["bob"]
    assert sent == ["alice", "bob"]
    coalescer.mark("alice", 2.0)  # a later edit is a new repair
    assert coalescer.next_due() == 3.0
    assert coalescer.flush(3.0) == ["alice"]


def test_a_repair_names_every_object_its_marks_named_and_a_later_repair_only_its_own():
    sent: list[tuple] = []
    coalescer = Coalescer(send=lambda *job: sent.append(job), window=1.0)
    quota, deny = ("ResourceQuota", "t-a", "berth-quota"), ("NetworkPolicy", "t-a", "berth-default-deny")
    coalescer.mark("alice", 0.0, deny)
    coalescer.mark("alice", 0.5, quota)
    coalescer.mark("alice", 0.6, deny)
    coalescer.mark("bob", 0.0)  # no object named: a repair of the whole tenant
    coalescer.flush(1.0)
    assert sent == [("alice", [deny, quota]), ("bob",)]
    coalescer.mark("alice", 2.0, quota)
    coalescer.flush(3.0)
    assert sent[-1] == ("alice", [quota])


def _lines(*events: dict) -> list[bytes]:
    return [json.dumps(event).encode() for event in events]


def test_events_carry_their_kind_and_bookmarks_their_resource_version():
    events = list(
        kube._watch_events(
            "ResourceQuota",
            _lines(
                {"type": "MODIFIED", "object": {"metadata": {"name": "berth-quota", "resourceVersion": "7"}}},
                {"type": "BOOKMARK", "object": {"kind": "ResourceQuota", "metadata": {"resourceVersion": "9"}}},
            ),
            "watch",
        )
    )
    assert [(e.type, e.object["kind"], e.resource_version) for e in events] == [
        ("MODIFIED", "ResourceQuota", "7"),
        ("BOOKMARK", "ResourceQuota", "9"),
    ]


def test_an_expired_resource_version_in_the_stream_is_gone():
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 5 (90)"}
    with pytest.raises(KubeGone, match="too old resource version"):
        list(kube._watch_events("Role", _lines({"type": "ERROR", "object": status}), "watch Role"))


def test_a_garbled_line_is_a_dropped_connection_not_a_crash():
    with pytest.raises(KubeTransientError):
        list(kube._watch_events("Role", [b"{not json"], "watch Role"))


def test_the_heartbeat_stops_once_a_clusters_loop_has_not_gone_round_lately(tmp_path, monkeypatch):
    """A hung leader keeps its lock (a database session's); its heartbeat file going stale is what gets it restarted."""
    monkeypatch.setattr(watcher, "TICKS", {})
    monkeypatch.setattr(watcher, "HEARTBEAT_EVERY_SECONDS", 0.01)
    beat = tmp_path / "heartbeat"
    watcher.tick("a")
    watcher.tick("b")
    assert watcher.alive(time.monotonic())
    stop = threading.Event()
    thread = threading.Thread(target=watcher.keep_heartbeat, args=(str(beat), stop), daemon=True)
    thread.start()
    try:
        wait = time.monotonic() + 5
        while not beat.exists() and time.monotonic() < wait:
            time.sleep(0.01)
        assert beat.exists()
        watcher.TICKS["b"] = time.monotonic() - watcher.STALL_SECONDS - 1  # b's loop is stuck
        assert not watcher.alive(time.monotonic())
        time.sleep(0.05)  # whatever round was under way is over
        touched = beat.stat().st_mtime_ns
        time.sleep(0.2)
        assert beat.stat().st_mtime_ns == touched
        watcher.tick("b")
        wait = time.monotonic() + 5
        while beat.stat().st_mtime_ns == touched and time.monotonic() < wait:
            time.sleep(0.01)
        assert beat.stat().st_mtime_ns > touched
    finally:
        stop.set()
        thread.join(timeout=5)
