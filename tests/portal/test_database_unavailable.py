"""While the portal's PostgreSQL is away, the portal answers 503 with a body that says so, never a 500.

The API's JSON error body (with Retry-After) and, for a signed-in browser, a page of its own that needs no database;
once PostgreSQL is back the same calls succeed, and a POST repeated with its Idempotency-Key is applied once.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import requests
from django.db import IntegrityError, OperationalError

from devcluster.servers import PostgresServer
from tenants.api.errors import database_unavailable
from tests.plugins.portal import portal_server
from tests.plugins.worker import OUTPUT, ROOT, django_process_env


def _run(argv: list[str], env: dict[str, str], stdin: str = "") -> str:
    return subprocess.run(argv, cwd=ROOT, env=env, input=stdin, capture_output=True, text=True, check=True).stdout


def _caused_by(error: Exception, cause: Exception) -> Exception:
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("error", "away"),
    [
        (_caused_by(OperationalError("refused"), psycopg.OperationalError("connection refused")), True),
        (_caused_by(OperationalError("shutdown"), psycopg.errors.AdminShutdown("terminating connection")), True),
        (_caused_by(OperationalError("starting"), psycopg.errors.CannotConnectNow("starting up")), True),
        (_caused_by(OperationalError("timeout"), psycopg.errors.QueryCanceled("statement timeout")), False),
        (_caused_by(IntegrityError("dup"), psycopg.errors.UniqueViolation("duplicate key")), False),
        (ValueError("no"), False),
    ],
)
def test_only_a_lost_or_refused_connection_counts_as_the_database_being_away(error: Exception, away: bool) -> None:
    assert database_unavailable(error) is away


@dataclass
class Portal:
    url: str
    postgres: PostgresServer
    token: str
    session: str


@pytest.fixture
def portal_on_own_database() -> Iterator[Portal]:
    """The portal under gunicorn on a PostgreSQL of its own (which the test stops), with an approver's API token
    and browser session."""
    directory = OUTPUT / "database-unavailable"
    postgres = PostgresServer(directory / "postgres").start()
    try:
        env = {**django_process_env(), "DATABASE_URL": postgres.url}
        _run([sys.executable, "manage.py", "migrate", "-v0"], env)
        spec = {"prefix": "dbu-", "api_url": "https://127.0.0.1:1", "ca_pem": "", "kubeconfig": "/dev/null", "teams": 1}
        cast = json.loads(_run([sys.executable, "-m", "tests.chaos.seed"], env, json.dumps(spec)))
        with portal_server("database-unavailable/portal", env) as portal:
            yield Portal(portal.url, postgres, cast["teams"][0]["token"], cast["approver_session"])
    finally:
        postgres.stop()
        shutil.rmtree(Path(directory) / "postgres" / "data", ignore_errors=True)


def test_the_portal_answers_503_with_a_clear_body_while_postgresql_is_away(portal_on_own_database: Portal) -> None:
    portal = portal_on_own_database
    api = requests.Session()
    api.headers["Authorization"] = f"Token {portal.token}"
    browser = requests.Session()
    browser.cookies.set("sessionid", portal.session)
    key = str(uuid.uuid4())
    body = {"action": "create", "team": "chaos-1", "name": "while-away", "tier": "medium", "cluster": "chaos-dbu"}
    assert api.get(f"{portal.url}/api/v1/tenants/", timeout=30).status_code == 200
    assert browser.get(f"{portal.url}/", timeout=30).status_code == 200

    portal.postgres.stop()
    for answer in (
        api.get(f"{portal.url}/api/v1/tenants/", timeout=30),
        api.post(f"{portal.url}/api/v1/requests/", json=body, headers={"Idempotency-Key": key}, timeout=30),
    ):
        assert answer.status_code == 503, answer.text
        assert answer.headers["Content-Type"] == "application/json"
        assert "database is not reachable" in answer.json()["detail"]
        assert int(answer.headers["Retry-After"]) > 0
    page = browser.get(f"{portal.url}/tenants/", timeout=30)
    assert page.status_code == 503
    assert page.headers["Content-Type"].startswith("text/html")
    assert "Berth is briefly unavailable" in page.text and "cannot reach its database" in page.text
    assert "Traceback" not in page.text and "OperationalError" not in page.text
    assert int(page.headers["Retry-After"]) > 0

    portal.postgres.start()
    assert api.get(f"{portal.url}/api/v1/tenants/", timeout=30).status_code == 200
    assert browser.get(f"{portal.url}/", timeout=30).status_code == 200
    first = api.post(f"{portal.url}/api/v1/requests/", json=body, headers={"Idempotency-Key": key}, timeout=30)
    assert first.status_code == 201, first.text
    again = api.post(f"{portal.url}/api/v1/requests/", json=body, headers={"Idempotency-Key": key}, timeout=30)
    assert again.json()["id"] == first.json()["id"]
