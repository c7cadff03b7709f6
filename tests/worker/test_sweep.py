"""The periodic sweep: re-sends lost work, reminds owners before expiry, decommissions expired tenants."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core import mail
from django.utils import timezone

from tenants import dispatch, services
from tenants.models import AuditEvent, Tenant, TenantRequest
from worker.provisioning import Outcome
from worker.tasks import reconcile, sweep

pytestmark = pytest.mark.django_db(transaction=True)


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
