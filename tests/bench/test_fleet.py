"""The fleet benchmark's pure helpers (bench/fleet.py): the audit policy, counting Berth's requests from the audit log
by step, identity and verb, the API server's counters, and repairs counted once."""

import json
import math

import pytest

from bench import fleet

USERS = {
    "system:serviceaccount:berth:berth-worker": "worker",
    "system:serviceaccount:berth:berth-watcher": "watcher",
}


def event(audit_id: str, user: str, verb: str, at: str, stage: str = "ResponseComplete", **extra: object) -> str:
    return json.dumps(
        {
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": "Metadata",
            "auditID": audit_id,
            "stage": stage,
            "verb": verb,
            "user": {"username": user},
            "userAgent": "berth-worker" if "worker" in user else "berth-watcher",
            "objectRef": {"resource": "resourcequotas"},
            "requestReceivedTimestamp": at,
            **extra,
        }
    )


def test_the_policy_records_berth_and_tenant_service_accounts_at_metadata_and_no_controller():
    policy = fleet.audit_policy(["b", "a"])
    assert policy["omitStages"] == ["RequestReceived"]
    assert policy["rules"] == [
        {"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},  # first match wins
        {"level": "Metadata", "users": ["a", "b"]},
        {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
        {"level": "None"},
    ]


def test_each_request_counts_once_whatever_its_stages_and_strangers_not_at_all():
    lines = [
        event(
            "1", "system:serviceaccount:berth:berth-watcher", "watch", "2026-11-29T01:00:00.000000Z", "ResponseStarted"
        ),
        event("2", "system:serviceaccount:berth:berth-worker", "patch", "2026-11-29T01:00:01.500000Z"),
        event("1", "system:serviceaccount:berth:berth-watcher", "watch", "2026-11-29T01:00:00.000000Z"),
        event("3", "berth-admin", "delete", "2026-11-29T01:00:02Z"),
        event("4", "system:serviceaccount:bench-t1:berth-tenant", "create", "2026-11-29T01:00:03Z"),
        "",
    ]
    found = fleet.audit_requests(lines, USERS)
    assert [(r.role, r.verb, r.agent, r.resource) for r in found] == [
        ("watcher", "watch", "berth-watcher", "resourcequotas"),
        ("worker", "patch", "berth-worker", "resourcequotas"),
        ("tenant token", "create", "berth-watcher", "resourcequotas"),
    ]
    assert found[1].at - found[0].at == pytest.approx(1.5)


def test_requests_fall_in_the_step_whose_window_holds_their_arrival():
    requests = [
        fleet.Request(at=t, role=role, agent="", verb=verb, resource="")
        for t, role, verb in [
            (1.0, "worker", "patch"),
            (2.0, "worker", "patch"),
            (5.0, "watcher", "watch"),
            (9.0, "worker", "get"),
        ]
    ]
    steps = [fleet.Step("provision", 0.0, 3.0), fleet.Step("idle", 4.0, 6.0)]
    counts = fleet.by_step(requests, steps)
    assert counts["provision"] == {("worker", "patch"): 2}
    assert counts["idle"] == {("watcher", "watch"): 1}
    assert counts["between steps"] == {("worker", "get"): 1}
    table = fleet.verb_table(counts, steps)
    idle_row = next(line for line in table.splitlines() if line.strip().startswith("idle"))
    assert idle_row.split()[-3:] == ["1", "2", "0.500"]  # total, seconds, per second


DISPATCHED = "apiserver_flowcontrol_dispatched_requests_total"


def test_the_counters_sum_their_series_and_the_flow_schema_is_selected():
    text = "\n".join(
        [
            "# HELP apiserver_request_total Counter",
            'apiserver_request_total{code="200",resource="pods",verb="GET"} 5',
            'apiserver_request_total{code="201",resource="pods",verb="POST"} 2',
            f'{DISPATCHED}{{flow_schema="service-accounts",priority_level="workload-low"}} 7',
            f'{DISPATCHED}{{flow_schema="kube-system-service-accounts",priority_level="workload-high"}} 100',
        ]
    )
    assert fleet.counter_sums(text) == {"all clients": 7.0, "service-accounts": 7.0}
    step = fleet.Step("x", 0.0, 1.0, counters_start={"all clients": 2.0}, counters_end={"all clients": 9.0})
    assert step.counted("all clients") == 7.0
    assert math.isnan(step.counted("service-accounts"))


def test_spread_takes_evenly_over_the_list():
    assert fleet.spread(list(range(10)), 5) == [0, 2, 4, 6, 8]
    assert fleet.spread([1, 2], 5) == [1, 2]


def test_repairs_count_from_their_edit_on_once_more_or_never():
    edited = {"a": 10.0, "b": 20.0, "c": 30.0}
    repairs = [("a", 9.0), ("a", 11.5), ("b", 21.0), ("b", 22.0), ("z", 40.0)]
    result = fleet.exactly_once(edited, repairs)
    assert (result["once"], result["more"], result["never"]) == (1, 1, 1)
    assert result["latency"] == [1.0, 1.5]
    assert result["last"] == 22.0


def test_quick_shortens_what_is_not_given_explicitly():
    args = fleet.parse_args(["--quick", "--idle-minutes", "6"])
    assert (args.tenants, args.idle_minutes, args.drift_edits, args.storm_edits) == (100, 6.0, 20, 100)
    args = fleet.parse_args(["--tenants", "10000"])
    assert (args.tenants, args.idle_minutes, args.drift_edits, args.storm_edits, args.page_rounds) == (
        10000,
        10.0,
        100,
        1000,
        30,
    )
