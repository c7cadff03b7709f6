"""Platform admins manage webhook endpoints in the Django admin: the secret is shown once, the URL's path never;
bad input is a form error (never a 500); the delivery log is read-only."""

from __future__ import annotations

import ipaddress

import pytest

from tenants import dispatch
from tenants.models import AuditEvent, WebhookDelivery, WebhookEndpoint
from tenants.sealing import unseal
from tenants.webhooks import targets

ADD = "/admin/tenants/webhookendpoint/add/"
LIST = "/admin/tenants/webhookendpoint/"


def form(url: str, **overrides) -> dict:
    data = {
        "name": "approvals",
        "team": "",
        "url": url,
        "format": "json",
        "events": ["request.submitted", "tenant.ready"],
        "is_active": "on",
        "secret": "",
        "_save": "Save",
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


@pytest.fixture
def admin_client(client, dave, dispatched):
    client.force_login(dave)
    return client


def test_adding_an_endpoint_shows_its_secret_once_and_never_its_path(admin_client, receiver):
    url = receiver().url("/services/T000/B000/PATHSECRET")
    response = admin_client.post(ADD, form(url))
    assert response.status_code == 200, response.content[:2000]
    endpoint = WebhookEndpoint.objects.get()
    secret = unseal(endpoint.secret_sealed)
    assert secret and secret.startswith("whsec_") and secret in response.content.decode()
    assert "no-store" in response["Cache-Control"]
    assert unseal(endpoint.url_sealed) == url and endpoint.events == ["request.submitted", "tenant.ready"]
    for page in (LIST, f"{LIST}{endpoint.pk}/change/"):
        html = admin_client.get(page).content.decode()
        assert endpoint.url_origin in html and "PATHSECRET" not in html and secret not in html
    assert AuditEvent.objects.get(action="webhook.create").actor.username == "dave"


def test_an_admin_can_give_the_receivers_own_secret(admin_client, receiver):
    own = "whsec_" + "A" * 43 + "="
    admin_client.post(ADD, form(receiver().url(), secret=own))
    assert unseal(WebhookEndpoint.objects.get().secret_sealed) == own


@pytest.mark.parametrize(
    ("overrides", "field", "says"),
    [
        ({"url": "http://169.254.169.254/latest/meta-data/"}, "url", "link-local"),
        ({"url": "http://127.0.0.2:8080/"}, "url", "loopback"),
        ({"url": "gopher://127.0.0.1:6379/"}, "url", "https://"),
        ({"url": "https://a:b@hooks.example.test/"}, "url", "password"),
        ({"url": "http://[::1/"}, "url", "not valid"),  # urlsplit's ValueError, not a 500
        ({"url": ""}, "url", "required"),
        ({"events": []}, "events", "required"),
        ({"events": ["tenant.exploded"]}, "events", "valid choice"),
        ({"format": "xml"}, "format", "valid choice"),
        ({"secret": "hunter2"}, "secret", "whsec_"),
        ({"team": "999999"}, "team", "valid choice"),
    ],
)
def test_bad_input_is_a_form_error_and_nothing_is_kept(admin_client, receiver, overrides, field, says):
    response = admin_client.post(ADD, form(**{"url": receiver().url(), **overrides}))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert says in " ".join(errors[field]), errors
    assert not WebhookEndpoint.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="webhook.").exists()


def test_changing_keeps_the_url_unless_a_new_one_is_given_and_checks_it_against_the_allowance(
    admin_client, receiver, monkeypatch
):
    monkeypatch.setattr(targets, "resolve", lambda host, port: [ipaddress.ip_address("10.9.8.7")])
    admin_client.post(ADD, form("https://relay.corp.test/in", allow_private_network="on"))
    endpoint = WebhookEndpoint.objects.get()
    change = f"{LIST}{endpoint.pk}/change/"
    response = admin_client.post(change, form("", name="renamed", allow_private_network="on"))
    assert response.status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.name == "renamed" and unseal(endpoint.url_sealed) == "https://relay.corp.test/in"
    response = admin_client.post(change, form("", name="renamed"))  # the allowance taken away
    assert response.status_code == 200
    assert "10.9.8.7 is a private address" in " ".join(response.context["adminform"].form.errors["url"])
    endpoint.refresh_from_db()
    assert endpoint.allow_private_network
    update = AuditEvent.objects.get(action="webhook.update")
    assert update.before["name"] == "approvals" and update.after["name"] == "renamed"


def test_rotating_shows_the_new_secret_once_and_a_test_event_is_queued(
    admin_client, receiver, dispatched, django_capture_on_commit_callbacks
):
    admin_client.post(ADD, form(receiver().url()))
    endpoint = WebhookEndpoint.objects.get()
    old = unseal(endpoint.secret_sealed)
    response = admin_client.post(LIST, {"action": "rotate_secret", "_selected_action": [endpoint.pk]})
    endpoint.refresh_from_db()
    new = unseal(endpoint.secret_sealed)
    assert new != old and new in response.content.decode() and "no-store" in response["Cache-Control"]
    dispatched.clear()
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(LIST, {"action": "send_test_event", "_selected_action": [endpoint.pk]})
    (delivery,) = WebhookDelivery.objects.all()
    assert delivery.event == "ping" and dispatched == [(dispatch.DELIVER_WEBHOOK, (str(delivery.pk),))]
    assert {e.action for e in AuditEvent.objects.all()} >= {"webhook.rotate_secret", "webhook.test"}


def test_deleting_is_audited(admin_client, receiver):
    admin_client.post(ADD, form(receiver().url()))
    endpoint = WebhookEndpoint.objects.get()
    response = admin_client.post(f"{LIST}{endpoint.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302 and not WebhookEndpoint.objects.exists()
    assert AuditEvent.objects.get(action="webhook.delete").before["name"] == "approvals"


def test_the_delivery_log_is_read_only(admin_client, receiver, dave):
    admin_client.post(ADD, form(receiver().url()))
    endpoint = WebhookEndpoint.objects.get()
    admin_client.post(LIST, {"action": "send_test_event", "_selected_action": [endpoint.pk]})
    delivery = WebhookDelivery.objects.get()
    page = "/admin/tenants/webhookdelivery/"
    assert admin_client.get(page).status_code == 200
    assert admin_client.get(f"{page}{delivery.pk}/change/").status_code == 200  # a view, not a form
    assert admin_client.post(f"{page}{delivery.pk}/change/", {"status": "delivered"}).status_code == 403
    assert admin_client.get(f"{page}add/").status_code == 403
    assert admin_client.post(f"{page}{delivery.pk}/delete/", {"post": "yes"}).status_code == 403
    delivery.refresh_from_db()
    assert delivery.status == "pending"
