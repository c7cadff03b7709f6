"""Webhooks end to end: services → the outbox → Redis → a real Celery worker on the events queue → real HTTP
receivers on 127.0.0.1. The last test provisions on the dev control plane while every receiver hangs."""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from standardwebhooks.webhooks import Webhook

from tenants import services
from tenants.models import Tenant, TenantRequest, WebhookDelivery
from tenants.services.webhooks import SUBSCRIBABLE
from tests.plugins.kube import wait_for
from tests.plugins.webhooks import Receiver, documented_verifier
from tests.plugins.worker import wait_status

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def register(dave, hooks: Receiver, **kwargs) -> str:
    """An endpoint for ``hooks`` (every event unless ``events`` says otherwise); returns its signing secret."""
    kwargs.setdefault("events", SUBSCRIBABLE)
    _, secret = services.webhook_endpoint_create(actor=dave, name=f"hook {hooks.port}", url=hooks.url(), **kwargs)
    return secret


def wait_delivered(count: int, timeout: float = 30.0, **filters) -> list[WebhookDelivery]:
    rows = WebhookDelivery.objects.filter(status="delivered", **filters)
    wait_for(lambda: rows.count() >= count, timeout=timeout, what=f"{count} delivered webhook(s)")
    return list(rows.order_by("sequence"))


def test_the_worker_signs_what_it_sends_and_slack_gets_the_approval_link(
    celery_worker, alice, carol, dave, receiver, team_a, medium, cluster
):
    plain, slack = receiver(), receiver()
    secret = register(dave, plain, events=["request.submitted", "request.decided"])
    register(dave, slack, events=["request.submitted"], format="slack", team=team_a)
    started = time.monotonic()
    req = services.request_submit(
        actor=alice, action="create", team=team_a, tier=medium, cluster=cluster, name="web", purpose="payments API"
    )
    services.request_reject(tenant_request=req, actor=carol, reason="Use the small tier.")
    assert time.monotonic() - started < 2  # the services never wait for a receiver
    submitted, decided = (got.json for got in plain.wait_for(2))
    for got in plain.received:
        assert Webhook(secret).verify(got.body, got.headers)
        assert documented_verifier()(secret, got.headers, got.body)["id"] == got.headers["webhook-id"]
    assert (submitted["type"], submitted["sequence"], submitted["data"]["request"]["purpose"]) == (
        "request.submitted",
        1,
        "payments API",
    )
    assert (decided["type"], decided["data"]["request"]["status"], decided["sequence"]) == (
        "request.decided",
        "rejected",
        2,
    )
    assert decided["data"]["request"]["decision_comment"] == "Use the small tier."
    (message,) = (got.json for got in slack.wait_for(1))
    assert f"{settings.BERTH_PUBLIC_URL}/requests/{req.pk}/" == message["blocks"][-1]["elements"][0]["url"]
    wait_delivered(3)


def test_a_receiver_that_answers_500_gets_the_event_again_with_backoff_until_it_takes_it(
    celery_worker, ready_tenant_row, dave, receiver
):
    answers = iter([500, 500, 503])
    hooks = receiver(respond=lambda got: next(answers, 200))
    secret = register(dave, hooks, events=["tenant.drift_repaired"])
    tenant = ready_tenant_row("web")
    services.tenant_record_applied(tenant=tenant, generation=1, repaired=["NetworkPolicy/web/berth-default-deny"])
    (delivery,) = wait_delivered(1)
    attempts = hooks.received
    assert [a.status for a in attempts] == [500, 500, 503, 200]
    assert len({a.headers["webhook-id"] for a in attempts}) == 1
    assert all(Webhook(secret).verify(a.body, a.headers) for a in attempts)  # each attempt signed anew
    gaps = [later.came_at - earlier.answered_at for earlier, later in zip(attempts, attempts[1:], strict=False)]
    base = settings.BERTH_WEBHOOK_RETRY_SECONDS
    assert (
        gaps[0] >= base / 2 and gaps[1] >= base and gaps[2] >= min(2 * base, settings.BERTH_WEBHOOK_RETRY_MAX_SECONDS)
    )
    assert (delivery.attempts, delivery.response_code, delivery.last_error) == (4, 200, "")


def test_one_tenants_events_arrive_in_order_while_another_tenants_do_not_wait(
    celery_worker, ready_tenant_row, dave, receiver
):
    def respond(got) -> int:
        event = got.json
        if event["tenant"]["name"] == "first" and event["sequence"] == 1:
            tries = [r for r in hooks.received if r.json["id"] == event["id"]]
            other_answered = any(r.json["tenant"]["name"] == "other" and r.status == 200 for r in hooks.received)
            # first's first event fails until the other tenant's event got through: if tenants waited for
            # each other, neither would ever be delivered.
            return 200 if len(tries) > 1 and other_answered else 500
        return 200

    hooks = receiver(respond=respond)
    register(dave, hooks)
    first, other = ready_tenant_row("first"), ready_tenant_row("other")
    services.tenant_record_applied(tenant=first, generation=1, repaired=["Role/first/berth-tenant"])
    services.tenant_record_isolation_report(
        tenant=first, report={"passed": False, "checks": [{"id": "node-ports", "passed": False}]}
    )
    services.tenant_remind_expiry(tenant=first)
    services.tenant_mark_failed(tenant=Tenant.objects.get(pk=first.pk), reason="drift came back")
    services.tenant_record_applied(tenant=other, generation=1, repaired=["Role/other/berth-tenant"])
    wait_delivered(5)
    firsts = [r for r in hooks.received if r.json["tenant"]["name"] == "first"]
    retried = [r.status for r in firsts if r.json["sequence"] == 1]
    assert retried[0] == 500 and retried[-1] == 200 and set(retried[:-1]) == {500}
    assert [r.json["type"] for r in firsts[len(retried) :]] == [
        "tenant.isolation_failed",
        "tenant.expiring",
        "tenant.failed",
    ]
    assert [r.json["sequence"] for r in firsts[len(retried) :]] == [2, 3, 4]
    for earlier, later in zip(firsts, firsts[1:], strict=False):
        assert later.came_at >= earlier.answered_at  # one at a time: nothing overtakes an unanswered event


@pytest.mark.cluster
def test_receivers_that_hang_do_not_delay_provisioning(
    celery_worker, live_cluster, alice, carol, dave, team_a, medium, receiver
):
    # As many hanging receivers as the worker has processes: without the in-flight cap they would take them all.
    hanging = [receiver(hang=True) for _ in range(4)]
    for hooks in hanging:
        register(dave, hooks, events=["request.submitted", "request.decided", "tenant.ready"])
    started = time.monotonic()
    req = services.request_submit(
        actor=alice, action="create", team=team_a, tier=medium, cluster=live_cluster, name="web", purpose="hang test"
    )
    services.request_approve(tenant_request=TenantRequest.objects.get(pk=req.pk), actor=carol)
    assert time.monotonic() - started < 2
    wait_status(Tenant.objects.get(pk=req.tenant_id), "ready", timeout=settings.BERTH_WEBHOOK_TIMEOUT_SECONDS)
    ready_after = time.monotonic() - started
    waiting = [got for hooks in hanging for got in hooks.received]
    assert waiting and all(got.answered_at is None for got in waiting)  # every receiver reached still hangs
    assert len(waiting) <= settings.BERTH_WEBHOOK_MAX_IN_FLIGHT
    assert ready_after < settings.BERTH_WEBHOOK_TIMEOUT_SECONDS
    print(f"\nready {ready_after:.1f}s after the request while {len(waiting)} receivers hung")
    for hooks in hanging:
        hooks.hang = False
        hooks.release.set()
    delivered = wait_delivered(12, timeout=60)
    for hooks in hanging:
        assert [r.json["type"] for r in hooks.delivered()] == ["request.submitted", "request.decided", "tenant.ready"]
    assert {d.attempts for d in delivered} <= {1, 2}
