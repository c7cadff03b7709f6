"""Tenants as code: what it takes to make the portal match a tenants file, and doing it through the API.

The plan compares the file with what exists for the file's teams (and only those teams): a tenant that
is missing is created, one on another tier changes tier, one that expires before the file's date is
extended, and with ``prune`` one that the file no longer lists is decommissioned (a delete request; a
create request still waiting is cancelled). Every change is an ordinary request, so approvals and
budgets apply as they do in the browser.

Each request carries an ``Idempotency-Key`` derived from what it asks (its JSON body) and from what it
builds on (the tenant and the tenant's latest request, or the earlier tenants of that name). A re-run
of the same file sends the same key, so a request whose answer was lost is not made twice; a changed
entry, or the same entry after the tenant moved on, gets another key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from berth_cli.client import Api, object_path
from berth_cli.errors import CliError, Exit
from berth_cli.tenantsfile import API_VERSION, Entry, InvalidFile, TenantsFile

LIVE = frozenset({"requested", "approved", "provisioning", "ready", "decommissioning", "failed", "diverged"})
KEY_PREFIX = "berth-apply-"
APPLY_PURPOSE = "berth apply"
WRITER_ROLES = frozenset({"owner", "member"})


@dataclass
class State:
    """What exists, as the caller's credentials see it."""

    me: dict[str, Any]
    teams: dict[str, dict[str, Any]]
    tiers: dict[str, dict[str, Any]]
    clusters: dict[str, dict[str, Any]]
    tenants: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def can_write(self, team: str) -> bool:
        if "admin" in (self.me.get("platform_roles") or []):
            return team in self.teams
        roles = {m.get("team"): m.get("role") for m in self.me.get("teams") or []}
        return team in self.teams and roles.get(team) in WRITER_ROLES


@dataclass
class Change:
    """One request the plan sends: a create/change_tier/extend/delete request, or cancelling one."""

    action: str
    team: str
    cluster: str
    name: str
    detail: str
    line: int | None = None
    tenant_id: str | None = None
    body: dict[str, Any] | None = None
    request_id: str | None = None  # the pending request a "cancel" cancels
    idempotency_key: str = ""

    @property
    def target(self) -> str:
        return f"{self.team}/{self.cluster}/{self.name}"

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v not in (None, "")}


@dataclass
class Note:
    """Something the plan leaves alone, and why (unchanged, waiting for a decision, being provisioned…)."""

    status: str
    team: str
    cluster: str
    name: str
    detail: str
    line: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None}


@dataclass
class Plan:
    file: TenantsFile
    prune: bool
    changes: list[Change] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "file": self.file.path,
            "teams": list(self.file.teams),
            "prune": self.prune,
            "changes": [c.as_dict() for c in self.changes],
            "unchanged": [n.as_dict() for n in self.notes],
        }


def idempotency_key(body: dict[str, Any], basis: list[str]) -> str:
    """At most 64 printable ASCII characters, as the API accepts: a digest of the body and its basis."""
    material = json.dumps({"format": API_VERSION, "body": body, "basis": sorted(basis)}, sort_keys=True)
    return KEY_PREFIX + hashlib.sha256(material.encode()).hexdigest()[: 64 - len(KEY_PREFIX)]


# --- Reading what exists ---------------------------------------------------------------------------------


def fetch_state(api: Api, tenants_file: TenantsFile) -> State:
    state = State(
        me=api.get("/api/v1/me/"),
        teams={t["slug"]: t for t in api.all("/api/v1/teams/")},
        tiers={t["name"]: t for t in api.all("/api/v1/tiers/")},
        clusters={c["name"]: c for c in api.all("/api/v1/clusters/")},
    )
    check_access(state, tenants_file)
    for team in tenants_file.teams:
        state.tenants += api.all("/api/v1/tenants/", team=team)
        state.requests += api.all("/api/v1/requests/", team=team)
    return state


def check_access(state: State, tenants_file: TenantsFile) -> None:
    """Refuse, before anything is sent, a file naming a team these credentials cannot act for."""
    refused = [
        (line, f"team {team!r}: these credentials cannot request tenants for it")
        for team, line in tenants_file.team_lines.items()
        if not state.can_write(team)
    ]
    if refused:
        raise CliError(
            f"{tenants_file.path} names teams you cannot manage; nothing was changed:",
            Exit.FORBIDDEN,
            [f"{tenants_file.path}:{line}: {message}" for line, message in refused],
        )


def catalog_problems(state: State, entry: Entry, *, creating: bool) -> list[tuple[int, str]]:
    """What the portal does not offer among what ``entry`` needs (cluster, tier, kind), each with its line.

    An existing tenant needs none of it unless its tier changes: its cluster may have stopped taking new ones.
    """
    cluster = state.clusters.get(entry.cluster)
    if cluster is None:
        if not creating:
            return []  # the server decides whether a retired cluster still takes a tier change
        known = ", ".join(sorted(state.clusters)) or "none"
        return [(entry.line_of("cluster"), f"cluster {entry.cluster!r} does not exist (clusters: {known})")]
    problems = []
    if entry.tier not in state.tiers:
        known = ", ".join(sorted(state.tiers)) or "none"
        problems.append((entry.line_of("tier"), f"tier {entry.tier!r} does not exist (tiers: {known})"))
    elif entry.tier not in cluster.get("tiers", []):
        problems.append((entry.line_of("tier"), f"tier {entry.tier!r} is not offered on cluster {entry.cluster}"))
    if creating and entry.kind not in cluster.get("kinds", []):
        offered = ", ".join(cluster.get("kinds", []))
        problems.append((entry.line_of("kind"), f"cluster {entry.cluster} offers {offered} tenants, not {entry.kind}"))
    return problems


# --- Planning ------------------------------------------------------------------------------------------------


def make_plan(tenants_file: TenantsFile, state: State, *, prune: bool) -> Plan:
    """The changes that make the file's teams match the file; InvalidFile when the file asks the impossible."""
    problems: list[tuple[int, str]] = []
    plan = Plan(file=tenants_file, prune=prune)
    live = {(t["cluster"], t["name"]): t for t in state.tenants if t["status"] in LIVE}
    for entry in tenants_file.tenants:
        tenant = live.get(entry.identity)
        if tenant is None:
            problems += catalog_problems(state, entry, creating=True)
            plan.changes.append(_create(entry, state))
            continue
        found = _conflicts(entry, tenant)
        if not found and tenant["tier"] != entry.tier:
            found = catalog_problems(state, entry, creating=False)
        problems += found
        if not problems:
            _plan_existing(plan, entry, tenant, state)
    if problems:
        raise InvalidFile(tenants_file.path, problems)
    declared = {entry.identity for entry in tenants_file.tenants}
    for key, tenant in sorted(live.items()):
        if key not in declared:
            _plan_undeclared(plan, tenant, state)
    return plan


def _conflicts(entry: Entry, tenant: dict[str, Any]) -> list[tuple[int, str]]:
    where = f"{entry.cluster}/{entry.name}"
    if tenant["team"] != entry.team:
        return [(entry.line_of("team"), f"{where} belongs to {tenant['team']}; a tenant cannot move between teams")]
    if tenant["kind"] != entry.kind:
        return [
            (
                entry.line_of("kind"),
                f"{where} is a {tenant['kind']} tenant; the kind cannot change (decommission it, then create it anew)",
            )
        ]
    return []


def _requests_of(state: State, tenant_id: str) -> list[dict[str, Any]]:
    return sorted((r for r in state.requests if r.get("tenant") == tenant_id), key=lambda r: r["created_at"])


def _pending_of(state: State, tenant_id: str) -> dict[str, Any] | None:
    return next((r for r in _requests_of(state, tenant_id) if r["status"] == "pending"), None)


def _change_basis(state: State, tenant: dict[str, Any]) -> list[str]:
    history = _requests_of(state, tenant["id"])
    return [tenant["id"], history[-1]["id"] if history else ""]


def _create(entry: Entry, state: State) -> Change:
    body: dict[str, Any] = {
        "action": "create",
        "team": entry.team,
        "name": entry.name,
        "cluster": entry.cluster,
        "tier": entry.tier,
        "kind": entry.kind,
        "purpose": entry.purpose,
    }
    if entry.expires is not None:
        body["requested_expiry"] = entry.expires.isoformat()
    # Earlier tenants of this name (deleted, rejected): creating it again after them is a new request.
    earlier = [t["id"] for t in state.tenants if (t["cluster"], t["name"]) == entry.identity]
    detail = f"{entry.kind} at tier {entry.tier}" + (f", expires {entry.expires}" if entry.expires else "")
    return Change(
        action="create",
        team=entry.team,
        cluster=entry.cluster,
        name=entry.name,
        detail=detail,
        line=entry.line,
        body=body,
        idempotency_key=idempotency_key(body, earlier),
    )


def _note(plan: Plan, status: str, tenant: dict[str, Any], detail: str, line: int | None = None) -> None:
    plan.notes.append(Note(status, tenant["team"], tenant["cluster"], tenant["name"], detail, line))


_WAITING = {
    "approved": "approved; the worker will provision it",
    "provisioning": "being provisioned",
    "decommissioning": "being decommissioned; run again once it is gone to create it anew",
    "diverged": "its namespace is not the one Berth recorded (gone or replaced); a platform admin decides",
}


def _plan_existing(plan: Plan, entry: Entry, tenant: dict[str, Any], state: State) -> None:
    status = tenant["status"]
    pending = _pending_of(state, tenant["id"])
    if pending is not None:
        _note(plan, "pending", tenant, f"{pending['action']} request {pending['id']} awaits a decision", entry.line)
    elif status in _WAITING:
        _note(plan, status, tenant, _WAITING[status], entry.line)
    elif status == "failed":
        reason = tenant.get("status_reason") or "no reason given"
        _note(plan, "failed", tenant, f"failed ({reason}); retry it in the portal", entry.line)
    else:
        _plan_ready(plan, entry, tenant, state)


def _plan_ready(plan: Plan, entry: Entry, tenant: dict[str, Any], state: State) -> None:
    changed = False
    if tenant["tier"] != entry.tier:
        body = {"action": "change_tier", "tenant": tenant["id"], "tier": entry.tier, "purpose": APPLY_PURPOSE}
        plan.changes.append(_change(tenant, state, body, f"tier {tenant['tier']} → {entry.tier}", entry.line))
        changed = True
    expires = (tenant.get("expires_at") or "")[:10]
    if entry.expires is not None and expires and entry.expires.isoformat() > expires:
        body = {"action": "extend", "tenant": tenant["id"], "requested_expiry": entry.expires.isoformat()}
        body["purpose"] = APPLY_PURPOSE
        plan.changes.append(_change(tenant, state, body, f"expiry {expires} → {entry.expires}", entry.line))
        changed = True
    elif entry.expires is not None and entry.expires.isoformat() < expires:
        _note(
            plan, "ready", tenant, f"expires {expires}, after the file's {entry.expires}; never shortened", entry.line
        )
        return
    if not changed:
        _note(plan, "unchanged", tenant, f"ready at tier {tenant['tier']}", entry.line)


def _about(tenant: dict[str, Any], action: str, detail: str, **more: Any) -> Change:
    """A change to an existing tenant."""
    where = {key: tenant[key] for key in ("team", "cluster", "name")}
    return Change(action=action, detail=detail, tenant_id=tenant["id"], **where, **more)


def _change(tenant: dict[str, Any], state: State, body: dict[str, Any], detail: str, line: int | None = None) -> Change:
    """A request about an existing tenant, keyed on the body and the tenant's latest request."""
    key = idempotency_key(body, _change_basis(state, tenant))
    return _about(tenant, body["action"], detail, line=line, body=body, idempotency_key=key)


def _plan_undeclared(plan: Plan, tenant: dict[str, Any], state: State) -> None:
    """A live tenant of the file's teams that the file does not list."""
    status = tenant["status"]
    pending = _pending_of(state, tenant["id"])
    if not plan.prune:
        _note(plan, "not-in-file", tenant, f"{status}; not in the file (kept: --prune decommissions it)")
    elif status == "requested" and pending is not None:
        detail = f"cancel create request {pending['id']} (not in the file)"
        plan.changes.append(_about(tenant, "cancel", detail, request_id=pending["id"]))
    elif pending is not None:
        _note(plan, "pending", tenant, f"not in the file, but {pending['action']} request {pending['id']} is open")
    elif status in ("ready", "failed"):
        body = {"action": "delete", "tenant": tenant["id"], "purpose": f"{APPLY_PURPOSE} --prune: not in the file"}
        detail = f"decommission ({status}, tier {tenant['tier']}; not in the file)"
        plan.changes.append(_change(tenant, state, body, detail))
    else:
        _note(plan, status, tenant, f"not in the file; {_WAITING.get(status, status)}: run again to decommission it")


# --- Applying ----------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    change: Change
    result: str  # "submitted" | "approved" | "cancelled" | "deferred" | "failed"
    request: dict[str, Any] | None = None
    error: CliError | None = None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"result": self.result, **self.change.as_dict()}
        if self.request is not None:
            data["request"] = self.request
        if self.error is not None:
            data["error"] = {"message": self.error.message, "details": self.error.details, "exit": int(self.error.code)}
        return data


def apply(api: Api, plan: Plan, report: Callable[[Outcome], None] = lambda outcome: None) -> list[Outcome]:
    """Send every change; one that fails does not stop the others (each is a separate, retry-safe request)."""
    outcomes: list[Outcome] = []
    waiting_tenants: set[str] = set()
    for change in plan.changes:
        if change.tenant_id in waiting_tenants:
            # One open request per tenant: the next change waits for the decision on this one.
            outcome = Outcome(change, "deferred")
        else:
            outcome = _send(api, change)
            if outcome.request is not None and outcome.request.get("status") == "pending" and change.tenant_id:
                waiting_tenants.add(change.tenant_id)
        outcomes.append(outcome)
        report(outcome)
    return outcomes


def _send(api: Api, change: Change) -> Outcome:
    try:
        if change.action == "cancel":
            assert change.request_id is not None
            request = api.post(object_path("requests", change.request_id, "cancel"))
            return Outcome(change, "cancelled", request)
        assert change.body is not None
        request = api.post("/api/v1/requests/", change.body, idempotency_key=change.idempotency_key)
    except CliError as error:
        return Outcome(change, "failed", error=error)
    return Outcome(change, "approved" if request.get("status") == "approved" else "submitted", request)
