"""pytest plugin: the portal as a real HTTP server process, and the `berth` CLI run against it.

`live_portal` (session) runs gunicorn on a free port of 127.0.0.1, on this run's test database and
Redis, verifying OIDC access tokens from the run's provider. Tests that use it see each other's
committed rows only: mark them ``django_db(transaction=True)``. Its log: test-output/live-portal.log.

`berth` runs ``python -m berth_cli`` as a separate process with a fresh HOME and config, exactly as a
user or a CI pipeline would: ``berth("tenants", "-o", "json", token=alice_token)``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.keycloak import Keycloak
from devcluster.oidc import OidcProvider
from devcluster.process import Component, wait_until
from tests.plugins.worker import OUTPUT, ROOT, django_process_env, fresh_directory

_LISTENING = re.compile(rb"Listening at: http://127\.0\.0\.1:(\d+)")


@dataclass(frozen=True)
class LivePortal:
    url: str
    log: Path
    # The bearer token its /metrics asks for.
    metrics_token: str = ""
    # The bearer token its Alertmanager receiver (/hooks/alertmanager/) asks for.
    alertmanager_token: str = ""


@contextmanager
def portal_server(name: str, env: dict[str, str], *, workers: int = 2, cwd: Path = ROOT) -> Iterator[LivePortal]:
    """gunicorn serving the portal in ``cwd`` (this checkout) on a free port of 127.0.0.1 with ``env``; its log:
    test-output/<name>.log."""
    OUTPUT.mkdir(exist_ok=True)
    log = OUTPUT / f"{name}.log"
    server = Component(
        name,
        [
            sys.executable,
            "-m",
            "gunicorn",
            "portal.wsgi:application",
            "--bind",
            "127.0.0.1:0",  # the kernel picks a free port; gunicorn's log names it
            "--workers",
            str(workers),
            "--preload",  # as deploy/gunicorn.conf.py runs it: workers forked from a parent that loaded the portal
            "--timeout",
            "60",
            "--access-logfile",
            "-",
            "--error-logfile",
            "-",
        ],
        log,
        cwd=cwd,
        env=env,
    )
    server.start()
    try:
        wait_until(
            lambda: _LISTENING.search(log.read_bytes()) is not None,
            timeout=60,
            watched=[server],
            what="gunicorn to listen",
        )
        port = int(_LISTENING.search(log.read_bytes()).group(1))
        yield LivePortal(
            url=f"http://127.0.0.1:{port}",
            log=log,
            metrics_token=env.get("BERTH_METRICS_TOKEN", ""),
            alertmanager_token=env.get("BERTH_ALERTMANAGER_TOKEN", ""),
        )
    finally:
        server.stop(grace_seconds=10)


@pytest.fixture(scope="session")
def live_portal(django_db_setup, django_db_blocker, oidc_provider: OidcProvider) -> Iterator[LivePortal]:
    env = {
        **django_process_env(),
        **oidc_provider.portal_env(),
        # Tests write far faster than people; the write throttle is not what they test.
        "BERTH_WRITE_THROTTLE": "100000/min",
        # /metrics as deployed: a token, and every gunicorn worker's counters added up.
        "BERTH_METRICS_TOKEN": secrets.token_urlsafe(24),
        "PROMETHEUS_MULTIPROC_DIR": str(fresh_directory(OUTPUT / "prometheus-web")),
        # Alertmanager's receiver, as deployed: its own token.
        "BERTH_ALERTMANAGER_TOKEN": secrets.token_urlsafe(24),
    }
    with portal_server("live-portal", env) as portal:
        yield portal


@pytest.fixture(scope="session")
def keycloak_live_portal(django_db_setup, django_db_blocker, keycloak: Keycloak) -> Iterator[LivePortal]:
    """The portal under gunicorn verifying access tokens from the run's Keycloak; its log:
    test-output/keycloak-live-portal.log."""
    env = {**django_process_env(), **keycloak.portal_env(), "BERTH_WRITE_THROTTLE": "100000/min"}
    with portal_server("keycloak-live-portal", env) as portal:
        yield portal


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def yaml(self) -> Any:
        return yaml.safe_load(self.stdout)


class Berth:
    """Runs ``python -m berth_cli`` against the live portal with its own HOME (so its own config file)."""

    def __init__(self, portal: LivePortal, home: Path) -> None:
        self.portal = portal
        self.home = home
        self.config_path = home / ".config" / "berth" / "config.yaml"
        self.started: list[subprocess.Popen[str]] = []

    def env(self, token: str | None, extra: dict[str, str] | None) -> dict[str, str]:
        return {
            "PATH": os.environ["PATH"],
            "HOME": str(self.home),
            "PYTHONPATH": str(ROOT),
            "BERTH_URL": self.portal.url,
            **({"BERTH_TOKEN": token} if token else {}),
            **(extra or {}),
        }

    def __call__(
        self,
        *args: str,
        token: str | None = None,
        input: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 120,
    ) -> CliResult:
        done = subprocess.run(
            [sys.executable, "-m", "berth_cli", *args],
            cwd=ROOT,
            env=self.env(token, env),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return CliResult(done.returncode, done.stdout, done.stderr)

    def start(self, *args: str, token: str | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """The CLI in the background (``--wait``, ``login --oidc``); the caller waits for it or kills it."""
        process = subprocess.Popen(
            [sys.executable, "-m", "berth_cli", *args],
            cwd=ROOT,
            env=self.env(token, env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.started.append(process)
        return process


BerthRunner = Berth


def _cli(portal: LivePortal, tmp_path: Path) -> Iterator[Berth]:
    home = tmp_path / "cli-home"
    home.mkdir()
    runner = Berth(portal, home)
    yield runner
    for process in runner.started:  # a test that failed half-way leaves no CLI behind
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


@pytest.fixture
def berth(live_portal: LivePortal, tmp_path: Path) -> Iterator[Berth]:
    """Run the CLI against the live portal: ``berth(*args, token=..., input=..., env={...}, timeout=...)``."""
    yield from _cli(live_portal, tmp_path)


@pytest.fixture
def keycloak_berth(keycloak_live_portal: LivePortal, tmp_path: Path) -> Iterator[Berth]:
    """The CLI against the live portal that trusts the run's Keycloak."""
    yield from _cli(keycloak_live_portal, tmp_path)
