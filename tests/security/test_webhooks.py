"""Webhooks attacked: people who are not platform admins reaching for them, endpoints aimed at the cloud
metadata service or at loopback, a name that now resolves to an internal address, one team listening to
another's events, and secrets leaking into logs, the audit trail or the delivery log.

Each attack uses the attacker's own credentials (a session in the admin, a real API token against the live
portal) or plays the attacker's receiver, against PostgreSQL, Redis and a real Celery worker; each must be
refused with nothing changed.
"""

from __future__ import annotations

import re

import pytest
import requests
from django.test import Client

from tenants import services
from tenants.errors import Forbidden
from tenants.models import AuditEvent, WebhookDelivery, WebhookEndpoint
from tenants.sealing import seal
from tenants.services.webhooks import SUBSCRIBABLE
from tests.fixtures import TokenFactory
from tests.plugins.kube import wait_for
from tests.plugins.portal import LivePortal
from tests.plugins.webhooks import Receiver
from tests.plugins.worker import OUTPUT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

ADD = "/admin/tenants/webhookendpoint/add/"


def webhooks_world() -> tuple[list, list, list]:
    """Everything an attack on webhooks could change."""
    return (
        list(WebhookEndpoint.objects.order_by("pk").values()),
        list(WebhookDelivery.objects.order_by("pk").values_list("pk", "status")),
        list(AuditEvent.objects.filter(action__startswith="webhook.").values_list("pk")),
    )


def admin_form(url: str, **extra: object) -> dict:
    return {"name": "x", "url": url, "format": "json", "events": ["tenant.ready"], "is_active": "on", **extra}


@pytest.fixture
def teams_endpoint(dave, team_b, receiver) -> tuple[WebhookEndpoint, Receiver]:
    """Team B's endpoint, registered by a platform admin."""
    hooks = receiver()
    endpoint, _ = services.webhook_endpoint_create(
        actor=dave, name="team-b alerts", url=hooks.url(), events=SUBSCRIBABLE, team=team_b
    )
    return endpoint, hooks


def test_owners_members_and_approvers_cannot_use_the_admin_or_reach_beyond_their_team(
    teams_endpoint, alice, bob, amir, carol, team_a, team_b, receiver
):
    """The admin is the platform admins'; every team's events are theirs too. A team's owners manage their own
    team's endpoints (tests/security/test_team_webhooks.py), nobody else's."""
    before = webhooks_world()
    target = receiver().url()
    endpoint, _ = teams_endpoint
    for person in (bob, alice, amir, carol):  # bob owns team-b, whose endpoint this is
        client = Client()
        client.force_login(person)
        for page in (
            "/admin/tenants/webhookendpoint/",
            f"/admin/tenants/webhookendpoint/{endpoint.pk}/change/",
            "/admin/tenants/webhookdelivery/",
        ):
            assert client.get(page).status_code == 302  # to the admin's sign-in: not staff
        assert client.post(ADD, admin_form(target)).status_code == 302
        assert client.post(f"/admin/tenants/webhookendpoint/{endpoint.pk}/delete/", {"post": "yes"}).status_code == 302
        with pytest.raises(Forbidden):  # every team's events
            services.webhook_endpoint_create(actor=person, name="mine", url=target, events=["tenant.ready"])
        if person == bob:
            continue
        with pytest.raises(Forbidden):
            services.webhook_endpoint_create(actor=person, name="b", url=target, events=["tenant.ready"], team=team_b)
        with pytest.raises(Forbidden):
            services.webhook_endpoint_rotate_secret(endpoint=endpoint, actor=person)
        with pytest.raises(Forbidden):
            services.webhook_endpoint_test(endpoint=endpoint, actor=person)
    assert webhooks_world() == before


def test_the_rest_api_has_no_webhooks_for_anyone(
    live_portal: LivePortal, api_token: TokenFactory, bob, dave, team_b, teams_endpoint
):
    before = webhooks_world()
    for token in (api_token(bob), api_token(bob, team=team_b), api_token(dave)):
        headers = {"Authorization": f"Token {token}"}
        for path in ("/api/v1/webhooks/", f"/api/v1/webhooks/{teams_endpoint[0].pk}/", "/api/v1/webhook-endpoints/"):
            assert requests.get(live_portal.url + path, headers=headers, timeout=10).status_code == 404
            posted = requests.post(
                live_portal.url + path, json={"url": "http://169.254.169.254/"}, headers=headers, timeout=10
            )
            assert posted.status_code in (404, 405)
    assert webhooks_world() == before


@pytest.mark.parametrize(
    ("url", "private"),
    [
        ("http://169.254.169.254/latest/meta-data/iam/security-credentials/", False),
        ("http://[::ffff:169.254.169.254]/latest/meta-data/", False),
        ("http://2852039166/latest/meta-data/", False),  # 169.254.169.254 as one decimal number
        ("http://[fe80::a9fe:a9fe]/latest/meta-data/", False),
        ("http://127.0.0.2:6379/", False),  # loopback other than the test settings' receivers
        ("http://[::1]:8000/admin/", False),
        ("http://0.0.0.0:8000/", False),
        ("http://10.0.0.1/", True),
        ("http://[fd00:ec2::254]/latest/meta-data/", True),  # AWS's IPv6 metadata address is a private one
    ],
)
def test_an_endpoint_aimed_at_the_metadata_service_loopback_or_a_private_network_is_refused(client, dave, url, private):
    client.force_login(dave)
    before = webhooks_world()
    # The private allowance opens private ranges only (tests/tenants covers that it does); never the rest.
    for extra in ({},) if private else ({}, {"allow_private_network": "on"}):
        response = client.post(ADD, admin_form(url, **extra))
        assert response.status_code == 200
        assert "public addresses only" in " ".join(response.context["adminform"].form.errors["url"])
    assert webhooks_world() == before


def test_a_name_that_now_points_inside_is_refused_when_sending(celery_worker, dave, ready_tenant_row, receiver):
    internal = receiver(host="127.0.0.2")  # an internal service the attacker wants to reach
    hooks = receiver()
    endpoint, _ = services.webhook_endpoint_create(actor=dave, name="hook", url=hooks.url(), events=["tenant.failed"])
    # What DNS rebinding does to a name after it was checked: the stored target now leads to the internal service.
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(url_sealed=seal(internal.url("/flushall")))
    tenant = ready_tenant_row("web")
    services.tenant_mark_failed(tenant=tenant, reason="quota")
    delivery = WebhookDelivery.objects.get()
    wait_for(
        lambda: WebhookDelivery.objects.filter(pk=delivery.pk, status="failed").exists(),
        timeout=30,
        what="the worker to refuse the delivery",
    )
    delivery.refresh_from_db()
    assert delivery.last_error.startswith("refused:") and "127.0.0.2 is a loopback address" in delivery.last_error
    assert delivery.attempts == 1 and internal.received == [] and hooks.received == []


def test_team_b_never_hears_of_team_as_tenants(celery_worker, teams_endpoint, dave, ready_tenant_row, receiver):
    _, team_b_hooks = teams_endpoint
    everyone = receiver()
    services.webhook_endpoint_create(actor=dave, name="ops", url=everyone.url(), events=SUBSCRIBABLE)
    tenant = ready_tenant_row("web")
    services.tenant_record_applied(tenant=tenant, generation=1, repaired=["Role/web/berth-tenant"])
    services.tenant_mark_failed(tenant=tenant, reason="quota")
    everyone.wait_for(2)
    wait_for(lambda: WebhookDelivery.objects.filter(status="delivered").count() == 2, timeout=30, what="2 deliveries")
    assert team_b_hooks.received == []
    assert not WebhookDelivery.objects.filter(endpoint__team__slug="team-b").exists()


def test_secrets_never_reach_logs_the_audit_trail_or_the_delivery_log(
    celery_worker, client, dave, ready_tenant_row, receiver
):
    answers = iter([500])
    hooks = receiver(respond=lambda got: next(answers, 200))
    path_secret = "T0ATTACK/B0ATTACK/PATHSECRETxyz123"
    client.force_login(dave)
    signing_secret = "whsec_" + "c2VjcmV0LXRoYXQtbXVzdC1uZXZlci1sZWFrLTEyMzQ="
    response = client.post(
        ADD,
        admin_form(
            hooks.url(f"/services/{path_secret}"), secret=signing_secret, events=["tenant.expiring", "tenant.failed"]
        ),
    )
    assert signing_secret in response.content.decode()  # shown once, to the admin who made it
    endpoint = WebhookEndpoint.objects.get()
    rotated = client.post(
        "/admin/tenants/webhookendpoint/", {"action": "rotate_secret", "_selected_action": [endpoint.pk]}
    )  # and its successor, shown once too
    second_secret = re.search(r'id="webhook-secret"[^>]*>([^<]+)<', rotated.content.decode()).group(1)
    tenant = ready_tenant_row("web")
    services.tenant_remind_expiry(tenant=tenant)
    services.tenant_mark_failed(tenant=tenant, reason=f"the receiver said {signing_secret}")
    wait_for(lambda: WebhookDelivery.objects.filter(status="delivered").count() == 2, timeout=30, what="2 deliveries")
    endpoint.refresh_from_db()
    current_secret = services.webhook_endpoint_rotate_secret(endpoint=endpoint, actor=dave)
    secrets = [signing_secret, signing_secret.removeprefix("whsec_"), second_secret, current_secret, "PATHSECRET"]
    places = {
        "audit trail": str(list(AuditEvent.objects.values())),
        "delivery log": str(list(WebhookDelivery.objects.values())),
        "endpoint row": str(list(WebhookEndpoint.objects.values())),
        "worker log": (OUTPUT / "celery-worker.log").read_text(errors="replace"),
        "what the receiver got": str([(r.headers, r.body) for r in hooks.received]),
    }
    for page in (
        "/admin/tenants/webhookendpoint/",
        f"/admin/tenants/webhookendpoint/{endpoint.pk}/change/",
        "/admin/tenants/webhookdelivery/",
        *(f"/admin/tenants/webhookdelivery/{d.pk}/change/" for d in WebhookDelivery.objects.all()),
        "/admin/tenants/auditevent/",
    ):
        places[page] = client.get(page).content.decode()
    for place, text in places.items():
        for secret in secrets:
            assert secret not in text, f"{secret[:12]}… found in {place}"
    assert len(hooks.received) == 3 and "[redacted]" in hooks.received[-1].body.decode()
