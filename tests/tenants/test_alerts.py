"""Alertmanager's webhook into Berth: parsing (pure), and the receiver recording each alert once and telling the
owning team once per transition (real PostgreSQL, the real view through Django's test client)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.core import mail
from django.utils import timezone

from tenants import alert_rules, alerts, services
from tenants.models import AuditEvent, Cluster, Tenant, TenantAlert, WebhookDelivery
from tenants.services import webhooks as webhook_services

TOKEN = "am-token-" + "t" * 32
URL = "/hooks/alertmanager/"
START = "2026-11-28T21:00:00.123456789Z"


def alert(namespace: str, *, status: str = "firing", fingerprint: str = "a1b2c3d4e5f60718", **labels) -> dict:
    return {
        "status": status,
        "labels": {"alertname": "BerthTenantCrashLooping", "namespace": namespace, "severity": "warning", **labels},
        "annotations": {"summary": f"A container restarts over and over in {namespace}."},
        "startsAt": START,
        "endsAt": "2026-11-28T21:30:00Z" if status == "resolved" else "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus/graph",
        "fingerprint": fingerprint,
    }


def webhook(*items: dict) -> dict:
    return {"version": "4", "status": "firing", "receiver": "berth", "groupKey": "{}:{}", "alerts": list(items)}


@pytest.fixture
def post(client, settings):
    settings.BERTH_ALERTMANAGER_TOKEN = TOKEN
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    mail.outbox.clear()

    def send(body, *, token: str | None = TOKEN):
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token is not None else {}
        return client.post(URL, data=data, content_type="application/json", **headers)

    return send


# --- Parsing ----------------------------------------------------------------------------------------------------


def test_a_v4_body_parses_with_nanosecond_times_and_go_zero_end():
    (parsed,) = alerts.parse(json.dumps(webhook(alert("team-a-web"))).encode())
    assert parsed.namespace == "team-a-web"
    assert parsed.name == "BerthTenantCrashLooping"
    assert parsed.starts_at.isoformat() == "2026-11-28T21:00:00.123456+00:00"
    assert parsed.ends_at is None


@pytest.mark.parametrize(
    "body, message",
    [
        (b"\xff\xfe", "not JSON"),
        (b"[]", "JSON object"),
        (json.dumps({"version": "3", "alerts": []}).encode(), 'version "4"'),
        (json.dumps({"version": "4", "alerts": {}}).encode(), '"alerts" must be a list'),
        (json.dumps(webhook({**alert("x"), "status": "pending"})).encode(), "alerts[0].status"),
        (json.dumps(webhook({**alert("x"), "fingerprint": "../etc"})).encode(), "alerts[0].fingerprint"),
        (json.dumps(webhook({**alert("x"), "startsAt": "yesterday"})).encode(), "alerts[0].startsAt"),
        (json.dumps(webhook({**alert("x"), "labels": {"a": 1}})).encode(), "alerts[0].labels"),
        (json.dumps(webhook({**alert("x"), "labels": {"a": "\u0000"}})).encode(), "NUL"),
        (json.dumps(webhook({**alert("x"), "labels": {"a": "\ud800"}})).encode(), "lone surrogates"),
        (json.dumps(webhook({**alert("x"), "labels": {"\udfff": "a"}})).encode(), "lone surrogates"),
        (json.dumps(webhook({**alert("x"), "annotations": {"summary": "ok \udc00"}})).encode(), "lone surrogates"),
        (json.dumps(webhook(*[alert("x")] * (alerts.MAX_ALERTS + 1))).encode(), "more than"),
        (b"[" * 100_000, "not JSON"),
        (b" " * (alerts.MAX_BODY + 1), "larger than"),
    ],
)
def test_hostile_bodies_are_refused_with_a_reason(body, message):
    with pytest.raises(alerts.PayloadError, match=message.replace("[", r"\[").replace("]", r"\]")):
        alerts.parse(body)


# --- The receiver -----------------------------------------------------------------------------------------------


def test_a_firing_alert_is_recorded_audited_and_told_to_the_team_once(
    post, ready_tenant_row, alice, django_capture_on_commit_callbacks
):
    tenant = ready_tenant_row("team-a-web")
    with django_capture_on_commit_callbacks(execute=True):
        first = post(webhook(alert("team-a-web", pod="web-1", container="app")))
        for _ in range(3):  # Alertmanager's repeat_interval and its retries
            again = post(webhook(alert("team-a-web", pod="web-1", container="app")))
    assert first.status_code == 200 and first.json() == {"received": {"fired": 1}}
    assert again.json() == {"received": {"repeated": 1}}
    (row,) = TenantAlert.objects.filter(tenant=tenant)
    assert (row.status, row.name, row.severity, row.labels["pod"]) == (
        "firing",
        "BerthTenantCrashLooping",
        "warning",
        "web-1",
    )
    assert row.notified_at is not None and row.suppressed_reason == ""
    assert [m.subject for m in mail.outbox] == ["[Berth] BerthTenantCrashLooping fires on team-a-web"]
    assert mail.outbox[0].to == [alice.email]
    (event,) = AuditEvent.objects.filter(action="tenant.alert_firing")
    assert (event.object_id, event.team_id, event.actor_name) == (str(tenant.pk), tenant.team_id, "alertmanager")


def test_resolving_tells_the_team_once_more_and_a_late_firing_retry_changes_nothing(
    post, ready_tenant_row, django_capture_on_commit_callbacks
):
    tenant = ready_tenant_row("team-a-web")
    with django_capture_on_commit_callbacks(execute=True):
        post(webhook(alert("team-a-web")))
        resolved = post(webhook(alert("team-a-web", status="resolved")))
        post(webhook(alert("team-a-web", status="resolved")))
        late = post(webhook(alert("team-a-web")))
    assert resolved.json() == {"received": {"resolved": 1}}
    assert late.json() == {"received": {"repeated": 1}}
    row = TenantAlert.objects.get(tenant=tenant)
    assert row.status == "resolved" and row.ends_at.isoformat() == "2026-11-28T21:30:00+00:00"
    assert [m.subject for m in mail.outbox] == [
        "[Berth] BerthTenantCrashLooping fires on team-a-web",
        "[Berth] BerthTenantCrashLooping resolved on team-a-web",
    ]
    assert AuditEvent.objects.filter(action__startswith="tenant.alert_").count() == 2


def test_the_same_alert_firing_again_later_is_a_new_alert(post, ready_tenant_row, django_capture_on_commit_callbacks):
    tenant = ready_tenant_row("team-a-web")
    with django_capture_on_commit_callbacks(execute=True):
        post(webhook(alert("team-a-web")))
        post(webhook(alert("team-a-web", status="resolved")))
        post(webhook({**alert("team-a-web"), "startsAt": "2026-11-28T23:00:00Z"}))
    assert TenantAlert.objects.filter(tenant=tenant).count() == 2
    assert len(mail.outbox) == 3


def test_alerts_of_namespaces_berth_does_not_manage_are_counted_and_dropped(post, ready_tenant_row):
    ready_tenant_row("team-a-web")
    answer = post(webhook(alert("kube-system"), alert("team-a-web", fingerprint="ff")))
    assert answer.json() == {"received": {"unknown_namespace": 1, "fired": 1}}
    assert TenantAlert.objects.count() == 1


def test_a_sleeping_tenants_alert_is_recorded_suppressed_and_told_once_it_is_awake(
    post, ready_tenant_row, django_capture_on_commit_callbacks
):
    tenant = ready_tenant_row("team-a-web")
    type(tenant).objects.filter(pk=tenant.pk).update(sleeping=True)
    with django_capture_on_commit_callbacks(execute=True):
        asleep = post(webhook(alert("team-a-web")))
    assert asleep.json() == {"received": {"suppressed": 1}}
    row = TenantAlert.objects.get(tenant=tenant)
    assert (row.status, row.notified_at, row.suppressed_reason) == ("firing", None, "asleep")
    assert mail.outbox == []
    assert AuditEvent.objects.get(action="tenant.alert_firing").after["suppressed"] == "asleep"
    type(tenant).objects.filter(pk=tenant.pk).update(sleeping=False)
    with django_capture_on_commit_callbacks(execute=True):
        awake = post(webhook(alert("team-a-web")))
    assert awake.json() == {"received": {"fired": 1}}
    assert len(mail.outbox) == 1


def test_a_resolved_alert_never_told_as_firing_is_recorded_but_not_sent(
    post, ready_tenant_row, django_capture_on_commit_callbacks
):
    tenant = ready_tenant_row("team-a-web")
    with django_capture_on_commit_callbacks(execute=True):
        post(webhook(alert("team-a-web", status="resolved")))
    assert TenantAlert.objects.get(tenant=tenant).status == "resolved"
    assert mail.outbox == []


def test_alert_events_go_to_subscribed_webhooks_of_the_team(
    post, ready_tenant_row, dave, team_a, team_b, receiver, dispatched, django_capture_on_commit_callbacks
):

    ready_tenant_row("team-a-web")
    url = receiver().url()
    events = ["tenant.alert_firing", "tenant.alert_resolved"]
    for_a, _ = services.webhook_endpoint_create(actor=dave, name="a", url=url, events=events, team=team_a)
    services.webhook_endpoint_create(actor=dave, name="b", url=url, events=events, team=team_b)
    with django_capture_on_commit_callbacks(execute=True):
        post(webhook(alert("team-a-web")))
        post(webhook(alert("team-a-web")))
        post(webhook(alert("team-a-web", status="resolved")))
    made = list(WebhookDelivery.objects.order_by("sequence"))
    assert [(d.endpoint_id, d.event) for d in made] == [
        (for_a.pk, "tenant.alert_firing"),
        (for_a.pk, "tenant.alert_resolved"),
    ]
    assert made[0].payload["data"]["alert"]["name"] == "BerthTenantCrashLooping"
    assert set(events) <= set(webhook_services.SUBSCRIBABLE)


def test_the_receiver_is_404_until_a_token_is_set(client, settings):
    settings.BERTH_ALERTMANAGER_TOKEN = ""
    answer = client.post(URL, data="{}", content_type="application/json", HTTP_AUTHORIZATION="Bearer ")
    assert answer.status_code == 404


# --- Reading them: the API and the tenant page ------------------------------------------------------------------


def _fired_and_resolved(post, tenant_name: str) -> None:
    post(webhook(alert(tenant_name, fingerprint="aa", pod="web-1")))
    post(webhook(alert(tenant_name, fingerprint="bb", pod="web-2")))
    post(webhook(alert(tenant_name, fingerprint="bb", status="resolved", pod="web-2")))


def test_the_api_lists_firing_and_resolved_alerts_exactly(post, ready_tenant_row, alice, api_token, client):
    tenant = ready_tenant_row("team-a-web")
    _fired_and_resolved(post, "team-a-web")
    answer = client.get(f"/api/v1/tenants/{tenant.pk}/alerts/", HTTP_AUTHORIZATION=f"Token {api_token(alice)}")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    firing = TenantAlert.objects.get(fingerprint="aa")
    assert body["firing"] == [
        {
            "id": firing.pk,
            "name": "BerthTenantCrashLooping",
            "status": "firing",
            "severity": "warning",
            "summary": "A container of pod web-1 keeps restarting (crash loop).",  # Berth's words, not the annotation
            "labels": {
                "alertname": "BerthTenantCrashLooping",
                "namespace": "team-a-web",
                "severity": "warning",
                "pod": "web-1",
            },
            "starts_at": "2026-11-28T21:00:00.123456Z",
            "ends_at": None,
            "notified": True,
            "suppressed_reason": "",
        }
    ]
    assert [(a["status"], a["labels"]["pod"], a["ends_at"]) for a in body["resolved"]] == [
        ("resolved", "web-2", "2026-11-28T21:30:00Z")
    ]


def test_bob_cannot_see_alices_tenants_alerts(post, ready_tenant_row, bob, api_token, client):
    tenant = ready_tenant_row("team-a-web")
    _fired_and_resolved(post, "team-a-web")
    answer = client.get(f"/api/v1/tenants/{tenant.pk}/alerts/", HTTP_AUTHORIZATION=f"Token {api_token(bob)}")
    assert answer.status_code == 404


def test_the_tenant_page_shows_firing_and_recent_alerts_or_says_there_are_none(
    post, ready_tenant_row, alice, client, django_assert_num_queries, django_assert_max_num_queries
):
    tenant = ready_tenant_row("team-a-web")
    client.force_login(alice)
    empty = client.get(f"/tenants/{tenant.pk}/").content.decode()
    assert "No alert is firing." in empty
    _fired_and_resolved(post, "team-a-web")
    page = client.get(f"/tenants/{tenant.pk}/").content.decode()
    assert "No alert is firing." not in page
    assert "A container of pod web-1 keeps restarting (crash loop)." in page
    assert "firing since" in page and "Recently resolved" in page
    with django_assert_max_num_queries(40) as few:
        client.get(f"/tenants/{tenant.pk}/")
    with_two = len(few)  # now: the next request clears the connection's query log
    for i in range(6):  # many more alerts, firing and resolved: not one query more
        post(webhook(alert("team-a-web", fingerprint=f"c{i}", pod=f"web-{i}")))
        if i % 2:
            post(webhook(alert("team-a-web", fingerprint=f"c{i}", pod=f"web-{i}", status="resolved")))
    with django_assert_num_queries(with_two):
        many = client.get(f"/tenants/{tenant.pk}/").content.decode()
    assert "web-5" in many


def test_platform_admins_read_alerts_in_the_admin_and_cannot_edit_them(post, ready_tenant_row, dave, client):
    ready_tenant_row("team-a-web")
    post(webhook(alert("team-a-web")))
    client.force_login(dave)
    listing = client.get("/admin/tenants/tenantalert/")
    assert listing.status_code == 200 and "BerthTenantCrashLooping" in listing.content.decode()
    assert client.get("/admin/tenants/tenantalert/add/").status_code == 403


# --- Only Berth's rules, in Berth's words -------------------------------------------------------------------------


def test_an_alert_of_a_rule_that_is_not_berths_notifies_no_one(
    post, ready_tenant_row, django_capture_on_commit_callbacks
):
    ready_tenant_row("team-a-web")
    forged = alert("team-a-web", alertname="PayYourInvoice")
    forged["annotations"] = {"summary": "Your account is locked: sign in at https://evil.example/login"}
    with django_capture_on_commit_callbacks(execute=True):
        answer = post(webhook(forged, alert("team-a-web", fingerprint="ff")))
    assert answer.json() == {"received": {"unknown_rule": 1, "fired": 1}}
    assert list(TenantAlert.objects.values_list("name", flat=True)) == ["BerthTenantCrashLooping"]
    # Even Berth's own rule is told in Berth's words, never the annotation's.
    (sent,) = mail.outbox
    assert "evil.example" not in sent.body and "over and over" not in sent.body
    assert "keeps restarting (crash loop)" in sent.body


def test_berths_summary_names_the_rules_subject_from_its_labels():
    assert alert_rules.summary("BerthTenantOOMKilled", {"pod": "web-1", "container": "app"}) == (
        "Container app of pod web-1 ran out of memory and was killed (OOMKilled)."
    )
    assert alert_rules.summary("BerthTenantQuotaNearlyFull", {"resource": "requests.cpu"}) == (
        "requests.cpu of the quota is nearly used up."
    )
    assert alert_rules.summary("Other", {"pod": "x"}) == ""
    assert alert_rules.ALERT_NAMES == {"BerthTenantQuotaNearlyFull", "BerthTenantCrashLooping", "BerthTenantOOMKilled"}


# --- Which cluster ------------------------------------------------------------------------------------------------


def test_a_quota_alert_goes_to_the_tenant_on_the_cluster_its_gauge_names(
    post, ready_tenant_row, bob, team_b, medium, cluster, django_capture_on_commit_callbacks
):
    """One namespace name on two clusters; the quota rule copies the gauge's cluster into berth_cluster (the rule's
    label wins over the scraping Prometheus's external label, tests/deploy/tenant_alerts_test.yaml)."""
    alices = ready_tenant_row("team-a-web")
    prod = Cluster.objects.create(
        name="prod", display_name="Prod", api_url="https://127.0.0.2:6443", credential_ref="env:NONE",
        public_endpoint="https://prod.example.test:6443", kinds=["namespace"],
    )  # fmt: skip
    bobs = Tenant.objects.create(
        name="team-a-web", namespace="team-a-web", team=team_b, tier=medium, cluster=prod, status="ready",
        created_by=bob,
    )  # fmt: skip
    quota = alert("team-a-web", alertname="BerthTenantQuotaNearlyFull", resource="requests.cpu", cluster="prod")
    with django_capture_on_commit_callbacks(execute=True):
        answer = post(webhook({**quota, "labels": {**quota["labels"], "berth_cluster": "prod"}}))
    assert answer.json() == {"received": {"fired": 1}}
    assert list(TenantAlert.objects.values_list("tenant_id", flat=True)) == [bobs.pk]
    assert [m.to for m in mail.outbox] == [[bob.email]]
    # Without berth_cluster it could be either tenant's: no one's.
    answer = post(webhook({**quota, "fingerprint": "99"}))
    assert answer.json() == {"received": {"unknown_namespace": 1}}
    assert not TenantAlert.objects.filter(tenant=alices).exists()


# --- Resolutions, repeats, expiry ---------------------------------------------------------------------------------


def test_the_resolution_of_a_told_firing_is_told_even_when_the_tenant_fell_asleep_since(
    post, ready_tenant_row, django_capture_on_commit_callbacks
):
    tenant = ready_tenant_row("team-a-web")
    with django_capture_on_commit_callbacks(execute=True):
        post(webhook(alert("team-a-web")))
        Tenant.objects.filter(pk=tenant.pk).update(sleeping=True)
        resolved = post(webhook(alert("team-a-web", status="resolved")))
    assert resolved.json() == {"received": {"resolved": 1}}
    row = TenantAlert.objects.get(tenant=tenant)
    assert (row.status, row.suppressed_reason) == ("resolved", "")
    assert [m.subject for m in mail.outbox] == [
        "[Berth] BerthTenantCrashLooping fires on team-a-web",
        "[Berth] BerthTenantCrashLooping resolved on team-a-web",
    ]


def test_an_ha_peer_moving_the_start_earlier_is_the_same_alert(
    post, ready_tenant_row, django_capture_on_commit_callbacks
):
    tenant = ready_tenant_row("team-a-web")
    with django_capture_on_commit_callbacks(execute=True):
        post(webhook(alert("team-a-web")))
        peer = post(webhook({**alert("team-a-web"), "startsAt": "2026-11-28T20:59:30Z"}))
        resolved = post(webhook({**alert("team-a-web", status="resolved"), "startsAt": "2026-11-28T20:59:30Z"}))
    assert peer.json() == {"received": {"repeated": 1}}
    assert resolved.json() == {"received": {"resolved": 1}}
    assert TenantAlert.objects.filter(tenant=tenant).count() == 1
    assert len(mail.outbox) == 2


def test_a_firing_alert_not_seen_for_the_expiry_is_resolved_as_expired_and_told(
    post, ready_tenant_row, settings, django_capture_on_commit_callbacks
):
    tenant = ready_tenant_row("team-a-web")
    with django_capture_on_commit_callbacks(execute=True):
        post(webhook(alert("team-a-web")))
    row = TenantAlert.objects.get(tenant=tenant)
    first_seen = row.last_seen_at
    post(webhook(alert("team-a-web")))  # a repeat marks it seen
    row.refresh_from_db()
    assert row.last_seen_at > first_seen
    now = timezone.now()
    assert services.alerts_sweep(now=now + dt.timedelta(hours=settings.BERTH_ALERT_EXPIRE_HOURS - 1)) == {
        "expired": 0,
        "pruned": 0,
    }
    with django_capture_on_commit_callbacks(execute=True):
        later = now + dt.timedelta(hours=settings.BERTH_ALERT_EXPIRE_HOURS + 1)
        assert services.alerts_sweep(now=later) == {"expired": 1, "pruned": 0}
    row.refresh_from_db()
    assert row.ends_at is not None and (row.status, row.ends_at) == ("resolved", row.last_seen_at)
    assert mail.outbox[-1].subject == "[Berth] BerthTenantCrashLooping expired on team-a-web"
    assert "stopped reporting it" in mail.outbox[-1].body
    assert AuditEvent.objects.get(action="tenant.alert_resolved").after["expired"] is True
    # Kept BERTH_ALERT_LOG_DAYS after it ended, then deleted.
    kept = row.ends_at + dt.timedelta(days=settings.BERTH_ALERT_LOG_DAYS - 1)
    assert services.alerts_sweep(now=kept) == {"expired": 0, "pruned": 0}
    gone = row.ends_at + dt.timedelta(days=settings.BERTH_ALERT_LOG_DAYS + 1)
    assert services.alerts_sweep(now=gone) == {"expired": 0, "pruned": 1}
    assert not TenantAlert.objects.exists()


def test_the_periodic_sweep_expires_alerts(post, ready_tenant_row, settings, dispatched):
    from worker import tasks

    tenant = ready_tenant_row("team-a-web")
    post(webhook(alert("team-a-web")))
    stale = timezone.now() - dt.timedelta(hours=settings.BERTH_ALERT_EXPIRE_HOURS + 1)
    TenantAlert.objects.filter(tenant=tenant).update(last_seen_at=stale)
    assert tasks.sweep()["alerts_expired"] == 1
    assert TenantAlert.objects.get(tenant=tenant).status == "resolved"
