#!/usr/bin/env python
"""Berth at fleet scale, as deployed: the chart's RBAC, the watcher, workers and beat, N namespace tenants.

    .venv/bin/python bench/fleet.py                          # N = 1000, 10 idle minutes
    .venv/bin/python bench/fleet.py --quick                  # N = 100, short windows
    .venv/bin/python bench/fleet.py --tenants 10000          # the fleet of issue 32 (hours on 2 cores)
    .venv/bin/python bench/fleet.py --tenants 300 --idle-minutes 1 --drift-edits 20 --keep-logs

Set-up: a throwaway PostgreSQL and Redis, the dev control plane with an audit log of Berth's own identities only,
the Helm chart's RBAC installed with the real helm (devcluster/chart_rbac.py: RBAC-only values), a kubeconfig per
ServiceAccount of the chart (worker, web, watcher), a fresh database, a team with room for every tenant, a
platform admin. Every Berth process holds only its chart identity: the Cluster's credential is
``env:BERTH_FLEET_KUBECONFIG``, which each process gets its own kubeconfig in (the workers and this process, where
it plays the worker, the worker's; the watcher its own; gunicorn the web's), and BERTH_NAMESPACE_GRANTS and
BERTH_WATCHER=true as the chart sets them. The admin's kubeconfig serves the set-up, the kubectl baseline and the
hand edits (a person's acts). Berth runs as deployed, DEBUG off: the portal under gunicorn (deploy/gunicorn.conf.py),
the watcher (manage.py berth_watch, leader), a worker for ``provision,celery`` (prefork x``--concurrency``) and,
from step 5 on, one for ``reconcile`` (prefork x2, nice ``--reconcile-nice``) and celery beat with the product's
schedule (with the watcher the safety-net pass runs every 6 hours: never within the run).

  1. Warm-up: ``--warmup-tenants`` (100) tenants approved and provisioned; then the pages at 100 tenants: the
     platform admin's dashboard, approvals, tenants list and audit pages and GET /api/v1/tenants/ (first page),
     ``--page-rounds`` times each, p95 per page.
  2. Provision: N medium tenants submitted, then approved one after the other (as an approver), the watcher
     running; approve → ready per tenant (ready_at - decided_at) p50/p95, tenants per minute, wall time from the
     first approval to the last ready tenant.
  3. Baseline: the same rendered objects, each tenant's moved into a fresh namespace and relabelled (not Berth's),
     applied with ``kubectl apply --server-side`` at the same concurrency; Berth's wall / kubectl's.
  4. The watcher restarted (a new leader): its first list and check of every tenant, in seconds.
  5. Requests per first provision (in this process, after one warm-up tenant) and objects per tenant; one reconcile
     pass (worker.reconcile.reconcile_cluster, in this process) over every in-sync tenant: seconds, requests,
     whether it had to go tenant by tenant (``per_tenant``: the credential may not list cluster-wide).
  6. Idle: ``--idle-minutes`` (10) with every tenant ready and nothing happening; Berth's requests per second.
     Resident memory (VmRSS) of the watcher, the workers (main and pool processes), kube-apiserver and etcd at
     its end.
  7. Drift: ``--drift-edits`` (100) hand edits spread over tenants and over five kinds of edit (quota changed,
     NetworkPolicy deleted, Pod Security label changed, LimitRange emptied, RoleBinding deleted), one every half
     second; each timed from the edit to its tenant's ``tenant.drift_repaired`` audit entry; repaired once, or
     more often.
  8. Storm: 10 approvals with nothing else going on, then 10 while ``--storm-edits`` (1,000) hand edits on as many
     tenants are made at once from 4 threads (the edits themselves load the API server, and the watcher reads
     each), then 10 more once they are made, while the watcher and the reconcile worker repair them; p95 of each
     over idle, how long the storm took to repair, and whether each was repaired exactly once.
  9. The pages again, at N + warm-up tenants; the worst page's p95 ratio to step 1's.

Berth's requests are read from the API server's audit log (Metadata level, Berth's ServiceAccounts only; a watch
is recorded when its response starts): per step, per identity (worker, watcher, web) and verb. The API server's
own counters are read at each step's ends as a cross-check: every client's requests (apiserver_request_total) and
those API Priority and Fairness dispatched for the ``service-accounts`` FlowSchema (Berth's ServiceAccounts and
nothing else on the dev control plane; the controllers' are in ``kube-system-service-accounts``).

Each ready tenant queues an isolation check on the reconcile queue; those of steps 1-2 are purged before the
reconcile worker starts (they are not part of approve → ready and would take hours on 2 cores at 10,000). So that
the pages of steps 1 and 9 read a fleet whose every ready tenant has a report, as a real one's has (the dashboard
counts the failing ones, the tenants list shows each verdict), every ready tenant without one gets a copy of a real
report just before them (``fill_isolation_reports``): the newest one a check of this run produced, or, in step 1,
where none has run yet (no reconcile worker), the report of a check run in this process, as the worker would, on
the first warm-up tenant. A copy is the report's JSON with the source tenant's namespace, wherever its details name
it (the API server's refusals do), replaced by the tenant's own, and ``checked_at`` now. Its verdict is set for a
realistic mix, 1 tenant in 20 (by name) failing: a failing copy keeps the source's checks as they are (marking its
first check failed if none did) and says ``passed: false``; a passing one marks every check passed (on the dev
control plane, with no node, the network checks are "not proven", which fails every real report here). The size and
shape of what the pages read are the real report's; only the verdicts are the bench's. Each copy is recorded through
``services.tenant_record_isolation_report``, as a check's report is (the audit entry, and the notification of a
failing one, with it), and ``VACUUM ANALYZE`` of the database follows until the listed tables' visibility maps are
full (``api_load.vacuum``), as autovacuum leaves them in a running database: with the map incomplete the planner
prices the pages' index-only counts like reading the rows, and picks among the indexes over the live tenants by
chance. Beat starts with the reconcile worker, after the batch: while the provision queue holds messages its sweep
holds the waiting tenants back, but still re-sends each once per BERTH_STUCK_BACKLOG_SECONDS (an hour): at 10,000
(hours) a duplicate job per waiting tenant per hour on the measured workers, beside the sweep's own runs on them.
Step 2 measures provisioning without either. The last line of stdout is a JSON object with the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import api_load, rss  # noqa: E402  (no Django at import time)
from bench import provision as base  # noqa: E402
from devcluster import chart_rbac, servers  # noqa: E402
from devcluster.launcher import CONTROLLER_API_QPS, ControlPlane, helm_binary  # noqa: E402
from devcluster.process import Component, berth_watcher, celery_worker, wait_for_celery_ready  # noqa: E402

say, pct, p50, fmt, table = base.say, base.pct, base.p50, base.fmt, base.table
BUSY_APPROVALS = 10
CREDENTIAL_VARIABLE = "BERTH_FLEET_KUBECONFIG"
RELEASE = chart_rbac.Release("berth-fleet", "berth-fleet-system")
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")
PAGES = (
    ("dashboard", "/"),
    ("approvals", "/approvals/"),
    ("tenants", "/tenants/"),
    ("audit", "/audit/"),
    ("api tenants", "/api/v1/tenants/"),
)
STORM_THREADS = 4
# The API server's counters read at each step's ends: every client's requests; those APF dispatched for the
# FlowSchema Berth's ServiceAccounts fall under (the controllers' are kube-system-service-accounts).
COUNTERS = {
    "all clients": ("apiserver_request_total", None),
    "service-accounts": ("apiserver_flowcontrol_dispatched_requests_total", 'flow_schema="service-accounts"'),
}


# --- pure helpers (tests/bench/test_fleet.py) --------------------------------------------------------------------


def audit_policy(users: Iterable[str]) -> dict[str, Any]:
    """An audit.k8s.io/v1 Policy recording, at Metadata level, the requests of ``users`` and of every ServiceAccount
    outside kube-system (a tenant's token, which Berth's isolation check uses; on the bench's cluster no tenant runs
    anything of its own), and nothing else (the controllers' ServiceAccounts are kube-system's). No RequestReceived
    stage: a request shows when its response starts (a watch too) and when it completes."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},
            {"level": "Metadata", "users": sorted(users)},
            {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
            {"level": "None"},
        ],
    }


@dataclass(frozen=True)
class Request:
    """One request of Berth's, from the audit log."""

    at: float  # requestReceivedTimestamp, seconds since the epoch
    role: str  # worker, watcher, web, or "tenant token" (a ServiceAccount of a tenant's)
    agent: str
    verb: str
    resource: str


def audit_requests(lines: Iterable[str], users: Mapping[str, str]) -> list[Request]:
    """The requests of ``users`` (user name → role) and of other ServiceAccounts (role "tenant token") in audit log
    ``lines``, each once (a request has an event per stage, all with its auditID), in the order first seen."""
    seen: set[str] = set()
    found = []
    for line in lines:
        if not line.strip():
            continue
        event = json.loads(line)
        username = str((event.get("user") or {}).get("username", ""))
        role = users.get(username) or ("tenant token" if username.startswith("system:serviceaccount:") else None)
        audit_id = event.get("auditID", "")
        if role is None or audit_id in seen:
            continue
        seen.add(audit_id)
        received = dt.datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
        found.append(
            Request(
                at=received.timestamp(),
                role=role,
                agent=str(event.get("userAgent", "")).split(" ", 1)[0],
                verb=str(event.get("verb", "")),
                resource=str((event.get("objectRef") or {}).get("resource", "")),
            )
        )
    return found


@dataclass
class Step:
    """A step of the run: its wall-clock ends (seconds since the epoch) and the API server's counters at them."""

    name: str
    start: float
    end: float = math.nan
    counters_start: dict[str, float] = field(default_factory=dict)
    counters_end: dict[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def counted(self, name: str) -> float:
        return self.counters_end.get(name, math.nan) - self.counters_start.get(name, math.nan)


def by_step(requests: Iterable[Request], steps: list[Step]) -> dict[str, Counter[tuple[str, str]]]:
    """Requests per step (the step whose window holds their arrival; "between steps" for the others), counted by
    (role, verb)."""
    counts: dict[str, Counter[tuple[str, str]]] = {step.name: Counter() for step in steps}
    for request in requests:
        step = next((s for s in steps if s.start <= request.at <= s.end), None)
        counts.setdefault(step.name if step else "between steps", Counter())[(request.role, request.verb)] += 1
    return counts


def counter_sums(text: str) -> dict[str, float]:
    """COUNTERS summed over their series in the API server's /metrics text."""
    sums = dict.fromkeys(COUNTERS, 0.0)
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name, _, rest = line.partition("{")
        for key, (metric, selector) in COUNTERS.items():
            if name == metric and (selector is None or selector in rest):
                sums[key] += float(rest.rpartition(" ")[2])
    return sums


def verb_table(counts: Mapping[str, Counter[tuple[str, str]]], steps: list[Step]) -> str:
    """Per step and identity: requests of each verb, the total, and per second over the step."""
    seconds = {step.name: step.seconds for step in steps}
    rows = []
    for name, counter in counts.items():
        for role in sorted({role for role, _ in counter}):
            total = sum(n for (r, _), n in counter.items() if r == role)
            others = sum(n for (r, v), n in counter.items() if r == role and v not in VERBS)
            span = seconds.get(name, math.nan)
            rows.append(
                [
                    name,
                    role,
                    *(str(counter[(role, verb)]) for verb in VERBS),
                    str(others),
                    str(total),
                    fmt(span, 0),
                    fmt(total / span if span and span > 0 else math.nan, 3),
                ]
            )
    return table(["step", "identity", *VERBS, "other", "total", "seconds", "per s"], rows)


def spread(items: list[Any], k: int) -> list[Any]:
    """``k`` of ``items`` spread evenly over them (all of them when there are no more than ``k``)."""
    if k >= len(items):
        return list(items)
    return [items[i * len(items) // k] for i in range(k)]


def exactly_once(edited: Mapping[str, float], repairs: Iterable[tuple[str, float]]) -> dict[str, Any]:
    """Each edited tenant (id → when edited) against the repairs recorded (tenant id, when), those at or after its
    edit: latency to the first, and how many were repaired once, more than once, never."""
    after: dict[str, list[float]] = {tid: [] for tid in edited}
    for tid, at in repairs:
        if tid in after and at >= edited[tid]:
            after[tid].append(at)
    latency = sorted(min(ats) - edited[tid] for tid, ats in after.items() if ats)
    counts = Counter(min(len(ats), 2) for ats in after.values())
    return {
        "edits": len(edited),
        "latency": latency,
        "once": counts[1],
        "more": counts[2],
        "never": counts[0],
        "last": max((max(ats) for ats in after.values() if ats), default=math.nan),
    }


# --- the run ------------------------------------------------------------------------------------------------------


class Steps:
    """The run's steps, with the API server's counters read at their ends."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.all: list[Step] = []

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[Step]:
        step = Step(name, time.time(), counters_start=counter_sums(self.cp.metrics()))
        self.all.append(step)
        try:
            yield step
        finally:
            step.end = time.time()
            step.counters_end = counter_sums(self.cp.metrics())

    def named(self, name: str) -> Step:
        return next(s for s in self.all if s.name == name)


def configure(db: dict, redis_url: str, worker_kubeconfig: Path, static: Path) -> dict[str, str]:
    """The environment of every Berth process (this one, where it acts as the worker, included), DEBUG off (the
    static files collected into ``static``, as the image has them); must run before django.setup()."""
    env = {
        **api_load.portal_env(db, redis_url),
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DJANGO_STATIC_ROOT": str(static),
        **chart_rbac.process_env(RELEASE, CREDENTIAL_VARIABLE, worker_kubeconfig, watcher=True),
    }
    os.environ.update(env)
    import django

    django.setup()
    return env


def seed(cp: ControlPlane, total_tenants: int) -> dict[str, Any]:
    """bench/provision.py's cast, the Cluster's credential the chart's (per process); a platform admin with a
    session and an API token."""
    from django.test import Client
    from django.utils import timezone

    from tenants import services
    from tenants.models import Cluster, User

    ctx = base.seed(cp, total_tenants)
    Cluster.objects.filter(pk=ctx["cluster"].pk).update(credential_ref=f"env:{CREDENTIAL_VARIABLE}")
    ctx["cluster"].refresh_from_db()
    admin = User.objects.create(
        username="fleet-admin",
        oidc_subject="sub-fleet-admin",
        is_platform_admin=True,
        identity_checked_at=timezone.now(),
    )
    browser = Client()
    browser.force_login(admin)
    ctx["session"] = browser.cookies["sessionid"].value
    ctx["token"] = services.api_token_create(actor=admin, name="fleet", expires_in_days=1)[1]
    return ctx


def admin_kube(cp: ControlPlane) -> Any:
    """A client as the control plane's admin: a person's hand edits."""
    import yaml

    from worker import kube

    return kube.Kube.from_kubeconfig_dict(yaml.safe_load(cp.kubeconfig_path.read_text())).with_user_agent("bench-admin")


def process_env(env: dict[str, str], role: str, kubeconfigs: dict[str, Path]) -> dict[str, str]:
    return {
        **os.environ,
        **env,
        **chart_rbac.process_env(RELEASE, CREDENTIAL_VARIABLE, kubeconfigs[role], watcher=True),
        "PYTHONPATH": str(ROOT),
        "LOG_LEVEL": "INFO",
    }


def start_worker(
    env: dict[str, str], log: Path, queues: list[str], concurrency: int, name: str, nice: int = 0
) -> Component:
    worker = celery_worker(
        log, cwd=ROOT, env=env, queues=queues, concurrency=concurrency, node=f"{name}-{os.getpid()}@%h", nice=nice
    )
    worker.start()
    wait_for_celery_ready(worker, 90)
    return worker


def start_watcher(env: dict[str, str], log: Path, cluster: str) -> tuple[Component, float]:
    """The watcher, once it leads and watches; and how long it took to list and check everything."""
    log.unlink(missing_ok=True)
    watcher = berth_watcher(log, cwd=ROOT, env=env, clusters=[cluster])
    started = time.monotonic()
    watcher.start()
    while "; watching" not in (log.read_text(errors="replace") if log.exists() else ""):
        if watcher.exited() is not None or time.monotonic() - started > 1800:
            raise RuntimeError(f"the watcher did not start watching:\n{watcher.log_tail()}")
        time.sleep(0.2)
    return watcher, time.monotonic() - started


def start_beat(env: dict[str, str], work_dir: Path) -> Component:
    beat = Component(
        "celery beat",
        [sys.executable, "-m", "celery", "-A", "portal", "beat", "-l", "INFO", "--schedule", str(work_dir / "beat")],
        work_dir / "beat.log",
        cwd=ROOT,
        env=env,
    )
    beat.start()
    return beat


def approve_batch(ctx: dict, names: list[str], worker: Component, timeout: float) -> dict[str, Any]:
    """Submit and approve ``names``; wait until all are ready; latencies and wall time."""
    from tenants import services
    from tenants.models import Tenant, TenantRequest

    # All submitted first: the window from the first approval to the last ready tenant holds only approvals
    # (this process, one after the other) and Berth's work.
    submitted = [
        services.request_submit(
            actor=ctx["requester"],
            action=TenantRequest.Action.CREATE,
            team=ctx["team"],
            tier=ctx["tier"],
            cluster=ctx["cluster"],
            name=name,
            purpose="fleet benchmark",
        )
        for name in names
    ]
    decided: dict[str, dt.datetime] = {}
    began = time.monotonic()
    for req in submitted:
        req = services.request_approve(tenant_request=req, actor=ctx["approver"], comment="bench")
        assert req.decided_at is not None
        decided[str(req.tenant_id)] = req.decided_at
    approving = time.monotonic() - began
    deadline = time.monotonic() + timeout
    # The figures come from the rows' timestamps; a big batch is polled less often (the query competes with Berth).
    poll = 0.25 if len(names) <= 100 else 2.0
    batch = Tenant.objects.filter(pk__in=list(decided))
    while batch.exclude(status__in=("ready", "failed")).exists():
        if worker.exited() is not None:
            raise RuntimeError(f"the provision worker died:\n{worker.log_tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"not all of {len(names)} tenants were ready after {timeout:.0f}s")
        time.sleep(poll)
    rows = list(batch.values("pk", "status", "ready_at", "status_reason"))
    failed = [r for r in rows if r["status"] == "failed"]
    for r in failed[:5]:
        say(f"FAILED: {r['status_reason']}")
    ready: dict[str, dt.datetime] = {
        str(r["pk"]): r["ready_at"] for r in rows if r["status"] == "ready" and r["ready_at"] is not None
    }
    latency = [(ready[t] - decided[t]).total_seconds() for t in ready]
    wall = (max(ready.values()) - min(decided.values())).total_seconds() if ready else math.nan
    return {
        "latency": latency,
        "wall": wall,
        "approving": approving,  # the approvals alone: Berth's wall can be no shorter
        "ready": len(ready),
        "failed": len(failed),
        "ids": list(ready),
        "last_ready": max(ready.values()).timestamp() if ready else math.nan,
    }


def kubectl_files(ctx: dict, tenant_ids: list[str], out_dir: Path) -> list[Path]:
    """The objects Berth applied, per tenant, in namespace kctl-<i>, labelled as not Berth's."""
    from tenants.models import Tenant
    from worker import kube, manifests
    from worker.backends.namespace import NamespaceBackend

    k = kube.for_cluster(ctx["cluster"])
    files = []
    tenants = Tenant.objects.select_related("tier", "cluster", "team").filter(pk__in=tenant_ids).order_by("name")
    for i, tenant in enumerate(tenants):
        objs = base._rename(NamespaceBackend().render(tenant, k), tenant.namespace, f"kctl-{i:05d}")
        for obj in objs:
            obj["metadata"].pop("uid", None)
            labels = obj["metadata"].setdefault("labels", {})
            labels["app.kubernetes.io/managed-by"] = "berth-bench-kubectl"
            labels.pop(manifests.TENANT_ID_LABEL, None)
        path = out_dir / f"kctl-{i:05d}.yaml"
        path.write_text(manifests.to_yaml(objs))
        files.append(path)
    return files


def first_provision_requests(ctx: dict, samples: int) -> tuple[list[int], int]:
    """Requests per first provision (every step until ready), after one warm-up tenant; objects per tenant."""
    from unittest import mock

    from tenants import dispatch
    from tenants.models import Tenant
    from worker import kube
    from worker.backends.namespace import NamespaceBackend

    counts, objects = [], 0
    k = kube.for_cluster(ctx["cluster"])
    with mock.patch.object(dispatch, "send", lambda task, *args, **kw: True):  # the workers never hear of them
        for i in range(samples + 1):
            tid = base.approve_in_process(ctx, f"rq-{i:02d}")
            before = k.requests
            progress, _ = base.provision_in_process(tid)
            if progress.outcome != "ready":
                raise RuntimeError(f"in-process provision ended {progress}")
            if i:
                counts.append(k.requests - before)
            tenant = Tenant.objects.select_related("tier", "cluster", "team").get(pk=tid)
            objects = len(NamespaceBackend().render(tenant, k))
    return counts, objects


def edit_by_hand(k: Any, ns: str, i: int) -> str:
    """The ``i % 5``-th of five edits a careless admin might make in tenant namespace ``ns`` (with Kube ``k``); the
    repair Berth should record for it (bench/soak.py makes them too)."""
    match i % 5:
        case 0:
            k.patch("ResourceQuota", "berth-quota", {"spec": {"hard": {"pods": "9999"}}}, namespace=ns)
            return "ResourceQuota/berth-quota was changed"
        case 1:
            k.delete("NetworkPolicy", "berth-default-deny", namespace=ns)
            return "NetworkPolicy/berth-default-deny was missing"
        case 2:
            k.patch("Namespace", ns, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}})
            return f"Namespace/{ns} was changed"
        case 3:
            k.patch("LimitRange", "berth-limits", {"spec": {"limits": []}}, namespace=ns)
            return "LimitRange/berth-limits was changed"
        case _:
            k.delete("RoleBinding", "berth-tenant", namespace=ns)
            return "RoleBinding/berth-tenant was missing"


def queue_length(queue: str) -> int:
    from portal.celery import app

    with app.connection_for_write() as conn:
        channel: Any = conn.default_channel  # kombu's virtual channel (Redis)
        return int(channel.client.llen(queue))


def wait_quiet(settle: float = 5.0, queues: Iterable[str] = ("provision", "celery", "reconcile")) -> None:
    """Until ``queues`` have been empty for ``settle`` seconds (the last job has finished, or nearly)."""
    quiet_since = None
    while quiet_since is None or time.monotonic() - quiet_since < settle:
        if any(queue_length(q) for q in queues):
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        time.sleep(0.5)


def purge(queue: str) -> int:
    from portal.celery import app

    with app.connection_for_write() as conn:
        channel: Any = conn.default_channel  # kombu's virtual channel (Redis) has queue_purge
        return int(channel.queue_purge(queue) or 0)


FAILING_EVERY = 20  # of the copied isolation reports, 1 in 20 fails


def copied_report(
    source: Mapping[str, Any], source_namespace: str, namespace: str, *, failing: bool, checked_at: str
) -> dict[str, Any]:
    """A copy of the real isolation report ``source`` (of the tenant in ``source_namespace``) for the tenant in
    ``namespace``: that namespace wherever the source's names its own, checked at ``checked_at``, and the verdict
    ``failing`` says: failing, the source's checks as they were (the first one failed if none was); passing, every
    check passed."""
    report: dict[str, Any] = json.loads(json.dumps(source).replace(source_namespace, namespace))
    report["checked_at"] = checked_at
    checks = report.get("checks") or []
    if failing:
        if checks and all(c.get("passed") for c in checks):
            checks[0]["passed"] = False
    else:
        for check in checks:
            check["passed"] = True
    report["passed"] = not failing
    return report


def fill_isolation_reports(cluster: Any) -> int:
    """Give every ready tenant of ``cluster`` without an isolation report a copy of a real one (see the module's
    docstring); the number given."""
    from django.utils import timezone

    from tenants import services
    from tenants.models import Tenant
    from worker import provisioning

    ready = Tenant.objects.filter(cluster=cluster, status="ready").select_related("team", "cluster")
    source = ready.filter(isolation_report_at__isnull=False).order_by("-isolation_report_at").first()
    if source is None:  # no check has run yet: run one on the first ready tenant, as the worker's task does
        first = ready.order_by("name").first()
        if first is None:
            return 0
        report = provisioning.isolation_report(str(first.pk))
        if report is None:
            raise RuntimeError(f"no isolation report for {first.name}")
        services.tenant_record_isolation_report(tenant=first, report=report)
        source = ready.get(pk=first.pk)
    checked_at = timezone.now().isoformat()
    given = 0
    for i, tenant in enumerate(ready.filter(isolation_report_at__isnull=True).order_by("name")):
        failing = i % FAILING_EVERY == FAILING_EVERY - 1
        report = copied_report(
            source.isolation_report, source.namespace, tenant.namespace, failing=failing, checked_at=checked_at
        )
        services.tenant_record_isolation_report(tenant=tenant, report=report)
        given += 1
    api_load.vacuum()
    return given


def repairs_since(since: float, tenant_ids: Iterable[str]) -> list[tuple[str, float, list[str]]]:
    """``tenant.drift_repaired`` audit entries of ``tenant_ids`` from ``since`` on: (tenant id, when, repairs)."""
    from tenants.models import AuditEvent

    found = []
    ids = list(tenant_ids)
    for chunk in range(0, len(ids), 1000):
        for event in AuditEvent.objects.filter(
            action="tenant.drift_repaired",
            object_id__in=ids[chunk : chunk + 1000],
            at__gte=dt.datetime.fromtimestamp(since, dt.UTC),
        ).values("object_id", "at", "after"):
            found.append(
                (event["object_id"], event["at"].timestamp(), list((event["after"] or {}).get("repaired", [])))
            )
    return found


def await_repairs(
    edited: dict[str, float], since: float, timeout: float, settle: float
) -> list[tuple[str, float, list[str]]]:
    """Wait until every edited tenant has a repair (or ``timeout``), then ``settle`` seconds more for any second one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if {tid for tid, _, _ in repairs_since(since, edited)} >= set(edited):
            break
        time.sleep(0.5)
    time.sleep(settle)
    return repairs_since(since, edited)


def drift(k: Any, tenants: list[tuple[str, str]], interval: float) -> dict[str, Any]:
    """One hand edit on each of ``tenants`` (id, namespace), kinds in turn, one every ``interval`` seconds."""
    since = time.time()
    edited: dict[str, float] = {}
    expected: dict[str, str] = {}
    for i, (tid, ns) in enumerate(tenants):
        edited[tid] = time.time()
        expected[tid] = edit_by_hand(k, ns, i)
        time.sleep(interval)
    found = await_repairs(edited, since, timeout=180, settle=5)
    result = exactly_once(edited, [(tid, at) for tid, at, _ in found])
    result["right"] = sum(1 for tid, _, what in found if expected.get(tid) in what)
    return result


def storm(ks: list[Any], tenants: list[tuple[str, str]], edited: dict[str, float], expected: dict[str, str]) -> None:
    """Hand edits on every one of ``tenants``, from one thread per client in ``ks``, as fast as they go."""

    def edit(part: int) -> None:
        for i in range(part, len(tenants), len(ks)):
            tid, ns = tenants[i]
            edited[tid] = time.time()
            expected[tid] = edit_by_hand(ks[part], ns, i)

    threads = [threading.Thread(target=edit, args=(part,), name=f"storm-{part}") for part in range(len(ks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def measure_pages(url: str, ctx: dict, rounds: int) -> dict[str, list[float]]:
    """Each page ``rounds`` times in turns (after three untimed rounds), seconds per response read whole."""

    def get(path: str) -> float:
        request = urllib.request.Request(url + path)
        if path.startswith("/api/"):
            request.add_header("Authorization", f"Token {ctx['token']}")
        else:
            request.add_header("Cookie", f"sessionid={ctx['session']}")
        t = time.monotonic()
        with urllib.request.urlopen(request, timeout=60) as answer:
            answer.read()
            status = answer.status
        took = time.monotonic() - t
        if status != 200:
            raise RuntimeError(f"GET {path} answered {status}")
        return took

    for _ in range(3):  # every gunicorn worker warm
        for _, path in PAGES:
            get(path)
    took: dict[str, list[float]] = {name: [] for name, _ in PAGES}
    for _ in range(rounds):
        for name, path in PAGES:
            took[name].append(get(path))
    return took


def memory(cp: ControlPlane, watcher: Component, workers: dict[str, Component]) -> dict[str, Any]:
    """VmRSS in MiB now: the watcher, each worker's main process and its pool processes, kube-apiserver, etcd."""
    out: dict[str, Any] = {"watcher": rss.rss_mib(watcher.pid or 0) or math.nan}
    for name, worker in workers.items():
        main = rss.rss_mib(worker.pid or 0) or math.nan
        pool = [rss.rss_mib(pid) or 0.0 for pid in rss.children(worker.pid or 0)]
        out[f"worker {name}"] = {"main": main, "pool": pool, "total": main + sum(pool)}
    plane = cp.pids()
    out["kube-apiserver"] = rss.rss_mib(plane.get("kube-apiserver", 0)) or math.nan
    out["etcd"] = rss.rss_mib(plane.get("etcd", 0)) or math.nan
    return out


# What --quick changes (the options given explicitly win), and the defaults without it.
QUICK = {"tenants": 100, "idle_minutes": 1.0, "drift_edits": 20, "storm_edits": 100, "page_rounds": 10}
FULL = {"tenants": 1000, "idle_minutes": 10.0, "drift_edits": 100, "storm_edits": 1000, "page_rounds": 30}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Berth at fleet scale against the dev control plane.")
    parser.add_argument("--tenants", type=int, help="namespace tenants of the timed batch (default 1000)")
    parser.add_argument("--quick", action="store_true", help=f"short: {QUICK} unless given")
    parser.add_argument("--warmup-tenants", type=int, default=100, help="the batch the pages are first measured at")
    parser.add_argument("--concurrency", type=int, default=base.WORKER_CONCURRENCY, help="provision worker and kubectl")
    parser.add_argument("--request-samples", type=int, default=3)
    parser.add_argument("--reconcile-nice", type=int, default=10, help="CPU niceness of the reconcile worker")
    parser.add_argument("--idle-minutes", type=float, help="the steady window (default 10)")
    parser.add_argument("--drift-edits", type=int, help="hand edits, one every half second (default 100)")
    parser.add_argument("--storm-edits", type=int, help="hand edits at once while approving (default 1000)")
    parser.add_argument("--page-rounds", type=int, help="GETs of each page per measurement (default 30)")
    parser.add_argument(
        "--controller-qps",
        type=int,
        default=CONTROLLER_API_QPS,
        help=f"kube-controller-manager's --kube-api-qps and burst (default {CONTROLLER_API_QPS}; 0: upstream's 20/30)",
    )
    parser.add_argument("--keep-logs", action="store_true")
    args = parser.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.tenants < 10 or args.warmup_tenants < 1:
        parser.error("--tenants must be at least 10 and --warmup-tenants at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, base._raise_keyboard_interrupt)
    began = time.monotonic()
    load_start = os.getloadavg()
    work_dir = Path(tempfile.mkdtemp(prefix="berth-fleet-"))
    stack = contextlib.ExitStack()
    try:
        if not args.keep_logs:
            stack.callback(shutil.rmtree, work_dir, ignore_errors=True)
        run(args, work_dir, stack, began, load_start)
    except KeyboardInterrupt:
        print("\ninterrupted; stopping everything that was started", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        say("cleaning up ..." + (f" (logs kept in {work_dir})" if args.keep_logs else ""))
        stack.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return 0


def run(args: argparse.Namespace, work_dir: Path, stack: contextlib.ExitStack, began: float, load_start: Any) -> None:
    n, warm = args.tenants, args.warmup_tenants
    db = stack.enter_context(servers.postgres_server())
    base.create_database(db)
    redis = stack.enter_context(servers.redis_server())
    cp = ControlPlane(
        name="berth-fleet", audit_policy=audit_policy(RELEASE.users()), controller_api_qps=args.controller_qps or None
    )
    stack.callback(cp.stop)
    cp.start()
    say(f"control plane at {cp.api_url}; installing the chart's RBAC with helm ...")
    installed = chart_rbac.install(helm_binary(), cp, RELEASE)
    if installed.returncode != 0:
        raise RuntimeError(f"helm install failed: {installed.stderr}")
    # The longest the dev control plane lets a token live: a day, enough for the 10,000 run.
    kubeconfigs = chart_rbac.kubeconfigs(cp, RELEASE, work_dir, seconds=24 * 3600)
    env = configure(db, redis.url, kubeconfigs["worker"], work_dir / "static")
    from django.core.management import call_command
    from django.db import connections

    stack.callback(connections.close_all)
    call_command("migrate", verbosity=0)
    call_command("collectstatic", "--no-input", verbosity=0)
    ctx = seed(cp, warm + n + 3 * BUSY_APPROVALS + args.request_samples + 1)
    cluster = ctx["cluster"]
    steps = Steps(cp)

    server, url = api_load.start_portal(process_env(env, "web", kubeconfigs), work_dir / "gunicorn.log")
    stack.callback(server.stop, grace_seconds=10)
    worker_env = process_env(env, "worker", kubeconfigs)
    provision_worker = start_worker(
        worker_env, work_dir / "worker-provision.log", ["provision", "celery"], args.concurrency, "provision"
    )
    stack.callback(provision_worker.stop, grace_seconds=20)
    watcher_env = process_env(env, "watcher", kubeconfigs)
    watcher, _ = start_watcher(watcher_env, work_dir / "watcher.log", cluster.name)
    stack.callback(lambda: watcher.stop(grace_seconds=10))

    # CPU of each side's batch (steps 2 and 3): the reconcile worker is not running yet, so Berth's side is the
    # provisioning alone (the isolation checks it queues are purged before step 5).
    meter = base.CpuMeter.of_run(cp, {"provision worker": provision_worker.pid, "watcher": watcher.pid})

    say(f"1. warm-up: {warm} tenants, then the pages ...")
    with steps.step("warm-up"):
        warmup = approve_batch(ctx, [f"w-{i:05d}" for i in range(warm)], provision_worker, 300 + 2 * warm)
    copied_small = fill_isolation_reports(cluster)
    wait_quiet(queues=("provision", "celery"))  # the notifications of failing reports sent (no reconcile worker yet)
    with steps.step(f"pages at {warm}"):
        pages_small = measure_pages(url, ctx, args.page_rounds)

    say(f"2. submitting and approving {n} tenants (the watcher running) ...")
    before = meter.read()
    with steps.step("provision"):
        fleet = approve_batch(ctx, [f"f-{i:05d}" for i in range(n)], provision_worker, 300 + 2 * n)
    berth_cpu = meter.spent(before, meter.read())
    say(
        f"   {fleet['ready']} ready, {fleet['failed']} failed, wall {fleet['wall']:.1f}s "
        f"(approvals {fleet['approving']:.1f}s)"
    )

    say(f"3. kubectl apply --server-side of the same objects, {args.concurrency} at a time ...")
    files = kubectl_files(ctx, fleet["ids"], work_dir)
    before = meter.read()
    with steps.step("kubectl"):
        kubectl = base.run_kubectl_batch(cp, work_dir / "kube-cache", files, args.concurrency)
    kubectl_cpu = meter.spent(before, meter.read())
    for path in files:
        path.unlink()

    say("4. the watcher restarted: its first list and check ...")
    with steps.step("watcher restart"):
        watcher.stop(grace_seconds=10)
        watcher, sync_seconds = start_watcher(watcher_env, work_dir / "watcher.log", cluster.name)

    say("5. requests per first provision; a reconcile pass in this process ...")
    with steps.step("first provisions"):
        first, objects = first_provision_requests(ctx, args.request_samples)
    from worker import reconcile

    with steps.step("pass"):
        in_sync = reconcile.reconcile_cluster(cluster)
    purged = purge("reconcile")
    reconcile_worker = start_worker(
        worker_env, work_dir / "worker-reconcile.log", ["reconcile"], 2, "reconcile", nice=args.reconcile_nice
    )
    stack.callback(reconcile_worker.stop, grace_seconds=20)
    beat = start_beat(worker_env, work_dir)
    stack.callback(beat.stop, grace_seconds=10)
    wait_quiet()

    say(f"6. idle for {args.idle_minutes:g} minutes ...")
    with steps.step("idle"):
        time.sleep(args.idle_minutes * 60)
    mem = memory(cp, watcher, {"provision": provision_worker, "reconcile": reconcile_worker})

    ready = ctx_tenants(cluster)
    drift_tenants = spread(ready, args.drift_edits)
    taken = {tid for tid, _ in drift_tenants}
    storm_tenants = spread([t for t in ready if t[0] not in taken], args.storm_edits)
    k = admin_kube(cp)
    say(f"7. {len(drift_tenants)} hand edits, one every half second ...")
    with steps.step("drift"):
        drifted = drift(k, drift_tenants, 0.5)

    say(f"8. {BUSY_APPROVALS} approvals idle, then during a storm of {len(storm_tenants)} hand edits ...")
    with steps.step("approvals idle"):
        idle = approve_batch(ctx, [f"idle-{i:02d}" for i in range(BUSY_APPROVALS)], provision_worker, 120)
    storm_edited: dict[str, float] = {}
    storm_expected: dict[str, str] = {}
    with steps.step("storm"):
        storm_began = time.time()
        ks = [admin_kube(cp) for _ in range(STORM_THREADS)]
        storming = threading.Thread(target=storm, args=(ks, storm_tenants, storm_edited, storm_expected))
        storming.start()
        busy = approve_batch(ctx, [f"busy-{i:02d}" for i in range(BUSY_APPROVALS)], provision_worker, 600)
        storming.join()
        storm_edits_s = max(storm_edited.values(), default=storm_began) - storm_began
        repairing = approve_batch(ctx, [f"repairing-{i:02d}" for i in range(BUSY_APPROVALS)], provision_worker, 600)
        found = await_repairs(storm_edited, storm_began, timeout=600 + len(storm_edited), settle=10)
    stormed = exactly_once(storm_edited, [(tid, at) for tid, at, _ in found])
    stormed["right"] = sum(1 for tid, _, what in found if storm_expected.get(tid) in what)
    storm_repair_s = stormed["last"] - storm_began
    covered = busy["last_ready"] < stormed["last"] and repairing["last_ready"] < stormed["last"]

    say("9. the pages again, every ready tenant with an isolation report, once every queue is empty ...")
    copied_big = fill_isolation_reports(cluster)
    wait_quiet()
    total_tenants = len(ctx_tenants(cluster))
    with steps.step(f"pages at {total_tenants}"):
        pages_big = measure_pages(url, ctx, args.page_rounds)

    say("reading the audit log ...")
    assert cp.audit_log_path is not None
    with cp.audit_log_path.open() as lines:
        requests = audit_requests(lines, RELEASE.users())
    counts = by_step(requests, steps.all)
    agents = Counter((r.role, r.agent) for r in requests)
    resources = Counter((r.role, r.verb, r.resource) for r in requests)
    report(
        args=args,
        n=n,
        warm=warm,
        total_tenants=total_tenants,
        warmup=warmup,
        fleet=fleet,
        kubectl=kubectl,
        cpu=base.CpuMeter.per_tenant(berth_cpu, kubectl_cpu, n),
        sync_seconds=sync_seconds,
        first=first,
        objects=objects,
        in_sync=in_sync,
        purged=purged,
        steps=steps,
        counts=counts,
        agents=agents,
        resources=resources,
        mem=mem,
        drifted=drifted,
        idle=idle,
        busy=busy,
        repairing=repairing,
        stormed=stormed,
        storm_edits_s=storm_edits_s,
        storm_repair_s=storm_repair_s,
        covered=covered,
        pages_small=pages_small,
        pages_big=pages_big,
        copied=(copied_small, copied_big),
        began=began,
        load_start=load_start,
    )


def ctx_tenants(cluster: Any) -> list[tuple[str, str]]:
    """The cluster's ready tenants (id, namespace), by name."""
    from tenants.models import Tenant

    rows = Tenant.objects.filter(cluster=cluster, status="ready").order_by("name").values_list("pk", "namespace")
    return [(str(pk), ns) for pk, ns in rows]


def tally(repairs: dict[str, Any]) -> str:
    return f"{repairs['once']}/{repairs['edits']} once, {repairs['more']} more, {repairs['never']} never"


def report(**r: Any) -> None:
    args, n, warm, steps = r["args"], r["n"], r["warm"], r["steps"]
    fleet, kubectl, in_sync, mem = r["fleet"], r["kubectl"], r["in_sync"], r["mem"]
    idle_step = steps.named("idle")
    idle_requests = sum(r["counts"].get("idle", Counter()).values())
    steady = idle_requests / idle_step.seconds
    tenants_min = 60 * fleet["ready"] / fleet["wall"]
    ratio = fleet["wall"] / kubectl["wall"]
    print(f"Fleet benchmark: {n} medium namespace tenants (+{warm} warm-up), the chart's RBAC, as deployed")
    print(f"load average at the start {' '.join(f'{x:.2f}' for x in r['load_start'])}")
    qps = f"{args.controller_qps}/{args.controller_qps}" if args.controller_qps else "20/30 (upstream's default)"
    print(f"kube-controller-manager --kube-api-qps/--kube-api-burst {qps}")
    print()
    print("2-3. approve → ready, and the same objects with kubectl apply --server-side (the watcher running)")
    rows = [
        ["Berth", fmt(p50(fleet["latency"])), fmt(pct(fleet["latency"], 95)), fmt(fleet["wall"], 1)],
        ["kubectl", fmt(p50(kubectl["latency"])), fmt(pct(kubectl["latency"], 95)), fmt(kubectl["wall"], 1)],
    ]
    print(table(["", "p50 s", "p95 s", "wall s"], rows))
    print(
        f"Berth {tenants_min:.0f} tenants/min ({fleet['ready']} ready, {fleet['failed']} failed); "
        f"wall ratio {ratio:.2f}; the approvals alone (one approver, one after the other) took "
        f"{fleet['approving']:.1f}s of Berth's wall"
    )
    base.print_cpu({str(n): r["cpu"]}, "   CPU seconds per tenant (/proc; Berth: approve → ready; kubectl: its batch)")
    print()
    print(f"4. the watcher's first list and check of every tenant after a restart: {r['sync_seconds']:.1f}s")
    print(f"5. requests per first provision {r['first']} (objects per tenant {r['objects']})")
    print(
        f"   reconcile pass over {in_sync.tenants} tenants: {in_sync.seconds:.2f}s, {in_sync.requests} requests, "
        f"per_tenant {in_sync.per_tenant}, repairs {sum(len(x) for x in in_sync.repaired.values())}; "
        f"isolation checks purged {r['purged']}"
    )
    print()
    print(
        f"6. idle {idle_step.seconds:.0f}s: Berth sent {idle_requests} requests, {steady:.4f}/s "
        "(the safety-net pass is every 6 h with the watcher: none ran)"
    )
    print("   resident memory at its end (MiB):")
    rows = [["watcher", fmt(mem["watcher"], 1), ""]]
    for name in ("provision", "reconcile"):
        w = mem[f"worker {name}"]
        rows.append(
            [
                f"worker {name}",
                fmt(w["total"], 1),
                f"main {fmt(w['main'], 1)}, pool " + ", ".join(fmt(p, 1) for p in w["pool"]),
            ]
        )
    rows += [["kube-apiserver", fmt(mem["kube-apiserver"], 1), ""], ["etcd", fmt(mem["etcd"], 1), ""]]
    print(table(["process", "MiB", "of which"], rows))
    print()
    for label, d in (("7. drift", r["drifted"]), ("8. storm", r["stormed"])):
        lat = d["latency"]
        print(
            f"{label}: {d['edits']} hand edits; repaired once {d['once']}, more than once {d['more']}, never "
            f"{d['never']}; the expected repair recorded {d['right']}; edit → repair p50 {fmt(p50(lat))} s, "
            f"p95 {fmt(pct(lat, 95))} s, max {fmt(max(lat, default=math.nan))} s"
        )
    print(
        f"   the storm's edits took {r['storm_edits_s']:.1f}s to make, {r['storm_repair_s']:.1f}s from the first to "
        "the last repair; a repair was still to come when the last approval of each busy batch was ready: "
        + ("yes" if r["covered"] else "no")
    )
    busy_p95, idle_p95 = pct(r["busy"]["latency"], 95), pct(r["idle"]["latency"], 95)
    repairing_p95 = pct(r["repairing"]["latency"], 95)
    print(
        table(
            ["approve → ready", "p50 s", "p95 s"],
            [
                ["nothing else going on", fmt(p50(r["idle"]["latency"])), fmt(idle_p95)],
                ["while the edits are made", fmt(p50(r["busy"]["latency"])), fmt(busy_p95)],
                ["while they are repaired", fmt(p50(r["repairing"]["latency"])), fmt(repairing_p95)],
            ],
        )
    )
    print()
    small, big = r["pages_small"], r["pages_big"]
    ratios = {name: pct(big[name], 95) / pct(small[name], 95) for name, _ in PAGES}
    print(f"9. pages, p95 of {args.page_rounds} GETs each, at {warm} and at {r['total_tenants']} tenants")
    print(f"   isolation reports copied before them (1 in {FAILING_EVERY} failing): {r['copied'][0]}, {r['copied'][1]}")
    print(
        table(
            ["page", f"p95 s at {warm}", f"p95 s at {r['total_tenants']}", "ratio"],
            [[name, fmt(pct(small[name], 95), 3), fmt(pct(big[name], 95), 3), fmt(ratios[name])] for name, _ in PAGES],
        )
    )
    print()
    print("Berth's requests per step (the API server's audit log; a watch counts when its response starts)")
    print(verb_table(r["counts"], steps.all))
    print(
        "user agents: " + ", ".join(f"{role} {agent} {count}" for (role, agent), count in sorted(r["agents"].items()))
    )
    print(
        "over the run, by resource: "
        + ", ".join(f"{role} {verb} {res or '-'} {count}" for (role, verb, res), count in r["resources"].most_common())
    )
    print()
    print("the API server's counters per step: every client's requests; APF's service-accounts dispatches")
    print(
        table(
            ["step", "all clients", "service-accounts", "Berth (audit)"],
            [
                [
                    s.name,
                    fmt(s.counted("all clients"), 0),
                    fmt(s.counted("service-accounts"), 0),
                    str(sum(r["counts"].get(s.name, Counter()).values())),
                ]
                for s in steps.all
            ],
        )
    )
    load_end = os.getloadavg()
    run_s = time.monotonic() - r["began"]
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in load_end)}; total run time {run_s:.0f}s")
    worst = max(ratios.values())
    drifted, stormed = r["drifted"], r["stormed"]
    print(
        json.dumps(
            {
                "bench": "fleet",
                "tenants": n,
                "warmup_tenants": warm,
                "objects_per_tenant": r["objects"],
                "first_provision_requests": round(statistics.mean(r["first"]), 1) if r["first"] else None,
                f"provision_wall_ratio_vs_kubectl_{n}": round(ratio, 2),
                f"tenants_per_min_{n}": round(tenants_min),
                f"approving_seconds_{n}": round(fleet["approving"], 1),
                f"cpu_s_per_tenant_{n}": r["cpu"]["cpu_s_per_tenant"],
                f"kubectl_cpu_s_per_tenant_{n}": r["cpu"]["kubectl_cpu_s_per_tenant"],
                f"approve_ready_p50_seconds_{n}": round(p50(fleet["latency"]), 2),
                f"approve_ready_p95_seconds_{n}": round(pct(fleet["latency"], 95), 2),
                "provision_failed": fleet["failed"],
                f"watch_sync_seconds_{n}": round(r["sync_seconds"], 2),
                f"reconcile_pass_seconds_{n}": round(in_sync.seconds, 2),
                f"reconcile_pass_requests_{n}": in_sync.requests,
                "reconcile_pass_per_tenant": in_sync.per_tenant,
                f"steady_requests_per_second_{n}": round(steady, 4),
                "idle_seconds": round(idle_step.seconds),
                f"watcher_rss_mib_{n}": round(mem["watcher"], 1),
                f"worker_rss_mib_{n}": round(mem["worker provision"]["total"] + mem["worker reconcile"]["total"], 1),
                f"apiserver_rss_mib_{n}": round(mem["kube-apiserver"], 1),
                f"etcd_rss_mib_{n}": round(mem["etcd"], 1),
                "drift_repair_p95_seconds": round(pct(drifted["latency"], 95), 2) if drifted["latency"] else None,
                "drift_repaired": tally(drifted),
                f"page_p95_ratio_{n}_over_{warm}": round(worst, 2),
                "page_p95_ratios": {name: round(v, 2) for name, v in ratios.items()},
                "isolation_reports_copied": list(r["copied"]),
                "approve_ready_p95_busy_over_idle": round(busy_p95 / idle_p95, 2),
                "approve_ready_p95_repairing_over_idle": round(repairing_p95 / idle_p95, 2),
                "storm_edits": stormed["edits"],
                "storm_repair_seconds": round(r["storm_repair_s"], 1),
                "storm_repaired": tally(stormed),
                "busy_window_covered": r["covered"],
                "reconcile_worker_nice": args.reconcile_nice,
                "controller_manager_api_qps": args.controller_qps,
                "requests_by_step": {
                    step: {f"{role} {verb}": count for (role, verb), count in sorted(counter.items())}
                    for step, counter in r["counts"].items()
                },
                "loadavg_start": [round(x, 2) for x in r["load_start"]],
                "loadavg_end": [round(x, 2) for x in load_end],
                "run_s": round(run_s),
            },
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
