"""Team webhooks attacked with the attacker's own credentials: another team's owner reaching for team-a's
endpoints, a plain member writing, fields a client may not set, URLs aimed at loopback, the cloud metadata
service or a private network in every spelling, a receiver that redirects inward, and one team listening to
another's events.

Each attack runs against the live portal (gunicorn, PostgreSQL, Redis) with a real API token, or through a
real Celery worker delivering to real HTTP receivers on loopback; each must be refused with nothing changed.
alice owns team-a, amir is a plain member of it; bob owns team-b.
"""

from __future__ import annotations

import ipaddress
import time

import pytest
import requests
from django.conf import settings
from django.test import Client

from tenants import services
from tenants.models import AuditEvent, WebhookDelivery, WebhookEndpoint
from tenants.services.webhooks import SUBSCRIBABLE
from tenants.webhooks import targets
from tests.fixtures import TokenFactory
from tests.plugins.kube import wait_for
from tests.plugins.portal import LivePortal

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker, pytest.mark.usefixtures("celery_worker")]


def world() -> tuple[list, list, list]:
    """Everything an attack on team webhooks could change."""
    return (
        list(WebhookEndpoint.objects.order_by("pk").values()),
        list(WebhookDelivery.objects.order_by("pk").values_list("pk", "status", "attempts")),
        list(AuditEvent.objects.filter(action__startswith="webhook.").values_list("pk", flat=True)),
    )


@pytest.fixture
def team_a_hooks(alice, team_a, receiver):
    """team-a's endpoint, registered by its owner alice, and its receiver."""
    hooks = receiver()
    endpoint, _ = services.webhook_endpoint_create(
        actor=alice, team=team_a, name="team-a alerts", url=hooks.url("/T0/B0/PATHSECRET"), events=SUBSCRIBABLE
    )
    return endpoint, hooks


class Caller:
    """A person's real API token against the live portal."""

    def __init__(self, portal: LivePortal, token: str) -> None:
        self.base = portal.url + "/api/v1/teams"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    def __call__(self, method: str, path: str, body: object = None) -> requests.Response:
        return self.session.request(method, self.base + path, json=body, timeout=30)


def test_another_teams_owner_finds_nothing_to_read_or_change(
    live_portal: LivePortal, api_token: TokenFactory, bob, team_b, team_a_hooks, receiver
):
    endpoint, hooks = team_a_hooks
    ping = services.webhook_endpoint_test(endpoint=endpoint, actor=endpoint.created_by)  # a delivery log to reach for
    # The run's worker may be sending the ping meanwhile (not the attacker's doing): wait until it is sent.
    wait_for(lambda: WebhookDelivery.objects.filter(pk=ping.pk, status="delivered").exists(), timeout=30, what="ping")
    before = world()
    one = f"/team-a/webhooks/{endpoint.pk}/"
    for token in (api_token(bob), api_token(bob, team=team_b)):
        call = Caller(live_portal, token)
        for method, path, body in [
            ("GET", "/team-a/webhooks/", None),
            ("GET", one, None),
            ("GET", f"{one}deliveries/", None),
            ("POST", "/team-a/webhooks/", {"name": "x", "url": receiver().url(), "events": ["tenant.ready"]}),
            ("PATCH", one, {"url": receiver().url("/mine"), "events": SUBSCRIBABLE}),
            ("DELETE", one, None),
            ("POST", f"{one}rotate-secret/", None),
            ("POST", f"{one}test/", None),
            # team-a's endpoint through bob's own team's path.
            ("GET", f"/team-b/webhooks/{endpoint.pk}/", None),
            ("PATCH", f"/team-b/webhooks/{endpoint.pk}/", {"name": "x"}),
            ("DELETE", f"/team-b/webhooks/{endpoint.pk}/", None),
            ("POST", f"/team-b/webhooks/{endpoint.pk}/rotate-secret/", None),
            ("GET", f"/team-b/webhooks/{endpoint.pk}/deliveries/", None),
        ]:
            response = call(method, path, body)
            assert response.status_code == 404, (method, path, response.text)
            assert "PATHSECRET" not in response.text and "team-a alerts" not in response.text
    assert world() == before


def test_a_plain_member_reads_but_cannot_write(live_portal: LivePortal, api_token: TokenFactory, amir, team_a_hooks):
    endpoint, _ = team_a_hooks
    call = Caller(live_portal, api_token(amir))
    before = world()
    one = f"/team-a/webhooks/{endpoint.pk}/"
    listed = call("GET", "/team-a/webhooks/")
    assert listed.status_code == 200 and listed.json()["results"][0]["id"] == endpoint.pk
    assert "secret" not in listed.text and "PATHSECRET" not in listed.text
    for method, path, body in [
        ("POST", "/team-a/webhooks/", {"name": "x", "url": "https://example.com/", "events": ["tenant.ready"]}),
        ("PATCH", one, {"is_active": False}),
        ("DELETE", one, None),
        ("POST", f"{one}rotate-secret/", None),
        ("POST", f"{one}test/", None),
    ]:
        assert call(method, path, body).status_code == 403, (method, path)
    assert world() == before


@pytest.mark.parametrize(
    "extra",
    [
        {"team": "team-b"},
        {"team": None},
        {"allow_private_network": True},
        {"url_origin": "https://trusted.example.com"},
        {"created_by": "dave"},
        {"url_sealed": "x"},
        {"secret_sealed": "x"},
        {"id": 1},
    ],
)
def test_fields_a_team_owner_may_not_set_are_refused(
    live_portal: LivePortal, api_token: TokenFactory, alice, team_a_hooks, receiver, extra
):
    endpoint, _ = team_a_hooks
    call = Caller(live_portal, api_token(alice))
    before = world()
    (field,) = extra
    created = call(
        "POST", "/team-a/webhooks/", {"name": "x", "url": receiver().url(), "events": ["tenant.ready"], **extra}
    )
    assert created.status_code == 400 and field in created.json(), created.text
    changed = call("PATCH", f"/team-a/webhooks/{endpoint.pk}/", extra)
    assert changed.status_code == 400 and field in changed.json(), changed.text
    assert world() == before


SSRF_URLS = [
    "http://127.0.0.2:6379/",  # loopback other than the test settings' receivers (127.0.0.1)
    "http://2130706434/",  # 127.0.0.2 as one decimal number
    "http://0177.0.0.2/",  # ... in octal
    "http://0x7f000002/",  # ... in hex
    "http://127.2/",  # ... in the short form inet_aton reads
    "http://[::1]:8000/admin/",
    "http://[::ffff:127.0.0.2]/",  # IPv4-mapped loopback
    "http://[::ffff:169.254.169.254]/latest/meta-data/",
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "http://2852039166/latest/meta-data/",  # 169.254.169.254 as one decimal number
    "http://0251.0376.0251.0376/latest/meta-data/",  # ... in octal
    "http://[fe80::a9fe:a9fe]/",
    "http://[fd00:ec2::254]/latest/meta-data/",  # AWS's IPv6 metadata address: a private one
    "http://10.0.0.1/",  # private: only a platform admin may allow those
    "http://192.168.1.1/",
    "http://0.0.0.0:8000/",
    "http://[::]/",
    "gopher://127.0.0.2:6379/_FLUSHALL",
]


@pytest.mark.parametrize("url", SSRF_URLS)
def test_a_team_owner_cannot_aim_an_endpoint_inside(
    live_portal: LivePortal, api_token: TokenFactory, alice, team_a_hooks, url
):
    endpoint, _ = team_a_hooks
    call = Caller(live_portal, api_token(alice))
    before = world()
    for body in ({"url": url}, {"url": url, "allow_private_network": True}):
        created = call("POST", "/team-a/webhooks/", {"name": "x", "events": ["tenant.ready"], **body})
        assert created.status_code == 400, created.text
        changed = call("PATCH", f"/team-a/webhooks/{endpoint.pk}/", body)
        assert changed.status_code == 400, changed.text
        if "allow_private_network" in body:
            assert "Only platform admins" in created.json()["allow_private_network"][0]
        else:
            assert "url" in created.json() and "url" in changed.json()
    assert world() == before


def test_a_name_that_resolves_inside_is_refused_for_a_team_owner(client: Client, alice, team_a, monkeypatch):
    """What an attacker's DNS answers for a name of theirs: loopback, or the metadata service behind IPv6."""
    answers = {"hooks.attacker.test": ["127.0.0.2"], "meta.attacker.test": ["203.0.113.9", "::ffff:169.254.169.254"]}
    monkeypatch.setattr(
        targets, "resolve", lambda host, port: [ipaddress.ip_address(ip) for ip in answers.get(host, ["127.0.0.2"])]
    )
    client.force_login(alice)
    before = world()
    for host in answers:
        form = {
            "new-hook-name": "x",
            "new-hook-url": f"https://{host}/hook",
            "new-hook-format": "json",
            "new-hook-events": "tenant.ready",
        }
        page = client.post("/teams/team-a/webhooks/", form)
        assert "public addresses only" in page.context["notifications"]["add_form"].errors["url"][0]
    assert world() == before


def test_a_receiver_that_redirects_inward_is_not_followed(celery_worker, alice, team_a, receiver):
    internal = receiver(host="127.0.0.2")  # an internal service the attacker wants the worker to reach

    def redirect(received) -> int:
        return 307

    hooks = receiver(respond=redirect)
    endpoint, _ = services.webhook_endpoint_create(
        actor=alice, team=team_a, name="bouncer", url=hooks.url(), events=["tenant.ready"]
    )
    delivery = services.webhook_endpoint_test(endpoint=endpoint, actor=alice)
    wait_for(
        lambda: WebhookDelivery.objects.filter(pk=delivery.pk, attempts__gte=1).exists(),
        timeout=30,
        what="the worker's first attempt",
    )
    delivery.refresh_from_db()
    assert "redirects are not followed" in delivery.last_error and internal.received == []


def test_a_team_endpoint_never_receives_another_teams_events(
    celery_worker,
    live_portal: LivePortal,
    api_token: TokenFactory,
    alice,
    bob,
    team_a_hooks,
    ready_tenant_row,
    receiver,
):
    _, team_a_receiver = team_a_hooks
    bobs_receiver = receiver()
    created = Caller(live_portal, api_token(bob))(
        "POST", "/team-b/webhooks/", {"name": "spy", "url": bobs_receiver.url(), "events": SUBSCRIBABLE}
    )
    assert created.status_code == 201, created.text
    spy = WebhookEndpoint.objects.get(pk=created.json()["id"])
    assert spy.team.slug == "team-b"
    tenant = ready_tenant_row("web")  # team-a's
    services.tenant_remind_expiry(tenant=tenant)
    services.tenant_record_applied(tenant=tenant, generation=1, repaired=["Role/web/berth-tenant"])
    services.tenant_mark_failed(tenant=tenant, reason="quota")
    received = team_a_receiver.wait_for(3)
    assert sorted(r.json["type"] for r in received) == ["tenant.drift_repaired", "tenant.expiring", "tenant.failed"]
    assert all(r.json["tenant"]["id"] == str(tenant.pk) for r in received)
    # bob's own ping reaches him, so his receiver works; nothing of team-a's came before or with it.
    services.webhook_endpoint_test(endpoint=spy, actor=bob)
    (ping,) = bobs_receiver.wait_for(1)
    wait_for(lambda: WebhookDelivery.objects.filter(status="delivered").count() == 4, timeout=30, what="4 deliveries")
    assert ping.json["type"] == "ping" and len(bobs_receiver.received) == 1
    assert not WebhookDelivery.objects.filter(endpoint=spy, tenant=tenant).exists()


def test_a_teams_tarpits_and_piled_up_tests_do_not_delay_another_teams_events(
    celery_worker, live_portal: LivePortal, api_token: TokenFactory, alice, bob, team_a, team_b, receiver
):
    """alice points four endpoints at receivers that never answer (each attempt holds a worker until the
    deadline) and presses every test button again and again; bob's team's event still goes out at once."""
    tarpits = [receiver(hang=True) for _ in range(4)]
    call = Caller(live_portal, api_token(alice))
    ids = []
    for n, tarpit in enumerate(tarpits):
        created = call(
            "POST", "/team-a/webhooks/", {"name": f"tarpit {n}", "url": tarpit.url(), "events": ["tenant.alert_firing"]}
        )
        assert created.status_code == 201, created.text
        ids.append(created.json()["id"])
    for endpoint_id in ids:
        assert call("POST", f"/team-a/webhooks/{endpoint_id}/test/").status_code == 202
        again = call("POST", f"/team-a/webhooks/{endpoint_id}/test/")
        assert again.status_code == 409 and "still being sent" in again.json()["detail"]
    assert WebhookDelivery.objects.count() == len(ids)  # the refused tests queued nothing
    wait_for(lambda: any(t.received for t in tarpits), timeout=30, what="a tarpit's first request")
    bobs = receiver()
    created = Caller(live_portal, api_token(bob))(
        "POST", "/team-b/webhooks/", {"name": "alerts", "url": bobs.url(), "events": ["tenant.alert_firing"]}
    )
    assert created.status_code == 201, created.text
    started = time.monotonic()
    services.webhook_endpoint_test(endpoint=WebhookEndpoint.objects.get(pk=created.json()["id"]), actor=bob)
    bobs.wait_for(1, timeout=settings.BERTH_WEBHOOK_TIMEOUT_SECONDS)
    took = time.monotonic() - started
    print(f"\nteam-b's event arrived {took:.1f}s after it happened while team-a's tarpits held their slot")
    assert took < 5, took
    hanging = [got for tarpit in tarpits for got in tarpit.received]
    assert len(hanging) <= settings.BERTH_WEBHOOK_MAX_IN_FLIGHT_PER_TEAM  # team-a never held more than its share
    for tarpit in tarpits:  # let the tarpits answer so the worker drains
        tarpit.hang = False
        tarpit.release.set()
    wait_for(
        lambda: not WebhookDelivery.objects.filter(status="pending").exists(), timeout=120, what="every delivery done"
    )
