"""The fleet benchmark's helpers (bench/fleet.py): the audit policy, counting Berth's requests from the audit log
by step, identity and verb, the API server's counters, repairs counted once, and the copies of a real isolation
report every ready tenant without one gets before the pages are measured."""

import json
import math
from typing import Any

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


REPORT: dict[str, Any] = {
    "passed": False,
    "checked_at": "2026-11-29T05:00:00+00:00",
    "checks": [
        {
            "id": "MTB-PL1-CC-TI-1",
            "title": "Block access to other tenants' resources",
            "passed": True,
            "proven": True,
            "detail": 'refused: configmaps is forbidden: User "system:serviceaccount:fleet-w-00000:tenant" cannot list',
        },
        {"id": "berth-net-dns", "title": "DNS", "passed": False, "proven": False, "detail": "not proven: no node"},
    ],
}


def test_a_copied_report_names_its_own_tenant_and_takes_the_verdict_it_is_given():
    copy = fleet.copied_report(REPORT, "fleet-w-00000", "fleet-f-00042", failing=False, checked_at="now")
    assert copy["passed"] is True and copy["checked_at"] == "now"
    assert [c["passed"] for c in copy["checks"]] == [True, True]
    assert "system:serviceaccount:fleet-f-00042:tenant" in copy["checks"][0]["detail"]
    assert "fleet-w-00000" not in json.dumps(copy)
    assert [(c["id"], c["title"], c["proven"]) for c in copy["checks"]] == [
        (c["id"], c["title"], c["proven"]) for c in REPORT["checks"]
    ]
    assert REPORT["checks"][1]["passed"] is False and REPORT["checked_at"] != "now"  # the source is left alone

    failing = fleet.copied_report(REPORT, "fleet-w-00000", "fleet-f-00042", failing=True, checked_at="now")
    assert failing["passed"] is False and [c["passed"] for c in failing["checks"]] == [True, False]
    passing_source = fleet.copied_report(REPORT, "fleet-w-00000", "fleet-w-00000", failing=False, checked_at="now")
    failing = fleet.copied_report(passing_source, "fleet-w-00000", "fleet-f-00001", failing=True, checked_at="now")
    assert failing["passed"] is False and [c["passed"] for c in failing["checks"]] == [False, True]


@pytest.mark.django_db(transaction=True)  # fill_isolation_reports ends with VACUUM, which no transaction may hold
def test_every_ready_tenant_without_a_report_gets_a_copy_of_the_newest_real_one(cluster, medium, alice, team_a):
    from tenants import services
    from tenants.models import AuditEvent, Tenant

    def tenant(name: str, status: str = "ready") -> Tenant:
        return Tenant.objects.create(
            name=name,
            namespace=f"fleet-{name}",
            team=team_a,
            tier=medium,
            cluster=cluster,
            status=status,
            created_by=alice,
        )

    source = tenant("w-00000")
    services.tenant_record_isolation_report(
        tenant=source,
        report=fleet.copied_report(REPORT, "fleet-w-00000", "fleet-w-00000", failing=False, checked_at="then"),
    )
    bare = [tenant(f"f-{i:05d}") for i in range(40)]
    waiting = tenant("f-99999", status="provisioning")

    assert fleet.fill_isolation_reports(cluster) == 40
    reports = dict(Tenant.objects.filter(cluster=cluster).values_list("name", "isolation_report"))
    assert reports["w-00000"]["checked_at"] == "then" and reports[waiting.name] == {}
    failing = sorted(t.name for t in bare if reports[t.name]["passed"] is False)
    assert failing == ["f-00019", "f-00039"]  # 1 in 20, by name
    for t in bare:
        report = reports[t.name]
        assert f"system:serviceaccount:fleet-{t.name}:tenant" in report["checks"][0]["detail"]
        assert len(report["checks"]) == len(REPORT["checks"]) and report["checked_at"] != "then"
    assert not Tenant.objects.filter(status="ready", isolation_report_at__isnull=True).exists()
    assert AuditEvent.objects.filter(action="tenant.isolation_checked").count() == 41
    assert fleet.fill_isolation_reports(cluster) == 0  # step 9 copies only to those without one
