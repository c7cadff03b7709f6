#!/usr/bin/env python
"""Berth at fleet scale: provision N namespace tenants, then reconcile them all in one pass per cluster.

    .venv/bin/python bench/fleet.py              # N = 1000 (several minutes on 2 cores)
    .venv/bin/python bench/fleet.py --quick      # N = 100
    .venv/bin/python bench/fleet.py --tenants 300 --keep-logs

Set-up as bench/provision.py (its helpers): a throwaway PostgreSQL and Redis, the dev control plane, a fresh
database, a team with room for N tenants, and real Celery workers started as deployed, one per queue group:
``provision,celery`` (prefork x``--concurrency``) and, from step 5 on, ``reconcile`` (prefork x1).

  1. Berth: N medium-tier requests are submitted and approved one after the other (as an approver); approve →
     ready per tenant (Tenant.ready_at - TenantRequest.decided_at), p50/p95, tenants per minute and the wall
     time from the first approval to the last ready tenant.
  2. Baseline: the same rendered objects, moved into a fresh namespace per tenant (and relabelled so that Berth
     does not count them as its own), applied with `kubectl apply --server-side` at the same concurrency in
     this run; the wall-time ratio Berth / kubectl.
  3. API requests per first provision (in this process, counted on the cached client, after one warm-up
     tenant: what a worker process reads once a minute is not counted) and objects per tenant.
  4. One reconcile pass (worker.reconcile.reconcile_cluster, in this process) over the N in-sync tenants:
     seconds and API requests; then the same after 10 hand edits on 10 tenants: repairs found and requests.
  5. approve → ready p95 of 10 new approvals while the reconcile worker (nice 10, as in the demo; it shares
     the 2 cores with everything else) runs passes, over the same for 10 approvals with it idle.
  6. The watcher (manage.py berth_watch, worker/watcher.py): how long its first list and check of N tenants
     takes; the LIST and WATCH requests on the managed resources the API server counts itself
     (apiserver_request_total, where a watch counts when it ends: the window outlasts one) over a quiet window
     with the watcher running, minus the same window before it started (the controller manager's own
     reflectors), and the watches it holds open (apiserver_longrunning_requests); and hand edit → repair (the
     audit entry) for ``--drift-edits`` quota edits on as many tenants, one every half second, repaired by the
     reconcile worker.

Each ready tenant queues an isolation check on the reconcile queue; those of step 1 are purged before the
reconcile worker starts (they are not part of approve → ready and would take minutes on 2 cores).
The last line of stdout is a JSON object with the figures.
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
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import provision as base  # noqa: E402  (no Django at import time)
from devcluster import servers  # noqa: E402
from devcluster.launcher import ControlPlane  # noqa: E402
from devcluster.process import Component, celery_worker, wait_for_celery_ready  # noqa: E402

say, pct, p50, fmt, table = base.say, base.pct, base.p50, base.fmt, base.table
EDITS = 10
BUSY_APPROVALS = 10
# The managed kinds' resources, as apiserver_request_total names them (worker.reconcile.MANAGED_KINDS).
WATCHED_RESOURCES = (
    "namespaces",
    "serviceaccounts",
    "resourcequotas",
    "limitranges",
    "networkpolicies",
    "roles",
    "rolebindings",
    "flowschemas",
)


def start_worker(
    env: dict[str, str], log: Path, queues: list[str], concurrency: int, name: str, *, nice: int = 0
) -> Component:
    worker = celery_worker(
        log,
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT), "LOG_LEVEL": "INFO"},
        queues=queues,
        concurrency=concurrency,
        node=f"{name}-{os.getpid()}@%h",
        nice=nice,
    )
    worker.start()
    wait_for_celery_ready(worker, 60)
    return worker


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
    for req in submitted:
        req = services.request_approve(tenant_request=req, actor=ctx["approver"], comment="bench")
        assert req.decided_at is not None
        decided[str(req.tenant_id)] = req.decided_at
    deadline = time.monotonic() + timeout
    while True:
        rows = list(Tenant.objects.filter(pk__in=list(decided)).values("pk", "status", "ready_at", "status_reason"))
        if all(r["status"] in ("ready", "failed") for r in rows):
            break
        if worker.exited() is not None:
            raise RuntimeError(f"the provision worker died:\n{worker.log_tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"not all of {len(names)} tenants were ready after {timeout:.0f}s")
        time.sleep(0.25)
    failed = [r for r in rows if r["status"] == "failed"]
    for r in failed[:5]:
        say(f"FAILED: {r['status_reason']}")
    ready: dict[str, dt.datetime] = {
        str(r["pk"]): r["ready_at"] for r in rows if r["status"] == "ready" and r["ready_at"] is not None
    }
    latency = [(ready[t] - decided[t]).total_seconds() for t in ready]
    wall = (max(ready.values()) - min(decided.values())).total_seconds() if ready else math.nan
    return {"latency": latency, "wall": wall, "ready": len(ready), "failed": len(failed), "ids": list(ready)}


def kubectl_files(ctx: dict, tenant_ids: list[str], out_dir: Path) -> list[Path]:
    """The objects Berth applied, per tenant, in namespace kctl-<i>, labelled as not Berth's."""
    from tenants.models import Tenant
    from worker import kube, manifests
    from worker.backends.namespace import NamespaceBackend

    k = kube.for_cluster(ctx["cluster"])
    files = []
    tenants = Tenant.objects.select_related("tier", "cluster", "team").filter(pk__in=tenant_ids).order_by("name")
    for i, tenant in enumerate(tenants):
        objs = base._rename(NamespaceBackend().render(tenant, k), tenant.namespace, f"kctl-{i:04d}")
        for obj in objs:
            obj["metadata"].pop("uid", None)
            labels = obj["metadata"].setdefault("labels", {})
            labels["app.kubernetes.io/managed-by"] = "berth-bench-kubectl"
            labels.pop(manifests.TENANT_ID_LABEL, None)
        path = out_dir / f"kctl-{i:04d}.yaml"
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


def hand_edit(ctx: dict, tenant_ids: list[str]) -> list[tuple[str, str]]:
    """Ten edits a careless admin might make, one on each of ten tenants: (tenant id, the repair to expect)."""
    from tenants.models import Tenant
    from worker import kube

    k = kube.for_cluster(ctx["cluster"])
    tenants = Tenant.objects.filter(pk__in=tenant_ids).order_by("name").values_list("pk", "namespace")[:EDITS]
    return [(str(pk), edit_by_hand(k, ns, i)) for i, (pk, ns) in enumerate(tenants)]


def edit_by_hand(k: Any, ns: str, i: int) -> str:
    """The ``i % 5``-th of five edits a careless admin might make in tenant namespace ``ns`` (with Kube ``k``); the
    repair the reconcile pass should record for it (bench/soak.py makes them too)."""
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


def purge(queue: str) -> int:
    from portal.celery import app

    with app.connection_for_write() as conn:
        channel: Any = conn.default_channel  # kombu's virtual channel (Redis) has queue_purge
        return int(channel.queue_purge(queue) or 0)


def busy_window(ctx: dict, worker: Component, passes: int) -> tuple[dict[str, Any], bool]:
    """Approve BUSY_APPROVALS tenants while the reconcile worker runs ``passes`` passes one after the other."""
    from tenants import dispatch

    def finished() -> int:
        lines = worker.log_tail(100_000).splitlines()
        return sum("worker.tasks.reconcile_cluster[" in line and " succeeded in " in line for line in lines)

    done_before = finished()
    for _ in range(passes):
        dispatch.send(dispatch.RECONCILE_CLUSTER, str(ctx["cluster"].pk))
    time.sleep(0.5)  # the first pass has begun
    busy = approve_batch(ctx, [f"busy-{i:02d}" for i in range(BUSY_APPROVALS)], ctx["provision_worker"], 120)
    still_running = finished() - done_before < passes
    return busy, still_running


def list_and_watch_requests(cp: ControlPlane) -> tuple[float, float]:
    """LIST and WATCH requests on the managed resources the API server has counted so far (a watch counts when it
    ends), and the watches on them open now (apiserver_longrunning_requests); all clients."""
    total = open_watches = 0.0
    for line in cp.metrics().splitlines():
        name, _, rest = line.partition("{")
        if name not in ("apiserver_request_total", "apiserver_longrunning_requests"):
            continue
        labels, _, value = rest.rpartition(" ")
        verb = labels.split('verb="', 1)[-1].split('"', 1)[0]
        resource = labels.split('resource="', 1)[-1].split('"', 1)[0]
        if resource not in WATCHED_RESOURCES:
            continue
        if name == "apiserver_request_total" and verb in ("LIST", "WATCH"):
            total += float(value)
        elif name == "apiserver_longrunning_requests" and verb == "WATCH":
            open_watches += float(value)
    return total, open_watches


def watcher_figures(ctx: dict, env: dict[str, str], work_dir: Path, cp: ControlPlane, args: argparse.Namespace) -> dict:
    """Step 6 (see the module's docstring)."""
    from devcluster.process import berth_watcher
    from tenants.models import AuditEvent, Tenant
    from worker import kube

    window = args.watch_window
    before, watches_before = list_and_watch_requests(cp)
    time.sleep(window)
    baseline = list_and_watch_requests(cp)[0] - before
    log = work_dir / "watcher.log"
    watcher_env = {**os.environ, **env, "PYTHONPATH": str(ROOT), "LOG_LEVEL": "INFO"}
    watcher_env["BERTH_WATCH_COALESCE_SECONDS"] = "0.5"
    watcher = berth_watcher(log, cwd=ROOT, env=watcher_env, clusters=[ctx["cluster"].name])
    started = time.monotonic()
    watcher.start()
    try:
        while "; watching" not in (log.read_text(errors="replace") if log.exists() else ""):
            if watcher.exited() is not None or time.monotonic() - started > 900:
                raise RuntimeError(f"the watcher did not start watching:\n{watcher.log_tail()}")
            time.sleep(0.2)
        sync = time.monotonic() - started
        before, watches_with = list_and_watch_requests(cp)
        time.sleep(window)
        with_watcher = list_and_watch_requests(cp)[0] - before
        k = kube.for_cluster(ctx["cluster"])
        ready = list(Tenant.objects.filter(cluster=ctx["cluster"], status="ready").order_by("pk")[: args.drift_edits])
        edited: dict[str, float] = {}
        for i, tenant in enumerate(ready):
            since = time.time()
            k.patch(
                "ResourceQuota", "berth-quota", {"spec": {"hard": {"pods": str(7000 + i)}}}, namespace=tenant.namespace
            )
            edited[str(tenant.pk)] = since
            time.sleep(0.5)
        deadline = time.monotonic() + 120
        latency: dict[str, float] = {}
        while len(latency) < len(edited) and time.monotonic() < deadline:
            for event in AuditEvent.objects.filter(action="tenant.drift_repaired", object_id__in=list(edited)):
                if event.object_id not in latency and event.at.timestamp() >= edited[event.object_id]:
                    latency[event.object_id] = event.at.timestamp() - edited[event.object_id]
            time.sleep(0.25)
    finally:
        watcher.stop(grace_seconds=10)
    return {
        "sync_seconds": sync,
        "window": window,
        "baseline": baseline,
        "with_watcher": with_watcher,
        "steady_rps": max(0.0, with_watcher - baseline) / window,
        "watches_opened": watches_with - watches_before,
        "repaired": len(latency),
        "edits": len(edited),
        "latency": sorted(latency.values()),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Berth at fleet scale against the dev control plane.")
    parser.add_argument("--tenants", type=int, default=1000, help="namespace tenants to provision (default 1000)")
    parser.add_argument("--quick", action="store_true", help="100 tenants")
    parser.add_argument("--concurrency", type=int, default=base.WORKER_CONCURRENCY, help="provision worker and kubectl")
    parser.add_argument("--request-samples", type=int, default=3)
    parser.add_argument("--reconcile-nice", type=int, default=10, help="CPU niceness of the reconcile worker")
    # Longer than a watch (BERTH_WATCH_TIMEOUT_SECONDS, 300): the API server counts a watch when it ends.
    parser.add_argument("--watch-window", type=float, default=330.0, help="seconds of each steady-request window")
    parser.add_argument("--drift-edits", type=int, default=20, help="hand edits for the repair latency (step 6)")
    parser.add_argument("--keep-logs", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.tenants = 100
    if args.tenants < EDITS:
        parser.error(f"--tenants must be at least {EDITS}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, base._raise_keyboard_interrupt)
    began = time.monotonic()
    work_dir = Path(tempfile.mkdtemp(prefix="berth-fleet-"))
    stack = contextlib.ExitStack()
    n = args.tenants
    try:
        if not args.keep_logs:
            stack.callback(shutil.rmtree, work_dir, ignore_errors=True)
        db = stack.enter_context(servers.postgres_server())
        base.create_database(db)
        redis = stack.enter_context(servers.redis_server())
        cp = ControlPlane(name="berth-fleet")
        stack.callback(cp.stop)
        cp.start()
        say(f"control plane at {cp.api_url}")
        env = base.configure_django(db, redis.url)
        from django.core.management import call_command
        from django.db import connections

        stack.callback(connections.close_all)
        call_command("migrate", verbosity=0)
        ctx = base.seed(cp, n + 2 * BUSY_APPROVALS + args.request_samples + 1)
        provision_worker = start_worker(
            env, work_dir / "worker-provision.log", ["provision", "celery"], args.concurrency, "provision"
        )
        stack.callback(provision_worker.stop, grace_seconds=20)
        ctx["provision_worker"] = provision_worker

        from worker import reconcile

        say(f"1. submitting and approving {n} tenants ...")
        fleet = approve_batch(ctx, [f"f-{i:04d}" for i in range(n)], provision_worker, 300 + 2 * n)
        say(f"   {fleet['ready']} ready, {fleet['failed']} failed, wall {fleet['wall']:.1f}s")

        say(f"2. kubectl apply --server-side of the same objects, {args.concurrency} at a time ...")
        files = kubectl_files(ctx, fleet["ids"], work_dir)
        kubectl = base.run_kubectl_batch(cp, work_dir / "kube-cache", files, args.concurrency)

        say("3. requests per first provision ...")
        first, objects = first_provision_requests(ctx, args.request_samples)

        say(f"4. reconcile passes over {n} in-sync tenants ...")
        purged = purge("reconcile")
        in_sync = reconcile.reconcile_cluster(ctx["cluster"])
        steady = reconcile.reconcile_cluster(ctx["cluster"])
        expected = hand_edit(ctx, fleet["ids"])
        edited = reconcile.reconcile_cluster(ctx["cluster"])
        found = {(tid, what) for tid, repairs in edited.repaired.items() for what in repairs}
        after = reconcile.reconcile_cluster(ctx["cluster"])

        say("5. approvals with the reconcile worker idle, then busy ...")
        # As in the demo: on a machine shared with provisioning, the reconcile worker runs at nice 10 (in the chart
        # it has pods and CPU requests of its own).
        reconcile_worker = start_worker(
            env, work_dir / "worker-reconcile.log", ["reconcile"], 1, "reconcile", nice=args.reconcile_nice
        )
        stack.callback(reconcile_worker.stop, grace_seconds=20)
        idle = approve_batch(ctx, [f"idle-{i:02d}" for i in range(BUSY_APPROVALS)], provision_worker, 120)
        passes = max(2, math.ceil(10 / max(steady.seconds, 0.5)) + 1)
        busy, covered = busy_window(ctx, reconcile_worker, passes)

        say("6. the watcher: first list, steady requests, hand edit → repair ...")
        purge("reconcile")
        watch = watcher_figures(ctx, env, work_dir, cp, args)

        tenants_min = 60 * fleet["ready"] / fleet["wall"]
        ratio = fleet["wall"] / kubectl["wall"]
        print(f"Fleet benchmark: {n} medium namespace tenants, provision worker prefork x{args.concurrency}")
        print()
        print("1-2. approve → ready, and the same objects with kubectl apply --server-side")
        rows = [
            ["Berth", fmt(p50(fleet["latency"])), fmt(pct(fleet["latency"], 95)), fmt(fleet["wall"], 1)],
            ["kubectl", fmt(p50(kubectl["latency"])), fmt(pct(kubectl["latency"], 95)), fmt(kubectl["wall"], 1)],
        ]
        print(table(["", "p50 s", "p95 s", "wall s"], rows))
        print(f"Berth {tenants_min:.0f} tenants/min; wall ratio Berth/kubectl {ratio:.2f}")
        print()
        print(f"3. requests per first provision {first} (objects per tenant {objects})")
        print()
        print(f"4. reconcile passes over {in_sync.tenants} tenants (isolation checks purged: {purged})")
        rows = [
            [label, str(r.tenants), fmt(r.seconds), str(r.requests), str(sum(len(x) for x in r.repaired.values()))]
            for label, r in (("first", in_sync), ("again", steady), ("10 edits", edited), ("after", after))
        ]
        print(table(["pass", "tenants", "seconds", "requests", "repairs"], rows))
        missed = sorted(set(expected) - set(found))
        print(
            f"edits found {len(set(expected) & set(found))}/{len(expected)}" + (f"; missed {missed}" if missed else "")
        )
        print()
        busy_p95, idle_p95 = pct(busy["latency"], 95), pct(idle["latency"], 95)
        print("5. approve → ready of 10 new approvals")
        print(
            table(
                ["", "p50 s", "p95 s"],
                [
                    ["reconcile worker idle", fmt(p50(idle["latency"])), fmt(idle_p95)],
                    [f"{passes} passes queued", fmt(p50(busy["latency"])), fmt(busy_p95)],
                ],
            )
        )
        print(f"a pass was still running when the last busy tenant was ready: {'yes' if covered else 'no'}")
        print()
        print(f"6. the watcher over {n} tenants")
        print(f"first list and check {watch['sync_seconds']:.1f}s")
        print(
            f"LIST+WATCH on the managed resources in {watch['window']:.0f}s: {watch['with_watcher']:.0f} with the "
            f"watcher, {watch['baseline']:.0f} before it ran: {watch['steady_rps']:.3f} requests/s; "
            f"watches it holds open {watch['watches_opened']:.0f}"
        )
        lat = watch["latency"]
        print(
            f"hand edit → repair: {watch['repaired']}/{watch['edits']} repaired, "
            f"p50 {fmt(p50(lat)) if lat else '-'} s, p95 {fmt(pct(lat, 95)) if lat else '-'} s"
        )
        print()
        print(f"total run time {time.monotonic() - began:.0f}s")
        kinds = len(reconcile.MANAGED_KINDS) + 2
        print(
            json.dumps(
                {
                    "bench": "fleet",
                    "tenants": n,
                    "kinds_listed": kinds,
                    "objects_per_tenant": objects,
                    "first_provision_requests": round(statistics.mean(first), 1) if first else None,
                    "reconcile_pass_seconds_1000": round(in_sync.seconds, 2),
                    "reconcile_pass_requests_1000": in_sync.requests,
                    "reconcile_repairs_found": len(set(expected) & found),
                    "reconcile_repair_pass_requests": edited.requests,
                    "approve_ready_p95_busy_over_idle": round(busy_p95 / idle_p95, 2),
                    "busy_window_covered": covered,
                    "reconcile_worker_nice": args.reconcile_nice,
                    "wall_ratio_vs_kubectl_1000": round(ratio, 2),
                    "tenants_per_min": round(tenants_min),
                    "watch_sync_seconds": round(watch["sync_seconds"], 2),
                    "watch_steady_requests_per_second": round(watch["steady_rps"], 4),
                    "watch_drift_repaired": f"{watch['repaired']}/{watch['edits']}",
                    "drift_repair_p95_seconds": round(pct(watch["latency"], 95), 2) if watch["latency"] else None,
                    "run_s": round(time.monotonic() - began),
                },
                sort_keys=True,
            )
        )
    except KeyboardInterrupt:
        print("\ninterrupted; stopping everything that was started", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        say("cleaning up ...")
        stack.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
