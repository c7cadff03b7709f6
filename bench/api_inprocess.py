#!/usr/bin/env python
"""CPU of one list page, Berth's and stock DRF's, measured in one process each, without load.

    .venv/bin/python bench/api_inprocess.py                       # the audit trail, 5 rounds of 200 pages
    .venv/bin/python bench/api_inprocess.py --code /tmp/old-berth  # also the code in that directory, interleaved
    .venv/bin/python bench/api_inprocess.py --pg-dir /tmp/pg       # keep the seeded database for the next run

bench/api_load.py measures whole requests under load, where the machine moves the rates by a third from one run to
the next; this measures what a page costs alone. It seeds the same data (bench/api_load.py's seed: 10 teams,
10,000 tenants, 100,000 audit rows, a token per person) in a throwaway PostgreSQL, then starts one process per
code tree (this one, and each ``--code``), with settings bench.api_settings as api_load.py's portal has them
(DEBUG off, connections kept), and has each call Django's WSGI handler directly, as gunicorn would: for the audit
trail, each person's team's first page (``?team=…&limit=50``) and its ``next`` links ten pages deep, as the load
bench's readers walk it, and the same from ``/bench/stock/…``. Batches of each (code, endpoint) run in turns, in
rounds; each figure is the median of the rounds: the process's CPU (``time.process_time``) a page, PostgreSQL's
(the server's processes, from /proc) a page, and the statements a page (counted in a separate, untimed walk); and
the ratio of each round's Python CPU to stock's in the same round (a busy machine moves whole rounds together).
The pages each code tree answered are compared by digest: a change meant to be faster must answer the same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path and "--serve" not in sys.argv:  # a child imports the code tree it was started in
    sys.path.insert(0, str(ROOT))

LISTS = {
    "audit": ("/api/v1/audit-events/", "/bench/stock/audit-events/", 10),  # Berth's, stock's, pages deep
    "tenants": ("/api/v1/tenants/", "/bench/stock/tenants/", 1),
    "requests": ("/api/v1/requests/", "/bench/stock/requests/", 1),
}


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# The child: one code tree, serving pages on command.


class Walker:
    """Walks a list as a reader does, calling the WSGI handler in this process."""

    def __init__(self, people: list[dict[str, str]]):
        from django.core.handlers.wsgi import WSGIHandler

        self.handler = WSGIHandler()
        self.people = people

    def get(self, path: str, query: str, token: str) -> bytes:
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "HTTP_HOST": "127.0.0.1:8000",
            "REMOTE_ADDR": "127.0.0.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_AUTHORIZATION": f"Token {token}",
            "wsgi.input": io.BytesIO(b""),
            "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr,
        }
        status: list[str] = []

        def start_response(line: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            status.append(line)
            return lambda data: None

        body = b"".join(self.handler(environ, start_response))
        if not status[0].startswith("200"):
            raise RuntimeError(f"{path}?{query}: {status[0]} {body[:300]!r}")
        return body

    def walk(self, path: str, depth: int, pages: int, digest: Any = None) -> int:
        """``pages`` pages: each person in turn reads the first page of their team and follows ``next`` links
        ``depth`` pages deep."""
        from urllib.parse import urlsplit

        done = 0
        while done < pages:
            for person in self.people:
                query = f"team={person['team']}&limit=50"
                for _ in range(depth):
                    body = self.get(path, query, person["token"])
                    if digest is not None:
                        digest.update(body)
                    done += 1
                    link = json.loads(body)["next"]
                    if not link or done >= pages:
                        break
                    query = urlsplit(link).query
                if done >= pages:
                    break
        return done

    def count(self, path: str, depth: int, pages: int) -> dict[str, Any]:
        """A walk's statements a page, and a digest of the bytes it was answered."""
        from django.db import connection

        statements: list[str] = []

        def counted(execute: Any, sql: str, *args: Any) -> Any:
            statements.append(sql)
            return execute(sql, *args)

        digest = hashlib.sha256()
        with connection.execute_wrapper(counted):
            done = self.walk(path, depth, pages, digest)
        return {"statements": len(statements) / done, "digest": digest.hexdigest()[:16]}


def serve() -> None:
    """Read commands (``{"path", "depth", "pages"}``) from stdin, one JSON line each; answer each with the CPU
    seconds the walk took, or (with ``"count": true``) the statements and a digest of the bytes instead."""
    import django

    django.setup()
    walker = Walker(json.loads(os.environ["BERTH_BENCH_PEOPLE"]))
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("count"):
            answer = walker.count(command["path"], command["depth"], command["pages"])
        elif command.get("profile"):
            import cProfile

            cProfile.runctx(
                "walker.walk(command['path'], command['depth'], command['pages'])",
                globals(),
                {"walker": walker, "command": command},
                command["profile"],
            )
            answer = {"profile": command["profile"]}
        else:
            start = time.process_time()
            walker.walk(command["path"], command["depth"], command["pages"])
            answer = {"cpu": time.process_time() - start}
        print(json.dumps(answer), flush=True)


# The parent: the database, the children, the rounds.


class Child:
    def __init__(self, code: Path, env: dict[str, str]):
        self.code = code
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve"],
            cwd=code,
            env={**os.environ, **env, "PYTHONPATH": str(code)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, **command: Any) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the child for {self.code} ended")
        return json.loads(line)

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", choices=sorted(LISTS), default="audit")
    parser.add_argument("--code", type=Path, action="append", default=[], help="another code tree to measure")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pages", type=int, default=200, help="pages a batch")
    parser.add_argument("--pg-dir", type=Path, help="keep the database here (seeded on the first run)")
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--audit-rows", type=int, default=100_000)
    parser.add_argument("--profile", type=Path, help="also profile a batch of each, into files in this directory")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return 0
    work = Path(tempfile.mkdtemp(prefix="berth-api-inprocess-"))
    if args.pg_dir:
        args.pg_dir.mkdir(parents=True, exist_ok=True)
    try:
        return measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(args: argparse.Namespace, work: Path) -> int:
    from bench import api_load
    from devcluster import servers

    with servers.postgres_server(args.pg_dir) as db, servers.redis_server() as redis:
        env = api_load.portal_env(db, redis.url)
        metrics_dir = work / "metrics"
        metrics_dir.mkdir()
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
        os.environ.update(env)
        import django

        django.setup()
        from django.core.management import call_command

        from tenants.models import Team

        people_file = args.pg_dir / "people.json" if args.pg_dir else work / "people.json"
        if not people_file.exists():
            say("migrating and seeding")
            call_command("migrate", verbosity=0)
            if Team.objects.exists():
                raise SystemExit(f"{args.pg_dir} holds a database seeded by a run that did not finish: remove it")
            data = api_load.seed(args.tenants, args.audit_rows)
            api_load.vacuum()
            people_file.write_text(json.dumps(data["tokens"]))
        people = json.loads(people_file.read_text())
        postgres = api_load.postmaster_pid()
        from django.db import connection

        connection.close()

        codes = [ROOT, *[code.resolve() for code in args.code]]
        children = {str(code): Child(code, {"BERTH_BENCH_PEOPLE": json.dumps(people)}) for code in codes}
        berth, stock, depth = LISTS[args.list]
        sides = [(code, "berth", berth) for code in children] + [(str(ROOT), "stock", stock)]
        try:
            counted = {}
            for code, side, path in sides:
                children[code].ask(path=path, depth=depth, pages=args.pages)  # warm up, unmeasured
                counted[code, side] = children[code].ask(path=path, depth=depth, pages=args.pages, count=True)
            cpu: dict[tuple[str, str], list[float]] = {key[:2]: [] for key in sides}
            db_cpu: dict[tuple[str, str], list[float]] = {key[:2]: [] for key in sides}
            for round_ in range(args.rounds):
                order = sides if round_ % 2 == 0 else sides[::-1]
                for code, side, path in order:
                    before = api_load.tree_cpu_seconds(postgres)
                    answer = children[code].ask(path=path, depth=depth, pages=args.pages)
                    db_cpu[code, side].append((api_load.tree_cpu_seconds(postgres) - before) / args.pages)
                    cpu[code, side].append(answer["cpu"] / args.pages)
                say(f"round {round_ + 1} of {args.rounds}")
            if args.profile:
                args.profile.mkdir(parents=True, exist_ok=True)
                for number, (code, side, path) in enumerate(sides):
                    out = args.profile / f"{number}-{side}.prof"
                    children[code].ask(path=path, depth=depth, pages=args.pages, profile=str(out.resolve()))
                    say(f"profile of {code} {side}: {out}")
        finally:
            for child in children.values():
                child.stop()

    stock_cpu = cpu[str(ROOT), "stock"]
    print(f"{args.list}: {args.rounds} rounds of {args.pages} pages; ms a page, median of rounds (lowest–highest)")
    print("| code | endpoint | Python | PostgreSQL | statements a page | vs stock (Python, median of rounds) | bytes |")
    print("|---|---|---|---|---|---|---|")
    summary = {}
    for code, side, _ in sides:
        python, pg = cpu[code, side], db_cpu[code, side]
        mid = statistics.median(python)
        ratios = [ours / theirs for ours, theirs in zip(python, stock_cpu, strict=True)]
        print(
            f"| {code} | {side} | {1000 * mid:.2f} ({1000 * min(python):.2f}–{1000 * max(python):.2f}) "
            f"| {1000 * statistics.median(pg):.2f} | {counted[code, side]['statements']:.2f} "
            f"| {100 * statistics.median(ratios):.0f} % ({100 * min(ratios):.0f}–{100 * max(ratios):.0f} %) "
            f"| {counted[code, side]['digest']} |"
        )
        summary[f"{code} {side}"] = {
            "python_ms": round(1000 * mid, 3),
            "python_vs_stock": round(statistics.median(ratios), 3),
            "postgres_ms": round(1000 * statistics.median(pg), 3),
            "statements": counted[code, side]["statements"],
        }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
