#!/usr/bin/env python
"""Berth API load benchmark: the portal under gunicorn on real PostgreSQL and Redis, driven by locust.

    .venv/bin/python bench/api_load.py                  # 10,000 tenants, 100,000 audit rows, about 5 minutes
    .venv/bin/python bench/api_load.py --users 20 --mix-seconds 60 --solo-seconds 15

Everything it needs is started here and stopped on exit: a throwaway PostgreSQL and Redis
(devcluster.servers), migrations, seed data written with bulk_create (the audit table refuses
UPDATE and DELETE, not INSERT), an API token per person, and the portal under gunicorn with
deploy/gunicorn.conf.py (settings bench.api_settings: the product's plus a bare DRF endpoint).

Then locust (headless) runs each list endpoint alone, between runs of the bare endpoint alone
(req/s; a list's share is of the mean of the bare rates before and after it), and a mix of reads
and writes by people of several teams (per endpoint req/s, p50/p95/p99, errors). Afterwards the
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


def run_locust(url: str, tag: str, seconds: int, users: int, work: Path, env: dict[str, str]) -> dict[str, Any]:
    label = f"{tag}-warmup" if env.get("BERTH_BENCH_WARMUP") else tag
    prefix = work / label
    results = work / f"{label}-results.json"
    command = [
        sys.executable, "-m", "locust", "-f", str(ROOT / "bench" / "api_locustfile.py"), "--headless",
        "--host", url, "--users", str(users), "--spawn-rate", str(users), "--run-time", f"{seconds}s",
        "--tags", tag, "--csv", str(prefix), "--only-summary", "--loglevel", "WARNING", "--stop-timeout", "10",
    ]  # fmt: skip
    say(f"locust: {tag}, {users} users, {seconds} s")
    subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, **env, "BERTH_BENCH_RESULTS": str(results)},
        capture_output=True,
        check=False,
        timeout=seconds + 120,
    )
    with open(f"{prefix}_stats.csv", newline="") as stats:
        rows = {row["Name"]: row for row in csv.DictReader(stats)}
    return {"rows": rows, **json.loads(results.read_text())}


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--audit-rows", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=20, help="concurrent locust users")
    parser.add_argument("--solo-seconds", type=int, default=15, help="each endpoint alone")
    parser.add_argument("--mix-seconds", type=int, default=60, help="the read/write mix")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="berth-api-load-"))
    with servers.postgres_server() as db, servers.redis_server() as redis:
        env = portal_env(db, redis.url)
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
        server, url = start_portal(env, work / "gunicorn.log")
        try:
            # Workers import Django and connect on their first requests: warm them up first, unmeasured.
            run_locust(url, "bare", 5, args.users, work, {**locust_env, "BERTH_BENCH_WARMUP": "1"})
            # The bare endpoint runs before and after each list, and a list is compared with the mean of the two:
            # the rate drifts within minutes (in four of five runs on 2026-11-23 the first bare phase was the
            # fastest, by up to a quarter), so a yardstick taken before only would favour the lists measured later.
            solo: dict[str, dict[str, Any]] = {}
            bares = [run_locust(url, "bare", args.solo_seconds, args.users, work, locust_env)]
            for tag in ["tenants", "requests", "audit"]:
                solo[tag] = run_locust(url, tag, args.solo_seconds, args.users, work, locust_env)
                bares.append(run_locust(url, "bare", args.solo_seconds, args.users, work, locust_env))
            mix = run_locust(url, "mix", args.mix_seconds, args.users, work, locust_env)
        finally:
            server.stop(grace_seconds=10)
        writes = check_writes(mix, data["seeded_requests"])

    print(f"\nAPI load: {args.tenants} tenants, {args.audit_rows} audit rows, {TEAMS} teams, {args.users} users\n")
    print(f"Each endpoint alone ({args.solo_seconds} s; the bare endpoint before and after each list):")
    print(f"  {'endpoint':<28}{'req/s':>8}{'of bare':>9}{'p50 ms':>8}{'p95 ms':>8}{'p99 ms':>8}")
    ratios: dict[str, float] = {}
    bare_rates = [figures(phase["rows"]["bare DRF endpoint"])["rps"] for phase in bares]
    rows: list[tuple[str, dict[str, float], str]] = []
    for i, (tag, name) in enumerate(zip(["tenants", "requests", "audit"], LIST_ENDPOINTS, strict=True)):
        f = figures(solo[tag]["rows"][name])
        ratios[name] = f["rps"] / ((bare_rates[i] + bare_rates[i + 1]) / 2)
        rows += [
            ("bare DRF endpoint", figures(bares[i]["rows"]["bare DRF endpoint"]), ""),
            (name, f, f"{ratios[name]:.0%}"),
        ]
    rows.append(("bare DRF endpoint", figures(bares[-1]["rows"]["bare DRF endpoint"]), ""))
    for label, row, share in rows:
        print(f"  {label:<28}{row['rps']:>8.1f}{share:>9}{row['p50']:>8.0f}{row['p95']:>8.0f}{row['p99']:>8.0f}")
    print("  (a list's share: of the mean of the bare rates before and after it)")
    print(f"\nMix of reads and writes ({args.mix_seconds} s):")
    print(f"  {'endpoint':<28}{'req/s':>8}{'p50 ms':>8}{'p95 ms':>8}{'p99 ms':>8}{'errors':>8}")
    for name, row in mix["rows"].items():
        f = figures(row)
        print(f"  {name:<28}{f['rps']:>8.1f}{f['p50']:>8.0f}{f['p95']:>8.0f}{f['p99']:>8.0f}{f['failures']:>8}")
    statuses: Counter[str] = Counter()
    for phase in [*bares, *solo.values(), mix]:
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
