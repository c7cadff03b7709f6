"""Planning (pure logic, no portal): what a tenants file asks of the portal, and the keys that make re-runs safe.

The same plans are applied against a live portal and the dev cluster in test_apply_live.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from berth_cli import plan as plans
from berth_cli.errors import CliError, Exit
from berth_cli.tenantsfile import InvalidFile, TenantsFile, parse

ALICE = {"username": "alice", "teams": [{"team": "team-a", "role": "owner"}], "platform_roles": []}
TIERS = {name: {"name": name} for name in ("small", "medium", "large")}
CLUSTERS = {"dev": {"name": "dev", "kinds": ["namespace"], "tiers": ["small", "medium", "large"]}}


def tenants_file(body: str, teams: str = "[team-a]") -> TenantsFile:
    header = f"apiVersion: berth.dev/v1\nkind: TenantList\nteams: {teams}\ntenants:\n"
    return parse((header + body).encode(), "tenants.yaml")


WEB = "  - {name: web, team: team-a, cluster: dev, tier: medium, expires: 2030-06-30}\n"


def tenant(name: str = "web", *, status: str = "ready", tier: str = "medium", **more: Any) -> dict[str, Any]:
    return {
        "id": more.pop("id", f"00000000-0000-0000-0000-{abs(hash(name)) % 10**12:012d}"),
        "name": name,
        "team": "team-a",
        "cluster": "dev",
        "kind": "namespace",
        "tier": tier,
        "status": status,
        "expires_at": "2030-06-30T23:59:59Z",
        "status_reason": "",
        **more,
    }


def request(tenant_id: str, *, rid: str, action: str = "create", status: str = "approved", at: str = "1") -> dict:
    return {"id": rid, "tenant": tenant_id, "action": action, "status": status, "created_at": f"2030-01-0{at}T00:00Z"}


def state(tenants: list[dict] | None = None, requests: list[dict] | None = None, me: dict = ALICE) -> plans.State:
    teams = {"team-a": {"slug": "team-a"}, "team-b": {"slug": "team-b"}}
    return plans.State(
        me=me, teams=teams, tiers=TIERS, clusters=CLUSTERS, tenants=tenants or [], requests=requests or []
    )


def plan_of(body: str, current: plans.State, *, prune: bool = False) -> plans.Plan:
    return plans.make_plan(tenants_file(body), current, prune=prune)


def test_a_missing_tenant_is_created_with_the_files_values() -> None:
    plan = plan_of(WEB, state())
    (change,) = plan.changes
    assert change.action == "create" and change.line == 5
    assert change.body == {
        "action": "create",
        "team": "team-a",
        "name": "web",
        "cluster": "dev",
        "tier": "medium",
        "kind": "namespace",
        "purpose": "",
        "requested_expiry": "2030-06-30",
    }
    assert change.idempotency_key.startswith("berth-apply-") and len(change.idempotency_key) == 64


def test_keys_are_stable_for_the_same_entry_and_differ_when_it_changes() -> None:
    first = plan_of(WEB, state()).changes[0].idempotency_key
    assert plan_of(WEB, state()).changes[0].idempotency_key == first
    assert plan_of(WEB.replace("medium", "large"), state()).changes[0].idempotency_key != first
    assert plan_of(WEB.replace("2030-06-30", "2030-07-01"), state()).changes[0].idempotency_key != first
    # Created once, deleted since: asking again is a new request, not the first one returned.
    gone = state([tenant(status="deleted")])
    assert plan_of(WEB, gone).changes[0].idempotency_key != first


def test_a_tenant_that_matches_is_left_alone() -> None:
    plan = plan_of(WEB, state([tenant()]))
    assert plan.changes == []
    assert [(n.status, n.name, n.line) for n in plan.notes] == [("unchanged", "web", 5)]


def test_another_tier_and_a_later_date_change_tier_then_extend() -> None:
    current = state([tenant(tier="small", expires_at="2030-01-31T23:59:59Z")], [request(tenant()["id"], rid="r1")])
    plan = plan_of(WEB, current)
    assert [(c.action, c.detail) for c in plan.changes] == [
        ("change_tier", "tier small → medium"),
        ("extend", "expiry 2030-01-31 → 2030-06-30"),
    ]
    tier_change, extension = plan.changes
    assert tier_change.body == {
        "action": "change_tier",
        "tenant": tenant()["id"],
        "tier": "medium",
        "purpose": "berth apply",
    }
    assert extension.body is not None and extension.body["requested_expiry"] == "2030-06-30"
    # The basis is the tenant's latest request: once another request was decided, the same ask is a new one.
    later = state(current.tenants, [*current.requests, request(tenant()["id"], rid="r2", action="extend", at="2")])
    assert plan_of(WEB, later).changes[0].idempotency_key != tier_change.idempotency_key


def test_expiry_is_never_shortened() -> None:
    plan = plan_of(WEB, state([tenant(expires_at="2031-01-01T23:59:59Z")]))
    assert plan.changes == []
    assert "never shortened" in plan.notes[0].detail


@pytest.mark.parametrize(
    ("status", "shown"),
    [("approved", "approved"), ("provisioning", "provisioning"), ("decommissioning", "decommissioning")],
)
def test_tenants_on_their_way_are_not_touched(status: str, shown: str) -> None:
    plan = plan_of(WEB.replace("medium", "large"), state([tenant(status=status)]))
    assert plan.changes == [] and plan.notes[0].status == shown


def test_an_open_request_means_waiting_not_asking_again() -> None:
    web = tenant(status="requested")
    plan = plan_of(WEB, state([web], [request(web["id"], rid="r1", status="pending")]))
    assert plan.changes == []
    assert plan.notes[0].status == "pending" and "r1" in plan.notes[0].detail


def test_a_failed_tenant_is_reported_not_retried() -> None:
    plan = plan_of(WEB, state([tenant(status="failed", status_reason="quota")]))
    assert plan.changes == [] and "quota" in plan.notes[0].detail


def test_undeclared_tenants_are_kept_unless_pruned() -> None:
    old, asked = tenant("old"), tenant("asked", status="requested")
    current = state([old, asked], [request(asked["id"], rid="r9", status="pending")])
    kept = plan_of("", current)
    assert kept.changes == [] and {n.status for n in kept.notes} == {"not-in-file"}
    pruned = plan_of("", current, prune=True)
    assert [(c.action, c.name) for c in pruned.changes] == [("cancel", "asked"), ("delete", "old")]
    cancel, delete = pruned.changes
    assert cancel.request_id == "r9" and not cancel.idempotency_key
    assert delete.body == {"action": "delete", "tenant": old["id"], "purpose": "berth apply --prune: not in the file"}


def test_prune_waits_for_tenants_being_provisioned() -> None:
    plan = plan_of("", state([tenant("new", status="provisioning")]), prune=True)
    assert plan.changes == [] and "run again" in plan.notes[0].detail


def test_what_cannot_change_is_refused_with_the_line() -> None:
    with pytest.raises(InvalidFile) as raised:
        plan_of(WEB.replace("tier: medium", "tier: medium, kind: vcluster"), state([tenant()]))
    assert raised.value.details == [
        "tenants.yaml:5: dev/web is a namespace tenant; the kind cannot change (decommission it, then create it anew)"
    ]
    with pytest.raises(InvalidFile) as raised:
        plan_of(WEB, state([tenant(team="team-b")]))
    assert "belongs to team-b" in raised.value.details[0]


def test_unknown_clusters_and_tiers_are_refused_with_their_lines() -> None:
    body = "  - {name: a, team: team-a, cluster: prod, tier: small}\n  - name: b\n    team: team-a\n"
    body += "    cluster: dev\n    tier: huge\n  - {name: c, team: team-a, cluster: dev, tier: small, kind: kcp}\n"
    with pytest.raises(InvalidFile) as raised:
        plan_of(body, state())
    assert raised.value.details == [
        "tenants.yaml:5: cluster 'prod' does not exist (clusters: dev)",
        "tenants.yaml:9: tier 'huge' does not exist (tiers: large, medium, small)",
        "tenants.yaml:10: cluster dev offers namespace tenants, not kcp",
    ]


@pytest.mark.parametrize(
    ("me", "allowed"),
    [
        (ALICE, True),
        ({"username": "vera", "teams": [{"team": "team-a", "role": "viewer"}], "platform_roles": []}, False),
        ({"username": "bob", "teams": [{"team": "team-b", "role": "owner"}], "platform_roles": []}, False),
        ({"username": "dave", "teams": [], "platform_roles": ["admin"]}, True),
        ({"username": "carol", "teams": [], "platform_roles": ["approver"]}, False),
    ],
)
def test_only_writers_of_every_team_in_the_file_may_apply_it(me: dict, allowed: bool) -> None:
    if allowed:
        plans.check_access(state(me=me), tenants_file(WEB))
        return
    with pytest.raises(CliError) as raised:
        plans.check_access(state(me=me), tenants_file(WEB))
    assert raised.value.code == Exit.FORBIDDEN
    assert raised.value.details == ["tenants.yaml:3: team 'team-a': these credentials cannot request tenants for it"]


def test_a_team_token_sees_only_its_team() -> None:
    current = state()
    current.teams = {"team-a": {"slug": "team-a"}}  # what /teams/ answers to a team-a automation token
    with pytest.raises(CliError) as raised:
        plans.check_access(current, tenants_file(WEB, teams="[team-a, team-b]"))
    assert raised.value.details == ["tenants.yaml:3: team 'team-b': these credentials cannot request tenants for it"]


class RecordingApi:
    """Stands in for the API in this pure-logic test of apply's ordering; the real one is in test_apply_live.py."""

    def __init__(self, status: str) -> None:
        self.status = status
        self.sent: list[tuple[str, dict | None, str]] = []

    def post(self, path: str, body: dict | None = None, *, idempotency_key: str = "") -> dict:
        self.sent.append((path, body, idempotency_key))
        if body and body.get("tier") == "refused":
            raise CliError("the portal refused the input:", Exit.INVALID, ["tier: no"])
        return {"id": f"r{len(self.sent)}", "status": self.status}


def test_a_pending_change_defers_the_next_one_on_that_tenant() -> None:
    current = state([tenant(tier="small", expires_at="2030-01-31T23:59:59Z")])
    plan = plan_of(WEB, current)
    api = RecordingApi("pending")
    outcomes = plans.apply(api, plan)  # type: ignore[arg-type]
    assert [o.result for o in outcomes] == ["submitted", "deferred"]
    assert [body["action"] for _, body, _ in api.sent if body] == ["change_tier"]
    auto = RecordingApi("approved")
    assert [o.result for o in plans.apply(auto, plan)] == ["approved", "approved"]  # type: ignore[arg-type]


def test_one_refused_change_does_not_stop_the_others() -> None:
    body = "".join(f"  - {{name: {name}, team: team-a, cluster: dev, tier: small}}\n" for name in "ab")
    plan = plan_of(body, state())
    plan.changes[0].body["tier"] = "refused"  # type: ignore[index]
    outcomes = plans.apply(RecordingApi("pending"), plan)  # type: ignore[arg-type]
    assert [o.result for o in outcomes] == ["failed", "submitted"]
    assert outcomes[0].error is not None and outcomes[0].error.code == Exit.INVALID
