"""The burst a fault lands in, and the checks after it.

Several teams' owners submit tenants, an approver approves them, owners change tiers and decommission, all
through the portal's API as a client would: every POST with an Idempotency-Key where the API takes one, and every
call repeated while the portal answers 502/503 or cannot be reached. Each answer is recorded; a 500 is a failure
whatever happens. Meanwhile a watcher lists the bed's namespaces, so a namespace made twice (a new UID under the
same name) shows.

After the fault: every lane's tenant reaches what its lane asked for (ready at its tier, or deleted) within the
bound, every request answered 201 is in the database and was carried out, one audit row per status change (the
rows chain: each starts where the previous ended, and the last ends where the tenant is), and the objects Berth
did not create are as they were.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import requests
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from tenants.services.lifecycle import TRANSITIONS
from tests.chaos.bed import Bed
from tests.plugins.kube import manifest

RETRYABLE = {502, 503, 504}
# Lanes per team: what each one asks for. "tier" and "decommission" wait for ready first (an owner acts on what
# is there); "early" decommissions right after the approval, while the worker provisions.
LANES = ("keep", "tier", "decommission", "early")


@dataclass
class Answer:
    at: float
    who: str
    method: str
    path: str
    status: int  # 0: no answer (connection refused or reset)
    body: str


@dataclass
class Lane:
    team: str
    kind: str
    name: str
    tenant_id: str = ""
    created: list[str] = field(default_factory=list)  # request ids answered 201
    expect: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    done: bool = False


class Client:
    """One person's API client: retries what a fault interrupted, records every answer."""

    def __init__(self, burst: Burst, who: str, token: str) -> None:
        self.burst = burst
        self.who = who
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, *, key: str = "") -> requests.Response:
        headers = {"Idempotency-Key": key} if key else {}
        deadline = time.monotonic() + self.burst.call_deadline
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self.session.request(
                    method, self.burst.bed.portal.url + path, json=body, headers=headers, timeout=30
                )
                status, text = response.status_code, response.text[:500]
            except requests.RequestException as exc:
                response, status, text = None, 0, f"{type(exc).__name__}: {exc}"[:500]
            self.burst.record(Answer(time.monotonic(), self.who, method, path, status, text))
            if response is not None and status not in RETRYABLE:
                if attempt > 1 and status == 409 and method == "POST":
                    # An earlier attempt was carried out before its answer was lost: the caller checks the state.
                    response.retried_conflict = True  # type: ignore[attr-defined]
                return response
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.who}: {method} {path} unanswered for {self.burst.call_deadline:.0f} s")
            time.sleep(1.0)


class Burst:
    """Lanes of several teams run side by side; ``half`` is set once half of the lanes' creations were answered."""

    def __init__(self, bed: Bed, *, wait_ready: float = 300.0) -> None:
        self.bed = bed
        self.answers: list[Answer] = []
        self.lock = threading.Lock()
        self.call_deadline = 240.0
        self.wait_ready = wait_ready
        self.half = threading.Event()
        self.lanes = [
            Lane(team=team["slug"], kind=kind, name=f"{kind}-{number}")
            for number, team in enumerate(bed.cast["teams"], start=1)
            for kind in LANES
        ]
        self.clients = {team["slug"]: Client(self, team["owner"], team["token"]) for team in bed.cast["teams"]}
        self.approver = Client(self, "approver", bed.cast["approver_token"])
        self.threads: list[threading.Thread] = []
        self.namespace_uids: dict[str, set[str]] = {}
        self.stop_watching = threading.Event()
        self.foreign: dict[str, tuple[str, str]] = {}  # "namespace/name" -> (uid, resourceVersion)

    def record(self, answer: Answer) -> None:
        with self.lock:
            self.answers.append(answer)

    def _created(self, lane: Lane, request_id: str) -> None:
        with self.lock:
            lane.created.append(request_id)
            if sum(1 for each in self.lanes if each.created) * 2 >= len(self.lanes):
                self.half.set()

    # -- running ------------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._plant_foreign_namespace()
        watcher = threading.Thread(target=self._watch_namespaces, daemon=True)
        watcher.start()
        for index, lane in enumerate(self.lanes):
            thread = threading.Thread(target=self._run_lane, args=(lane, index * 0.4), daemon=True)
            thread.start()
            self.threads.append(thread)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _run_lane(self, lane: Lane, delay: float) -> None:
        time.sleep(delay)
        try:
            self._lane(lane)
        except Exception as exc:  # reported by check(), with the lane
            lane.error = f"{type(exc).__name__}: {exc}"
        lane.done = True

    def _submit(self, lane: Lane, body: dict[str, Any]) -> str:
        owner = self.clients[lane.team]
        response = owner.call("POST", "/api/v1/requests/", body, key=str(uuid.uuid4()))
        assert response.status_code == 201, f"submit {body['action']}: {response.status_code} {response.text[:300]}"
        request_id = str(response.json()["id"])
        self._created(lane, request_id)
        response = self.approver.call("POST", f"/api/v1/requests/{request_id}/approve/", {})
        if response.status_code == 409 and getattr(response, "retried_conflict", False):
            response = self.approver.call("GET", f"/api/v1/requests/{request_id}/")
            assert response.json()["status"] == "approved", response.text[:300]
        else:
            assert response.status_code == 200, f"approve: {response.status_code} {response.text[:300]}"
        return str(response.json()["tenant"])

    def _lane(self, lane: Lane) -> None:
        lane.tenant_id = self._submit(
            lane,
            {"action": "create", "team": lane.team, "name": lane.name, "tier": "medium", "cluster": self.bed.cluster},
        )
        lane.expect = {"status": "ready", "tier": "medium"}
        if lane.kind == "early":
            self._decommission(lane)
            return
        if lane.kind == "keep":
            return
        tenant = self._wait_ready(lane)
        if lane.kind == "tier" and lane.team == self.lanes[0].team:
            # Something of the team's own in the tenant's namespace, without Berth's labels: the tier change, the
            # reconcile passes and the fault leave it as it is.
            self.plant_config_map(tenant["namespace"])
        if lane.kind == "tier":
            self._submit(lane, {"action": "change_tier", "tenant": lane.tenant_id, "tier": "large"})
            lane.expect = {"status": "ready", "tier": "large"}
        elif lane.kind == "decommission":
            self._decommission(lane)

    def _decommission(self, lane: Lane) -> None:
        """As an owner would: a 409 (the worker moved the tenant on meanwhile, or an earlier attempt went through)
        is looked into and the decommission asked again unless it is under way."""
        owner = self.clients[lane.team]
        for _ in range(10):
            response = owner.call("POST", f"/api/v1/tenants/{lane.tenant_id}/decommission/", {"reason": "chaos"})
            if response.status_code == 200:
                break
            assert response.status_code == 409, f"decommission: {response.status_code} {response.text[:300]}"
            status = owner.call("GET", f"/api/v1/tenants/{lane.tenant_id}/").json()["status"]
            if status in ("decommissioning", "deleted"):
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"decommission of {lane.name} refused ten times: {response.text[:300]}")
        lane.expect = {"status": "deleted"}

    def _wait_ready(self, lane: Lane) -> dict[str, Any]:
        owner = self.clients[lane.team]
        deadline = time.monotonic() + self.wait_ready
        while time.monotonic() < deadline:
            response = owner.call("GET", f"/api/v1/tenants/{lane.tenant_id}/")
            if response.status_code == 200 and response.json()["status"] == "ready":
                return dict(response.json())
            time.sleep(1.0)
        raise AssertionError(f"{lane.name} not ready within {self.wait_ready:.0f} s")

    # -- what Berth must leave alone ------------------------------------------------------------------------------

    def _plant_foreign_namespace(self) -> None:
        """A namespace named as Berth names them, with a ConfigMap, neither made by Berth (no labels, no ids)."""
        core = CoreV1Api(self.bed.kube)
        name = f"{self.bed.prefix}foreign"
        namespace = core.create_namespace(manifest({"metadata": {"name": name}}))
        self.foreign[f"namespace/{name}"] = (str(namespace.metadata.uid), "")
        self.plant_config_map(name)

    def plant_config_map(self, namespace: str) -> None:
        """Made as a person would, again while the API server is the part that is away."""
        core = CoreV1Api(self.bed.kube)
        body = manifest({"metadata": {"name": "not-berths"}, "data": {"a": "1"}})
        deadline = time.monotonic() + self.call_deadline
        while True:
            try:
                made = core.create_namespaced_config_map(namespace, body, _request_timeout=10)
                break
            except ApiException as exc:
                if exc.status < 500 or time.monotonic() > deadline:
                    raise
            except Exception:  # no answer (connection refused, reset)
                if time.monotonic() > deadline:
                    raise
            time.sleep(1.0)
        self.foreign[f"{namespace}/not-berths"] = (str(made.metadata.uid), str(made.metadata.resource_version))

    def _watch_namespaces(self) -> None:
        core = CoreV1Api(self.bed.kube)
        while not self.stop_watching.is_set():
            try:
                for namespace in core.list_namespace(_request_timeout=5).items:
                    name = str(namespace.metadata.name)
                    if name.startswith(self.bed.prefix):
                        self.namespace_uids.setdefault(name, set()).add(str(namespace.metadata.uid))
            except Exception:  # the API server may be the thing that is down
                pass
            time.sleep(0.5)

    # -- after the fault ------------------------------------------------------------------------------------------

    def converged(self) -> bool:
        """Every lane finished and its tenant is what the lane asked for."""
        if not all(lane.done for lane in self.lanes):
            return False
        return not self._state_problems()

    def _tenants(self) -> dict[str, tuple[str, str, int, int, str, str]]:
        rows = self.bed.sql(
            "SELECT t.id::text, t.status, tier.name, t.generation, t.applied_generation, t.namespace, t.status_reason "
            "FROM tenants_tenant t JOIN tenants_tier tier ON tier.id = t.tier_id "
            "JOIN tenants_cluster c ON c.id = t.cluster_id WHERE c.name = %s",
            (self.bed.cluster,),
        )
        return {row[0]: row[1:] for row in rows}

    def _state_problems(self) -> list[str]:
        problems = []
        tenants = self._tenants()
        for lane in self.lanes:
            if lane.error:
                problems.append(f"{lane.name}: {lane.error}")
                continue
            found = tenants.get(lane.tenant_id)
            if found is None:
                problems.append(f"{lane.name}: no tenant {lane.tenant_id}")
                continue
            status, tier, generation, applied, _namespace, reason = found
            want = lane.expect
            if status != want["status"]:
                problems.append(f"{lane.name}: {status} ({reason}), want {want['status']}")
            elif status == "ready" and (tier != want["tier"] or applied != generation):
                problems.append(f"{lane.name}: tier {tier} applied {applied}/{generation}, want {want['tier']}")
        return problems

    def check(self) -> list[str]:
        """Everything the fault must not have broken; empty when all holds."""
        self.stop_watching.set()
        problems = self._state_problems()
        problems += self._check_answers()
        problems += self._check_requests()
        problems += self._check_audit()
        problems += self._check_created_once()
        problems += self._check_foreign()
        return problems

    def _check_answers(self) -> list[str]:
        server_errors = [a for a in self.answers if a.status >= 500 and a.status not in RETRYABLE]
        problems = [f"{a.who} {a.method} {a.path}: {a.status} {a.body[:200]}" for a in server_errors]
        for answer in self.answers:
            if answer.status == 503 and '"detail"' not in answer.body:
                problems.append(f"a 503 without the API's error body: {answer.path} {answer.body[:200]}")
        return problems

    def _check_requests(self) -> list[str]:
        """No request answered 201 is missing, each was approved once and submitted once."""
        created = [request_id for lane in self.lanes for request_id in lane.created]
        rows = self.bed.sql("SELECT id::text, status FROM tenants_tenantrequest WHERE id::text = ANY(%s)", (created,))
        found = dict(rows)
        problems = [
            f"request {request_id} was answered 201 but is not stored"
            for request_id in created
            if request_id not in found
        ]
        problems += [f"request {r} is {s}, not approved" for r, s in found.items() if s != "approved"]
        counts = self.bed.sql(
            "SELECT object_id, action, count(*) FROM tenants_auditevent WHERE object_type = 'request' "
            "AND object_id = ANY(%s) GROUP BY object_id, action HAVING count(*) > 1",
            (created,),
        )
        problems += [f"request {obj}: {count} audit rows '{action}'" for obj, action, count in counts]
        return problems

    def _check_audit(self) -> list[str]:
        """One audit row per status change: the rows of each tenant chain from requested to where it is now."""
        tenants = self._tenants()
        rows = self.bed.sql(
            "SELECT object_id, action, before->>'status', after->>'status' FROM tenants_auditevent "
            "WHERE object_type = 'tenant' AND object_id = ANY(%s) ORDER BY id",
            (list(tenants),),
        )
        chains: dict[str, list[tuple[str, str, str]]] = {}
        for object_id, action, before, after in rows:
            if before and after and before != after:
                chains.setdefault(object_id, []).append((action, before, after))
        problems = []
        for tenant_id, (status, *_rest) in tenants.items():
            at = "requested"
            for action, before, after in chains.get(tenant_id, []):
                if before != at or after not in TRANSITIONS[before]:
                    problems.append(f"tenant {tenant_id}: audit {action} {before}->{after} after {at}")
                at = after
            if at != status:
                problems.append(f"tenant {tenant_id}: the audit trail ends at {at}, the tenant is {status}")
        return problems

    def _check_created_once(self) -> list[str]:
        problems = [
            f"namespace {name} was created {len(uids)} times (UIDs {sorted(uids)})"
            for name, uids in self.namespace_uids.items()
            if len(uids) > 1
        ]
        names = Counter(
            name
            for (name,) in self.bed.sql(
                "SELECT t.name FROM tenants_tenant t JOIN tenants_cluster c ON c.id = t.cluster_id WHERE c.name = %s",
                (self.bed.cluster,),
            )
        )
        problems += [f"{count} tenants named {name}" for name, count in names.items() if count > 1]
        creates = Counter(
            lane.name for lane in self.lanes for request_id in lane.created[:1]
        )  # one create per lane by construction; the database must agree
        stored = Counter(
            name
            for (name,) in self.bed.sql(
                "SELECT r.name FROM tenants_tenantrequest r JOIN tenants_cluster c ON c.id = r.cluster_id "
                "WHERE c.name = %s AND r.action = 'create'",
                (self.bed.cluster,),
            )
        )
        problems += [f"{stored[name]} create requests for {name}" for name in creates if stored[name] != 1]
        return problems

    def _check_foreign(self) -> list[str]:
        core = CoreV1Api(self.bed.kube)
        problems = []
        for key, (uid, version) in self.foreign.items():
            where, name = key.split("/", 1)
            try:
                found: Any = (
                    core.read_namespace(name) if where == "namespace" else core.read_namespaced_config_map(name, where)
                )
            except ApiException as exc:
                problems.append(f"{key} (not Berth's) is gone: {exc.status}")
                continue
            if found.metadata.uid != uid or (version and found.metadata.resource_version != version):
                problems.append(f"{key} (not Berth's) was changed or made anew")
            if found.metadata.deletion_timestamp:
                problems.append(f"{key} (not Berth's) is being deleted")
        return problems

    # -- figures --------------------------------------------------------------------------------------------------

    def statuses(self) -> Counter[int]:
        return Counter(answer.status for answer in self.answers)
