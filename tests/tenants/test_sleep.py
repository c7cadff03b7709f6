"""Sleep and wake in the portal: who may, when the schedule and the idle period act, audit, notifications,
sleep periods, the budget, and the API's answers (tenants.services.sleep, tenants.api.tenants)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.core import mail
from django.core.exceptions import ValidationError

from tenants import dispatch, selectors, services
from tenants.errors import Forbidden, InvalidTransition
from tenants.models import AuditEvent, Team, Tenant, TenantSleepPeriod, Tier, WebhookDelivery
from tenants.services.sleep import schedule_window
from tests.tenants.conftest import CTX

pytestmark = pytest.mark.django_db
API = "/api/v1/tenants"
UTC = dt.UTC


@pytest.fixture
def sleepy(medium: Tier) -> Tier:
    medium.sleep_allowed = True
    medium.save()
    return medium


@pytest.fixture
def tenant(ready_tenant, sleepy) -> Tenant:
    return ready_tenant(name="web")


def _at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


# --- owner action ---------------------------------------------------------------------------------------------------


def test_alice_puts_her_tenant_to_sleep_and_wakes_it(tenant, alice, dispatched, django_capture_on_commit_callbacks):
    mail.outbox.clear()
    dispatched.clear()
    with django_capture_on_commit_callbacks(execute=True):
        slept = services.tenant_sleep(tenant=tenant, actor=alice, ctx=CTX)
    assert slept.sleeping and not slept.sleep_applied and slept.sleep_reason == "owner"
    assert services.sleep_state(slept) == "falling_asleep"
    period = TenantSleepPeriod.objects.get(tenant=tenant)
    assert period.reason == "owner" and period.ended_at is None
    assert (dispatch.APPLY_SLEEP, (str(tenant.pk),)) in dispatched
    event = AuditEvent.objects.get(action="tenant.slept", object_id=str(tenant.pk))
    assert event.actor == alice and event.after["reason"] == "owner" and event.request_id == CTX.request_id
    assert event.before == {"sleeping": False, "sleep_reason": None}

    services.tenant_record_sleep_applied(tenant=slept, sleeping=True)
    slept.refresh_from_db()
    assert services.sleep_state(slept) == "asleep"

    with django_capture_on_commit_callbacks(execute=True):
        woke = services.tenant_wake(tenant=slept, actor=alice, ctx=CTX)
    assert not woke.sleeping and services.sleep_state(woke) == "waking" and woke.last_activity_at is not None
    period.refresh_from_db()
    assert period.ended_at is not None and period.ended_at >= period.started_at
    event = AuditEvent.objects.get(action="tenant.woke", object_id=str(tenant.pk))
    assert event.after == {"sleeping": False, "sleep_reason": None, "reason": "owner", "slept_for": "owner"}
    assert [d[0] for d in dispatched].count(dispatch.APPLY_SLEEP) == 2
    subjects = [m.subject for m in mail.outbox]
    assert any("web is going to sleep" in s for s in subjects) and any("web is waking up" in s for s in subjects)


def test_each_sleep_and_wake_is_a_webhook_event(tenant, alice, dave, receiver):
    endpoint, _ = services.webhook_endpoint_create(
        actor=dave, name="hook", url=receiver().url(), events=["tenant.slept", "tenant.woke"]
    )
    services.tenant_sleep(tenant=tenant, actor=alice)
    services.tenant_wake(tenant=Tenant.objects.get(pk=tenant.pk), actor=alice)
    events = list(
        WebhookDelivery.objects.filter(endpoint=endpoint).order_by("sequence").values_list("event", flat=True)
    )
    assert events == ["tenant.slept", "tenant.woke"]


def test_a_member_a_viewer_and_another_team_cannot_sleep_it(tenant, amir, vera, bob):
    for user in (amir, vera, bob):
        with pytest.raises(Forbidden):
            services.tenant_sleep(tenant=tenant, actor=user)
    assert not Tenant.objects.get(pk=tenant.pk).sleeping
    assert not TenantSleepPeriod.objects.exists()


def test_a_platform_admin_may(tenant, dave):
    assert services.tenant_sleep(tenant=tenant, actor=dave).sleeping


def test_sleeping_twice_or_waking_an_awake_tenant_is_refused(tenant, alice):
    services.tenant_sleep(tenant=tenant, actor=alice)
    with pytest.raises(InvalidTransition, match="already asleep"):
        services.tenant_sleep(tenant=Tenant.objects.get(pk=tenant.pk), actor=alice)
    services.tenant_wake(tenant=Tenant.objects.get(pk=tenant.pk), actor=alice)
    with pytest.raises(InvalidTransition, match="not asleep"):
        services.tenant_wake(tenant=Tenant.objects.get(pk=tenant.pk), actor=alice)
    assert TenantSleepPeriod.objects.filter(tenant=tenant).count() == 1


def test_a_tier_without_sleep_refuses_it(ready_tenant, alice, small):
    tenant = ready_tenant(name="ci", tier=small)
    with pytest.raises(InvalidTransition, match="does not allow sleeping"):
        services.tenant_sleep(tenant=tenant, actor=alice)


def test_a_kind_without_workloads_is_refused_with_the_reason(make_tenant, alice, team_a, sleepy):
    tenant = make_tenant(team=team_a, created_by=alice, kind="kcp", tier=sleepy)
    with pytest.raises(InvalidTransition, match="run no pods, so there is nothing to put to sleep"):
        services.tenant_sleep(tenant=tenant, actor=alice)


def test_a_vcluster_tenant_sleeps_like_a_namespace(make_tenant, alice, team_a, sleepy, dispatched):
    # The worker scales its workloads inside, then its control plane (tests/worker/backends/test_vcluster_real.py).
    tenant = make_tenant(team=team_a, created_by=alice, kind="vcluster", tier=sleepy)
    services.tenant_sleep(tenant=tenant, actor=alice)
    tenant.refresh_from_db()
    assert tenant.sleeping and not tenant.sleep_applied


def test_only_ready_tenants_sleep(make_tenant, alice, team_a, sleepy):
    tenant = make_tenant(team=team_a, created_by=alice, status="provisioning", tier=sleepy)
    with pytest.raises(InvalidTransition, match="Only ready tenants"):
        services.tenant_sleep(tenant=tenant, actor=alice)


def test_the_worker_report_of_an_outdated_state_is_ignored(tenant, alice):
    slept = services.tenant_sleep(tenant=tenant, actor=alice)
    services.tenant_wake(tenant=slept, actor=alice)
    # The sleep pass finishes after the wake: it must not say the tenant is in the state Berth wants.
    assert not services.tenant_record_sleep_applied(tenant=slept, sleeping=True)
    assert services.sleep_state(Tenant.objects.get(pk=tenant.pk)) == "waking"


def test_a_deleted_tenant_sleeps_no_more(tenant, alice):
    services.tenant_sleep(tenant=tenant, actor=alice)
    services.tenant_decommission(tenant=Tenant.objects.get(pk=tenant.pk), actor=alice)
    services.tenant_mark_deleted(tenant=Tenant.objects.get(pk=tenant.pk))
    assert TenantSleepPeriod.objects.get(tenant=tenant).ended_at is not None


# --- budget ---------------------------------------------------------------------------------------------------------


def test_a_sleeping_tenant_counts_fully_by_default(tenant, alice, team_a):
    before = selectors.team_allocation(team=team_a)
    services.tenant_sleep(tenant=tenant, actor=alice)
    assert selectors.team_allocation(team=team_a) == before


def test_a_tier_that_frees_cpu_and_memory_while_asleep(tenant, alice, team_a, sleepy):
    sleepy.sleep_budget = "none"
    sleepy.save()
    before = selectors.team_allocation(team=team_a)
    services.tenant_sleep(tenant=tenant, actor=alice)
    during = selectors.team_allocation(team=team_a)
    assert (during.cpu_millis, during.memory_mib) == (0, 0)
    assert (during.storage_gib, during.tenants) == (before.storage_gib, before.tenants)
    listed = selectors.team_budget(team=selectors.with_allocation(Team.objects.filter(pk=team_a.pk)).get())
    assert listed["cpu_millis"]["used"] == 0


def test_waking_is_refused_when_the_freed_budget_was_taken(tenant, alice, team_a, sleepy):
    sleepy.sleep_budget = "none"
    sleepy.save()
    services.tenant_sleep(tenant=tenant, actor=alice)
    Team.objects.filter(pk=team_a.pk).update(budget_cpu_millis=sleepy.cpu_limit_millis - 1)
    with pytest.raises(InvalidTransition, match="Cannot wake.*budget"):
        services.tenant_wake(tenant=Tenant.objects.get(pk=tenant.pk), actor=alice)
    assert Tenant.objects.get(pk=tenant.pk).sleeping


# --- schedule --------------------------------------------------------------------------------------------------------


def test_team_time_zone_is_validated(team_a):
    team_a.time_zone = "Mars/Olympus_Mons"
    with pytest.raises(ValidationError, match="Unknown time zone"):
        team_a.full_clean()
    team_a.time_zone = "Europe/Berlin"
    team_a.full_clean()


def _schedule(tenant, *, start=None, end=None, weekends=False, zone="UTC") -> Tenant:
    Team.objects.filter(pk=tenant.team_id).update(time_zone=zone)
    Tenant.objects.filter(pk=tenant.pk).update(
        sleep_schedule_start=start, sleep_schedule_end=end, sleep_weekends=weekends
    )
    return Tenant.objects.select_related("team", "tier").get(pk=tenant.pk)


def test_a_nightly_window_in_the_teams_time_zone(tenant):
    # 19:00 to 07:00 in Berlin (UTC+1 in November): 18:00 to 06:00 UTC.
    t = _schedule(tenant, start=dt.time(19), end=dt.time(7), zone="Europe/Berlin")
    assert schedule_window(t, now=_at("2026-11-24T17:59:00+00:00")) is None  # Tuesday
    assert schedule_window(t, now=_at("2026-11-24T18:00:00+00:00")) == _at("2026-11-24T18:00:00+00:00")
    assert schedule_window(t, now=_at("2026-11-25T05:59:00+00:00")) == _at("2026-11-24T18:00:00+00:00")
    assert schedule_window(t, now=_at("2026-11-25T06:00:00+00:00")) is None


def test_nights_and_weekends_make_one_window_from_friday_evening(tenant):
    t = _schedule(tenant, start=dt.time(19), end=dt.time(7), weekends=True, zone="America/New_York")
    friday_evening = _at("2026-11-28T00:00:00+00:00")  # Friday 19:00 in New York (UTC-5)
    assert schedule_window(t, now=_at("2026-11-29T12:00:00+00:00")) == friday_evening  # Sunday
    assert schedule_window(t, now=_at("2026-11-30T11:59:00+00:00")) == friday_evening  # Monday 06:59 local
    assert schedule_window(t, now=_at("2026-11-30T12:00:00+00:00")) is None  # Monday 07:00 local


def test_weekends_only(tenant):
    t = _schedule(tenant, weekends=True)
    assert schedule_window(t, now=_at("2026-11-28T10:00:00+00:00")) == _at("2026-11-28T00:00:00+00:00")
    assert schedule_window(t, now=_at("2026-11-27T23:59:00+00:00")) is None


def test_the_sweep_follows_the_schedule_and_an_owner_may_wake_inside_a_window(tenant, alice):
    _schedule(tenant, start=dt.time(22), end=dt.time(6))
    assert services.tenants_sleep_sweep(now=_at("2026-11-24T21:00:00+00:00"))["slept"] == 0
    assert services.tenants_sleep_sweep(now=_at("2026-11-24T22:01:00+00:00"))["slept"] == 1
    t = Tenant.objects.get(pk=tenant.pk)
    assert t.sleeping and t.sleep_reason == "schedule"
    assert AuditEvent.objects.get(action="tenant.slept").actor_name == "system"
    services.tenant_wake(tenant=t, actor=alice)
    # Still inside the window the sweep acted on: the owner's wake stands.
    assert services.tenants_sleep_sweep(now=_at("2026-11-24T23:00:00+00:00"))["slept"] == 0
    assert not Tenant.objects.get(pk=tenant.pk).sleeping
    # The next night's window puts it to sleep again; the morning wakes it.
    assert services.tenants_sleep_sweep(now=_at("2026-11-25T22:00:00+00:00"))["slept"] == 1
    assert services.tenants_sleep_sweep(now=_at("2026-11-26T06:00:00+00:00"))["woke"] == 1
    t = Tenant.objects.get(pk=tenant.pk)
    assert not t.sleeping
    reasons = list(TenantSleepPeriod.objects.filter(tenant=tenant).values_list("reason", "ended_at"))
    assert [r for r, _ in reasons] == ["schedule", "schedule"] and all(end for _, end in reasons)


def test_the_schedule_does_not_wake_what_an_owner_put_to_sleep(tenant, alice):
    _schedule(tenant, start=dt.time(22), end=dt.time(6))
    services.tenant_sleep(tenant=tenant, actor=alice, now=_at("2026-11-24T12:00:00+00:00"))
    services.tenants_sleep_sweep(now=_at("2026-11-24T22:30:00+00:00"))
    assert services.tenants_sleep_sweep(now=_at("2026-11-25T07:00:00+00:00"))["woke"] == 0
    t = Tenant.objects.get(pk=tenant.pk)
    assert t.sleeping and t.sleep_reason == "owner"


def test_owners_set_the_schedule_and_bad_ones_are_field_errors(tenant, alice, amir):
    t = services.tenant_set_sleep_schedule(tenant=tenant, actor=alice, start=dt.time(20), end=dt.time(8), weekends=True)
    assert services.schedule_json(t) == {"start": "20:00", "end": "08:00", "weekends": True, "time_zone": "UTC"}
    assert AuditEvent.objects.get(action="tenant.sleep_schedule_set").after["start"] == "20:00"
    with pytest.raises(ValidationError) as err:
        services.tenant_set_sleep_schedule(tenant=tenant, actor=alice, start=dt.time(20), end=None, weekends=False)
    assert "end" in err.value.message_dict
    with pytest.raises(ValidationError) as err:
        services.tenant_set_sleep_schedule(tenant=tenant, actor=alice, start=dt.time(8), end=dt.time(8), weekends=False)
    assert "end" in err.value.message_dict
    with pytest.raises(Forbidden):
        services.tenant_set_sleep_schedule(tenant=tenant, actor=amir, start=None, end=None, weekends=False)


# --- idle ------------------------------------------------------------------------------------------------------------


def test_an_idle_tenant_falls_asleep_and_activity_restarts_the_clock(tenant, alice, sleepy):
    sleepy.sleep_after_idle_hours = 12
    sleepy.save()
    ready_at = Tenant.objects.get(pk=tenant.pk).ready_at
    assert ready_at is not None
    assert services.tenants_sleep_sweep(now=ready_at + dt.timedelta(hours=11))["slept"] == 0
    services.tenant_touch_activity(tenant=tenant, at=ready_at + dt.timedelta(hours=11))
    assert services.tenants_sleep_sweep(now=ready_at + dt.timedelta(hours=13))["slept"] == 0
    assert services.tenants_sleep_sweep(now=ready_at + dt.timedelta(hours=23, minutes=1))["slept"] == 1
    t = Tenant.objects.get(pk=tenant.pk)
    assert t.sleeping and t.sleep_reason == "idle"
    # An idle sleep lasts until someone wakes it; waking restarts the clock.
    woke = services.tenant_wake(tenant=t, actor=alice, now=ready_at + dt.timedelta(hours=30))
    assert woke.last_activity_at == ready_at + dt.timedelta(hours=30)


def test_a_usage_change_and_a_kubeconfig_are_activity(tenant, alice, worker_hooks):
    used = {"hard": {"pods": "20"}, "used": {"pods": "0"}}
    services.tenant_record_usage(tenant=tenant, usage=used)
    assert Tenant.objects.get(pk=tenant.pk).last_activity_at is None  # a first reading is no activity
    t = Tenant.objects.get(pk=tenant.pk)
    services.tenant_record_usage(tenant=t, usage={**used, "used": {"pods": "3"}})
    assert Tenant.objects.get(pk=tenant.pk).last_activity_at is not None
    Tenant.objects.filter(pk=tenant.pk).update(last_activity_at=None)
    services.tenant_issue_kubeconfig(tenant=t, actor=alice)
    assert Tenant.objects.get(pk=tenant.pk).last_activity_at is not None


# --- API -----------------------------------------------------------------------------------------------------------


def test_api_sleep_and_wake_answer_202_with_the_state(api, tenant, alice):
    response = api(alice).post(f"{API}/{tenant.pk}/sleep/")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["sleep_state"] == "falling_asleep" and body["sleep_reason"] == "owner" and body["asleep_since"]
    again = api(alice).post(f"{API}/{tenant.pk}/sleep/")
    assert again.status_code == 409 and "already asleep" in again.json()["detail"]
    woke = api(alice).post(f"{API}/{tenant.pk}/wake/")
    assert woke.status_code == 202 and woke.json()["sleep_state"] == "waking"
    assert woke.json()["sleep_reason"] is None and woke.json()["asleep_since"] is None


def test_api_refusals(api, tenant, amir, bob):
    assert api(amir).post(f"{API}/{tenant.pk}/sleep/").status_code == 403
    assert api(bob).post(f"{API}/{tenant.pk}/sleep/").status_code == 404
    assert api(amir).post(f"{API}/{tenant.pk}/wake/").status_code == 403


def test_api_sleep_on_a_kcp_workspace_is_409_with_why(api, make_tenant, alice, team_a, sleepy):
    tenant = make_tenant(team=team_a, created_by=alice, kind="kcp", tier=sleepy)
    response = api(alice).post(f"{API}/{tenant.pk}/sleep/")
    assert response.status_code == 409 and "kcp" in response.json()["detail"]


def test_api_sleep_schedule(api, tenant, alice):
    url = f"{API}/{tenant.pk}/sleep-schedule/"
    ok = api(alice).post(url, {"nights": {"start": "19:30", "end": "07:00"}, "weekends": True}, format="json")
    assert ok.status_code == 200, ok.content
    assert ok.json()["sleep_schedule"] == {
        "nights": {"start": "19:30", "end": "07:00"},
        "weekends": True,
        "time_zone": "UTC",
    }
    for body, field, text in [
        ({"nights": {"start": "25:00", "end": "07:00"}}, "nights", "start: A time of day as HH:MM"),
        ({"nights": {"start": "7:00", "end": "08:00"}}, "nights", "start: "),
        ({"nights": {"start": 1900, "end": "07:00"}}, "nights", "start: Not a valid string."),
        ({"nights": {"start": "19:00"}}, "nights", "end: This field is required."),
        ({"nights": {"start": "19:00", "end": None}}, "nights", "end: This field may not be null."),
        ({"nights": {"start": "19:00", "end": "19:00"}}, "nights", "end: The end must differ from the start."),
        ({"nights": {"start": "19:00:00+01:00", "end": "07:00"}}, "nights", "start: "),
        ({"nights": {"start": "19:00", "end": "07:00", "tz": "x"}}, "nights", "tz: Unknown field."),
        ({"nights": "19-07"}, "nights", ""),
        ({"weekends": "sometimes"}, "weekends", ""),
        ({"weekends": 0}, "weekends", "Must be a valid boolean."),
        ({"weekends": "true"}, "weekends", ""),
        ({"start": "19:00"}, "start", "Unknown field."),
    ]:
        response = api(alice).post(url, body, format="json")
        assert response.status_code == 400, (body, response.content)
        errors = response.json()
        assert isinstance(errors[field], list) and all(isinstance(m, str) for m in errors[field]), errors
        assert any(m.startswith(text) for m in errors[field]), (body, errors)
    form = api(alice).post(url, "weekends=true", content_type="application/x-www-form-urlencoded")
    assert form.status_code == 415
    cleared = api(alice).post(url, {"nights": None, "weekends": False}, format="json")
    assert cleared.json()["sleep_schedule"] == {"nights": None, "weekends": False, "time_zone": "UTC"}
    Tenant.objects.filter(pk=tenant.pk).update(status="deleted")
    assert api(alice).post(url, {"weekends": False}, format="json").status_code == 409


def test_api_a_schedule_where_the_tier_cannot_sleep_is_409(api, ready_tenant, alice, small):
    tenant = ready_tenant(name="ci", tier=small)
    response = api(alice).post(f"{API}/{tenant.pk}/sleep-schedule/", {"weekends": True}, format="json")
    assert response.status_code == 409 and "does not allow sleeping" in response.json()["detail"]


def test_tenant_serializer_shows_sleep_for_a_tenant_that_never_slept(api, tenant, alice):
    body = api(alice).get(f"{API}/{tenant.pk}/").json()
    assert body["sleep_state"] == "awake" and body["sleep_reason"] is None and body["asleep_since"] is None
    assert body["sleep_schedule"] == {"nights": None, "weekends": False, "time_zone": "UTC"}


def test_schema_documents_sleep_endpoints_exactly(api, erin):
    import yaml

    schema = yaml.safe_load(api(erin).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi").content)
    for verb in ("sleep", "wake"):
        operation = schema["paths"]["/api/v1/tenants/{id}/" + verb + "/"]["post"]
        assert set(operation["responses"]) == {"202", "400", "401", "403", "404", "409", "429", "503"}
        assert operation["responses"]["202"]["content"]["application/json"]["schema"]["$ref"].endswith("/Tenant")
    components = schema["components"]["schemas"]
    tenant = components["Tenant"]["properties"]
    assert tenant["sleep_state"]["allOf"][0]["$ref"].endswith("/SleepStateEnum")
    assert components["SleepStateEnum"]["enum"] == ["awake", "falling_asleep", "asleep", "waking"]
    assert tenant["sleep_reason"]["nullable"] is True
    assert components["SleepReasonEnum"]["enum"] == ["owner", "schedule", "idle"]
    assert tenant["asleep_since"]["nullable"] is True
    schedule = components["SleepScheduleInputRequest"]
    assert schedule["properties"]["nights"]["nullable"] is True and schedule["additionalProperties"] is False
    nights = components["NightsInputRequest"]
    assert nights["required"] == ["end", "start"] and nights["additionalProperties"] is False
    assert nights["properties"]["start"]["pattern"] == "^([01][0-9]|2[0-3]):[0-5][0-9]$"
    assert "nullable" not in nights["properties"]["start"]
    operation = schema["paths"]["/api/v1/tenants/{id}/sleep-schedule/"]["post"]
    assert list(operation["requestBody"]["content"]) == ["application/json"]
    assert set(operation["responses"]) == {"200", "400", "401", "403", "404", "409", "415", "429", "503"}
    output = components["SleepSchedule"]["properties"]
    assert output["nights"]["nullable"] is True


# --- the tenant page ---------------------------------------------------------------------------------------------


def test_page_shows_state_buttons_and_schedule_and_they_work(client, tenant, alice):
    from django.urls import reverse

    client.force_login(alice)
    page = client.get(reverse("tenant-detail", args=[tenant.pk])).content.decode()
    assert 'id="sleep-state"' in page and "Awake" in page and 'id="sleep-now"' in page
    assert "Save schedule" in page and "(times in UTC)" in page
    done = client.post(reverse("tenant-sleep", args=[tenant.pk]), follow=True).content.decode()
    assert "is going to sleep" in done and "Falling asleep" in done and 'id="wake-now"' in done
    saved = client.post(
        reverse("tenant-sleep-schedule", args=[tenant.pk]), {"start": "19:00", "end": "07:00", "weekends": "on"}
    )
    assert saved.status_code == 302
    t = Tenant.objects.get(pk=tenant.pk)
    assert (t.sleep_schedule_start, t.sleep_schedule_end, t.sleep_weekends) == (dt.time(19), dt.time(7), True)
    bad = client.post(reverse("tenant-sleep-schedule", args=[tenant.pk]), {"start": "19:00"}, follow=True)
    assert "Schedule not saved" in bad.content.decode()
    woke = client.post(reverse("tenant-wake", args=[tenant.pk]), follow=True).content.decode()
    assert "is waking up" in woke and "Waking up" in woke


@pytest.mark.parametrize(
    "start, end, saved",
    [
        ("19:00", "07:30", (dt.time(19), dt.time(7, 30))),
        ("1900", " 0730 ", (dt.time(19), dt.time(7, 30))),
        ("7:00 PM", "07:30", None),
        ("24:00", "07:30", None),
    ],
)
def test_schedule_times_are_read_on_the_24_hour_clock_only(client, tenant, alice, start, end, saved):
    from django.urls import reverse

    client.force_login(alice)
    page = client.post(
        reverse("tenant-sleep-schedule", args=[tenant.pk]), {"start": start, "end": end}, follow=True
    ).content.decode()
    t = Tenant.objects.get(pk=tenant.pk)
    if saved is None:
        assert "Schedule not saved: times are HH:MM" in page and t.sleep_schedule_start is None
    else:
        assert (t.sleep_schedule_start, t.sleep_schedule_end) == saved
        widget = re.search(r'<input[^>]*name="start"[^>]*>', page).group(0)
        assert 'type="text"' in widget and 'value="19:00"' in widget and 'inputmode="numeric"' in widget


def test_page_offers_no_buttons_to_a_member_and_refuses_their_post(client, tenant, amir, bob):
    from django.urls import reverse

    client.force_login(amir)
    page = client.get(reverse("tenant-detail", args=[tenant.pk])).content.decode()
    assert 'id="sleep-state"' in page and 'id="sleep-now"' not in page and "Save schedule" not in page
    assert client.post(reverse("tenant-sleep", args=[tenant.pk])).status_code == 403
    client.force_login(bob)
    assert client.post(reverse("tenant-sleep", args=[tenant.pk])).status_code == 404
    assert client.post(reverse("tenant-wake", args=[tenant.pk])).status_code == 404
    assert not Tenant.objects.get(pk=tenant.pk).sleeping


def test_page_says_why_a_kcp_workspace_cannot_sleep(client, make_tenant, alice, team_a, sleepy):
    from django.urls import reverse

    tenant = make_tenant(team=team_a, created_by=alice, kind="kcp", tier=sleepy)
    client.force_login(alice)
    page = client.get(reverse("tenant-detail", args=[tenant.pk])).content.decode()
    assert 'id="sleep-now"' not in page and "nothing to put to sleep" in page


def test_the_sleep_card_polls_while_the_worker_applies_a_change(client, tenant, alice, bob):
    from django.urls import reverse

    client.force_login(alice)
    card = reverse("tenant-sleep-card", args=[tenant.pk])
    assert "hx-get" not in client.get(card).content.decode()
    slept = services.tenant_sleep(tenant=tenant, actor=alice)
    moving = client.get(card).content.decode()
    assert f'hx-get="{card}"' in moving and "Falling asleep" in moving and "updates automatically" in moving
    services.tenant_record_sleep_applied(tenant=slept, sleeping=True)
    settled = client.get(card).content.decode()
    assert "hx-get" not in settled and "Asleep" in settled and 'id="wake-now"' in settled
    client.force_login(bob)
    assert client.get(card).status_code == 404


def test_the_schedule_still_wakes_a_tenant_whose_tier_stopped_allowing_sleep(tenant, sleepy):
    _schedule(tenant, start=dt.time(22), end=dt.time(6))
    services.tenants_sleep_sweep(now=_at("2026-11-24T22:30:00+00:00"))
    Tier.objects.filter(pk=sleepy.pk).update(sleep_allowed=False)
    assert services.tenants_sleep_sweep(now=_at("2026-11-25T06:30:00+00:00"))["woke"] == 1
    assert services.tenants_sleep_sweep(now=_at("2026-11-25T22:30:00+00:00"))["slept"] == 0
    assert not Tenant.objects.get(pk=tenant.pk).sleeping


def test_the_dashboard_marks_a_sleeping_tenant(client, tenant, alice):
    from django.urls import reverse

    client.force_login(alice)
    assert '<span class="badge badge--info">Asleep</span>' not in client.get(reverse("dashboard")).content.decode()
    services.tenant_sleep(tenant=tenant, actor=alice)
    assert '<span class="badge badge--info">Asleep</span>' in client.get(reverse("dashboard")).content.decode()
