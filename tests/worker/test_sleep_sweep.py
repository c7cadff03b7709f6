"""The periodic sweep and sleep: schedules and idle periods are applied, and a sleep or wake whose job was lost
(the broker was down) is sent again."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from tenants import dispatch, services
from tenants.models import Tenant
from worker.tasks import sweep

# The sweep's window depends on the provision queue's depth, read from this run's Redis: empty for each test here.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("empty_provision_queue")]


@pytest.fixture
def asleep(ready_tenant_row, medium, alice, dispatched) -> Tenant:
    medium.sleep_allowed = True
    medium.save()
    tenant = services.tenant_sleep(tenant=ready_tenant_row("nap"), actor=alice)
    dispatched.clear()
    return tenant


def test_a_lost_sleep_job_is_sent_again_but_not_a_fresh_one(asleep, dispatched, settings):
    settings.BERTH_STUCK_AFTER_SECONDS = 90
    sweep()
    assert (dispatch.APPLY_SLEEP, (str(asleep.pk),)) not in dispatched
    Tenant.objects.filter(pk=asleep.pk).update(asleep_since=timezone.now() - dt.timedelta(minutes=5))
    sweep()
    assert (dispatch.APPLY_SLEEP, (str(asleep.pk),)) in dispatched
    dispatched.clear()
    sweep()  # sent again a minute later: once per window, not per sweep
    assert (dispatch.APPLY_SLEEP, (str(asleep.pk),)) not in dispatched


def test_an_applied_sleep_is_left_alone(asleep, dispatched):
    services.tenant_record_sleep_applied(tenant=asleep, sleeping=True)
    Tenant.objects.filter(pk=asleep.pk).update(asleep_since=timezone.now() - dt.timedelta(hours=5))
    sweep()
    assert (dispatch.APPLY_SLEEP, (str(asleep.pk),)) not in dispatched


def test_the_sweep_applies_a_schedule_whose_window_is_now(ready_tenant_row, medium, dispatched):
    medium.sleep_allowed = True
    medium.save()
    tenant = ready_tenant_row("night")
    now = timezone.now()
    start, end = (now - dt.timedelta(hours=1)).time(), (now + dt.timedelta(hours=1)).time()
    Tenant.objects.filter(pk=tenant.pk).update(sleep_schedule_start=start, sleep_schedule_end=end)
    assert sweep()["sleep"] == 1
    slept = Tenant.objects.get(pk=tenant.pk)
    assert slept.sleeping and slept.sleep_reason == "schedule"
    assert (dispatch.APPLY_SLEEP, (str(tenant.pk),)) in dispatched
    assert sweep()["sleep"] == 0  # the same window: nothing more to do
