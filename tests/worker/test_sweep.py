"""The periodic sweep: re-sends lost work, reminds owners before expiry, decommissions expired tenants."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core import mail
from django.db import connection
from django.utils import timezone

from tenants import dispatch, services
from tenants.models import AuditEvent, Tenant, TenantRequest
from tenants.services.page_changes import HORIZON
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


def test_a_job_for_a_tenant_another_worker_holds_is_retried_not_dropped(approved, monkeypatch):
    from celery.exceptions import Retry

    from worker import provisioning, tasks

    monkeypatch.setattr(provisioning, "decommission", lambda tenant_id: provisioning.Progress(Outcome.LOCKED))
    with pytest.raises(Retry):
        tasks.decommission_tenant.apply(args=(str(approved.pk),), throw=True)


def test_the_sweep_prunes_the_page_change_log_of_transactions_ended_by_a_horizon_over_an_hour_old(approved):
    def rows() -> list[tuple[int, int]]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT scope, xid::text::bigint FROM berth_page_change WHERE scope IN (-424242, -424243)")
            return sorted(cursor.fetchall())

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_xact_id()::text::bigint")  # this test's own transaction: not ended
        (ours,) = cursor.fetchone()
        # Begun two days ago, ended before a horizon recorded 90 minutes ago: it may go. Begun as long ago but
        # ended later (its id is above the horizon, as if it committed a moment ago): it stays.
        cursor.execute(
            "INSERT INTO berth_page_change (scope, xid, at) VALUES"
            " (%s, %s::text::xid8, now() - interval '90 minutes'),"
            " (-424242, '3'::xid8, now() - interval '2 days'),"
            " (-424243, %s::text::xid8, now() - interval '2 days')",
            [HORIZON, ours - 1, ours - 1],
        )
    assert sweep()["page_changes_pruned"] >= 1
    assert rows() == [(-424243, ours - 1)]
    with connection.cursor() as cursor:
        # The horizon it used stays (the next sweep may use it again); it recorded one now.
        cursor.execute(
            "SELECT count(*) FILTER (WHERE xid = %s::text::xid8),"
            " count(*) FILTER (WHERE at > now() - interval '1 hour') FROM berth_page_change WHERE scope = %s",
            [ours - 1, HORIZON],
        )
        assert cursor.fetchone() == (1, 1)
