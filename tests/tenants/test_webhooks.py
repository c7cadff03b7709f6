"""Webhooks in the portal's process: which deliveries an event makes, endpoints as admins manage them, and
``webhook_deliver`` against real HTTP receivers on 127.0.0.1 (the Celery worker's part is in tests/worker)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import threading
import time

import pytest
from django.core.exceptions import ValidationError
from django.db import connections, transaction
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from tenants import dispatch, services
from tenants.errors import Forbidden
from tenants.models import AuditEvent, Tenant, WebhookDelivery, WebhookEndpoint
from tenants.services import webhooks as webhook_services
from tenants.webhooks import targets
from tests.plugins.webhooks import documented_verifier, tls_receiver_context

ALL_EVENTS = webhook_services.SUBSCRIBABLE


@pytest.fixture
def endpoint(dave, dispatched):
    """``endpoint(url, events=..., team=..., **kw)``: registered by dave (platform admin): (endpoint, secret)."""

    def make(url: str, *, events=ALL_EVENTS, **kwargs):
        kwargs.setdefault("name", f"hook {WebhookEndpoint.objects.count() + 1}")
        return services.webhook_endpoint_create(actor=dave, url=url, events=list(events), **kwargs)

    return make


def deliveries(**filters) -> list[WebhookDelivery]:
    return list(WebhookDelivery.objects.filter(**filters).order_by("sequence", "endpoint_id"))


def make_due(delivery: WebhookDelivery) -> None:
    WebhookDelivery.objects.filter(pk=delivery.pk).update(next_attempt_at=timezone.now())


# --- Which deliveries an event makes ------------------------------------------------------------


def test_an_event_goes_to_its_teams_endpoints_and_the_global_ones_only(
    submit, endpoint, receiver, team_a, team_b, dispatched, django_capture_on_commit_callbacks
):
    url = receiver().url()
    everyone, _ = endpoint(url, events=["request.submitted"])
    for_a, _ = endpoint(url, events=["request.submitted"], team=team_a)
    endpoint(url, events=["request.submitted"], team=team_b)
    endpoint(url, events=["tenant.ready"], team=team_a)
    with django_capture_on_commit_callbacks(execute=True):
        req = submit(name="web")
    made = deliveries()
    assert {d.endpoint_id for d in made} == {everyone.pk, for_a.pk}
    assert all(d.event == "request.submitted" and d.tenant_id == req.tenant_id for d in made)
    assert len({d.event_id for d in made}) == 1  # one event, one id for every endpoint
    assert sorted(args for task, args in dispatched if task == dispatch.DELIVER_WEBHOOK) == sorted(
        (str(d.pk),) for d in made
    )
    payload = made[0].payload
    assert payload["version"] == 1 and payload["type"] == "request.submitted" and payload["sequence"] == 1
    assert payload["team"] == {"slug": "team-a", "name": "Team A"}
    assert payload["data"]["request"]["url"].endswith(f"/requests/{req.pk}/")


def test_an_action_that_rolls_back_owes_no_webhook(submit, endpoint, receiver):
    endpoint(receiver().url())
    with pytest.raises(RuntimeError), transaction.atomic():
        submit(name="web")
        assert WebhookDelivery.objects.count() == 1
        raise RuntimeError("the action fails after its notification")
    assert WebhookDelivery.objects.count() == 0


def test_a_tenants_events_are_numbered_in_the_order_they_happened(submit, carol, endpoint, receiver):
    endpoint(receiver().url())
    req = submit(name="web")
    services.request_approve(tenant_request=req, actor=carol)
    tenant = services.tenant_mark_provisioning(tenant=Tenant.objects.get(pk=req.tenant_id))
    tenant = services.tenant_mark_ready(tenant=tenant, applied_generation=1)
    services.tenant_record_applied(tenant=tenant, generation=1, repaired=["ResourceQuota/web/berth-quota"])
    services.tenant_record_isolation_report(
        tenant=tenant, report={"passed": False, "checks": [{"id": "external-ips", "passed": False}]}
    )
    services.tenant_remind_expiry(tenant=tenant)
    assert [(d.sequence, d.event) for d in deliveries()] == [
        (1, "request.submitted"),
        (2, "request.decided"),
        (3, "tenant.ready"),
        (4, "tenant.drift_repaired"),
        (5, "tenant.isolation_failed"),
        (6, "tenant.expiring"),
    ]
    last = deliveries()[-2].payload
    assert last["data"] == {"failed_checks": ["external-ips"]}


def test_a_passed_isolation_report_or_a_reconcile_without_drift_says_nothing(ready_tenant, endpoint, receiver):
    tenant = ready_tenant(name="web")
    endpoint(receiver().url())
    services.tenant_record_applied(tenant=tenant, generation=1, repaired=[])
    services.tenant_record_isolation_report(tenant=tenant, report={"passed": True, "checks": []})
    assert deliveries() == []


# --- Endpoints ----------------------------------------------------------------------------------


def test_only_platform_admins_register_webhooks(alice, carol, receiver, team_a):
    for actor in (alice, carol):
        with pytest.raises(Forbidden):
            services.webhook_endpoint_create(actor=actor, name="x", url=receiver().url(), events=["tenant.ready"])
    assert not WebhookEndpoint.objects.exists() and not AuditEvent.objects.filter(action="webhook.create").exists()


def test_the_url_and_secret_are_sealed_and_the_audit_trail_shows_only_the_origin(endpoint, receiver, team_a):
    url = receiver().url("/services/T000/B000/PATHSECRET")
    created, secret = endpoint(url, team=team_a)
    assert secret.startswith("whsec_")
    stored = WebhookEndpoint.objects.values().get(pk=created.pk)
    assert "PATHSECRET" not in str(stored) and secret not in str(stored)
    assert stored["url_origin"] == url.split("/services")[0]
    event = AuditEvent.objects.get(action="webhook.create")
    assert event.after["url"] == stored["url_origin"] and event.team_id == team_a.pk
    assert "PATHSECRET" not in str(event.after) and secret not in str(event.after)
    rotated = services.webhook_endpoint_rotate_secret(endpoint=created, actor=created.created_by)
    assert rotated != secret and rotated not in str(AuditEvent.objects.values_list("after", "before"))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"url": "http://169.254.169.254/latest/meta-data/"}, "url"),
        ({"url": "http://127.0.0.2:9/"}, "url"),
        ({"url": "ftp://127.0.0.1/"}, "url"),
        ({"events": []}, "events"),
        ({"events": ["tenant.exploded"]}, "events"),
        ({"events": ["ping"]}, "events"),
        ({"format": "xml"}, "format"),
        ({"name": "  "}, "name"),
        ({"secret": "whsec_short"}, "secret"),
    ],
)
def test_an_endpoint_that_cannot_work_is_refused_by_field_and_nothing_is_kept(dave, receiver, changes, field):
    args = {"name": "hook", "url": receiver().url(), "events": ["tenant.ready"], **changes}
    with pytest.raises(ValidationError) as refused:
        services.webhook_endpoint_create(actor=dave, **args)
    assert field in refused.value.message_dict
    assert not WebhookEndpoint.objects.exists() and not AuditEvent.objects.exists()


def test_taking_away_the_private_allowance_checks_the_stored_url_again(endpoint, monkeypatch, dave):
    monkeypatch.setattr(targets, "resolve", lambda host, port: [ipaddress.ip_address("10.20.30.40")])
    created, _ = endpoint("https://hooks.internal.test/x", allow_private_network=True)
    with pytest.raises(ValidationError) as refused:
        services.webhook_endpoint_update(
            endpoint=created,
            actor=dave,
            name=created.name,
            events=created.events,
            team=None,
            format="json",
            allow_private_network=False,
            is_active=True,
        )
    assert "10.20.30.40 is a private address" in refused.value.message_dict["url"][0]


# --- Delivering (webhook_deliver, in this process) ----------------------------------------------


def test_a_delivery_is_signed_so_the_standard_library_and_the_documented_snippet_verify_it(
    ready_tenant, endpoint, receiver
):
    hooks = receiver()
    _, secret = endpoint(hooks.url(), events=["tenant.ready"])
    tenant = ready_tenant(name="web")
    (delivery,) = deliveries()
    assert services.webhook_deliver(delivery_id=str(delivery.pk)) == "delivered"
    (got,) = hooks.received
    assert Webhook(secret).verify(got.body, got.headers)["tenant"]["id"] == str(tenant.pk)
    event = documented_verifier()(secret, got.headers, got.body)
    assert event["type"] == "tenant.ready" and got.headers["webhook-id"] == event["id"] == str(delivery.event_id)
    assert got.headers["berth-delivery"] == str(delivery.pk) and got.headers["berth-sequence"] == str(event["sequence"])
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.response_code) == ("delivered", 1, 200)
    assert delivery.duration_ms is not None and delivery.finished_at is not None


@pytest.fixture
def slow_retries(settings):
    """Retries a minute apart (the test settings' are quicker than "due" can tell apart)."""
    settings.BERTH_WEBHOOK_RETRY_SECONDS, settings.BERTH_WEBHOOK_RETRY_MAX_SECONDS = 60, 600


def test_a_failed_attempt_is_retried_later_and_given_up_after_the_last(
    ready_tenant, endpoint, receiver, settings, slow_retries
):
    hooks = receiver(respond=lambda got: 500)
    endpoint(hooks.url(), events=["tenant.ready"])
    ready_tenant(name="web")
    (delivery,) = deliveries()
    assert services.webhook_deliver(delivery_id=str(delivery.pk)) == "retrying"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.response_code) == ("pending", 1, 500)
    assert delivery.last_error == "HTTP 500" and delivery.next_attempt_at > timezone.now()
    assert services.webhook_deliver(delivery_id=str(delivery.pk)) == "waiting"  # not before its time
    for _ in range(settings.BERTH_WEBHOOK_MAX_ATTEMPTS - 2):
        make_due(delivery)
        assert services.webhook_deliver(delivery_id=str(delivery.pk)) == "retrying"
    make_due(delivery)
    assert services.webhook_deliver(delivery_id=str(delivery.pk)) == "failed"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("failed", settings.BERTH_WEBHOOK_MAX_ATTEMPTS)
    assert len(hooks.received) == settings.BERTH_WEBHOOK_MAX_ATTEMPTS
    assert len({r.headers["webhook-id"] for r in hooks.received}) == 1


def test_gone_is_not_retried_and_a_redirect_is_not_followed(ready_tenant, endpoint, receiver):
    elsewhere = receiver()
    gone, redirecting = receiver(respond=lambda got: 410), receiver(respond=lambda got: 302)
    endpoint(gone.url(), events=["tenant.ready"])
    endpoint(redirecting.url(), events=["tenant.ready"])
    ready_tenant(name="web")
    first, second = deliveries()
    assert services.webhook_deliver(delivery_id=str(first.pk)) == "failed"
    assert services.webhook_deliver(delivery_id=str(second.pk)) == "retrying"
    second.refresh_from_db()
    assert "redirects are not followed" in second.last_error and elsewhere.received == []


def test_the_next_event_of_a_tenant_waits_for_the_one_before(ready_tenant, endpoint, receiver, slow_retries):
    answers = iter([500, 200, 200])
    hooks = receiver(respond=lambda got: next(answers))
    endpoint(hooks.url(), events=["tenant.ready", "tenant.drift_repaired"])
    tenant = ready_tenant(name="web")
    services.tenant_record_applied(tenant=tenant, generation=1, repaired=["Role/web/berth-tenant"])
    first, second = deliveries()
    assert services.webhook_deliver(delivery_id=str(first.pk)) == "retrying"
    assert services.webhook_deliver(delivery_id=str(second.pk)) == "waiting"  # the first is its pair's head
    assert len(hooks.received) == 1
    make_due(first)
    assert services.webhook_deliver(delivery_id=str(second.pk)) == "delivered"  # delivers the head: the first
    assert services.webhook_deliver(delivery_id=str(second.pk)) == "delivered"
    assert [r.json["sequence"] for r in hooks.received] == [1, 1, 2]


def test_the_connection_goes_to_the_checked_address_and_a_rebound_name_is_refused(
    ready_tenant, endpoint, receiver, monkeypatch, caplog
):
    hooks = receiver()
    answers = {"hooks.example.test": "127.0.0.1"}
    monkeypatch.setattr(targets, "resolve", lambda host, port: [ipaddress.ip_address(answers[host])])
    endpoint(f"http://hooks.example.test:{hooks.port}/in", events=["tenant.ready", "tenant.failed"])
    tenant = ready_tenant(name="web")
    (delivery,) = deliveries()
    assert services.webhook_deliver(delivery_id=str(delivery.pk)) == "delivered"
    assert hooks.received[0].headers["host"] == f"hooks.example.test:{hooks.port}"
    answers["hooks.example.test"] = "127.0.0.2"  # the name now points at another loopback address
    services.tenant_mark_failed(tenant=tenant, reason="drift")
    rebound = deliveries(event="tenant.failed")[0]
    assert services.webhook_deliver(delivery_id=str(rebound.pk)) == "failed"
    rebound.refresh_from_db()
    assert "resolves to an address that is not public" in rebound.last_error and len(hooks.received) == 1
    # The team reads the delivery log: the address the name now points at is in the worker's log only.
    assert "127.0.0.2" not in rebound.last_error and "127.0.0.2 is a loopback address" in caplog.text


def test_https_goes_to_the_checked_address_and_verifies_the_urls_host(
    ready_tenant, endpoint, receiver, monkeypatch, settings, tmp_path
):
    context, ca_file = tls_receiver_context(tmp_path, "hooks.example.test")
    hooks = receiver(tls=context)
    monkeypatch.setattr(targets, "resolve", lambda host, port: [ipaddress.ip_address("127.0.0.1")])
    settings.BERTH_WEBHOOK_CA_BUNDLE = str(ca_file)
    endpoint(hooks.url(host="hooks.example.test"), events=["tenant.ready", "tenant.failed"])
    endpoint(hooks.url(host="other.example.test"), events=["tenant.ready"])  # a name the certificate lacks
    tenant = ready_tenant(name="web")
    right, wrong = deliveries()
    assert services.webhook_deliver(delivery_id=str(right.pk)) == "delivered"
    assert hooks.received[0].headers["host"] == f"hooks.example.test:{hooks.port}"
    assert services.webhook_deliver(delivery_id=str(wrong.pk)) == "retrying"
    wrong.refresh_from_db()
    assert wrong.last_error.startswith("TLS certificate not trusted") and len(hooks.received) == 1
    settings.BERTH_WEBHOOK_CA_BUNDLE = ""  # the system's trust store does not know the test CA
    services.tenant_mark_failed(tenant=tenant, reason="x")
    untrusted = deliveries(event="tenant.failed")[0]
    assert services.webhook_deliver(delivery_id=str(untrusted.pk)) == "retrying"
    untrusted.refresh_from_db()
    assert "certificate" in untrusted.last_error and len(hooks.received) == 1


def test_a_receiver_that_never_answers_or_trickles_is_cut_off_at_the_deadline(
    ready_tenant, endpoint, receiver, settings
):
    settings.BERTH_WEBHOOK_TIMEOUT_SECONDS = 1.0
    trickler = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def trickle() -> None:
        conn, _ = trickler.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        while not stop.wait(0.2):  # a header byte now and then: each read is quick, the answer never ends
            try:
                conn.sendall(b"X")
            except OSError:
                return

    threading.Thread(target=trickle, daemon=True).start()
    endpoint(receiver(hang=True).url(), events=["tenant.ready"])
    endpoint(f"http://127.0.0.1:{trickler.getsockname()[1]}/", events=["tenant.ready"])
    ready_tenant(name="web")
    try:
        for delivery in deliveries():
            started = time.monotonic()
            assert services.webhook_deliver(delivery_id=str(delivery.pk)) == "retrying"
            assert time.monotonic() - started < 3
            delivery.refresh_from_db()
            assert delivery.last_error == "no answer within 1s", delivery.last_error
    finally:
        stop.set()
        trickler.close()


def test_a_disabled_endpoint_gets_nothing(ready_tenant, endpoint, receiver, dave):
    hooks = receiver()
    created, _ = endpoint(hooks.url(), events=["tenant.ready"])
    ready_tenant(name="web")
    WebhookEndpoint.objects.filter(pk=created.pk).update(is_active=False)
    (delivery,) = deliveries()
    assert services.webhook_deliver(delivery_id=str(delivery.pk)) == "failed"
    assert hooks.received == []


def test_when_every_in_flight_slot_is_taken_an_attempt_waits_without_counting(
    ready_tenant, endpoint, receiver, settings
):
    hooks = receiver()
    endpoint(hooks.url(), events=["tenant.ready"])
    ready_tenant(name="web")
    (delivery,) = deliveries()
    holder = connections.create_connection("default")
    try:
        with holder.cursor() as cur:
            for slot in range(settings.BERTH_WEBHOOK_MAX_IN_FLIGHT):
                cur.execute("SELECT pg_advisory_lock(%s, %s)", [webhook_services.SLOT_LOCK, slot])
        assert services.webhook_deliver(delivery_id=str(delivery.pk)) == "throttled"
        delivery.refresh_from_db()
        assert delivery.attempts == 0 and hooks.received == []
    finally:
        holder.close()
    make_due(delivery)
    assert services.webhook_deliver(delivery_id=str(delivery.pk)) == "delivered"


def test_the_sweep_resends_lost_deliveries_and_drops_old_finished_ones(
    ready_tenant, endpoint, receiver, dispatched, settings
):
    endpoint(receiver().url(), events=["tenant.ready", "tenant.failed"])
    tenant = ready_tenant(name="web")
    services.tenant_mark_failed(tenant=tenant, reason="x")
    ready, failed = deliveries()
    long_ago = timezone.now() - dt.timedelta(days=settings.BERTH_WEBHOOK_LOG_DAYS + 1)
    WebhookDelivery.objects.filter(pk=ready.pk).update(status="delivered", finished_at=long_ago)
    WebhookDelivery.objects.filter(pk=failed.pk).update(next_attempt_at=timezone.now() - dt.timedelta(minutes=5))
    dispatched.clear()
    assert services.webhooks_sweep() == {"resent": 1, "pruned": 1}
    assert dispatched == [(dispatch.DELIVER_WEBHOOK, (str(failed.pk),))]


def test_a_test_event_reaches_one_endpoint(endpoint, receiver, dave):
    hooks = receiver()
    created, secret = endpoint(hooks.url(), events=["tenant.ready"])
    delivery = services.webhook_endpoint_test(endpoint=created, actor=dave)
    assert services.webhook_deliver(delivery_id=str(delivery.pk)) == "delivered"
    event = Webhook(secret).verify(hooks.received[0].body, hooks.received[0].headers)
    assert event["type"] == "ping" and event["tenant"] is None and event["data"]["sent_by"] == "dave"
    assert AuditEvent.objects.filter(action="webhook.test", actor=dave).exists()


# --- Slack --------------------------------------------------------------------------------------


def test_slack_gets_the_approval_request_with_a_link_to_the_approval_page_and_escaped_text(
    submit, endpoint, receiver, settings
):
    slack = receiver()
    endpoint(slack.url("/services/T0/B0/xyz"), events=["request.submitted"], format="slack")
    req = submit(name="web", purpose="<!channel> urgent <https://evil.example|click me> & brt_" + "x" * 24)
    (delivery,) = deliveries()
    assert services.webhook_deliver(delivery_id=str(delivery.pk)) == "delivered"
    message = slack.received[0].json
    approval_page = f"{settings.BERTH_PUBLIC_URL}/requests/{req.pk}/"
    assert message["text"].startswith("alice asks to create web for team-a")
    assert f"<{approval_page}|Review the request>" in message["text"]
    (button,) = message["blocks"][-1]["elements"]
    assert button["url"] == approval_page and button["text"]["text"] == "Review the request"
    fields = {f["text"].split("\n")[0]: f["text"].split("\n", 1)[1] for f in message["blocks"][0]["fields"]}
    assert fields["*Tier*"] == "medium" and fields["*Team*"] == "team-a"
    purpose = fields["*Purpose*"]
    assert "<!channel>" not in purpose and "&lt;!channel&gt;" in purpose
    assert "<https://evil.example|" not in str(message) and "brt_xxxx" not in purpose
