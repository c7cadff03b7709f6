#!/usr/bin/env python
"""Berth API load benchmark: the portal under gunicorn on real PostgreSQL and Redis, driven by locust.

    .venv/bin/python bench/api_load.py                  # 10,000 tenants, 100,000 audit rows, about 11 minutes
    .venv/bin/python bench/api_load.py --users 20 --mix-seconds 60 --rounds 6 --solo-seconds 10

Everything it needs is started here and stopped on exit: a throwaway PostgreSQL and Redis
(devcluster.servers), migrations, seed data written with bulk_create (the audit table refuses
UPDATE and DELETE, not INSERT), an API token per person, and the portal under gunicorn with
deploy/gunicorn.conf.py (settings bench.api_settings: the product's plus a bare DRF endpoint).

Then locust (headless) runs each list endpoint alone, in rounds, each run between two runs of the
bare endpoint alone (req/s; a run's share is of the mean of the bare rates just before and just
after it, a list's share the mean of its runs'), and a mix of reads and writes by people of several
teams (per endpoint req/s, p50/p95/p99, errors). Afterwards the
database is checked for lost or duplicated writes. The tables go to stdout, ending with one line
of JSON; progress to stderr.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import re
import resource
import runpy
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from devcluster import servers  # noqa: E402  (no Django at import time)
from devcluster.process import Component, wait_until  # noqa: E402

TEAMS = 10
PEOPLE_PER_TEAM = 3
LISTENING = re.compile(rb"Listening at: http://127\.0\.0\.1:(\d+)")
LIST_ENDPOINTS = ["GET tenants", "GET requests", "GET audit-events"]
LISTS = dict(zip(["tenants", "requests", "audit"], LIST_ENDPOINTS, strict=True))  # locust tag: endpoint
BARE = "bare DRF endpoint"


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def portal_env(db: dict, redis_url: str) -> dict[str, str]:
    base = redis_url.rsplit("/", 1)[0]
    return {
        "DJANGO_SETTINGS_MODULE": "bench.api_settings",
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": "bench-only-secret-key-" + "b" * 40,
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DJANGO_SECURE_SSL_REDIRECT": "false",
        "OIDC_RP_CLIENT_SECRET": "bench",
        "EMAIL_URL": "dummymail://",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        # As docker-compose.yml deploys it: connections kept for a minute.
        "DATABASE_CONN_MAX_AGE": "60",
        "CELERY_BROKER_URL": f"{base}/0",
        "CACHE_URL": f"{base}/1",
        # The clients write as fast as they can; the write throttle is not what is measured.
        "BERTH_WRITE_THROTTLE": "10000000/min",
        "BERTH_IDENTITY_MAX_AGE_MINUTES": "1440",
        "LOG_LEVEL": "WARNING",
    }


def seed(tenants: int, audit_rows: int) -> dict[str, Any]:
    """Teams with people, a cluster, tenants with one request each, audit rows; an API token per person."""
    from django.utils import timezone

    from tenants import services
    from tenants.models import AuditEvent, Cluster, Membership, Team, Tenant, TenantRequest, Tier, User

    now = timezone.now()
    tiers = {t.name: t for t in Tier.objects.all()}
    cluster = Cluster.objects.create(
        name="bench",
        display_name="Bench",
        api_url="https://127.0.0.1:1",
        credential_ref="env:BENCH_NO_CLUSTER",
        public_endpoint="https://127.0.0.1:1",
        kinds=["namespace"],
    )
    cluster.tiers.set(tiers.values())
    people, teams = [], []
    for t in range(TEAMS):
        team = Team.objects.create(
            slug=f"team-{t:02d}",
            name=f"Team {t}",
            oidc_group=f"team-{t:02d}",
            budget_cpu_millis=10**9,
            budget_memory_mib=10**9,
            budget_storage_gib=10**9,
            budget_tenants=10**6,
        )
        teams.append(team)
        for p in range(PEOPLE_PER_TEAM):
            user = User.objects.create(
                username=f"u{t:02d}{p}", oidc_subject=f"sub-u{t:02d}{p}", identity_checked_at=now
            )
            Membership.objects.create(user=user, team=team, role=Membership.Role.OWNER)
            people.append((user, team))
    say(f"seeding {tenants} tenants with a request each")
    tier_cycle = [tiers["small"], tiers["medium"], tiers["large"]]
    rows = []
    for i in range(tenants):
        user, team = people[i % len(people)]
        rows.append(
            Tenant(
                name=f"t{i:05d}",
                namespace=f"t{i:05d}",
                team=team,
                tier=tier_cycle[i % 3],
                cluster=cluster,
                status="ready",
                created_by=user,
                ready_at=now,
                expires_at=now + dt.timedelta(days=30),
            )
        )
    Tenant.objects.bulk_create(rows, batch_size=2000)
    requests = [
        TenantRequest(
            action="create",
            name=tenant.name,
            team=tenant.team,
            tier=tenant.tier,
            cluster=cluster,
            tenant=tenant,
            status="approved",
            requested_by=tenant.created_by,
            decided_at=now,
            auto_approved=True,
        )
        for tenant in Tenant.objects.all()
    ]
    TenantRequest.objects.bulk_create(requests, batch_size=2000)
    say(f"seeding {audit_rows} audit rows, one a second up to now")
    # ``at`` is auto_now_add, which bulk_create would stamp with the time of the insert: every row would be from
    # the last seconds, and the mix's export "since the run started" would stream the team's whole history.
    at = AuditEvent._meta.get_field("at")
    at.auto_now_add = False
    batch = []
    for i in range(audit_rows):
        user, team = people[i % len(people)]
        batch.append(
            AuditEvent(
                at=now - dt.timedelta(seconds=audit_rows - i),
                actor=user,
                actor_name=user.username,
                team=team,
                object_type="tenant",
                object_id=str(i),
                action="tenant.seeded",
                after={"i": i},
            )
        )
        if len(batch) == 5000:
            AuditEvent.objects.bulk_create(batch)
            batch = []
    AuditEvent.objects.bulk_create(batch)
    at.auto_now_add = True
    tokens = [
        {
            "username": user.username,
            "team": team.slug,
            "token": services.api_token_create(actor=user, name="bench", expires_in_days=1)[1],
        }
        for user, team in people
    ]
    return {"tokens": tokens, "seeded_requests": TenantRequest.objects.count(), "started": now}


def start_portal(env: dict[str, str], log: Path) -> tuple[Component, str]:
    server = Component(
        "gunicorn",
        [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py")],
        log,
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT), "GUNICORN_BIND": "127.0.0.1:0"},
    )
    server.start()
    wait_until(lambda: LISTENING.search(log.read_bytes()) is not None, timeout=60, watched=[server], what="gunicorn")
    listening = LISTENING.search(log.read_bytes())
    assert listening is not None
    return server, f"http://127.0.0.1:{int(listening.group(1))}"


def worker_boots(log: Path) -> int:
    return log.read_bytes().count(b"Booting worker with pid")


class Canary:
    """How fast this machine runs the same instructions, moment by moment: a fixed piece of Python, timed in CPU
    (its thread's) every 0.2 s on a thread of this process, which is otherwise only waiting for locust. About 1 ms
    a time: half a percent of one core. The tables give a phase's median against the bare phases' median."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="canary", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            start = time.thread_time()
            sum(i * i for i in range(20_000))
            self.samples.append((time.monotonic(), time.thread_time() - start))

    def median(self, begin: float, end: float) -> float:
        during = [cpu for at, cpu in self.samples if begin <= at <= end]
        return statistics.median(during) if during else float("nan")


def run_locust(
    url: str,
    tag: str,
    seconds: int,
    users: int,
    work: Path,
    env: dict[str, str],
    cpu: CpuMeter,
    log: Path,
    canary: Canary,
) -> dict[str, Any]:
    """One locust run; with what it measured, the CPU each component used and how many workers gunicorn booted."""
    label = f"{tag}-warmup" if env.get("BERTH_BENCH_WARMUP") else tag
    prefix = work / label
    results = work / f"{label}-results.json"
    command = [
        sys.executable, "-m", "locust", "-f", str(ROOT / "bench" / "api_locustfile.py"), "--headless",
        "--host", url, "--users", str(users), "--spawn-rate", str(users), "--run-time", f"{seconds}s",
        "--tags", tag, "--csv", str(prefix), "--only-summary", "--loglevel", "WARNING", "--stop-timeout", "10",
    ]  # fmt: skip
    say(f"locust: {label}, {users} users, {seconds} s")
    cpu_before, boots_before, began = cpu.read(), worker_boots(log), time.monotonic()
    subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, **env, "BERTH_BENCH_RESULTS": str(results)},
        capture_output=True,
        check=False,
        timeout=seconds + 120,
    )
    cpu_after, boots_after, ended = cpu.read(), worker_boots(log), time.monotonic()
    with open(f"{prefix}_stats.csv", newline="") as stats:
        rows = {row["Name"]: row for row in csv.DictReader(stats)}
    return {
        "rows": rows,
        **json.loads(results.read_text()),
        "cpu": {name: cpu_after[name] - cpu_before[name] for name in cpu_after},
        "boots": boots_after - boots_before,
        "canary": canary.median(began, ended),
    }


def figures(row: dict[str, str]) -> dict[str, float]:
    return {
        "requests": int(row["Request Count"]),
        "failures": int(row["Failure Count"]),
        "rps": float(row["Requests/s"]),
        "p50": float(row["50%"]),
        "p95": float(row["95%"]),
        "p99": float(row["99%"]),
    }


LISTED_TABLES = ("tenants_tenant", "tenants_tenantrequest", "tenants_auditevent")
_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int) -> float:
    """CPU time (user and system) of process ``root``, its live descendants and those it has reaped.

    A parent's cutime/cstime hold what its waited-for children used, so a worker gunicorn replaced or a backend
    PostgreSQL ended between two readings is still counted, once: the total only grows.
    """
    children: dict[int, list[tuple[int, list[str]]]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "
        stats[int(entry)] = fields
        children.setdefault(int(fields[1]), []).append((int(entry), fields))
    total = 0
    pending = [(root, stats[root])] if root in stats else []
    while pending:
        pid, fields = pending.pop()
        total += sum(int(tick) for tick in fields[11:15])  # utime, stime, cutime, cstime
        pending.extend(children.get(pid, []))
    return total / _TICKS


class CpuMeter:
    """CPU seconds used by the portal (gunicorn and its workers), PostgreSQL, Redis and the load tool."""

    def __init__(self, portal: int, postgres: int, redis: int):
        self.roots = {"portal": portal, "postgres": postgres, "redis": redis}

    def read(self) -> dict[str, float]:
        own = resource.getrusage(resource.RUSAGE_CHILDREN)  # locust, once it has been waited for
        return {
            **{name: tree_cpu_seconds(pid) for name, pid in self.roots.items()},
            "client": own.ru_utime + own.ru_stime,
        }


def vacuum() -> None:
    """VACUUM ANALYZE until the listed tables' visibility maps are (nearly) full.

    One VACUUM may leave them nearly empty (250 of the audit table's 1,717 pages, in each of three runs): a
    page is marked all-visible only if no transaction could still miss its rows, and a snapshot older than the
    bulk load (most likely an autovacuum worker's, started by it) keeps them from being so. The planner then
    prices counting from an index alone, which needs the map, above reading the table: a run with a single pass
    measured the audit list at 207 req/s, where the runs around it measured 298 and 329.
    """
    from django.db import connection

    for attempt in range(1, 31):
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
            cursor.execute(
                "SELECT relname, relpages, relallvisible FROM pg_class WHERE relname = ANY(%s)", [list(LISTED_TABLES)]
            )
            maps = cursor.fetchall()
        say(f"vacuum analyze ({attempt}): pages all-visible {', '.join(f'{t} {v}/{p}' for t, p, v in maps)}")
        if all(visible >= 0.95 * pages for _, pages, visible in maps):
            return
        time.sleep(2)
    say("the visibility maps stayed incomplete: counts read from the tables")


def postmaster_pid() -> int:
    """PostgreSQL's postmaster: the parent of this process's backend."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    text = Path(f"/proc/{backend}/stat").read_text()
    return int(text[text.rindex(")") + 2 :].split()[1])


def check_writes(mix: dict[str, Any], seeded_requests: int) -> dict[str, int]:
    """Every request the API said it created is there once; every one it said it cancelled is cancelled."""
    from tenants.models import TenantRequest

    created = mix["created"]
    in_db = TenantRequest.objects.filter(pk__in=created)
    cancelled = TenantRequest.objects.filter(pk__in=mix["cancelled"], status="cancelled").count()
    new = TenantRequest.objects.count() - seeded_requests
    names = TenantRequest.objects.filter(name__startswith="ld-").values_list("name", flat=True)
    return {
        "created_answers": len(created),
        "created_in_db": in_db.count(),
        "rows_added": new,
        "duplicate_names": len(names) - len(set(names)),
        "cancelled_answers": len(mix["cancelled"]),
        "cancelled_in_db": cancelled,
    }


def cpu_per_request(cpu: dict[str, float], requests: float) -> str:
    """Each component's CPU seconds as milliseconds per request, in the tables' order."""
    return ", ".join(f"{1000 * seconds / max(requests, 1):.2f}" for seconds in cpu.values())


def print_phase(label: str, phase: dict[str, Any], machine: float, share: str = "") -> None:
    f = figures(phase["rows"][label])
    per_request = cpu_per_request(phase["cpu"], f["requests"])
    print(
        f"  {label:<22}{f['rps']:>7.1f}{share:>8}{f['p50']:>7.0f}{f['p95']:>7.0f}{f['p99']:>7.0f}"
        f"{phase['boots']:>6}{phase['canary'] / machine:>8.2f}  {per_request}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--audit-rows", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=20, help="concurrent locust users")
    parser.add_argument("--rounds", type=int, default=6, help="runs of each list alone, each between two bare runs")
    parser.add_argument("--solo-seconds", type=int, default=10, help="each run of one endpoint alone")
    parser.add_argument("--mix-seconds", type=int, default=60, help="the read/write mix")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="berth-api-load-"))
    with servers.postgres_server() as db, servers.redis_server() as redis:
        env = portal_env(db, redis.url)
        # As the chart and compose run the portal: counters in files that /metrics adds up over the workers.
        metrics_dir = work / "metrics"
        metrics_dir.mkdir()
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
        os.environ.update(env)
        import django

        django.setup()
        from django.core.management import call_command

        say("migrating")
        call_command("migrate", verbosity=0)
        data = seed(args.tenants, args.audit_rows)
        # As a database that has been running would be: planner statistics and a visibility map for the bulk-loaded
        # tables. Otherwise autovacuum gets to them at some moment during the run (within a minute), and the
        # figures before and after it differ.
        vacuum()
        people = work / "people.json"
        people.write_text(json.dumps(data["tokens"]))
        locust_env = {
            "BERTH_BENCH_USERS": str(people),
            "BERTH_BENCH_SINCE": (data["started"] - dt.timedelta(minutes=5)).isoformat(),
            "BERTH_BENCH_RUN": str(int(time.time()) % 100000),
        }
        log = work / "gunicorn.log"
        server, url = start_portal(env, log)
        canary = Canary()
        try:
            canary.start()
            cpu = CpuMeter(portal=server.pid or 0, postgres=postmaster_pid(), redis=redis.server.pid or 0)
            # As many as deploy/gunicorn.conf.py starts (they log their boots one by one, after it listens).
            workers = int(runpy.run_path(str(ROOT / "deploy" / "gunicorn.conf.py"))["workers"])

            def run(tag: str, seconds: int, **extra: str) -> dict[str, Any]:
                return run_locust(url, tag, seconds, args.users, work, {**locust_env, **extra}, cpu, log, canary)

            # Workers connect and fill their caches on their first requests: warm them up first, unmeasured. Then
            # on, until gunicorn has replaced every worker once (max_requests): before preloading, a worker's boot
            # cost about a second of CPU, and before the first of them the server ran a quarter faster than it
            # ever would again, which made the first bare phase of every earlier run its fastest.
            run("bare", 5, BERTH_BENCH_WARMUP="1")
            for _ in range(12):
                if worker_boots(log) >= 2 * workers:
                    break
                run("bare", 10, BERTH_BENCH_WARMUP="1")
            say(f"warm: {worker_boots(log) - workers} worker boots after the first {workers}")
            # The bare endpoint runs before and after each run of a list, and the run is compared with the mean
            # of the two. The lists take turns, in rounds: how fast this machine runs the same code drifts by a
            # fifth within minutes (the bare endpoint alone: 290 to 386 req/s in one run, its portal CPU per
            # request 4.0 to 5.5 ms), and a list measured once, in one stretch, took whatever the machine and
            # gunicorn's worker replacements did then as its own (2026-11-28: measured once for 30 s, the
            # requests list ranged from 62 to 78 % in six runs; in runs of 10 s, the two with two worker boots
            # each measured 63 and 64 %, the two with none 80 and 81 %, in one run, before preloading).
            solo: list[tuple[str, dict[str, Any]]] = []
            bares = [run("bare", args.solo_seconds)]
            for _ in range(args.rounds):
                for tag in LISTS:
                    solo.append((tag, run(tag, args.solo_seconds)))
                    bares.append(run("bare", args.solo_seconds))
            mix = run("mix", args.mix_seconds)
        finally:
            canary.stop()
            server.stop(grace_seconds=10)
        writes = check_writes(mix, data["seeded_requests"])

    print(f"\nAPI load: {args.tenants} tenants, {args.audit_rows} audit rows, {TEAMS} teams, {args.users} users\n")
    print(
        f"Each endpoint alone ({args.rounds} rounds of the lists in turn, {args.solo_seconds} s each run, the bare"
        " endpoint before and after each):"
    )
    print(
        f"  {'endpoint':<22}{'req/s':>7}{'of bare':>8}{'p50 ms':>7}{'p95 ms':>7}{'p99 ms':>7}{'boots':>6}{'canary':>8}"
        f"  CPU ms per request: portal, PostgreSQL, Redis, client"
    )
    bare_rates = [figures(phase["rows"][BARE])["rps"] for phase in bares]
    machine = statistics.median(phase["canary"] for phase in bares)
    shares: dict[str, list[float]] = {name: [] for name in LIST_ENDPOINTS}
    for i, (tag, phase) in enumerate(solo):
        name = LISTS[tag]
        shares[name].append(figures(phase["rows"][name])["rps"] / ((bare_rates[i] + bare_rates[i + 1]) / 2))
        print_phase(BARE, bares[i], machine)
        print_phase(name, phase, machine, f"{shares[name][-1]:.0%}")
    print_phase(BARE, bares[-1], machine)
    print("  (a run's share: of the mean of the bare rates before and after it; boots: workers gunicorn replaced")
    print("  during the run, 0.15-0.2 s of CPU each, forked from the preloaded portal; canary: the CPU a fixed piece")
    print("  of Python took during the run, against the bare runs' median, so 1.20 is a machine a fifth slower; CPU:")
    print("  each component's user and system time / requests, the client's including its start, about a second)")
    ratios = {name: sum(values) / len(values) for name, values in shares.items()}
    print("\nEach list over its runs (share: the mean of its runs'; p50: their median; p95, p99: their highest):")
    print(
        f"  {'endpoint':<22}{'req/s':>7}{'of bare':>8}{'runs':>12}{'p50 ms':>7}{'p95 ms':>7}{'p99 ms':>7}{'boots':>6}"
        f"  CPU ms per request: portal, PostgreSQL, Redis, client"
    )
    for tag, name in LISTS.items():
        runs = [phase for t, phase in solo if t == tag]
        each = [figures(phase["rows"][name]) for phase in runs]
        requests = sum(f["requests"] for f in each)
        used = {part: sum(phase["cpu"][part] for phase in runs) for part in runs[0]["cpu"]}
        spread = f"{min(shares[name]):.0%}-{max(shares[name]):.0%}"
        print(
            f"  {name:<22}{sum(f['rps'] for f in each) / len(each):>7.1f}{ratios[name]:>8.0%}{spread:>12}"
            f"{sorted(f['p50'] for f in each)[len(each) // 2]:>7.0f}{max(f['p95'] for f in each):>7.0f}"
            f"{max(f['p99'] for f in each):>7.0f}{sum(phase['boots'] for phase in runs):>6}  "
            + cpu_per_request(used, requests)
        )
    walked: Counter[str] = Counter()
    for tag, phase in solo:
        if tag == "audit":
            walked.update(phase.get("audit_pages", {}))
    print(
        f"  audit trail pages read from the top: {walked.get('first', 0)},"
        f" by a next link's cursor: {walked.get('cursor', 0)}"
    )
    print(f"\nMix of reads and writes ({args.mix_seconds} s):")
    print(f"  {'endpoint':<28}{'req/s':>8}{'p50 ms':>8}{'p95 ms':>8}{'p99 ms':>8}{'errors':>8}")
    for name, row in mix["rows"].items():
        f = figures(row)
        print(f"  {name:<28}{f['rps']:>8.1f}{f['p50']:>8.0f}{f['p95']:>8.0f}{f['p99']:>8.0f}{f['failures']:>8}")
    statuses: Counter[str] = Counter()
    for phase in [*bares, *(phase for _, phase in solo), mix]:
        statuses.update(phase["statuses"])
    server_errors = sum(v for k, v in statuses.items() if not k.isdigit() or int(k) >= 500)
    print(f"\nStatus codes (mix): {dict(sorted(mix['statuses'].items()))}")
    print(f"Writes checked in the database: {writes}")
    lost_or_doubled = (
        writes["created_in_db"] != writes["created_answers"]
        or writes["rows_added"] != writes["created_answers"]
        or writes["duplicate_names"]
        or writes["cancelled_in_db"] != writes["cancelled_answers"]
    )
    summary = {
        "tenants": args.tenants,
        "audit_rows": args.audit_rows,
        "users": args.users,
        "bare_rps": [round(rate, 1) for rate in bare_rates],
        "list_ratios": {name: round(ratio, 2) for name, ratio in ratios.items()},
        "list_run_ratios": {name: [round(share, 2) for share in values] for name, values in shares.items()},
        "list_run_canary": {
            name: [round(phase["canary"] / machine, 2) for tag, phase in solo if LISTS[tag] == name]
            for name in LIST_ENDPOINTS
        },
        "list_ratio_min": round(min(ratios[n] for n in LIST_ENDPOINTS), 2),
        "mix_rps": round(figures(mix["rows"]["Aggregated"])["rps"], 1),
        "mix_p95_ms": figures(mix["rows"]["Aggregated"])["p95"],
        "server_errors": server_errors,
        "writes_ok": not lost_or_doubled,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
