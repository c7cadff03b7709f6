"""Throwaway PostgreSQL and Redis servers on 127.0.0.1 and free ports, for the test run and the demo.

Set BERTH_TEST_DATABASE_URL / BERTH_TEST_REDIS_URL to use servers you run yourself.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devcluster.process import Component, ComponentFailed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    path = shutil.which(name)
    if not path:
        raise RuntimeError(f"PostgreSQL's {name} not found: run `make deps` (installs Debian's postgresql)")
    return path


def _as_postgres_user() -> list[str]:
    """PostgreSQL refuses to run as root; drop to the 'postgres' account when we are root."""
    if os.geteuid() != 0:
        return []
    pwd.getpwnam("postgres")
    return ["runuser", "-u", "postgres", "--"]


def wait_port(port: int, component: Component, timeout: float = 30) -> None:
    """Until ``component`` listens on 127.0.0.1:``port``; fails at once (with its log) if it exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = component.exited()
        if code is not None:
            raise ComponentFailed(component, f"{component.name} exited with {code}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise ComponentFailed(component, f"{component.name} did not listen on {port} within {timeout}s")


class PostgresServer:
    """A PostgreSQL cluster on a fixed free port that can be stopped (fast shutdown) and started again on the same
    data directory: to test the portal and the worker while their database restarts."""

    def __init__(self, root: Path, port: int | None = None, *, durable: bool = False) -> None:
        self.root = root
        self.port = port or free_port()
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.data = root / "data"
        runas = _as_postgres_user()
        if runas:
            shutil.chown(root, "postgres")
        if not (self.data / "PG_VERSION").exists():
            subprocess.run(
                runas
                + [_pg_bin("initdb"), "-D", str(self.data), "-U", "berth", "--auth=trust", "-E", "UTF8", "--no-sync"],
                check=True,
                capture_output=True,
            )
        options = [] if durable else ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        # SIGINT is PostgreSQL's fast shutdown (clients disconnected, open transactions rolled back); SIGTERM
        # would wait for every client to disconnect.
        self.server = Component(
            "postgres",
            runas
            + [
                _pg_bin("postgres"),
                "-D",
                str(self.data),
                "-p",
                str(self.port),
                "-h",
                "127.0.0.1",
                "-k",
                str(root),
                "-c",
                "max_connections=200",
                *options,
            ],
            root / "postgres.log",
            stop_signal=signal.SIGINT,
        )

    @property
    def settings(self) -> dict:
        """Django DATABASES-style settings of database 'berth'."""
        return {"HOST": "127.0.0.1", "PORT": str(self.port), "USER": "berth", "PASSWORD": "", "NAME": "berth"}

    @property
    def url(self) -> str:
        return f"postgres://berth@127.0.0.1:{self.port}/berth"

    def _psql(self, sql: str) -> subprocess.CompletedProcess[str]:
        psql = ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "berth", "-d", "postgres", "-tAc", sql]
        return subprocess.run(psql, capture_output=True, text=True)

    def start(self) -> PostgresServer:
        """Start it and wait until it takes connections (database 'berth' created on the first start)."""
        log = self.server.log_path
        if log is not None and log.exists() and log.stat().st_size:  # a restart keeps the previous run's log
            log.rename(log.with_name(f"postgres.{len(list(self.root.glob('postgres.*.log'))) + 1}.log"))
        self.server.start()
        wait_port(self.port, self.server)
        for _ in range(300):
            if self._psql("select 1").returncode == 0:
                break
            time.sleep(0.1)
        if not self._psql("select 1 from pg_database where datname='berth'").stdout.strip():
            self._psql("create database berth").check_returncode()
        return self

    def stop(self, grace_seconds: float = 15) -> None:
        """Fast shutdown (then SIGKILL after ``grace_seconds``)."""
        self.server.stop(grace_seconds=grace_seconds)


@contextmanager
def postgres_server(root: Path | None = None, port: int | None = None) -> Iterator[dict]:
    """A PostgreSQL cluster; yields Django DATABASES-style settings (database 'berth' is created).

    Without ``root`` it lives in a temp dir removed on exit; with one, data persists (the demo).
    """
    keep = root is not None
    root = root if root is not None else Path(tempfile.mkdtemp(prefix="berth-pg-"))
    server = PostgresServer(root, port, durable=keep)
    server.start()
    try:
        yield server.settings
    finally:
        server.stop()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


class RedisServer:
    """A Redis on a fixed free port that can be stopped and started again (to test broker outages)."""

    def __init__(self, port: int | None = None):
        self.binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.path.exists(self.binary):
            raise RuntimeError("redis-server not found: run `make deps` (installs Debian's redis-server)")
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.server = Component(
            "redis-server",
            [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            None,
        )

    def start(self) -> RedisServer:
        self.server.start()
        wait_port(self.port, self.server)
        return self

    def stop(self) -> None:
        self.server.stop(grace_seconds=10)


@contextmanager
def redis_server(port: int | None = None) -> Iterator[RedisServer]:
    """A Redis with no persistence on 127.0.0.1; stopped on exit."""
    server = RedisServer(port).start()
    try:
        yield server
    finally:
        server.stop()
