"""Worker fixtures for every test that needs them.

One real Celery worker process for the run, and a Cluster row on the dev control plane.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.conf import settings
from django.db import connection
from rest_framework.test import APIClient

from devcluster import process
from devcluster.launcher import OIDCIssuer
from devcluster.process import Component
from tenants.models import Cluster, Tenant
from tests.plugins.kube import wait_for
from worker import provisioning
from worker.provisioning import Progress

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "test-output"


def django_process_env() -> dict[str, str]:
    """The environment of a portal or worker process on this run's test database and Redis."""
    db = settings.DATABASES["default"]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT)}
    env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fresh_directory(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


@pytest.fixture
def celery_worker(celery_worker_process: Component) -> Iterator[Component]:
    """The run's Celery worker for one test, left idle when the test ends.

    A test's work can outlive its last assertion: a provision that requeues itself, a sweep's resent job,
    a webhook delivery's retry. Run during the database flush that ends a transactional test, such a task
    deadlocks the flush's TRUNCATE or writes rows into the next test. So the worker is drained first (this
    fixture is set up after the database fixture, so it is torn down before it).
    """
    yield celery_worker_process
    drain_worker(celery_worker_process.node_name)  # type: ignore[attr-defined]


def drain_worker(node: str, timeout: float = 90.0) -> None:
    """Discard every waiting, prefetched and scheduled task of ``node`` and wait until none is running.

    Quiet means two checks in a row with nothing running and nothing left but revoked tasks (a revoked task
    with a countdown stays listed until its time comes, then is dropped unrun).
    """
    from portal.celery import app

    quiet = 0
    deadline = time.monotonic() + timeout
    while quiet < 2:
        app.control.purge()
        inspect = app.control.inspect(destination=[node], timeout=5.0)
        active = (inspect.active() or {}).get(node, [])
        waiting = {task["id"] for task in (inspect.reserved() or {}).get(node, [])}
        waiting |= {entry["request"]["id"] for entry in (inspect.scheduled() or {}).get(node, [])}
        waiting -= set((inspect.revoked() or {}).get(node, []))
        if waiting:
            app.control.revoke(sorted(waiting), destination=[node])
        quiet = quiet + 1 if not active and not waiting else 0
        if time.monotonic() > deadline:
            names = [task["name"] for task in active]
            raise AssertionError(f"the Celery worker was still busy {timeout:.0f} s after the test: {names}")
        time.sleep(0.2)


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, django_db_blocker) -> Iterator[Component]:
    """`celery worker` as a separate process on the test database and this run's Redis, one for the run.

    Tests ask for ``celery_worker``, which drains it after each test. Its log: test-output/celery-worker.log.
    """
    OUTPUT.mkdir(exist_ok=True)
    log = OUTPUT / "celery-worker.log"
    metrics_port = free_port()
    env = {
        **django_process_env(),
        # The worker's exporter, as deployed: prefork children add up through the multiprocess directory.
        "PROMETHEUS_MULTIPROC_DIR": str(fresh_directory(OUTPUT / "prometheus-worker")),
        "BERTH_WORKER_METRICS_PORT": str(metrics_port),
        "BERTH_WORKER_METRICS_ADDRESS": "127.0.0.1",
    }
    node = f"test-{os.getpid()}@{socket.gethostname()}"
    worker = process.celery_worker(
        log,
        cwd=ROOT,
        env=env,
        # Every queue the settings declare, the events queue (webhook deliveries) included.
        queues=[queue.name for queue in settings.CELERY_TASK_QUEUES],
        node=node,
    )
    worker.start()
    try:
        process.wait_for_celery_ready(worker)
        worker.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"  # type: ignore[attr-defined]
        worker.node_name = node  # type: ignore[attr-defined]
        yield worker
    finally:
        worker.stop(grace_seconds=20)


@pytest.fixture
def live_cluster(control_plane, kube_admin, small, medium, large) -> Iterator[Cluster]:
    """A registered Cluster on the dev control plane; a unique namespace prefix keeps each test's namespaces apart."""
    yield from _registered(control_plane, kube_admin, [small, medium, large])


@pytest.fixture
def live_node_cluster(node_control_plane, node_kube_admin, small, medium, large) -> Iterator[Cluster]:
    """A registered Cluster on the control plane with real nodes (see node_control_plane)."""
    yield from _registered(node_control_plane, node_kube_admin, [small, medium, large])


def _registered(control_plane, kube_admin, tiers) -> Iterator[Cluster]:
    prefix = f"t{secrets.token_hex(2)}-"
    cluster = Cluster.objects.create(
        name=f"dev-{prefix[:-1]}",
        display_name="Dev control plane",
        api_url=control_plane.api_url,
        ca_pem=control_plane.ca_cert_pem,
        credential_ref=f"kubeconfig:{control_plane.kubeconfig_path}",
        public_endpoint=control_plane.api_url,
        namespace_prefix=prefix,
        kinds=["namespace"],
        monitoring_links=[{"name": "Grafana", "url": "https://grafana.example.test/d/ns?var-namespace={namespace}"}],
    )
    cluster.tiers.set(tiers)
    yield cluster
    from kubernetes import client

    core = client.CoreV1Api(kube_admin)
    for ns in core.list_namespace().items:
        name = str(ns.metadata.name)
        if name.startswith(prefix):
            core.delete_namespace(name)


def oidc_access_cluster(
    control_plane: Any, *, issuer: str, ca_pem: str, client_id: str, name: str, namespace_prefix: str, tiers: list[Any]
) -> Iterator[Cluster]:
    """The body of a fixture: a Cluster in access mode ``oidc`` on the dev control plane, which trusts ``issuer``
    (audience ``client_id``, groups prefixed ``oidc:``) until the fixture ends."""
    control_plane.set_oidc_issuers([OIDCIssuer(url=issuer, audience=client_id, ca_pem=ca_pem)])
    cluster = Cluster.objects.create(
        name=name,
        display_name=name,
        api_url=control_plane.api_url,
        ca_pem=control_plane.ca_cert_pem,
        credential_ref=f"kubeconfig:{control_plane.kubeconfig_path}",
        public_endpoint=control_plane.api_url,
        namespace_prefix=namespace_prefix,
        kinds=["namespace"],
        access_mode="oidc",
        oidc_issuer_url=issuer,
        oidc_client_id=client_id,
        oidc_groups_prefix="oidc:",
    )
    cluster.tiers.set(tiers)
    yield cluster
    control_plane.set_oidc_issuers([])


# The isolation report's packet checks (worker/isolation.py NetworkChecks), without the ingress one.
NETWORK_CHECK_IDS = {
    "MTB-PL1-CC-NET-1",
    "berth-net-same-namespace",
    "berth-net-dns",
    "berth-net-api-server-egress",
    "berth-net-node-egress",
}


def assert_passes_but_packets_unproven(report: dict[str, Any] | None) -> None:
    """A report from a cluster without nodes: every check passes except the packet checks, which cannot run
    there and say so (not proven, never passed), so the report as a whole does not pass."""
    assert report is not None
    unproven = {c["id"] for c in report["checks"] if c.get("proven") is False}
    # The ingress controller's check is there only on clusters that name an ingress namespace.
    assert unproven - {"berth-net-ingress-controller"} == NETWORK_CHECK_IDS, report["checks"]
    for check in report["checks"]:
        if check["id"] in unproven:
            assert not check["passed"] and "no Ready node" in check["detail"], check
        else:
            assert check["passed"], check
    assert report["passed"] is False


def wait_status(tenant: Tenant, status: str, timeout: float = 90.0) -> Tenant:
    def check():
        tenant.refresh_from_db()
        return tenant.status == status

    wait_for(
        check, timeout=timeout, what=f"tenant {tenant.name} to be {status} (is {tenant.status}: {tenant.status_reason})"
    )
    return tenant


def provision_until_settled(tenant_id: str, timeout: float = 90.0) -> Progress:
    """Provision in this process as the worker does: again after the pause each "not yet" asks for, until it
    settles (the test waits here; the worker never does)."""
    deadline = time.monotonic() + timeout
    while True:
        progress = provisioning.provision(tenant_id)
        if progress.requeue_after is None:
            return progress
        if time.monotonic() > deadline:
            pytest.fail(f"tenant {tenant_id} still not settled after {timeout:.0f}s: {progress}")
        time.sleep(min(progress.requeue_after, 1.0))


def fetch_kubeconfig(user, tenant: Tenant, tmp_path: Path, *, lifetime_seconds: int | None = 900) -> tuple[str, dict]:
    """The kubeconfig the API hands ``user`` for ``tenant``, written to a file for kubectl: (path, parsed)."""
    api = APIClient()
    api.force_authenticate(user)
    body = {} if lifetime_seconds is None else {"lifetime_seconds": lifetime_seconds}
    resp = api.post(f"/api/v1/tenants/{tenant.pk}/kubeconfig/", body, format="json")
    assert resp.status_code == 200, resp.content
    path = tmp_path / f"{user.username}-{tenant.name}.kubeconfig"
    path.write_bytes(resp.content)
    return str(path), yaml.safe_load(resp.content)


def stored_anywhere(text: str) -> list[str]:
    """Tables of the portal's database with a row whose text contains ``text``."""
    found = []
    with connection.cursor() as cur:
        for table in connection.introspection.table_names():
            cur.execute(f'SELECT count(*) FROM "{table}" t WHERE t::text LIKE %s', [f"%{text}%"])
            if cur.fetchone()[0]:
                found.append(table)
    return found
