#!/usr/bin/env python
"""Berth provisioning benchmark: approve → ready latency of namespace tenants, end to end.

    .venv/bin/python bench/provision.py            # N = 1, 10, 100 (a few minutes)
    .venv/bin/python bench/provision.py --quick    # N = 1, 10
    .venv/bin/python bench/provision.py --sizes 1,50

Everything it needs is started here and stopped again on exit (also on Ctrl-C / SIGTERM):
a throwaway PostgreSQL and Redis (devcluster.servers), the dev control plane
(devcluster.launcher.ControlPlane), migrations into the fresh database, a team, users and a
Cluster row, and a real `celery -A portal worker` process (prefork pool, concurrency 4).

What it measures (see bench/README.md for how to read the figures):
  1. Berth: for each N, submit N medium-tier requests (they need approval), approve each as a
     different user, and read approve → ready per tenant from the database
     (Tenant.ready_at - TenantRequest.decided_at), split into queue wait (approve → the worker's
     `tenant.provisioning` audit event) and provisioning (→ ready).
  2. Baseline: the same rendered manifests (worker.manifests.namespace_tenant → to_yaml), each
     moved into a fresh namespace, applied with `kubectl apply --server-side`.
  3. Kubernetes API requests per tenant, counted in-process on the cached Kube client
     (worker.kube.for_cluster(...).requests) for a first provision and a no-op reconcile.
  4. The quota controller's lag (apply of a ResourceQuota → status.hard filled), which is
     what provisioning waits for before calling a tenant ready.
  5. One worker.tasks.sweep() call after each N.

Progress goes to stderr, the tables to stdout.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import datetime as dt
import json
import math
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.api_load import portal_env, tree_cpu_seconds  # noqa: E402
from devcluster import servers  # noqa: E402  (no Django at import time)
from devcluster.launcher import ControlPlane  # noqa: E402
from devcluster.process import berth_watcher, celery_worker, wait_for_celery_ready, wait_until  # noqa: E402

WORKER_CONCURRENCY = 4
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager")
TIER = "medium"  # needs approval (auto_approve=False in the seeded tiers)
NAMESPACE_PREFIX = "bench-"


# --- small helpers ---------------------------------------------------------------------


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def fmt(value: float, digits: int = 2) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


# --- set-up ----------------------------------------------------------------------------


def create_database(db: dict) -> None:
    import psycopg

    with psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname="postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{db["NAME"]}"')


def configure_django(db: dict, broker: str) -> dict[str, str]:
    """Environment for this process and the worker, as deployed (bench/api_load.py's): DEBUG off, database
    connections kept for a minute (the chart's ``database.connMaxAge``), logs from WARNING up (this process's stdout
    is the tables'); must run before django.setup()."""
    env = {**portal_env(db, broker), "DJANGO_SETTINGS_MODULE": "portal.settings"}
    os.environ.update(env)
    import django

    django.setup()
    return env


def seed(cp: ControlPlane, total_tenants: int) -> dict[str, Any]:
    from tenants.models import Cluster, Membership, Team, Tier, User

    tier = Tier.objects.get(name=TIER)
    assert not tier.auto_approve, f"tier {TIER} is expected to need approval"
    room = total_tenants + 5
    team = Team.objects.create(
        slug="team-bench",
        name="Bench",
        oidc_group="team-bench",
        budget_cpu_millis=tier.cpu_limit_millis * room,
        budget_memory_mib=tier.memory_limit_mib * room,
        budget_storage_gib=tier.storage_gib * room,
        budget_tenants=room,
    )
    # No e-mail addresses: notifications have no recipients, so nothing is "sent" while measuring.
    requester = User.objects.create(username="bench-owner", oidc_subject="sub-bench-owner")
    Membership.objects.create(user=requester, team=team, role=Membership.Role.OWNER)
    approver = User.objects.create(username="bench-approver", oidc_subject="sub-bench-approver", is_approver=True)
    cluster = Cluster.objects.create(
        name="bench",
        display_name="Bench dev control plane",
        api_url=cp.api_url,
        ca_pem=cp.ca_cert_pem,
        credential_ref=f"kubeconfig:{cp.kubeconfig_path}",
        public_endpoint=cp.api_url,
        namespace_prefix=NAMESPACE_PREFIX,
        kinds=["namespace"],
    )
    cluster.tiers.set(Tier.objects.filter(name__in=["small", "medium", "large"]))
    return {"team": team, "requester": requester, "approver": approver, "cluster": cluster, "tier": tier}


class Worker:
    """The bench's Celery worker: devcluster.process.celery_worker, with the bench's options and a log tail."""

    def __init__(
        self,
        env: dict[str, str],
        log_path: Path,
        *,
        pool: str = "prefork",
        hub_tick: float = 0.0,
        heartbeat: bool = False,
        queues: list[str] | None = None,
        concurrency: int = WORKER_CONCURRENCY,
        nice: int = 0,
        name: str = "bench",
    ):
        self.log_path = log_path
        self.app = "portal"
        env = {**os.environ, **env, "PYTHONPATH": str(ROOT), "LOG_LEVEL": "INFO"}
        if hub_tick > 0:  # the celery#6941 workaround, from bench/tick_app.py (no product change)
            self.app = "bench.tick_app"
            env["BERTH_BENCH_HUB_TICK"] = str(hub_tick)
        self.component = celery_worker(
            log_path,
            cwd=ROOT,
            env=env,
            app=self.app,
            pool=pool,
            concurrency=concurrency,
            node=f"{name}-{os.getpid()}@%h",
            heartbeat=heartbeat,
            queues=queues,
            nice=nice,
        )

    def start(self, timeout: float = 60.0) -> Worker:
        self.component.start()
        wait_for_celery_ready(self.component, timeout)
        return self

    def alive(self) -> bool:
        return self.component.pid is not None and self.component.exited() is None

    def tail(self, lines: int = 30) -> str:
        return self.component.log_tail(lines)

    def stop(self) -> None:
        self.component.stop(grace_seconds=20)  # warm shutdown first: running tasks finish


class CpuMeter:
    """CPU seconds (user and system) of each part of a run, read from /proc: Berth's processes (the workers and the
    watcher, with their pool processes), the control plane's (etcd, kube-apiserver, kube-controller-manager),
    PostgreSQL (every backend), this process (the approvals, as people's requests would) and the kubectl processes
    it ran and waited for. On a shared machine a wall time moves with the neighbours; CPU per tenant hardly does."""

    def __init__(self, roots: dict[str, int]) -> None:
        self.roots = roots

    def read(self) -> dict[str, float]:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kubectl = resource.getrusage(resource.RUSAGE_CHILDREN)
        return {
            **{name: tree_cpu_seconds(pid) for name, pid in self.roots.items()},
            "bench (approvals)": own.ru_utime + own.ru_stime,
            "kubectl": kubectl.ru_utime + kubectl.ru_stime,
        }

    @classmethod
    def of_run(cls, cp: ControlPlane, berth: dict[str, int | None]) -> CpuMeter:
        """A meter of ``berth``'s processes (a name to a pid, None for one not started), the control plane's and
        PostgreSQL's."""
        roots = {**berth, "postgres": postmaster_pid()}
        roots.update({name: pid for name, pid in cp.pids().items() if name in CONTROL_PLANE})
        return cls({name: pid for name, pid in roots.items() if pid is not None})

    @staticmethod
    def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {name: after[name] - before.get(name, 0.0) for name in after}

    @staticmethod
    def per_tenant(berth: dict[str, float], kubectl: dict[str, float], n: int) -> dict[str, dict[str, float]]:
        """CPU seconds per tenant of each side's batch: Berth's parts, and kubectl's with the control plane."""
        return {
            "cpu_s_per_tenant": {name: round(v / n, 4) for name, v in berth.items() if name != "kubectl"},
            "kubectl_cpu_s_per_tenant": {
                name: round(v / n, 4) for name, v in kubectl.items() if name in ("kubectl", *CONTROL_PLANE)
            },
        }


def postmaster_pid() -> int:
    """PostgreSQL's postmaster: the parent of this process's backend."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        backend = int(cur.fetchone()[0])
    text = Path(f"/proc/{backend}/stat").read_text()
    return int(text[text.rindex(")") + 2 :].split()[1])


def start_watcher(env: dict[str, str], log_path: Path, cluster: str) -> Any:
    """The watcher as deployed (manage.py berth_watch), leading at once: its events take provisioning tenants' next
    step as soon as their quota is counted."""
    watcher = berth_watcher(
        log_path, cwd=ROOT, env={**os.environ, **env, "PYTHONPATH": str(ROOT), "LOG_LEVEL": "INFO"}, clusters=[cluster]
    )
    watcher.start()
    wait_until(lambda: b"; watching" in log_path.read_bytes(), timeout=60, watched=[watcher], what="the watcher")
    return watcher


# --- 1. Berth: approve → ready ---------------------------------------------------------------


def run_berth_batch(ctx: dict, batch: int, n: int, worker: Worker) -> dict:
    from tenants import services
    from tenants.models import AuditEvent, Tenant, TenantRequest

    names = [f"b{batch}-{i:03d}" for i in range(n)]
    requests = []
    t = time.monotonic()
    for name in names:
        requests.append(
            services.request_submit(
                actor=ctx["requester"],
                action=TenantRequest.Action.CREATE,
                team=ctx["team"],
                tier=ctx["tier"],
                cluster=ctx["cluster"],
                name=name,
                purpose="provisioning benchmark",
            )
        )
    submit_s = time.monotonic() - t
    assert all(r.status == TenantRequest.Status.PENDING for r in requests), "requests were auto-approved"

    decided = {}
    t = time.monotonic()
    for req in requests:  # a different user (an approver) decides, as the product requires
        req = services.request_approve(tenant_request=req, actor=ctx["approver"], comment="bench")
        assert req.decided_at is not None
        decided[str(req.tenant_id)] = req.decided_at
    approve_s = time.monotonic() - t

    ids = list(decided)
    deadline = time.monotonic() + 90 + 3 * n
    while True:
        rows = list(Tenant.objects.filter(pk__in=ids).values("pk", "status", "ready_at", "status_reason", "namespace"))
        settled = [r for r in rows if r["status"] in ("ready", "failed")]
        if len(settled) == len(ids):
            break
        if not worker.alive():
            raise RuntimeError(f"the celery worker died:\n{worker.tail()}")
        if time.monotonic() > deadline:
            stuck = collections.Counter(r["status"] for r in rows)
            raise RuntimeError(f"N={n}: not all tenants settled in time ({dict(stuck)}); worker log:\n{worker.tail()}")
        time.sleep(0.25)

    failed = [r for r in rows if r["status"] == "failed"]
    for r in failed:
        say(f"tenant {r['namespace']} FAILED: {r['status_reason']}")
    # When each ready tenant became ready (tenant_mark_ready always sets ready_at).
    ready: dict[str, dt.datetime] = {
        str(r["pk"]): r["ready_at"] for r in rows if r["status"] == "ready" and r["ready_at"] is not None
    }
    started = {
        e["object_id"]: e["at"]
        for e in AuditEvent.objects.filter(action="tenant.provisioning", object_id__in=ids)
        .order_by("at")
        .values("object_id", "at")
    }
    latency, queue, prov = [], [], []
    for tid, ready_at in ready.items():
        latency.append((ready_at - decided[tid]).total_seconds())
        if tid in started:
            queue.append((started[tid] - decided[tid]).total_seconds())
            prov.append((ready_at - started[tid]).total_seconds())
    first_approve = min(decided.values())
    last_ready = max(ready.values(), default=first_approve)
    wall = (last_ready - first_approve).total_seconds()

    # Each ready tenant gets an isolation check on the same worker; let it drain so N+1 starts clean.
    t = time.monotonic()
    drain_deadline = t + 60 + 2 * n
    while Tenant.objects.filter(pk__in=list(ready), isolation_report_at__isnull=True).exists():
        if time.monotonic() > drain_deadline:
            say("isolation checks did not all finish; going on")
            break
        time.sleep(0.25)
    last_report = (
        Tenant.objects.filter(pk__in=list(ready))
        .order_by("-isolation_report_at")
        .values_list("isolation_report_at", flat=True)
        .first()
    )
    drained = (last_report - first_approve).total_seconds() if last_report else math.nan
    return {
        "n": n,
        "ready": len(ready),
        "failed": len(failed),
        "latency": latency,
        "queue": queue,
        "prov": prov,
        "wall": wall,
        "submit_s": submit_s,
        "approve_s": approve_s,
        "drained": drained,
        "tenant_ids": list(ready),
    }


# --- 2. Baseline: kubectl apply --server-side ----------------------------------------------------


def _rename(value: Any, old: str, new: str) -> Any:
    if isinstance(value, dict):
        return {k: _rename(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_rename(v, old, new) for v in value]
    if isinstance(value, str):
        return value.replace(old, new)
    return value


def render_for_kubectl(ctx: dict, tenant_ids: list[str], batch: int, out_dir: Path) -> list[Path]:
    """The same objects the worker applied, moved into a fresh namespace per tenant."""
    from tenants.models import Tenant
    from worker import kube, manifests
    from worker.backends.namespace import cluster_facts

    facts = cluster_facts(kube.for_cluster(ctx["cluster"]))
    files = []
    tenants = Tenant.objects.select_related("tier", "cluster", "team").filter(pk__in=tenant_ids).order_by("name")
    for i, tenant in enumerate(tenants):
        objs = manifests.namespace_tenant(tenant, tenant.tier, tenant.cluster, facts)
        new_ns = f"kctl-{batch}-{i:03d}"
        objs = _rename(objs, tenant.namespace, new_ns)
        assert objs[0]["kind"] == "Namespace" and objs[0]["metadata"]["name"] == new_ns
        path = out_dir / f"{new_ns}.yaml"
        path.write_text(manifests.to_yaml(objs))
        files.append(path)
    return files


def kubectl_argv(cp: ControlPlane, cache_dir: Path, *args: str) -> list[str]:
    return [str(cp.kubectl), f"--kubeconfig={cp.kubeconfig_path}", f"--cache-dir={cache_dir}", *args]


def run_kubectl_batch(cp: ControlPlane, cache_dir: Path, files: list[Path], concurrency: int) -> dict:
    def apply(path: Path) -> float:
        t = time.monotonic()
        done = subprocess.run(
            kubectl_argv(cp, cache_dir, "apply", "--server-side", "--field-manager=bench", "-f", str(path)),
            capture_output=True,
            text=True,
        )
        took = time.monotonic() - t
        if done.returncode != 0:
            raise RuntimeError(f"kubectl apply -f {path.name} failed: {done.stderr.strip()}")
        return took

    t = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        took = list(pool.map(apply, files))
    return {"latency": took, "wall": time.monotonic() - t}


# --- 3. API requests per tenant, in-process ------------------------------------------------------


def approve_in_process(ctx: dict, name: str, kind: str = "namespace") -> str:
    """Submit and approve a tenant request as the bench's people; the tenant's id (publish dispatch yourself)."""
    from tenants import services
    from tenants.models import TenantRequest

    req = services.request_submit(
        actor=ctx["requester"],
        action=TenantRequest.Action.CREATE,
        kind=kind,
        team=ctx["team"],
        tier=ctx["tier"],
        cluster=ctx["cluster"],
        name=name,
        purpose="request count",
    )
    req = services.request_approve(tenant_request=req, actor=ctx["approver"], comment="bench")
    return str(req.tenant_id)


def provision_in_process(tenant_id: str, *, timeout: float = 60.0) -> tuple[Any, int]:
    """Provision step after step, as the worker's re-queues would run it (each step told what the one before
    applied), until it settles or ``timeout``; (the last Progress, how many steps ran). The pause each "not yet"
    asks for is capped at 0.1 s."""
    from worker import provisioning

    began, steps, applied = time.monotonic(), 0, None
    while True:
        steps += 1
        progress = provisioning.provision(tenant_id, applied)
        if progress.requeue_after is None or time.monotonic() - began > timeout:
            return progress, steps
        applied = progress.applied_generation
        time.sleep(min(progress.requeue_after, 0.1))


def measure_requests(ctx: dict, samples: int) -> dict:
    """Provision a few extra tenants in this process (the worker never hears of them) and count requests.

    A first provision runs step after step, as the worker's re-queues would, until it settles; the pauses
    each "not yet" asks for are taken here (capped at 0.1 s), so "steps" is how often the job would run.
    """
    from unittest import mock

    from tenants import dispatch
    from worker import kube, provisioning
    from worker.kube import Kube
    from worker.provisioning import Outcome

    by_call: dict[str, collections.Counter[str]] = {"first": collections.Counter(), "noop": collections.Counter()}
    phase = {"name": "first"}
    orig_call = Kube._call

    def counted_call(self: Kube, method: str, path: str, **kw: Any) -> Any:
        what = kw.get("what") or f"{method} {path}"
        verb, _, obj = what.partition(" ")
        by_call[phase["name"]][f"{verb} {obj.split('/')[0]}"] += 1
        return orig_call(self, method, path, **kw)

    first: list[int] = []
    noop: list[int] = []
    first_s: list[float] = []
    noop_s: list[float] = []
    steps_first: list[int] = []
    with (
        mock.patch.object(Kube, "_call", counted_call),
        mock.patch.object(dispatch, "send", lambda task, *args, **kw: True),
    ):
        for i in range(samples):
            tid = approve_in_process(ctx, f"rq-{i:02d}")
            k = kube.for_cluster(ctx["cluster"])
            phase["name"] = "first"
            before, t = k.requests, time.monotonic()
            progress, steps = provision_in_process(tid)
            first_s.append(time.monotonic() - t)
            first.append(k.requests - before)
            steps_first.append(steps)
            if progress.outcome != Outcome.READY:
                raise RuntimeError(f"in-process provision of rq-{i:02d} ended {progress}")
            phase["name"] = "noop"
            before, t = k.requests, time.monotonic()
            progress = provisioning.provision(tid)
            noop_s.append(time.monotonic() - t)
            noop.append(k.requests - before)
            if progress.outcome != Outcome.IN_SYNC:
                raise RuntimeError(f"no-op reconcile of rq-{i:02d} ended {progress}")
    return {
        "first": first,
        "noop": noop,
        "first_s": first_s,
        "noop_s": noop_s,
        "steps_first": steps_first,
        "by_call": {k: {c: v / samples for c, v in sorted(cnt.items())} for k, cnt in by_call.items()},
    }


# --- 4. Quota controller lag -----------------------------------------------------------------------


def measure_quota_lag(ctx: dict, samples: int) -> list[float]:
    """Apply a Namespace and the tenant's ResourceQuota, then poll every 10 ms until status.hard is filled."""
    from tenants.models import Tenant
    from worker import kube, manifests

    k = kube.for_cluster(ctx["cluster"])
    tenant = Tenant.objects.select_related("tier", "cluster", "team").filter(status="ready").first()
    if tenant is None:
        return []
    objs = manifests.namespace_tenant(tenant, tenant.tier, tenant.cluster)
    ns_obj = objs[0]
    quota = next(o for o in objs if o["kind"] == "ResourceQuota" and o["metadata"]["name"] == "berth-quota")
    lags = []
    for i in range(samples):
        name = f"qlag-{i:02d}"
        k.apply([_rename(ns_obj, tenant.namespace, name)])
        k.apply([_rename(quota, tenant.namespace, name)])
        t = time.monotonic()
        while True:
            live = k.get("ResourceQuota", "berth-quota", namespace=name) or {}
            if (live.get("status") or {}).get("hard"):
                lags.append(time.monotonic() - t)
                break
            if time.monotonic() - t > 30:
                raise RuntimeError("the quota controller did not fill status.hard within 30s")
            time.sleep(0.01)
    return lags


# --- 5. sweep ------------------------------------------------------------------------------------


def time_sweep(repeats: int = 5) -> tuple[float, dict, int]:
    from tenants.models import Tenant
    from worker import tasks

    took, counts = [], {}
    for _ in range(repeats):
        t = time.monotonic()
        counts = tasks.sweep()
        took.append(time.monotonic() - t)
    return p50(took), counts, Tenant.objects.filter(status="ready").count()


# --- main --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Berth provisioning benchmark against the dev control plane.")
    parser.add_argument("--sizes", default="1,10,100", help="comma-separated batch sizes N (default 1,10,100)")
    parser.add_argument("--quick", action="store_true", help="N = 1,10 only")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=WORKER_CONCURRENCY,
        help=f"the provision worker's processes (default {WORKER_CONCURRENCY}, the chart's 2 replicas of 2)",
    )
    parser.add_argument(
        "--kubectl-concurrency",
        type=int,
        help="parallel kubectl applies in the baseline (default: as --concurrency)",
    )
    parser.add_argument(
        "--request-samples", type=int, default=3, help="tenants provisioned in-process to count API requests"
    )
    parser.add_argument(
        "--pool",
        choices=["threads", "prefork"],
        default="prefork",
        help="worker pool (default prefork, as in production)",
    )
    parser.add_argument(
        "--hub-tick",
        type=float,
        default=0.0,
        metavar="S",
        help="experiment: wake the worker's event loop every S seconds (bench/tick_app.py; celery#6941)",
    )
    parser.add_argument(
        "--with-heartbeat",
        action="store_true",
        help="start the worker without --without-heartbeat (as devcluster/demo.py and docker-compose do)",
    )
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the worker log and rendered files (path printed)"
    )
    parser.add_argument(
        "--no-watcher",
        action="store_true",
        help="no watcher (manage.py berth_watch): a tenant not ready at its first step waits for its countdown",
    )
    args = parser.parse_args(argv)
    if args.kubectl_concurrency is None:
        args.kubectl_concurrency = args.concurrency
    if min(args.concurrency, args.kubectl_concurrency) < 1:
        parser.error("--concurrency and --kubectl-concurrency must be at least 1")
    sizes = "1,10" if args.quick else args.sizes
    args.sizes = [int(s) for s in sizes.split(",") if s.strip()]
    if not args.sizes or min(args.sizes) < 1:
        parser.error("--sizes needs positive integers")
    return args


def measure_size(
    args: argparse.Namespace, ctx: dict, cp: ControlPlane, worker: Worker, batch: int, n: int, work_dir: Path
) -> tuple[list[str], list[str], list[str], dict[str, Any]]:
    """One N: Berth approve -> ready, the kubectl baseline on the same manifests, and a sweep.

    Returns the rows of tables 1, 2 and 5 and this N's entry in the JSON summary.
    """
    cache_dir = work_dir / "kubectl-cache"
    say(f"N={n}: submitting, approving and waiting for ready ...")
    meter: CpuMeter = ctx["cpu"]
    before = meter.read()
    res = run_berth_batch(ctx, batch, n, worker)
    berth_cpu = meter.spent(before, meter.read())
    say(f"N={n}: {res['ready']} ready, {res['failed']} failed; p50 {fmt(p50(res['latency']))}s")

    files_dir = work_dir / f"kubectl-{batch}"
    files_dir.mkdir()
    files = render_for_kubectl(ctx, res["tenant_ids"], batch, files_dir)
    if files and not cache_dir.exists():  # warm kubectl's discovery cache outside the measurement
        warm = render_for_kubectl(ctx, res["tenant_ids"][:1], 0, files_dir)[0]
        run_kubectl_batch(cp, cache_dir, [warm], 1)
        warm.unlink()
    say(f"N={n}: kubectl apply --server-side baseline ({len(files)} files, {args.kubectl_concurrency} at a time) ...")
    before = meter.read()
    kres: dict[str, Any] = (
        run_kubectl_batch(cp, cache_dir, files, args.kubectl_concurrency)
        if files
        else {"latency": [], "wall": math.nan}
    )
    kubectl_cpu = meter.spent(before, meter.read())
    sweep_s, sweep_counts, ready_total = time_sweep()

    lat = res["latency"]
    berth_row = [
        str(n),
        f"{res['ready']}/{n}",
        fmt(p50(lat)),
        fmt(pct(lat, 95)),
        fmt(max(lat, default=math.nan)),
        fmt(p50(res["queue"])),
        fmt(p50(res["prov"])),
        fmt(res["wall"], 1),
        fmt(60 * res["ready"] / res["wall"], 0) if res["wall"] > 0 else "-",
        fmt(res["approve_s"], 1),
        fmt(res["drained"], 1),
    ]
    klat = kres["latency"]
    ratio = p50(lat) / p50(klat) if klat and lat else math.nan
    kubectl_row = [
        str(n),
        fmt(p50(klat)),
        fmt(pct(klat, 95)),
        fmt(max(klat, default=math.nan)),
        fmt(kres["wall"], 1),
        fmt(60 * len(klat) / kres["wall"], 0) if klat else "-",
        fmt(ratio, 1),
    ]
    sweep_row = [str(n), str(ready_total), fmt(sweep_s * 1000, 1), str(sweep_counts)]
    entry = {
        "ready": res["ready"],
        "failed": res["failed"],
        "p50_s": round(p50(lat), 3) if lat else None,
        "p95_s": round(pct(lat, 95), 3) if lat else None,
        "tenants_per_min": round(60 * res["ready"] / res["wall"], 1) if res["wall"] > 0 else None,
        "kubectl_p50_s": round(p50(klat), 3) if klat else None,
        **CpuMeter.per_tenant(berth_cpu, kubectl_cpu, n),
        "wall_s": round(res["wall"], 2),
        "kubectl_wall_s": round(kres["wall"], 2) if klat else None,
        "sweep_ms": round(sweep_s * 1000, 1),
    }
    return berth_row, kubectl_row, sweep_row, entry


def print_report(
    args: argparse.Namespace,
    setup: dict[str, float],
    berth_rows: list[list[str]],
    kubectl_rows: list[list[str]],
    sweep_rows: list[list[str]],
    req: dict[str, Any] | None,
    lags: list[float],
) -> None:
    """The five tables, on stdout."""
    print()
    print("Berth provisioning benchmark")
    tick = f", event-loop tick {args.hub_tick}s (bench/tick_app.py)" if args.hub_tick > 0 else ""
    tick += ", heartbeat on" if args.with_heartbeat else ", --without-heartbeat"
    print(
        f"machine: {os.cpu_count()} CPUs; worker: celery {args.pool} x{args.concurrency}{tick}; "
        f"tier: {TIER} (approval needed)"
    )
    print("set-up: " + ", ".join(f"{k} {v:.1f}s" for k, v in setup.items()))
    print()
    print("1. Berth approve -> ready (seconds; ready_at - decided_at, from the database)")
    print(
        table(
            [
                "N",
                "ready",
                "p50",
                "p95",
                "max",
                "queue p50",
                "provision p50",
                "wall",
                "tenants/min",
                "approve loop",
                "isolation drained",
            ],
            berth_rows,
        )
    )
    print("   queue = approve -> worker starts (tenant.provisioning); provision = that -> ready;")
    print("   wall = first approval -> last ready; isolation drained = first approval -> last isolation report.")
    print()
    print(
        f"2. Baseline: kubectl apply --server-side of the same manifests, fresh namespace each, "
        f"{args.kubectl_concurrency} at a time (seconds per apply)"
    )
    print(table(["N", "p50", "p95", "max", "wall", "tenants/min", "Berth p50 / kubectl p50"], kubectl_rows))
    print("   kubectl does not wait for the quota controller; Berth does (see 4).")
    print()
    if req:
        print(f"3. Kubernetes API requests per tenant (in-process, {args.request_samples} tenants, Kube.requests)")
        print(
            table(
                ["", "requests (min/mean/max)", "seconds p50", "job runs p50"],
                [
                    [
                        "first provision",
                        f"{min(req['first'])}/{statistics.mean(req['first']):.1f}/{max(req['first'])}",
                        fmt(p50(req["first_s"])),
                        fmt(p50([float(n) for n in req["steps_first"]]), 0),
                    ],
                    [
                        "no-op reconcile",
                        f"{min(req['noop'])}/{statistics.mean(req['noop']):.1f}/{max(req['noop'])}",
                        fmt(p50(req["noop_s"])),
                        "1",
                    ],
                ],
            )
        )
        for phase, calls in req["by_call"].items():
            label = "first provision" if phase == "first" else "no-op reconcile"
            print(f"   {label}: " + ", ".join(f"{c} x{v:g}" for c, v in calls.items()))
        print()
    print("4. Quota controller lag: apply ResourceQuota -> status.hard filled (10 samples, 10 ms polling)")
    print(
        f"   p50 {fmt(p50(lags) * 1000, 0)} ms, p95 {fmt(pct(lags, 95) * 1000, 0)} ms, "
        f"max {fmt(max(lags, default=math.nan) * 1000, 0)} ms"
        " (a tenant not ready yet is re-queued with a countdown of 2 s, then longer)"
    )
    print()
    print("5. worker.tasks.sweep() after each N (median of 5 calls)")
    print(table(["N", "ready tenants in DB", "sweep ms", "last counts"], sweep_rows))


CPU_TITLE = "6. CPU seconds per tenant (/proc; Berth: approve → ready and its isolation check; kubectl: its batch)"


def print_cpu(sizes: dict[str, dict[str, Any]], title: str = CPU_TITLE) -> None:
    """CPU seconds per tenant, by part, for Berth's batch and for kubectl's of the same manifests."""
    print(title)
    for n, entry in sizes.items():
        berth, kubectl = entry["cpu_s_per_tenant"], entry["kubectl_cpu_s_per_tenant"]
        names = [name for name in berth if berth[name] >= 0.0005] + ["kubectl"]
        rows = [
            ["Berth", *(fmt(berth.get(name, 0.0), 3) for name in names), fmt(sum(berth.values()), 3)],
            ["kubectl", *(fmt(kubectl.get(name, 0.0), 3) for name in names), fmt(sum(kubectl.values()), 3)],
        ]
        print(f"N={n}")
        print(table(["", *names, "total"], rows))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGINT too: a shell starts background jobs with SIGINT ignored, and `kill -INT` would then be lost.
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_keyboard_interrupt)
    began = time.monotonic()
    work_dir = Path(tempfile.mkdtemp(prefix="berth-bench-"))
    worker: Worker | None = None
    stack = contextlib.ExitStack()
    try:
        # The stack is closed in `finally`, with Ctrl-C ignored meanwhile.
        if not args.keep_logs:
            stack.callback(shutil.rmtree, work_dir, ignore_errors=True)
        setup: dict[str, float] = {}
        t = time.monotonic()
        db = stack.enter_context(servers.postgres_server())
        create_database(db)
        redis = stack.enter_context(servers.redis_server())
        setup["postgres + redis"] = time.monotonic() - t
        say(f"PostgreSQL on {db['PORT']}, Redis on {redis.port}")

        cp = ControlPlane(name="berth-bench")
        stack.callback(cp.stop)
        t = time.monotonic()
        cp.start()
        setup["control plane"] = time.monotonic() - t
        say(f"control plane at {cp.api_url} (ready in {cp.start_to_ready_seconds:.1f}s)")

        t = time.monotonic()
        env = configure_django(db, redis.url)
        from django.core.management import call_command
        from django.db import connections

        stack.callback(connections.close_all)  # before PostgreSQL stops: a smart shutdown waits for clients

        call_command("migrate", verbosity=0)
        setup["migrations"] = time.monotonic() - t
        total = sum(args.sizes) + args.request_samples + 1  # and the warm-up tenant
        ctx = seed(cp, total)

        t = time.monotonic()
        # As deployed (docker-compose.yml, the chart): provisioning has workers of its own; the isolation checks
        # each ready tenant queues run on the reconcile worker, at nice 10 as in the demo.
        worker = Worker(
            env,
            work_dir / "celery-worker.log",
            pool=args.pool,
            hub_tick=args.hub_tick,
            heartbeat=args.with_heartbeat,
            queues=["provision", "celery"],
            concurrency=args.concurrency,
        )
        stack.callback(worker.stop)
        worker.start()
        background = Worker(
            env, work_dir / "celery-reconcile.log", queues=["reconcile"], concurrency=1, nice=10, name="reconcile"
        )
        stack.callback(background.stop)
        background.start()
        setup["celery workers"] = time.monotonic() - t
        say(f"celery worker up ({args.pool} x{args.concurrency}, app {worker.app}); log {worker.log_path}")
        if not args.no_watcher:
            t = time.monotonic()
            watcher = start_watcher(env, work_dir / "watcher.log", ctx["cluster"].name)
            stack.callback(watcher.stop, grace_seconds=10)
            setup["watcher"] = time.monotonic() - t
        berth = {"provision worker": worker.component.pid, "reconcile worker": background.component.pid}
        ctx["cpu"] = CpuMeter.of_run(cp, berth if args.no_watcher else {**berth, "watcher": watcher.pid})
        say("warm-up: the cluster's first tenant (Berth's admission guards are installed with it) ...")
        warm = run_berth_batch(ctx, 0, 1, worker)
        say(f"warm-up tenant ready in {fmt(p50(warm['latency']))}s (not counted)")

        berth_rows: list[list[str]] = []
        kubectl_rows: list[list[str]] = []
        sweep_rows: list[list[str]] = []
        summary: dict[str, Any] = {
            "bench": "provision",
            "pool": args.pool,
            "concurrency": args.concurrency,
            "sizes": {},
        }
        for batch, n in enumerate(args.sizes, start=1):
            berth_row, kubectl_row, sweep_row, summary["sizes"][str(n)] = measure_size(
                args, ctx, cp, worker, batch, n, work_dir
            )
            berth_rows.append(berth_row)
            kubectl_rows.append(kubectl_row)
            sweep_rows.append(sweep_row)

        say(f"counting API requests on {args.request_samples} tenants provisioned in-process ...")
        req = measure_requests(ctx, args.request_samples) if args.request_samples > 0 else None
        say("measuring the quota controller's lag ...")
        lags = measure_quota_lag(ctx, 10)

        print_report(args, setup, berth_rows, kubectl_rows, sweep_rows, req, lags)
        print()
        print_cpu(summary["sizes"])
        print()
        print(f"total run time {time.monotonic() - began:.0f}s")
        if req:
            summary["requests_first_mean"] = round(statistics.mean(req["first"]), 1)
            summary["requests_noop_mean"] = round(statistics.mean(req["noop"]), 1)
        summary["quota_lag_p50_ms"] = round(p50(lags) * 1000, 1) if lags else None
        summary["watcher"] = not args.no_watcher
        summary["first_tenant_on_the_cluster_s"] = round(p50(warm["latency"]), 3) if warm["latency"] else None
        sizes = summary["sizes"]
        if sizes.get("1", {}).get("p50_s") and sizes["1"].get("kubectl_p50_s"):
            summary["approve_ready_p50_ratio_vs_kubectl_1"] = round(
                sizes["1"]["p50_s"] / sizes["1"]["kubectl_p50_s"], 2
            )
        for n, entry in sizes.items():
            if entry.get("kubectl_wall_s"):
                summary[f"wall_ratio_vs_kubectl_{n}"] = round(entry["wall_s"] / entry["kubectl_wall_s"], 2)
        summary["run_s"] = round(time.monotonic() - began)
        print(json.dumps(summary, sort_keys=True))
        if args.keep_logs:
            print(f"logs and rendered files kept in {work_dir}")
    except KeyboardInterrupt:
        print("\ninterrupted; stopping everything that was started", file=sys.stderr)
        return 130
    except Exception:
        if worker is not None:
            print(f"--- last lines of the worker log ---\n{worker.tail()}", file=sys.stderr)
        raise
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the clean-up
        say("cleaning up (worker, control plane, Redis, PostgreSQL) ...")
        stack.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
