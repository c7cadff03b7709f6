"""A chaos bed: Berth as deployed, on parts of its own that a scenario may break.

Its own PostgreSQL and Redis (restartable in place: same port, same data directory), the portal under gunicorn,
a Celery worker and celery beat, all on them, and a Cluster row on a dev control plane with a namespace prefix of
its own. Nothing of the run's shared servers is touched, so breaking them disturbs no other test.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from kubernetes.client import ApiClient, CoreV1Api

from devcluster import process
from devcluster.launcher import ControlPlane
from devcluster.process import Component
from devcluster.servers import PostgresServer, RedisServer
from tests.plugins.portal import LivePortal, portal_server
from tests.plugins.worker import OUTPUT, ROOT, django_process_env

# How fast lost work comes back in a bed: the sweep every 5 s re-sends a tenant untouched for 15 s, or for 60 s
# while the provision queue holds messages (workers behind), so within 65 s however busy the bed's one worker is.
# Deployed defaults are 60 s, 90 s and an hour (BERTH_SWEEP_SECONDS, BERTH_STUCK_AFTER_SECONDS,
# BERTH_STUCK_BACKLOG_SECONDS): scale the bounds accordingly.
SWEEP_SECONDS = 5
STUCK_AFTER_SECONDS = 15
STUCK_BACKLOG_SECONDS = 60


@dataclass
class Bed:
    name: str
    directory: Path
    postgres: PostgresServer
    redis: RedisServer
    env: dict[str, str]
    portal: LivePortal
    worker: Component
    beat: Component
    plane: ControlPlane
    kube: ApiClient
    prefix: str
    cast: dict[str, Any]
    worker_starts: int = 1
    notes: list[str] = field(default_factory=list)

    @property
    def cluster(self) -> str:
        return str(self.cast["cluster"])

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of ``query`` on the bed's database (the checker reads what the portal and worker wrote)."""
        with psycopg.connect(self.postgres.url, connect_timeout=5) as conn:
            return list(conn.execute(query, params).fetchall())

    def tenant_statuses(self) -> dict[str, int]:
        rows = self.sql(
            "SELECT status, count(*) FROM tenants_tenant t JOIN tenants_cluster c ON c.id = t.cluster_id "
            "WHERE c.name = %s GROUP BY status",
            (self.cluster,),
        )
        return dict(rows)

    def kill_worker(self) -> None:
        """SIGKILL the worker's whole process group: the parent and every prefork child, mid-task."""
        assert self.worker.pid is not None
        os.killpg(self.worker.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.worker.exited() is None and time.monotonic() < deadline:
            time.sleep(0.1)

    def start_worker(self) -> None:
        """Start the worker again (as its Deployment would), with a log of its own for this start."""
        self.worker_starts += 1
        self.worker.log_path = self.directory / f"celery-worker.{self.worker_starts}.log"
        self.worker.start()
        process.wait_for_celery_ready(self.worker, timeout=120)


def _run(argv: list[str], env: dict[str, str], stdin: str = "") -> str:
    done = subprocess.run(argv, cwd=ROOT, env=env, input=stdin, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


@contextmanager
def chaos_bed(name: str, plane: ControlPlane, kube: ApiClient) -> Iterator[Bed]:
    """Berth on servers of its own for one scenario; everything stopped (and its namespaces deleted) at the end.
    Logs under test-output/chaos/<name>/."""
    directory = OUTPUT / "chaos" / name
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    prefix = f"c{secrets.token_hex(2)}-"
    with ExitStack() as stack:
        postgres = PostgresServer(directory / "postgres").start()
        stack.callback(shutil.rmtree, directory / "postgres" / "data", ignore_errors=True)
        stack.callback(postgres.stop)
        redis = RedisServer().start()
        stack.callback(redis.stop)
        env = {
            **django_process_env(),
            "DATABASE_URL": postgres.url,
            "CELERY_BROKER_URL": redis.url,
            "CACHE_URL": f"redis://127.0.0.1:{redis.port}/1",
            "BERTH_WRITE_THROTTLE": "100000/min",
            "BERTH_SWEEP_SECONDS": str(SWEEP_SECONDS),
            "BERTH_STUCK_AFTER_SECONDS": str(STUCK_AFTER_SECONDS),
            "BERTH_STUCK_BACKLOG_SECONDS": str(STUCK_BACKLOG_SECONDS),
        }
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        _run([sys.executable, "manage.py", "migrate", "-v0"], env)
        spec = {
            "prefix": prefix,
            "api_url": plane.api_url,
            "ca_pem": plane.ca_cert_pem,
            "kubeconfig": str(plane.kubeconfig_path),
            "teams": 3,
        }
        cast = json.loads(_run([sys.executable, "-m", "tests.chaos.seed"], env, json.dumps(spec)))
        portal = stack.enter_context(portal_server(f"chaos/{name}/portal", env, workers=3))
        worker = process.celery_worker(
            directory / "celery-worker.1.log",
            cwd=ROOT,
            env=env,
            queues=[queue.name for queue in settings.CELERY_TASK_QUEUES],
            node=f"chaos-{name}@localhost",
        )
        worker.start()
        stack.callback(worker.stop, grace_seconds=20)
        process.wait_for_celery_ready(worker, timeout=120)
        beat = Component(
            "celery beat",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "portal",
                "beat",
                "-s",
                str(directory / "beat-schedule"),
                "-l",
                "INFO",
            ],
            directory / "celery-beat.log",
            cwd=ROOT,
            env=env,
        )
        beat.start()
        stack.callback(beat.stop)
        bed = Bed(
            name=name,
            directory=directory,
            postgres=postgres,
            redis=redis,
            env=env,
            portal=portal,
            worker=worker,
            beat=beat,
            plane=plane,
            kube=kube,
            prefix=prefix,
            cast=cast,
        )
        stack.callback(_delete_namespaces, kube, prefix)
        yield bed


def _delete_namespaces(kube: ApiClient, prefix: str) -> None:
    core = CoreV1Api(kube)
    for namespace in core.list_namespace().items:
        name = str(namespace.metadata.name)
        if name.startswith(prefix):
            core.delete_namespace(name)
