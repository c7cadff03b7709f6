"""Helpers for the portal-core tests: API clients, an audit context, and tenants in a chosen state."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from tenants import services
from tenants.audit import AuditContext
from tenants.models import Cluster, Team, Tenant, TenantRequest, TenantStatus, Tier, User

# What a page or API call would pass: used to check that every audit row carries it.
CTX = AuditContext(request_id="req-0042", source_ip="203.0.113.7", user_agent="pytest-agent/1.0")


@pytest.fixture
def api() -> Callable[..., APIClient]:
    """``api(user)``: a DRF client signed in as ``user`` (``api()``: anonymous)."""

    def client_for(user: User | None = None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user)
        return client

    return client_for


@pytest.fixture
def token_client() -> Callable[..., APIClient]:
    """``token_client(user, team=None)``: a client sending a real portal API token of ``user``."""

    def client_for(user: User, team: Team | None = None) -> APIClient:
        _, plaintext = services.api_token_create(actor=user, name="ci", expires_in_days=7, team=team)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {plaintext}")
        return client

    return client_for


@pytest.fixture
def submit(alice: User, team_a: Team, medium: Tier, cluster: Cluster) -> Callable[..., TenantRequest]:
    """``submit(name=..., actor=..., tier=...)``: a create request through the service (alice, team-a, medium)."""

    def _submit(
        *, name: str = "web", actor: User = alice, team: Team = team_a, tier: Tier = medium, **kwargs
    ) -> TenantRequest:
        kwargs.setdefault("cluster", cluster)
        return services.request_submit(actor=actor, action="create", team=team, name=name, tier=tier, **kwargs)

    return _submit


@pytest.fixture
def ready_tenant(submit, carol: User, dispatched) -> Callable[..., Tenant]:
    """``ready_tenant(name=...)``: a tenant taken through request → approve → provisioning → ready by the services."""

    def _ready(*, name: str = "web", **kwargs) -> Tenant:
        req = submit(name=name, **kwargs)
        if req.status == TenantRequest.Status.PENDING:
            services.request_approve(tenant_request=req, actor=carol)
        tenant = services.tenant_mark_provisioning(tenant=Tenant.objects.get(pk=req.tenant_id))
        return services.tenant_mark_ready(tenant=tenant, applied_generation=tenant.generation)

    return _ready


@pytest.fixture
def make_tenant(cluster: Cluster, medium: Tier) -> Callable[..., Tenant]:
    """``make_tenant(team=..., created_by=..., status=...)``: a row written directly, for read-side tests."""
    names = itertools.count(1)

    def _make(
        *,
        team: Team,
        created_by: User,
        status: str = TenantStatus.READY,
        tier: Tier = medium,
        name: str = "",
        cluster: Cluster = cluster,
        **fields: Any,
    ) -> Tenant:
        name = name or f"row-{next(names)}"
        fields.setdefault("namespace", cluster.namespace_prefix + name)
        return Tenant.objects.create(
            name=name, team=team, tier=tier, cluster=cluster, status=status, created_by=created_by, **fields
        )

    return _make


def run_together(*calls: Callable[[], Any]) -> list[Any]:
    """Run ``calls`` in threads released at the same instant; each result is a return value or the exception.

    Each thread uses its own database connection (Django's are per thread) and closes it at the end.
    Only for ``transaction=True`` tests: the threads must see committed data.
    """
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def worker(i: int, fn: Callable[[], Any]) -> None:
        try:
            barrier.wait(timeout=10)
            results[i] = fn()
        except Exception as exc:  # the loser's exception is the result under test
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i, fn)) for i, fn in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread hung: a lock was never released"
    return results
