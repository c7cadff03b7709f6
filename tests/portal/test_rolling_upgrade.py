"""A rollout as the chart does it: the new release's migrations run while the previous release's web pods still
serve, and those pods keep reading and writing through the migration and after it.

The previous release is the code just before the newest migration was added (git history): checked out with
``git archive`` into a directory of its own, it migrates a database of its own to its schema and serves it with
gunicorn. Its users keep listing and requesting tenants while this checkout's ``migrate`` runs against the same
database; then this checkout's web process reads every request the old one created. test_migrations_safe.py
reads each migration's SQL for what would break old code; this runs the old code.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
import requests
from django.conf import settings

from tests.plugins.portal import portal_server
from tests.plugins.worker import ROOT, django_process_env

MIGRATIONS = "tenants/migrations"
# The old code's own models, as its migrations leave them: a team, its owner, a cluster offering the seeded tiers.
SEED = """
from django.utils import timezone
from tenants import services
from tenants.models import Cluster, Membership, Team, Tier, User
team = Team.objects.create(slug="team-a", name="Team A", oidc_group="team-a")
alice = User.objects.create(username="alice", email="alice@example.test", oidc_subject="sub-alice",
                            identity_checked_at=timezone.now())
Membership.objects.create(user=alice, team=team, role=Membership.Role.OWNER)
cluster = Cluster.objects.create(name="dev", display_name="Dev", api_url="https://127.0.0.1:6443",
                                 credential_ref="env:BERTH_TEST_NO_KUBECONFIG", kinds=["namespace"])
cluster.tiers.set(Tier.objects.filter(name__in=["small", "medium"]))
print("TOKEN=" + services.api_token_create(actor=alice, name="rollout", expires_in_days=1)[1])
"""


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


def _migrations(listing: str) -> set[str]:
    return {Path(p).stem for p in listing.split() if Path(p).name[:4].isdigit() and p.endswith(".py")}


def _previous_release() -> str:
    """The commit before the newest migration file was added: the schema the running pods were built for."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the previous release's code comes from git history")
    added = _git("log", "-1", "--format=%H", "--diff-filter=A", "--", f"{MIGRATIONS}/0*.py")
    found = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{added}^"], capture_output=True
    )
    if not added or found.returncode != 0:
        pytest.fail("the git history does not reach the commit before the newest migration (a shallow clone?)")
    return f"{added}^"


def _export(commit: str, into: Path) -> None:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit], capture_output=True, check=True
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")


def _manage(tree: Path, env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=tree,
        env={**env, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"manage.py {' '.join(args)} in {tree} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@dataclass
class Traffic:
    """What the old pods answered, each with when it was sent (monotonic seconds)."""

    answers: list[tuple[float, str, int, str]] = field(default_factory=list)  # (sent, what, status, body head)
    created: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, url: str, token: str) -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Token {token}"
        n = 0
        while not self.stop.is_set():
            n += 1
            self.send("list tenants", lambda: session.get(f"{url}/api/v1/tenants/", timeout=30))
            self.send("list requests", lambda: session.get(f"{url}/api/v1/requests/", timeout=30))
            body = {"team": "team-a", "name": f"svc-{n}", "tier": "medium", "cluster": "dev"}
            created = self.send(
                "request a tenant",
                lambda body=body: session.post(
                    f"{url}/api/v1/requests/", json=body, headers={"Idempotency-Key": uuid.uuid4().hex}, timeout=30
                ),
            )
            if created is not None and created.status_code == 201:
                pk = created.json()["id"]
                self.created.append(pk)
                # Cancelled at once, so the team's budget (pending requests count) never runs out.
                self.send("cancel it", lambda pk=pk: session.post(f"{url}/api/v1/requests/{pk}/cancel/", timeout=30))

    def send(self, what: str, call) -> requests.Response | None:
        sent = time.monotonic()
        try:
            response = call()
        except requests.RequestException as error:
            self.answers.append((sent, what, 0, repr(error)))
            return None
        self.answers.append((sent, what, response.status_code, response.text[:300]))
        return response


@pytest.fixture
def upgrade_database() -> Iterator[str]:
    """A database of its own on the run's PostgreSQL (the old and the new code share it); dropped afterwards."""
    db = settings.DATABASES["default"]
    name = f"berth_rollout_{uuid.uuid4().hex[:8]}"
    admin = {"host": db["HOST"], "port": db["PORT"], "user": db["USER"], "password": db.get("PASSWORD") or None}
    with psycopg.connect(dbname="postgres", autocommit=True, **admin) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{name}"
    with psycopg.connect(dbname="postgres", autocommit=True, **admin) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_previous_release_serves_reads_and_writes_while_and_after_the_new_migrations_run(upgrade_database, tmp_path):
    commit = _previous_release()
    old_tree = tmp_path / "previous-release"
    _export(commit, old_tree)
    new_migrations = _migrations(_git("ls-files", MIGRATIONS)) - _migrations(
        _git("ls-tree", "-r", "--name-only", commit, MIGRATIONS)
    )
    assert new_migrations, f"{commit} already has every migration: not the release before the newest one"
    broker = django_process_env()["CELERY_BROKER_URL"].rsplit("/", 1)[0] + "/14"  # no worker reads this queue
    env = {
        **django_process_env(),
        "DATABASE_URL": upgrade_database,
        "CELERY_BROKER_URL": broker,
        "BERTH_WRITE_THROTTLE": "100000/min",
    }

    _manage(old_tree, env, "migrate", "--no-input")
    token = next(
        line[6:] for line in _manage(old_tree, env, "shell", "-c", SEED).splitlines() if line.startswith("TOKEN=")
    )
    traffic = Traffic()
    with portal_server("rollout-previous-web", {**env, "PYTHONPATH": str(old_tree)}, cwd=old_tree) as old_web:
        load = threading.Thread(target=traffic.run, args=(old_web.url, token), daemon=True)
        load.start()
        time.sleep(2)  # the old pods serving on their own schema
        began = time.monotonic()
        migrated = _manage(ROOT, env, "migrate", "--no-input")
        ended = time.monotonic()
        time.sleep(2)  # and on the new one
        traffic.stop.set()
        load.join(timeout=60)

    failures = [a for a in traffic.answers if not (200 <= a[2] < 300)]
    assert not failures, f"the previous release failed during the rollout: {failures[:5]}"
    phases = {
        "before": [a for a in traffic.answers if a[0] < began],
        "during": [a for a in traffic.answers if began <= a[0] < ended],
        "after": [a for a in traffic.answers if a[0] >= ended],
    }
    for phase, answers in phases.items():
        assert {a[1] for a in answers} == {"list tenants", "list requests", "request a tenant", "cancel it"}, (
            f"no reads and writes {phase} the migration ({len(answers)} answers; migrate took {ended - began:.1f} s)"
        )
    assert all(f"Applying tenants.{m}" in migrated for m in new_migrations), migrated

    # Nothing the old pods answered 201 for is missing, and the new release's web process reads every one.
    with portal_server("rollout-new-web", env) as new_web:
        session = requests.Session()
        session.headers["Authorization"] = f"Token {token}"
        for pk in traffic.created:
            answer = session.get(f"{new_web.url}/api/v1/requests/{pk}/", timeout=30)
            assert answer.status_code == 200, (pk, answer.text[:300])
            assert (answer.json()["team"], answer.json()["status"]) == ("team-a", "cancelled"), answer.text[:300]
        listed = session.get(f"{new_web.url}/api/v1/requests/", params={"limit": 1}, timeout=30).json()
        assert listed["count"] == len(traffic.created)
