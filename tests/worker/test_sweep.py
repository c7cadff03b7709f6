"""The periodic sweep: re-sends lost work, reminds owners before expiry, decommissions expired tenants."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Iterator

import pytest
from django.core import mail
from django.utils import timezone

from tenants import dispatch, services
from tenants.models import AuditEvent, Tenant, TenantRequest
from tests.fixtures import purge_queue
from worker.provisioning import Outcome
from worker.tasks import reconcile, sweep

# The sweep's window depends on the provision queue's depth, read from this run's Redis: empty for each test here.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_provision_queue")]


@pytest.fixture
def approved(alice, carol, team_a, medium, cluster, dispatched) -> Tenant:
    req = services.request_submit(
        actor=alice, action=TenantRequest.Action.CREATE, team=team_a, tier=medium, cluster=cluster, name="lost"
    )
    services.request_approve(tenant_request=req, actor=carol)
    dispatched.clear()
    return Tenant.objects.get(pk=req.tenant_id)


def _age(tenant: Tenant, **delta) -> None:
    Tenant.objects.filter(pk=tenant.pk).update(status_changed_at=timezone.now() - dt.timedelta(**delta))


def _resent_ago(tenant: Tenant, **delta) -> None:
    Tenant.objects.filter(pk=tenant.pk).update(resent_at=timezone.now() - dt.timedelta(**delta))


def test_sweep_resends_work_for_tenants_stuck_in_approved_but_not_fresh_ones(approved, dispatched, settings):
    settings.BERTH_STUCK_AFTER_SECONDS = 90
    assert sweep()["provision"] == 0  # just approved: its own job may still be on the way
    _age(approved, minutes=5)
    assert sweep()["provision"] == 1
    assert dispatched == [(dispatch.PROVISION, (str(approved.pk),))]


def test_sweep_resends_a_tier_change_whose_job_was_lost_but_not_a_fresh_one(
    approved, alice, carol, small, dispatched, settings
):
    """Approved while Redis was down (tests/chaos): the tenant stays ready at its old tier until the job is sent."""
    settings.BERTH_STUCK_AFTER_SECONDS = 90
    tenant = services.tenant_mark_ready(tenant=services.tenant_mark_provisioning(tenant=approved), applied_generation=1)
    change = services.request_submit(actor=alice, action=TenantRequest.Action.CHANGE_TIER, tenant=tenant, tier=small)
    if change.status == TenantRequest.Status.PENDING:
        services.request_approve(tenant_request=change, actor=carol)
    assert Tenant.objects.get(pk=tenant.pk).generation == 2
    dispatched.clear()
    assert sweep()["provision"] == 0  # just decided: its own job may still be on the way
    TenantRequest.objects.filter(tenant=tenant).update(decided_at=timezone.now() - dt.timedelta(minutes=5))
    assert sweep()["provision"] == 1
    assert dispatched == [(dispatch.PROVISION, (str(tenant.pk),))]
    services.tenant_record_applied(tenant=Tenant.objects.get(pk=tenant.pk), generation=2, repaired=[])
    dispatched.clear()
    assert sweep()["provision"] == 0  # applied: nothing owed


def test_sweep_resends_decommission_for_tenants_stuck_decommissioning(approved, alice, dispatched):
    tenant = services.tenant_mark_provisioning(tenant=approved)
    tenant = services.tenant_mark_ready(tenant=tenant, applied_generation=1)
    services.tenant_decommission(tenant=tenant, actor=alice)
    dispatched.clear()
    _age(tenant, minutes=5)
    assert sweep()["decommission"] == 1
    assert dispatched == [(dispatch.DECOMMISSION, (str(tenant.pk),))]


def test_a_waiting_tenant_is_resent_once_per_window_not_every_sweep(approved, dispatched, settings):
    """A tenant legitimately provisioning for minutes (a virtual cluster starting) gets no duplicate per sweep."""
    settings.BERTH_STUCK_AFTER_SECONDS = 90
    tenant = services.tenant_mark_provisioning(tenant=approved)
    _age(tenant, minutes=5)
    events = AuditEvent.objects.count()
    swept = sweep()
    assert (swept["provision"], swept["held_back"], swept["queue"]) == (1, 0, 0)
    resent_at = Tenant.objects.get(pk=tenant.pk).resent_at
    assert resent_at is not None and timezone.now() - resent_at < dt.timedelta(seconds=30)
    for _ in range(3):  # the next sweeps, a minute apart: re-sent 60 s ago, within the window
        assert sweep()["provision"] == 0
    _resent_ago(tenant, seconds=60)
    assert sweep()["provision"] == 0
    _resent_ago(tenant, seconds=91)
    assert sweep()["provision"] == 1
    assert dispatched == [(dispatch.PROVISION, (str(tenant.pk),))] * 2
    # Bookkeeping, not a state change: the re-sends wrote no audit event and left the tenant as it was.
    assert AuditEvent.objects.count() == events
    after = Tenant.objects.get(pk=tenant.pk)
    assert after.status == "provisioning" and after.status_changed_at < timezone.now() - dt.timedelta(minutes=4)


def test_one_update_records_every_tenant_the_sweep_resent(approved, alice, carol, team_a, small, cluster, dispatched):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    others = []
    for name in ("lost-b", "lost-c"):
        req = services.request_submit(
            actor=alice, action=TenantRequest.Action.CREATE, team=team_a, tier=small, cluster=cluster, name=name
        )
        if req.status == TenantRequest.Status.PENDING:
            services.request_approve(tenant_request=req, actor=carol)
        others.append(Tenant.objects.get(pk=req.tenant_id))
    dispatched.clear()
    Tenant.objects.update(status_changed_at=timezone.now() - dt.timedelta(minutes=5))
    with CaptureQueriesContext(connection) as queries:
        assert sweep()["provision"] == 3
    updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE") and "resent_at" in q["sql"]]
    assert len(updates) == 1
    assert {t.status for t in Tenant.objects.all()} == {"approved"}
    assert Tenant.objects.filter(resent_at__isnull=True).count() == 0


def _sent_and_held() -> tuple[int, int]:
    swept = sweep()
    return swept["provision"], swept["held_back"]


def test_with_a_backlog_a_waiting_tenant_is_held_back_until_the_long_window(
    approved, alice, dispatched, settings, monkeypatch
):
    """Thousands approved at once: the provision queue is long, the tenants wait in it and are not lost."""
    settings.BERTH_STUCK_AFTER_SECONDS = 90
    settings.BERTH_STUCK_BACKLOG_SECONDS = 3600
    monkeypatch.setattr(dispatch, "queue_depth", lambda queue: 5000 if queue == "provision" else 0)
    _age(approved, minutes=5)
    swept = sweep()
    assert (swept["provision"], swept["held_back"], swept["queue"]) == (0, 1, 5000)
    _age(approved, minutes=59)
    assert _sent_and_held() == (0, 1)
    _age(approved, minutes=61)  # a job lost while the queue was long: re-sent within the long window
    assert _sent_and_held() == (1, 0)
    assert dispatched == [(dispatch.PROVISION, (str(approved.pk),))]
    assert _sent_and_held() == (0, 0)  # just re-sent: due under neither window
    _resent_ago(approved, minutes=30)
    assert _sent_and_held() == (0, 1)
    _resent_ago(approved, minutes=61)
    assert _sent_and_held() == (1, 0)
    # The queue empty again (the workers caught up): the short window.
    monkeypatch.setattr(dispatch, "queue_depth", lambda queue: 0)
    _resent_ago(approved, minutes=2)
    assert _sent_and_held() == (1, 0)
    assert len(dispatched) == 3


def test_with_a_backlog_decommissions_and_tier_changes_are_held_back_too(
    approved, alice, carol, small, dispatched, settings, monkeypatch
):
    """Decommission jobs share the provision queue (CELERY_TASK_ROUTES), and so the window."""
    assert settings.CELERY_TASK_ROUTES[dispatch.DECOMMISSION] == {"queue": dispatch.PROVISION_QUEUE}
    monkeypatch.setattr(dispatch, "queue_depth", lambda queue: 12)
    ready = services.tenant_mark_ready(tenant=services.tenant_mark_provisioning(tenant=approved), applied_generation=1)
    change = services.request_submit(actor=alice, action=TenantRequest.Action.CHANGE_TIER, tenant=ready, tier=small)
    if change.status == TenantRequest.Status.PENDING:
        services.request_approve(tenant_request=change, actor=carol)
    TenantRequest.objects.filter(tenant=ready).update(decided_at=timezone.now() - dt.timedelta(minutes=5))
    swept = sweep()
    assert (swept["provision"], swept["held_back"]) == (0, 1)
    services.tenant_decommission(tenant=Tenant.objects.get(pk=ready.pk), actor=alice)
    dispatched.clear()
    _age(ready, minutes=5)
    swept = sweep()
    assert (swept["decommission"], swept["held_back"]) == (0, 1)
    _age(ready, hours=2)
    assert sweep()["decommission"] == 1
    assert dispatched == [(dispatch.DECOMMISSION, (str(ready.pk),))]


def test_with_the_depth_unreadable_the_short_window_applies(approved, dispatched, settings, monkeypatch):
    """Redis away (its depth unknown): towards re-sending, nothing is lost. The broker the sweep reads from is a port
    nothing listens on (this run's Redis stays up for the worker and the other tests)."""
    from portal.celery import app
    from tests.plugins.worker import free_port

    settings.BERTH_STUCK_AFTER_SECONDS = 90
    _age(approved, minutes=5)
    monkeypatch.setattr(app.conf, "broker_read_url", f"redis://127.0.0.1:{free_port()}/0")
    assert dispatch.queue_depth(dispatch.PROVISION_QUEUE) is None
    swept = sweep()
    assert (swept["provision"], swept["held_back"], swept["queue"]) == (1, 0, -1)
    assert dispatched == [(dispatch.PROVISION, (str(approved.pk),))]


def test_a_resend_the_broker_refused_is_tried_again_at_the_next_sweep(approved, monkeypatch):
    monkeypatch.setattr(dispatch, "send", lambda task, *args, countdown=0.0: False)
    _age(approved, minutes=5)
    assert sweep()["provision"] == 0
    assert Tenant.objects.get(pk=approved.pk).resent_at is None
    sent: list[tuple] = []

    def accepted(task: str, *args: object, countdown: float = 0.0) -> bool:
        sent.append((task, args))
        return True

    monkeypatch.setattr(dispatch, "send", accepted)
    assert sweep()["provision"] == 1 and sent == [(dispatch.PROVISION, (str(approved.pk),))]


@contextlib.contextmanager
def _unconsumed(queue: str) -> Iterator[None]:
    """No worker of this run's broker takes from ``queue`` meanwhile (the run's worker, if one is up, stops consuming
    it and starts again at the end), so that what the test publishes there stays; purged at the end."""
    from portal.celery import app

    replies = app.control.cancel_consumer(queue, reply=True, timeout=2.0) or []
    nodes = [node for reply in replies for node in reply]
    try:
        if nodes:
            time.sleep(1.5)  # a fetch (BRPOP, 1 s) the worker began on its former queues ends first
        yield
    finally:
        purge_queue(queue)
        if nodes:
            app.control.add_consumer(queue, destination=nodes, reply=True, timeout=5.0)


def test_the_depth_is_read_from_the_real_broker_and_holds_the_sweep_back(approved, dispatched, settings):
    """Messages waiting in this run's Redis, on the provision queue (one at a priority of its own, in a list of its
    own): counted, and the sweep holds the waiting tenant back; the queue empty, it is re-sent."""
    from portal.celery import app

    settings.BERTH_STUCK_AFTER_SECONDS = 90
    _age(approved, minutes=5)
    with _unconsumed(dispatch.PROVISION_QUEUE):
        assert dispatch.queue_depth(dispatch.PROVISION_QUEUE) == 0  # no list at all in Redis
        for _ in range(3):
            app.send_task(dispatch.PROVISION, args=["00000000-0000-0000-0000-000000000000"])
        app.send_task(dispatch.DECOMMISSION, args=["00000000-0000-0000-0000-000000000000"], priority=9)
        assert dispatch.queue_depth(dispatch.PROVISION_QUEUE) == 4
        swept = sweep()
        assert (swept["provision"], swept["held_back"], swept["queue"]) == (0, 1, 4)
        assert purge_queue(dispatch.PROVISION_QUEUE) == 4
        assert dispatch.queue_depth(dispatch.PROVISION_QUEUE) == 0
        swept = sweep()
    assert (swept["provision"], swept["held_back"], swept["queue"]) == (1, 0, 0)
    assert dispatched == [(dispatch.PROVISION, (str(approved.pk),))]


def test_owners_are_reminded_once_before_expiry(approved, settings):
    settings.BERTH_EXPIRY_REMINDER_DAYS = 7
    tenant = services.tenant_mark_ready(tenant=services.tenant_mark_provisioning(tenant=approved), applied_generation=1)
    Tenant.objects.filter(pk=tenant.pk).update(expires_at=timezone.now() + dt.timedelta(days=3))
    mail.outbox.clear()
    assert sweep()["reminded"] == 1
    assert sweep()["reminded"] == 0
    assert len(mail.outbox) == 1 and "alice@example.test" in mail.outbox[0].to and "expires" in mail.outbox[0].subject
    assert AuditEvent.objects.filter(action="tenant.expiry_reminded", object_id=str(tenant.pk)).count() == 1


def test_expired_tenants_are_decommissioned_by_the_sweep(approved, dispatched):
    tenant = services.tenant_mark_ready(tenant=services.tenant_mark_provisioning(tenant=approved), applied_generation=1)
    Tenant.objects.filter(pk=tenant.pk).update(expires_at=timezone.now() - dt.timedelta(minutes=1))
    dispatched.clear()
    assert sweep()["expired"] == 1
    tenant.refresh_from_db()
    assert tenant.status == "decommissioning" and tenant.status_reason == "Expired."
    assert dispatched == [(dispatch.DECOMMISSION, (str(tenant.pk),))]
    event = AuditEvent.objects.get(action="tenant.decommission", object_id=str(tenant.pk))
    assert event.actor is None and event.actor_name == "system"


def test_reconcile_sends_one_pass_per_cluster_with_ready_tenants_and_nothing_else(approved, dispatched):
    assert reconcile() == 0
    tenant = services.tenant_mark_ready(tenant=services.tenant_mark_provisioning(tenant=approved), applied_generation=1)
    dispatched.clear()
    assert reconcile() == 1
    assert dispatched == [(dispatch.RECONCILE_CLUSTER, (str(tenant.cluster_id),))]


def test_a_cluster_whose_tenants_all_diverged_still_gets_its_pass(approved, dispatched):
    """The pass keeps the cluster's orphan namespaces listed while an admin decides (after a restore)."""
    tenant = services.tenant_mark_ready(tenant=services.tenant_mark_provisioning(tenant=approved), applied_generation=1)
    services.tenant_mark_diverged(tenant=tenant, reason="Namespace gone.")
    dispatched.clear()
    assert reconcile() == 1
    assert dispatched == [(dispatch.RECONCILE_CLUSTER, (str(tenant.cluster_id),))]


def test_a_job_for_a_tenant_another_worker_holds_is_retried_not_dropped(approved, monkeypatch):
    from celery.exceptions import Retry

    from worker import provisioning, tasks

    monkeypatch.setattr(provisioning, "decommission", lambda tenant_id: provisioning.Progress(Outcome.LOCKED))
    with pytest.raises(Retry):
        tasks.decommission_tenant.apply(args=(str(approved.pk),), throw=True)


def _database_error(error_class: type[Exception], cause: Exception) -> Exception:
    error = error_class(str(cause))
    error.__cause__ = cause
    return error


def test_a_job_whose_database_went_away_is_retried_not_dropped(approved, monkeypatch):
    """PostgreSQL restarting under a provisioning job (tests/chaos): the job comes back with backoff instead of
    failing and waiting for the sweep."""
    import psycopg
    from celery.exceptions import Retry
    from django.db import OperationalError

    from worker import provisioning, tasks

    def away(tenant_id: str, applied_generation: int | None = None) -> provisioning.Progress:
        raise _database_error(OperationalError, psycopg.errors.AdminShutdown("terminating connection"))

    monkeypatch.setattr(provisioning, "provision", away)
    with pytest.raises(Retry):
        tasks.provision_tenant.apply(args=(str(approved.pk),), throw=True)


def test_a_jobs_own_database_error_is_raised_as_it_is(approved, monkeypatch):
    import psycopg
    from django.db import IntegrityError

    from worker import provisioning, tasks

    def refused(tenant_id: str) -> provisioning.Progress:
        raise _database_error(IntegrityError, psycopg.errors.UniqueViolation("duplicate key"))

    monkeypatch.setattr(provisioning, "decommission", refused)
    with pytest.raises(IntegrityError):
        tasks.decommission_tenant.apply(args=(str(approved.pk),), throw=True)
