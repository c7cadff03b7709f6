"""Fixtures for worker unit tests against an in-memory API server (tests/worker/fake_kube.py)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator

import pytest
from django.db import connections
from django.utils import timezone

from tenants import dispatch
from tenants.models import Cluster, Team, Tenant, Tier, User
from tests.worker.fake_kube import FakeKube
from worker import kube, provisioning
from worker.provisioning import Outcome

MakeTenant = Callable[..., Tenant]


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    """The API server every cluster record points at, in this test."""
    fake = FakeKube()
    monkeypatch.setattr(kube, "for_cluster", lambda cluster: fake)
    return fake


@pytest.fixture
def make_tenant(
    alice: User, team_a: Team, medium: Tier, cluster: Cluster, worker_hooks: object
) -> Callable[..., Tenant]:
    def make(*, status: str = "approved", name: str = "web", kind: str = "namespace", on: Cluster = cluster) -> Tenant:
        return Tenant.objects.create(
            name=name,
            namespace=f"dev-{name}",
            kind=kind,
            team=team_a,
            tier=medium,
            cluster=on,
            status=status,
            created_by=alice,
            expires_at=timezone.now() + dt.timedelta(days=3),
        )

    return make


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[object, ...], float]]:
    """Jobs published (task name, arguments, countdown) instead of reaching a broker."""
    published: list[tuple[str, tuple[object, ...], float]] = []

    def send(task: str, *args: object, countdown: float = 0.0) -> bool:
        published.append((task, args, countdown))
        return True

    monkeypatch.setattr(dispatch, "send", send)
    return published


@pytest.fixture
def other_worker() -> Iterator[Callable[[str], None]]:
    """A second database session, as another worker process has; ``hold(tenant_id)`` takes the tenant's lock."""
    conn = connections.create_connection("default")

    def hold(tenant_id: str) -> None:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", [provisioning.lock_key(tenant_id)])

    yield hold
    conn.close()


def provisioned_ready(tenant: Tenant, host: FakeKube) -> Tenant:
    """Provision ``tenant`` as the worker would: applied, then ready once the quota controller has looked."""
    assert provisioning.provision(str(tenant.pk)).outcome == Outcome.NOT_YET
    host.observe_quotas()
    assert provisioning.provision(str(tenant.pk)).outcome == Outcome.READY
    tenant.refresh_from_db()
    return tenant
