"""Pure logic of the watcher: coalescing marks into one repair per tenant, and reading a watch stream."""

from __future__ import annotations

import json

import pytest

from worker import kube
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
