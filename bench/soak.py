#!/usr/bin/env python
"""Berth soak: half an hour of the API load bench's mix while the worker provisions, decommissions and reconciles.

    .venv/bin/python bench/soak.py                 # 30 minutes (make soak)
    .venv/bin/python bench/soak.py --minutes 3     # a quick run
    .venv/bin/python bench/soak.py --recycle       # gunicorn recycling its workers as shipped (max_requests)

Everything is started here and stopped on exit (also on Ctrl-C / SIGTERM): a throwaway PostgreSQL and Redis
(devcluster.servers), the dev control plane without nodes (devcluster.launcher.ControlPlane: etcd, kube-apiserver,
kube-controller-manager; namespace tenants need no nodes), the portal under gunicorn as bench/api_load.py runs it
(deploy/gunicorn.conf.py, its seed data: 10,000 tenants of 30 people in 10 teams, here as deleted history on the
real cluster, 100,000 audit rows), and the workers and beat as `make demo` runs them: a worker for
``provision,celery,events`` (prefork x4), one for ``reconcile`` (prefork x2, nice 10) and `celery beat` with the
product's schedule (sweep, reconcile, identity re-check, webhook sweep), the reconcile and sweep intervals short.

For ``--minutes``: locust's ``mix`` (bench/api_locustfile.py, the api bench's default 20 users: reads, submits and
cancels), and beside it a provisioning stream through the API: an approver approves pending requests at
``--approvals-per-minute``, owners decommission their oldest ready tenants above ``--live-tenants``, and now and
then an object of a ready tenant is edited by hand on the cluster for the reconcile pass to repair. The resident
memory of every process is sampled by PID (after ``--warmup-seconds``, then every ``--sample-seconds``, at the end).

Afterwards: no 5xx (locust's statuses, the stream's and the portal's own counters), nothing lost (every 201 a row;
every approved tenant ready with its namespace on the cluster, every decommissioned one deleted and its namespace
gone, none stuck), the audit trail one row per transition for a sample, the hand edits repaired; each process's
memory judged flat or not (bench/rss.py states the threshold). The table goes to stdout, ending with one line of
JSON; progress to stderr. Exit status 1 when anything is not flat, on any 5xx, when anything is lost or a hand edit
was not repaired, or when a web or worker process was replaced that nothing recycles (it died).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import random
import runpy
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import api_load, fleet, rss  # noqa: E402  (no Django at import time)
from bench import provision as base  # noqa: E402
from devcluster import servers  # noqa: E402
from devcluster.launcher import ControlPlane  # noqa: E402
from devcluster.process import Component, celery_worker, wait_for_celery_ready  # noqa: E402

say = api_load.say
# Each tenant's transitions, as tenants.services records them: one audit row each.
LIFE = ["tenant.approve", "tenant.provisioning", "tenant.ready", "tenant.decommission", "tenant.deleted"]
TRANSITIONS = frozenset(LIFE) | {"tenant.failed", "tenant.retry", "tenant.cancel", "tenant.reject", "tenant.diverged"}
WORKING = ("approved", "provisioning", "decommissioning")
# What make demo runs: (name, queues, concurrency, nice).
WORKERS = (("provision", ["provision", "celery", "events"], 4, 0), ("reconcile", ["reconcile"], 2, 10))
AUDIT_SAMPLE = 20


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the load runs (default 30)")
    parser.add_argument("--users", type=int, default=20, help="locust users (the api bench's default)")
    parser.add_argument("--tenants", type=int, default=10_000, help="seeded tenants (deleted history)")
    parser.add_argument("--audit-rows", type=int, default=100_000)
    parser.add_argument("--approvals-per-minute", type=float, default=20.0)
    parser.add_argument(
        "--live-tenants",
        type=int,
        default=None,
        help="ready tenants above which owners decommission their oldest (default: 3 minutes of approvals, at most 60)",
    )
    parser.add_argument("--edit-seconds", type=float, default=60.0, help="one hand edit on the cluster this often")
    parser.add_argument("--reconcile-seconds", type=float, default=20.0, help="BERTH_RECONCILE_SECONDS (beat)")
    parser.add_argument("--sweep-seconds", type=float, default=30.0, help="BERTH_SWEEP_SECONDS (beat)")
    parser.add_argument("--sample-seconds", type=float, default=60.0)
    parser.add_argument(
        "--warmup-seconds", type=float, default=None, help="before the first memory sample (default: 3 min, 1 short)"
    )
    parser.add_argument(
        "--recycle",
        action="store_true",
        help="gunicorn recycles workers as deploy/gunicorn.conf.py ships (max_requests); default off: a leak shows",
    )
    parser.add_argument("--keep-logs", action="store_true")
    args = parser.parse_args(argv)
    if args.live_tenants is None:
        args.live_tenants = max(1, min(60, round(args.approvals_per_minute * min(3.0, args.minutes / 3))))
    if args.warmup_seconds is None:
        args.warmup_seconds = 180.0 if args.minutes >= 10 else min(60.0, args.minutes * 60 / 3)
    return args


# --- processes and their memory ------------------------------------------------------------------------------------


class Sampler(threading.Thread):
    """RSS of each watched process by PID: at the warm-up's end, every ``period`` seconds and once more at the end.

    ``roles`` maps a role to a function giving its PIDs now (a master and its children are read anew each time, so
    a worker that was replaced shows up as a new PID).
    """

    def __init__(self, roles: dict[str, Any], began: float, warmup: float, period: float):
        super().__init__(daemon=True)
        self.roles, self.began, self.warmup, self.period = roles, began, warmup, period
        self.samples: dict[tuple[str, int], list[tuple[float, float]]] = {}
        self.done = threading.Event()

    def sample(self) -> None:
        now = time.monotonic() - self.began
        total: dict[str, float] = {}
        for role, pids in self.roles.items():
            for pid in pids():
                mib = rss.rss_mib(pid)
                if mib is not None:
                    self.samples.setdefault((role, pid), []).append((now, mib))
                    part = role.split(" ")[0]
                    total[part] = total.get(part, 0.0) + mib
        say(f"RSS at {now / 60:.1f} min: " + ", ".join(f"{part} {mib:.0f} MiB" for part, mib in total.items()))

    def run(self) -> None:
        if self.done.wait(max(0.0, self.began + self.warmup - time.monotonic())):
            return
        while True:
            self.sample()
            if self.done.wait(self.period):
                return

    def finish(self) -> None:
        self.done.set()
        self.join()
        self.sample()


def children_of(component: Component) -> Any:
    return lambda: rss.children(component.pid or 0)


def own(pid: int | None) -> Any:
    return lambda: [pid] if pid else []


# --- the provisioning stream ---------------------------------------------------------------------------------------


class Api:
    """Small JSON client for the stream: who it is (an API token), what it got back (status counts)."""

    def __init__(self, url: str, statuses: Counter[str]):
        self.url, self.statuses = url, statuses

    def call(self, token: str, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"Token {token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                status, text = answer.status, answer.read()
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read()
        except OSError:
            self.statuses["no answer"] += 1
            return 0, None
        self.statuses[str(status)] += 1
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, None


class Stream(threading.Thread):
    """An approver approving pending requests, owners decommissioning their oldest ready tenants, hand edits."""

    def __init__(self, api: Api, approver_token: str, owners: dict[str, str], cluster: Any, args: argparse.Namespace):
        super().__init__(daemon=True)
        self.api, self.approver_token, self.owners, self.cluster, self.args = api, approver_token, owners, cluster, args
        self.stop = threading.Event()
        self.approved: list[str] = []  # tenant ids
        self.approve_refused = 0  # cancelled by its owner first: a 4xx, as for a person
        self.decommissioned: list[str] = []
        self.edits: list[tuple[str, str, float]] = []  # (tenant id, the repair expected, when)
        self.errors: list[str] = []
        self.tried: set[str] = set()

    def run(self) -> None:
        from django.db import connections

        began = time.monotonic()
        next_edit = began + self.args.edit_seconds
        rng = random.Random(36)
        try:
            while not self.stop.wait(3.0):
                elapsed = time.monotonic() - began
                self.approve(int(elapsed / 60 * self.args.approvals_per_minute) - len(self.approved))
                self.decommission()
                if time.monotonic() >= next_edit:
                    next_edit += self.args.edit_seconds
                    self.edit(rng)
        except Exception as exc:  # reported at the end; the load goes on
            self.errors.append(repr(exc))
            say(f"stream stopped: {exc!r}")
        finally:
            connections.close_all()

    def approve(self, wanted: int) -> None:
        if wanted <= 0:
            return
        status, page = self.api.call(self.approver_token, "GET", "/api/v1/requests/?status=pending&limit=50")
        if status != 200:
            return
        for item in page["results"]:
            if wanted <= 0:
                return
            if item["id"] in self.tried:
                continue
            self.tried.add(item["id"])
            status, answer = self.api.call(
                self.approver_token, "POST", f"/api/v1/requests/{item['id']}/approve/", {"comment": "soak"}
            )
            if status == 200:
                self.approved.append(answer["tenant"])
                wanted -= 1
            else:
                self.approve_refused += 1

    def decommission(self) -> None:
        from tenants.models import Tenant

        ready = Tenant.objects.filter(pk__in=self.approved, status="ready").order_by("ready_at")
        surplus = ready.count() - self.args.live_tenants
        if surplus <= 0:
            return
        for pk, team in ready.values_list("pk", "team__slug")[:surplus]:
            status, _ = self.api.call(
                self.owners[team], "POST", f"/api/v1/tenants/{pk}/decommission/", {"reason": "soak: its time is up"}
            )
            if status == 200:
                self.decommissioned.append(str(pk))

    def edit(self, rng: random.Random) -> None:
        """One of fleet's five hand edits on the newest ready tenant that has been ready a while."""
        from tenants.models import Tenant
        from worker import kube

        settled = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=10)
        found = (
            Tenant.objects.filter(pk__in=self.approved, status="ready", ready_at__lt=settled)
            .order_by("-ready_at")
            .values_list("pk", "namespace")
            .first()
        )
        if found is None:
            return
        what = fleet.edit_by_hand(kube.for_cluster(self.cluster), found[1], len(self.edits) + rng.randrange(5))
        self.edits.append((str(found[0]), what, time.time()))


# --- set-up --------------------------------------------------------------------------------------------------------


def make_cluster(cp: ControlPlane) -> Any:
    from tenants.models import Cluster, Tier

    cluster = Cluster.objects.create(
        name="bench",  # the name bench/api_locustfile.py submits to
        display_name="Soak dev control plane",
        api_url=cp.api_url,
        ca_pem=cp.ca_cert_pem,
        credential_ref=f"kubeconfig:{cp.kubeconfig_path}",
        public_endpoint=cp.api_url,
        kinds=["namespace"],
    )
    cluster.tiers.set(Tier.objects.filter(name__in=["small", "medium", "large"]))
    return cluster


def make_approver() -> str:
    from django.utils import timezone

    from tenants import services
    from tenants.models import User

    approver = User.objects.create(
        username="soak-approver", oidc_subject="sub-soak-approver", is_approver=True, identity_checked_at=timezone.now()
    )
    return services.api_token_create(actor=approver, name="soak", expires_in_days=1)[1]


def start_celery(stack: contextlib.ExitStack, env: dict[str, str], work: Path) -> dict[str, Component]:
    started: dict[str, Component] = {}
    for name, queues, concurrency, nice in WORKERS:
        metrics = work / f"metrics-{name}"
        metrics.mkdir()
        worker = celery_worker(
            work / f"worker-{name}.log",
            cwd=ROOT,
            env={
                **os.environ,
                **env,
                "PYTHONPATH": str(ROOT),
                "LOG_LEVEL": "INFO",
                "PROMETHEUS_MULTIPROC_DIR": str(metrics),
            },
            queues=queues,
            concurrency=concurrency,
            node=f"{name}-{os.getpid()}@%h",
            nice=nice,
        )
        worker.start()
        stack.callback(worker.stop, grace_seconds=20)
        wait_for_celery_ready(worker, 90)
        started[name] = worker
    beat_metrics = work / "metrics-beat"
    beat_metrics.mkdir()
    beat = Component(
        "celery beat",
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "portal",
            "beat",
            "-l",
            "INFO",
            "--schedule",
            str(work / "beat-schedule"),
        ],
        work / "beat.log",
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT), "PROMETHEUS_MULTIPROC_DIR": str(beat_metrics)},
    )
    beat.start()
    stack.callback(beat.stop, grace_seconds=10)
    started["beat"] = beat
    return started


# --- checks --------------------------------------------------------------------------------------------------------


def counters(directory: Path, name: str) -> dict[str, float]:
    """A counter's samples (by their labels) summed over the processes that wrote to a multiprocess directory."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(directory))
    found: dict[str, float] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == f"{name}_total":
                key = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                found[key] = found.get(key, 0) + sample.value
    return found


def settle(ids: list[str], timeout: float) -> dict[str, int]:
    """Wait until none of ``ids`` is in a working status (or ``timeout``); their statuses then."""
    from tenants.models import Tenant

    deadline = time.monotonic() + timeout
    while True:
        statuses = Counter(Tenant.objects.filter(pk__in=ids).values_list("status", flat=True))
        if not any(statuses[s] for s in WORKING) or time.monotonic() > deadline:
            return dict(statuses)
        time.sleep(1)


def check_tenants(stream: Stream, cluster: Any, timeout: float) -> dict[str, Any]:
    """Every approved tenant ready with its namespace there, every decommissioned one deleted with it gone."""
    from tenants.models import Tenant
    from worker import kube

    k = kube.for_cluster(cluster)
    decommissioned = set(stream.decommissioned)
    rows = {
        str(pk): (status, ns)
        for pk, status, ns in Tenant.objects.filter(pk__in=stream.approved).values_list("pk", "status", "namespace")
    }
    deadline = time.monotonic() + timeout
    while True:
        live = {item["metadata"]["name"]: item for item in k.list("Namespace")}
        ready_missing = [pk for pk, (status, ns) in rows.items() if pk not in decommissioned and ns not in live]
        deleted_there = [pk for pk, (status, ns) in rows.items() if pk in decommissioned and ns in live]
        if not deleted_there or time.monotonic() > deadline:
            break
        time.sleep(2)  # the namespace controller empties and removes terminating namespaces
    statuses = Counter(status for status, _ in rows.values())
    return {
        "approved": len(rows),
        "statuses": dict(statuses),
        "not_ready": [pk for pk, (status, _) in rows.items() if pk not in decommissioned and status != "ready"],
        "not_deleted": [pk for pk, (status, _) in rows.items() if pk in decommissioned and status != "deleted"],
        "namespace_missing": ready_missing,
        "namespace_left": deleted_there,
    }


def check_audit(stream: Stream) -> dict[str, Any]:
    """For a sample of tenants that went the whole way (and of those still ready): one audit row per transition."""
    from tenants.models import AuditEvent, Tenant

    rng = random.Random(5)
    gone = list(Tenant.objects.filter(pk__in=stream.decommissioned, status="deleted").values_list("pk", flat=True))
    ready = list(Tenant.objects.filter(pk__in=stream.approved, status="ready").values_list("pk", flat=True))
    sample = rng.sample(gone, min(AUDIT_SAMPLE, len(gone))) + rng.sample(ready, min(AUDIT_SAMPLE // 2, len(ready)))
    wrong = {}
    for pk in sample:
        actions = list(
            AuditEvent.objects.filter(object_type="tenant", object_id=str(pk), action__in=TRANSITIONS)
            .order_by("at", "pk")
            .values_list("action", flat=True)
        )
        expected = LIFE if pk in gone else LIFE[:3]
        if actions != expected:
            wrong[str(pk)] = actions
    return {"sampled": len(sample), "wrong": wrong}


def check_repairs(stream: Stream) -> dict[str, Any]:
    """Each hand edit on a tenant still ready at the end was recorded as repaired after it was made."""
    from tenants.models import AuditEvent, Tenant

    repaired = 0
    missed, gone_first = [], 0
    for pk, what, at in stream.edits:
        events = AuditEvent.objects.filter(
            object_type="tenant",
            object_id=pk,
            action="tenant.drift_repaired",
            at__gte=dt.datetime.fromtimestamp(at - 1, dt.UTC),
        ).values_list("after", flat=True)
        if any(what in (after or {}).get("repaired", []) for after in events):
            repaired += 1
        elif Tenant.objects.filter(pk=pk).exclude(status="ready").exists():
            gone_first += 1  # decommissioned before a pass came round
        else:
            missed.append((pk, what))
    return {"edits": len(stream.edits), "repaired": repaired, "decommissioned_first": gone_first, "missed": missed}


# --- report --------------------------------------------------------------------------------------------------------


def memory_report(sampler: Sampler) -> tuple[list[dict[str, Any]], bool]:
    rows, flat = [], True
    end = max(t for points in sampler.samples.values() for t, _ in points)
    for (role, pid), points in sorted(sampler.samples.items()):
        verdict = rss.judge(points, sampler.warmup)
        whole = points[0][0] <= sampler.warmup + sampler.period and points[-1][0] >= end - 1
        judged = whole and role.split(" ")[0] in ("gunicorn", "celery")
        rows.append(
            {
                "process": role,
                "pid": pid,
                "samples": len(points),
                "whole_run": whole,
                "judged": judged,
                "rss_start_mib": round(verdict.start_mib, 1),
                "rss_end_mib": round(verdict.end_mib, 1),
                "rss_max_mib": round(verdict.max_mib, 1),
                "slope_mib_per_10min": round(verdict.slope_mib_per_10min, 2),
                "limit_mib_per_10min": round(verdict.limit_mib_per_10min, 2),
                "flat": verdict.flat,
            }
        )
        if judged and not verdict.flat:
            flat = False
    return rows, flat


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, base._raise_keyboard_interrupt)
    work = Path(tempfile.mkdtemp(prefix="berth-soak-"))
    stack = contextlib.ExitStack()
    if not args.keep_logs:
        stack.callback(shutil.rmtree, work, ignore_errors=True)
    try:
        return soak(args, work, stack)
    except KeyboardInterrupt:
        print("\ninterrupted; stopping everything that was started", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        say(f"stopping everything{' (logs kept in ' + str(work) + ')' if args.keep_logs else ''} ...")
        stack.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)


def soak(args: argparse.Namespace, work: Path, stack: contextlib.ExitStack) -> int:
    db = stack.enter_context(servers.postgres_server())
    redis = stack.enter_context(servers.redis_server())
    cp = ControlPlane(name="berth-soak")
    stack.callback(cp.stop)
    cp.start()
    say(f"control plane at {cp.api_url} (no nodes: namespace tenants need none)")
    env = api_load.portal_env(db, redis.url)
    env.update(
        {
            "BERTH_RECONCILE_SECONDS": str(args.reconcile_seconds),
            "BERTH_SWEEP_SECONDS": str(args.sweep_seconds),
            "BERTH_METRICS_TOKEN": secrets.token_urlsafe(24),
        }
    )
    shipped = runpy.run_path(str(ROOT / "deploy" / "gunicorn.conf.py"))
    if not args.recycle:
        env["GUNICORN_MAX_REQUESTS"] = "0"  # gunicorn: never recycle
    web_metrics = work / "metrics-web"
    web_metrics.mkdir()
    os.environ.update({**env, "PROMETHEUS_MULTIPROC_DIR": str(web_metrics)})
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    stack.callback(connections.close_all)
    say("migrating")
    call_command("migrate", verbosity=0)
    cluster = make_cluster(cp)
    data = api_load.seed(args.tenants, args.audit_rows, cluster=cluster, status="deleted")
    api_load.vacuum()
    approver_token = make_approver()
    owners = {person["team"]: person["token"] for person in data["tokens"]}
    people = work / "people.json"
    people.write_text(json.dumps(data["tokens"]))

    say("starting the workers and beat")
    celery = start_celery(stack, env, work)
    log = work / "gunicorn.log"
    server, url = api_load.start_portal({**env, "PROMETHEUS_MULTIPROC_DIR": str(web_metrics)}, log)
    stack.callback(server.stop, grace_seconds=10)
    plane = cp.pids()
    roles: dict[str, Any] = {
        "gunicorn master": own(server.pid),
        "gunicorn worker": children_of(server),
        **{f"celery {name} main": own(celery[name].pid) for name, *_ in WORKERS},
        **{f"celery {name} child": children_of(celery[name]) for name, *_ in WORKERS},
        "celery beat": own(celery["beat"].pid),
        "postgres postmaster": own(api_load.postmaster_pid()),
        "redis": own(redis.server.pid),
        "kube-apiserver": own(plane.get("kube-apiserver")),
        "etcd": own(plane.get("etcd")),
    }
    workers = int(shipped["workers"])
    seconds = round(args.minutes * 60)
    locust_env = {
        "BERTH_BENCH_USERS": str(people),
        "BERTH_BENCH_SINCE": (data["started"] - dt.timedelta(minutes=5)).isoformat(),
        "BERTH_BENCH_RUN": str(int(time.time()) % 100000),
    }
    cpu = api_load.CpuMeter(portal=server.pid or 0, postgres=api_load.postmaster_pid(), redis=redis.server.pid or 0)
    statuses: Counter[str] = Counter()
    stream = Stream(Api(url, statuses), approver_token, owners, cluster, args)
    began = time.monotonic()
    sampler = Sampler(roles, began, args.warmup_seconds, args.sample_seconds)
    sampler.start()
    stream.start()
    say(
        f"soak: {args.minutes:g} min of the mix ({args.users} users) and the provisioning stream; memory from"
        f" {args.warmup_seconds:.0f} s on, every {args.sample_seconds:.0f} s"
    )
    mix = api_load.run_locust(url, "mix", seconds, args.users, work, locust_env, cpu, log)
    stream.stop.set()
    stream.join()
    sampler.finish()
    ran_s = time.monotonic() - began
    boots = api_load.worker_boots(log)

    say("load over: waiting for every tenant to settle and a reconcile pass after the last edit")
    settle(stream.approved, timeout=300)
    time.sleep(args.reconcile_seconds * 2 + 10)
    tenants = check_tenants(stream, cluster, timeout=120)
    audit = check_audit(stream)
    repairs = check_repairs(stream)
    writes = api_load.check_writes(mix, data["seeded_requests"])
    portal_statuses = counters(web_metrics, "berth_http_requests")
    task_states: Counter[str] = Counter()
    for name, *_ in WORKERS:
        for key, value in counters(work / f"metrics-{name}", "berth_celery_tasks").items():
            task_states[key.split("state=")[-1]] += int(value)
    # Pool processes replaced (a child that died or was recycled shows up as a new PID).
    pool_replacements = {
        name: len({pid for role, pid in sampler.samples if role == f"celery {name} child"}) - concurrency
        for name, _, concurrency, _ in WORKERS
    }

    memory, flat = memory_report(sampler)
    # Every sample, for a closer look (kept with --keep-logs): {"role pid": [[seconds, MiB], ...]}.
    (work / "rss-samples.json").write_text(
        json.dumps({f"{role} {pid}": points for (role, pid), points in sorted(sampler.samples.items())})
    )
    agg = api_load.figures(mix["rows"]["Aggregated"])
    locust_5xx = sum(v for k, v in mix["statuses"].items() if not k.isdigit() or int(k) >= 500)
    stream_5xx = sum(v for k, v in statuses.items() if not k.isdigit() or int(k) >= 500)
    portal_5xx = int(sum(v for k, v in portal_statuses.items() if k.split("=")[-1].startswith("5")))
    lost_writes = (
        abs(writes["created_answers"] - writes["created_in_db"])
        + abs(writes["rows_added"] - writes["created_answers"])
        + writes["duplicate_names"]
        + abs(writes["cancelled_answers"] - writes["cancelled_in_db"])
    )
    lost_tenants = sum(len(tenants[k]) for k in ("not_ready", "not_deleted", "namespace_missing", "namespace_left"))
    ok_audit = not audit["wrong"] and audit["sampled"] > 0
    ok_repairs = not repairs["missed"]

    recycling = f"as shipped ({shipped['max_requests']})" if args.recycle else "off (GUNICORN_MAX_REQUESTS=0)"
    print(f"\nSoak: {args.minutes:g} min, {args.users} users (bench/api_locustfile.py mix) and the provisioning stream")
    print(
        f"  gunicorn: {workers} workers, max_requests {recycling}; worker boots {boots}"
        f" ({boots - workers} replacements)"
    )
    print(f"  celery pool processes replaced: {pool_replacements}; task runs by state: {dict(task_states)}")
    print(f"  requests {agg['requests']}, {agg['rps']:.1f}/s, p50 {agg['p50']:.0f} ms, p95 {agg['p95']:.0f} ms")
    print(f"  status codes: locust {dict(sorted(mix['statuses'].items()))}; stream {dict(sorted(statuses.items()))}")
    print(f"  portal's counters (berth_http_requests): {portal_statuses}")
    print(f"  writes: {writes}")
    print(
        f"  tenants approved {len(stream.approved)} (approvals refused, cancelled first: {stream.approve_refused}),"
        f" decommissioned {len(stream.decommissioned)}; at the end {tenants['statuses']}"
    )
    print(
        f"  lost: not ready {tenants['not_ready']}, not deleted {tenants['not_deleted']}, namespace missing"
        f" {tenants['namespace_missing']}, namespace left {tenants['namespace_left']}"
    )
    print(
        f"  audit trail, one row per transition: {audit['sampled'] - len(audit['wrong'])}/{audit['sampled']}"
        f" {audit['wrong'] or ''}"
    )
    print(
        f"  hand edits {repairs['edits']}: repaired {repairs['repaired']}, decommissioned first"
        f" {repairs['decommissioned_first']}, missed {repairs['missed']}"
    )
    if stream.errors:
        print(f"  stream errors: {stream.errors}")
    print(
        f"\nMemory (RSS MiB; from {args.warmup_seconds:.0f} s on, every {args.sample_seconds:.0f} s; flat: slope at"
        f" most max({rss.FLAT_MIB_PER_10MIN:g} MiB, {rss.FLAT_SHARE_PER_10MIN:.0%} of start) per 10 min;"
        " judged: gunicorn and celery processes that lived the whole run)"
    )
    print(base.table(
        ["process", "pid", "start", "end", "max", "MiB/10min", "limit", "flat"],
        [
            [
                r["process"], str(r["pid"]),
                f"{r['rss_start_mib']:.1f}", f"{r['rss_end_mib']:.1f}", f"{r['rss_max_mib']:.1f}",
                f"{r['slope_mib_per_10min']:+.2f}", f"{r['limit_mib_per_10min']:.2f}",
                ("yes" if r["flat"] else "NO") + ("" if r["judged"] else " (context)"),
            ]
            for r in memory
        ],
    ))  # fmt: skip
    summary = {
        "bench": "soak",
        "minutes": args.minutes,
        "ran_s": round(ran_s),
        "users": args.users,
        "gunicorn_max_requests": int(shipped["max_requests"]) if args.recycle else 0,
        "gunicorn_worker_replacements": boots - workers,
        "celery_pool_replacements": pool_replacements,
        "requests": agg["requests"],
        "rps": round(agg["rps"], 1),
        "p95_ms": agg["p95"],
        "errors_5xx": locust_5xx + stream_5xx,
        "portal_5xx": portal_5xx,
        "lost_writes": lost_writes,
        "tenants_provisioned": len(stream.approved) - len(tenants["not_ready"]) - len(tenants["namespace_missing"]),
        "tenants_decommissioned": len(stream.decommissioned)
        - len(tenants["not_deleted"])
        - len(tenants["namespace_left"]),
        "lost_tenants": lost_tenants,
        "audit_ok": ok_audit,
        "hand_edits": repairs["edits"],
        "repairs": repairs["repaired"],
        "repairs_missed": len(repairs["missed"]),
        "rss": {
            f"{r['process']} {r['pid']}": {
                "rss_start_mib": r["rss_start_mib"],
                "rss_end_mib": r["rss_end_mib"],
                "rss_max_mib": r["rss_max_mib"],
                "slope_mib_per_10min": r["slope_mib_per_10min"],
                "judged": r["judged"],
            }
            for r in memory
        },
        "flat": flat,
    }
    print(json.dumps(summary))
    # A process that was replaced when nothing recycles it died: its memory was not watched to the end either.
    restarts = sum(pool_replacements.values()) + (0 if args.recycle else boots - workers)
    good = flat and not (
        locust_5xx or stream_5xx or portal_5xx or lost_writes or lost_tenants or stream.errors or restarts
    )
    return 0 if good and ok_audit and ok_repairs else 1


if __name__ == "__main__":
    sys.exit(main())
