"""Worker fixtures for every test that needs them: one real Celery worker process for the run, and a Cluster row on the dev control plane."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from tenants.models import Cluster, Tenant
from tests.plugins.kube import wait_for

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "test-output"


def _worker_env() -> dict[str, str]:
    db = settings.DATABASES["default"]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT)}
    env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL
    return env


@pytest.fixture(scope="session")
def celery_worker(django_db_setup, django_db_blocker) -> Iterator[subprocess.Popen]:
    """`celery worker` as a separate process on the test database and this run's Redis."""
    OUTPUT.mkdir(exist_ok=True)
    log = open(OUTPUT / "celery-worker.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool=prefork", "--concurrency=4",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO", "-n", f"test-{os.getpid()}@%h"],
        cwd=ROOT, env=_worker_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while b"ready." not in (OUTPUT / "celery-worker.log").read_bytes() and time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"celery worker exited with {proc.returncode}; see test-output/celery-worker.log")
        time.sleep(0.2)
    yield proc
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


@pytest.fixture
def live_cluster(control_plane, kube_admin, small, medium, large) -> Iterator[Cluster]:
    """A registered Cluster on the dev control plane; a unique namespace prefix keeps each test's namespaces apart."""
    prefix = f"t{secrets.token_hex(2)}-"
    cluster = Cluster.objects.create(
        name=f"dev-{prefix[:-1]}", display_name="Dev control plane", api_url=control_plane.api_url,
        ca_pem=control_plane.ca_cert_pem, credential_ref=f"kubeconfig:{control_plane.kubeconfig_path}",
        public_endpoint=control_plane.api_url, namespace_prefix=prefix, kinds=["namespace"],
        monitoring_links=[{"name": "Grafana", "url": "https://grafana.example.test/d/ns?var-namespace={namespace}"}],
    )
    cluster.tiers.set([small, medium, large])
    yield cluster
    from kubernetes import client

    core = client.CoreV1Api(kube_admin)
    for ns in core.list_namespace().items:
        if ns.metadata.name.startswith(prefix):
            core.delete_namespace(ns.metadata.name)


def wait_status(tenant: Tenant, status: str, timeout: float = 90.0) -> Tenant:
    def check():
        tenant.refresh_from_db()
        return tenant.status == status

    wait_for(check, timeout=timeout, what=f"tenant {tenant.name} to be {status} (is {tenant.status}: {tenant.status_reason})")
    return tenant
