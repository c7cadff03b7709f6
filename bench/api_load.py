#!/usr/bin/env python
"""Berth API load benchmark: the portal under gunicorn on real PostgreSQL and Redis, driven by locust.

    .venv/bin/python bench/api_load.py                  # 10,000 tenants, 100,000 audit rows, about 10 minutes
    .venv/bin/python bench/api_load.py --users 20 --mix-seconds 60 --rounds 3 --solo-seconds 10

Everything it needs is started here and stopped on exit: a throwaway PostgreSQL and Redis
(devcluster.servers), migrations, seed data written with bulk_create (the audit table refuses
UPDATE and DELETE, not INSERT), an API token per person, and the portal under gunicorn with
deploy/gunicorn.conf.py (settings bench.api_settings: the product's plus stock DRF endpoints).

Then locust (headless) runs each list endpoint alone beside a stock DRF endpoint serving the same page on the
same data (bench/api_urls.py), the two in turns (who goes first alternating by round), in rounds (req/s,
p50/p95/p99, CPU per request; Berth's share is its rate over the stock endpoint's), and a mix of reads and
writes by people of several teams (per endpoint req/s, p50/p95/p99, errors). Afterwards the database is
checked for lost or duplicated writes. The tables go to stdout, ending with one line of JSON; progress to stderr.
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
STOCK = "stock "  # the stock endpoint's name in locust's table: this before the list's


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


def seed(tenants: int, audit_rows: int, cluster: Any = None, status: str = "ready") -> dict[str, Any]:
    """Teams with people, a cluster, tenants with one request each, audit rows; an API token per person.

    The cluster is one no one can reach unless ``cluster`` is given; the tenants are ``status`` (bench/soak.py seeds
    them deleted on its real cluster: history the lists read, which no reconcile pass or sweep acts on).
    """
    from django.utils import timezone

    from tenants import services
    from tenants.models import AuditEvent, Cluster, Membership, Team, Tenant, TenantRequest, Tier, User

    now = timezone.now()
    tiers = {t.name: t for t in Tier.objects.all()}
    if cluster is None:
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
                status=status,
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


def run_locust(
    url: str,
    tag: str,
    seconds: int,
    users: int,
    work: Path,
    env: dict[str, str],
    cpu: CpuMeter,
    log: Path,
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
    cpu_before, boots_before = cpu.read(), worker_boots(log)
    subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, **env, "BERTH_BENCH_RESULTS": str(results)},
        capture_output=True,
        check=False,
        timeout=seconds + 120,
    )
    cpu_after, boots_after = cpu.read(), worker_boots(log)
    with open(f"{prefix}_stats.csv", newline="") as stats:
        rows = {row["Name"]: row for row in csv.DictReader(stats)}
    return {
        "rows": rows,
        **json.loads(results.read_text()),
        "cpu": {name: cpu_after[name] - cpu_before[name] for name in cpu_after},
        "boots": boots_after - boots_before,
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
    page is marked all-visible only if no transaction could still miss its rows and their commits have reached the
    WAL on disk. A snapshot older than the bulk load (most likely an autovacuum worker's, started by it), or, on the
    dev PostgreSQL, which commits asynchronously, the WAL writer's next flush keeps them from being so. The planner
    then prices counting from an index alone, which needs the map, above reading the table: a run with a single pass
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--audit-rows", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=20, help="concurrent locust users")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each list and its stock twin, in turns")
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
        try:
            cpu = CpuMeter(portal=server.pid or 0, postgres=postmaster_pid(), redis=redis.server.pid or 0)
            # As many as deploy/gunicorn.conf.py starts (they log their boots one by one, after it listens).
            workers = int(runpy.run_path(str(ROOT / "deploy" / "gunicorn.conf.py"))["workers"])

            def run(tag: str, seconds: int, **extra: str) -> dict[str, Any]:
                return run_locust(url, tag, seconds, args.users, work, {**locust_env, **extra}, cpu, log)

            # Workers connect and fill their caches on their first requests: warm every endpoint up first,
            # unmeasured, then go on until gunicorn has replaced every worker once (max_requests).
            for tag in LISTS:
                run(tag, 5, BERTH_BENCH_WARMUP="1")
                run(f"stock-{tag}", 5, BERTH_BENCH_WARMUP="1")
            for _ in range(6):
                if worker_boots(log) >= 2 * workers:
                    break
                run("tenants", 10, BERTH_BENCH_WARMUP="1")
            say(f"warm: {worker_boots(log) - workers} worker boots after the first {workers}")
            # Each list and its stock twin in turns, in rounds, so that both meet the same machine: how fast this
            # one runs the same code drifts by a fifth within minutes. Who goes first alternates by round, so
            # neither side always meets the machine as the other left it.
            solo: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
            for round_ in range(args.rounds):
                for tag in LISTS:
                    if round_ % 2:
                        theirs = run(f"stock-{tag}", args.solo_seconds)
                        ours = run(tag, args.solo_seconds)
                    else:
                        ours = run(tag, args.solo_seconds)
                        theirs = run(f"stock-{tag}", args.solo_seconds)
                    solo.append((tag, ours, theirs))
            mix = run("mix", args.mix_seconds)
        finally:
            server.stop(grace_seconds=10)
        writes = check_writes(mix, data["seeded_requests"])

    print(f"\nAPI load: {args.tenants} tenants, {args.audit_rows} audit rows, {TEAMS} teams, {args.users} users\n")
    print(
        f"Each list beside a stock DRF endpoint serving the same page ({args.rounds} rounds, {args.solo_seconds} s a"
        " run, in turns):"
    )
    print(
        f"  {'list':<18}{'req/s':>8}{'stock':>8}{'Berth/stock':>13}{'runs':>12}{'p95 ms':>8}{'stock':>7}"
        f"  CPU ms per request: portal, PostgreSQL (stock)"
    )
    ratios: dict[str, float] = {}
    run_ratios: dict[str, list[float]] = {}
    for tag, name in LISTS.items():
        berth = [figures(ours["rows"][name]) for t, ours, _ in solo if t == tag]
        stock = [figures(theirs["rows"][STOCK + name]) for t, _, theirs in solo if t == tag]
        run_ratios[name] = [b["rps"] / s["rps"] for b, s in zip(berth, stock, strict=True)]
        ratios[name] = statistics.mean(run_ratios[name])
        spread = f"{min(run_ratios[name]):.0%}-{max(run_ratios[name]):.0%}"

        def per_request(side: int, name: str = name, tag: str = tag) -> str:
            runs = [phases[side] for t, *phases in solo if t == tag]
            requests = sum(figures(phase["rows"][(STOCK if side else "") + name])["requests"] for phase in runs)
            return ", ".join(
                f"{1000 * sum(phase['cpu'][part] for phase in runs) / max(requests, 1):.2f}"
                for part in ("portal", "postgres")
            )

        rates = statistics.mean(f["rps"] for f in berth), statistics.mean(f["rps"] for f in stock)
        p95s = max(f["p95"] for f in berth), max(f["p95"] for f in stock)
        print(
            f"  {name:<18}{rates[0]:>8.1f}{rates[1]:>8.1f}{ratios[name]:>13.0%}{spread:>12}"
            f"{p95s[0]:>8.0f}{p95s[1]:>7.0f}"
            f"  {per_request(0)} ({per_request(1)})"
        )
    walked: Counter[str] = Counter()
    for tag, ours, _ in solo:
        if tag == "audit":
            walked.update(ours.get("audit_pages", {}))
    print(
        f"  (req/s: the mean of the runs; Berth/stock: the mean of each round's ratio, runs: the lowest and highest;"
        f" p95: the highest run's; audit trail pages read from the top: {walked.get('first', 0)}, by a next link's"
        f" cursor: {walked.get('cursor', 0)})"
    )
    print(f"\nMix of reads and writes ({args.mix_seconds} s):")
    print(f"  {'endpoint':<28}{'req/s':>8}{'p50 ms':>8}{'p95 ms':>8}{'p99 ms':>8}{'errors':>8}")
    for name, row in mix["rows"].items():
        f = figures(row)
        print(f"  {name:<28}{f['rps']:>8.1f}{f['p50']:>8.0f}{f['p95']:>8.0f}{f['p99']:>8.0f}{f['failures']:>8}")
    mix_requests = figures(mix["rows"]["Aggregated"])["requests"]
    print(f"  CPU ms per request: portal, PostgreSQL, Redis, load tool: {cpu_per_request(mix['cpu'], mix_requests)}")
    statuses: Counter[str] = Counter()
    for phase in [*(phase for _, *both in solo for phase in both), mix]:
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
        "list_ratios": {name: round(ratio, 2) for name, ratio in ratios.items()},
        "list_run_ratios": {name: [round(r, 2) for r in values] for name, values in run_ratios.items()},
        "list_ratio_min": round(min(ratios.values()), 2),
        # The median of each list's round ratios: one disturbed round moves it less than the mean.
        "list_median_ratios": {name: round(statistics.median(values), 2) for name, values in run_ratios.items()},
        "mix_rps": round(figures(mix["rows"]["Aggregated"])["rps"], 1),
        "mix_p95_ms": figures(mix["rows"]["Aggregated"])["p95"],
        # The mix's CPU per request, which the machine's other work moves less than the rates.
        "mix_cpu_ms": {
            part: round(1000 * mix["cpu"][part] / max(mix_requests, 1), 2) for part in ("portal", "postgres")
        },
        "server_errors": server_errors,
        "writes_ok": not lost_or_doubled,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
