"""Team owners manage their own team's webhook endpoints: through the services (the admin's checks, SSRF rules,
signing and audit), the API (/api/v1/teams/{slug}/webhooks/, exactly as its schema says) and the team's page.

alice owns team-a, amir is a member and vera a viewer of it; bob owns team-b; carol approves; dave is a
platform admin. Receivers are real HTTP servers on 127.0.0.1 (allowed by the test settings).
"""

from __future__ import annotations

import ipaddress
import re

import pytest
import yaml
from django.core.exceptions import ValidationError
from rest_framework.exceptions import NotFound

from tenants import services
from tenants.api.errors import to_api_exception
from tenants.api.throttling import SharedRateThrottle
from tenants.api.webhooks import TeamWebhookViewSet
from tenants.errors import Forbidden, NoLongerExists
from tenants.models import AuditEvent, WebhookDelivery, WebhookEndpoint
from tenants.sealing import unseal
from tenants.services.webhooks import PRIVATE_ADMIN_ONLY, SUBSCRIBABLE
from tenants.views import team_webhook_pages
from tenants.webhooks import sender, targets

pytestmark = pytest.mark.django_db

API = "/api/v1/teams"


@pytest.fixture
def hook_url(receiver) -> str:
    """A receiver's URL whose path is a credential, as a Slack webhook's is."""
    return receiver().url("/services/T0/B0/PATHSECRET")


@pytest.fixture
def alices_endpoint(alice, team_a, hook_url, dispatched) -> WebhookEndpoint:
    endpoint, _ = services.webhook_endpoint_create(
        actor=alice, team=team_a, name="payments", url=hook_url, events=["tenant.ready", "tenant.failed"]
    )
    return endpoint


def world() -> tuple[list, list]:
    return list(WebhookEndpoint.objects.order_by("pk").values()), list(
        AuditEvent.objects.filter(action__startswith="webhook.").values_list("pk", flat=True)
    )


# --- Services -----------------------------------------------------------------------------------


def test_a_team_owner_manages_her_teams_endpoint_and_each_change_is_audited_without_secrets(
    alice, team_a, hook_url, dispatched
):
    endpoint, secret = services.webhook_endpoint_create(
        actor=alice, team=team_a, name="payments", url=hook_url, events=["tenant.ready"], format="slack"
    )
    assert secret.startswith("whsec_") and unseal(endpoint.secret_sealed) == secret
    assert endpoint.team == team_a and endpoint.created_by == alice and not endpoint.allow_private_network
    services.webhook_endpoint_update(endpoint=endpoint, actor=alice, team=team_a, name="renamed", is_active=False)
    endpoint.refresh_from_db()
    assert (endpoint.name, endpoint.is_active, endpoint.events, endpoint.format) == (
        "renamed",
        False,
        ["tenant.ready"],
        "slack",
    )
    rotated = services.webhook_endpoint_rotate_secret(endpoint=endpoint, actor=alice)
    delivery = services.webhook_endpoint_test(endpoint=endpoint, actor=alice)
    assert delivery.event == "ping" and delivery.endpoint_id == endpoint.pk
    services.webhook_endpoint_delete(endpoint=endpoint, actor=alice)
    assert not WebhookEndpoint.objects.exists()
    trail = AuditEvent.objects.filter(action__startswith="webhook.").order_by("pk")
    assert [(e.action, e.actor_id, e.team_id) for e in trail] == [
        (action, alice.pk, team_a.pk)
        for action in ("webhook.create", "webhook.update", "webhook.rotate_secret", "webhook.test", "webhook.delete")
    ]
    recorded = str(list(trail.values()))
    for leaked in (secret, rotated, "PATHSECRET"):
        assert leaked not in recorded


def test_team_owners_make_no_global_endpoint_move_none_and_never_allow_private_addresses(
    alice, team_a, team_b, hook_url, alices_endpoint
):
    before = world()
    with pytest.raises(Forbidden, match="platform admins"):
        services.webhook_endpoint_create(actor=alice, name="all", url=hook_url, events=["tenant.ready"])
    with pytest.raises(ValidationError) as refused:
        services.webhook_endpoint_create(
            actor=alice, team=team_a, name="x", url=hook_url, events=["tenant.ready"], allow_private_network=True
        )
    assert refused.value.message_dict == {"allow_private_network": [PRIVATE_ADMIN_ONLY]}
    for team in (team_b, None):
        with pytest.raises((ValidationError, Forbidden)) as moved:
            services.webhook_endpoint_update(endpoint=alices_endpoint, actor=alice, team=team)
        if isinstance(moved.value, ValidationError):
            assert list(moved.value.message_dict) == ["team"]
    with pytest.raises(ValidationError) as refused:
        services.webhook_endpoint_update(endpoint=alices_endpoint, actor=alice, team=team_a, allow_private_network=True)
    assert refused.value.message_dict == {"allow_private_network": [PRIVATE_ADMIN_ONLY]}
    assert world() == before


def test_an_owners_new_url_loses_the_private_allowance_a_platform_admin_gave(
    alice, dave, team_a, monkeypatch, receiver, dispatched
):
    monkeypatch.setattr(
        targets,
        "resolve",
        lambda host, port: [ipaddress.ip_address("127.0.0.1" if host == "127.0.0.1" else "10.20.30.40")],
    )
    endpoint, _ = services.webhook_endpoint_create(
        actor=dave,
        team=team_a,
        name="relay",
        url="https://relay.internal.test/x",
        events=["tenant.ready"],
        allow_private_network=True,
    )
    services.webhook_endpoint_update(endpoint=endpoint, actor=alice, team=team_a, name="relay 2")
    endpoint.refresh_from_db()
    assert endpoint.allow_private_network and endpoint.name == "relay 2"  # the admin's allowance, for that URL
    with pytest.raises(ValidationError) as refused:
        services.webhook_endpoint_update(
            endpoint=endpoint, actor=alice, team=team_a, url="https://other.internal.test/"
        )
    # An owner is not told where the name points (the server's resolver is no map of internal names).
    assert "resolves to an address that is not public" in refused.value.message_dict["url"][0]
    assert "10.20.30.40" not in refused.value.message_dict["url"][0]
    services.webhook_endpoint_update(endpoint=endpoint, actor=alice, team=team_a, url=receiver().url())
    endpoint.refresh_from_db()
    assert not endpoint.allow_private_network and endpoint.url_origin.startswith("http://127.0.0.1:")


@pytest.mark.parametrize("who", ["amir", "vera", "carol", "bob", "erin"])
def test_members_viewers_approvers_and_other_teams_owners_change_nothing(
    request, who, team_a, hook_url, alices_endpoint
):
    person = request.getfixturevalue(who)
    before = world()
    attempts = [
        lambda: services.webhook_endpoint_create(actor=person, team=team_a, name="x", url=hook_url, events=["ping"]),
        lambda: services.webhook_endpoint_update(endpoint=alices_endpoint, actor=person, team=team_a, name="x"),
        lambda: services.webhook_endpoint_rotate_secret(endpoint=alices_endpoint, actor=person),
        lambda: services.webhook_endpoint_test(endpoint=alices_endpoint, actor=person),
        lambda: services.webhook_endpoint_delete(endpoint=alices_endpoint, actor=person),
    ]
    for attempt in attempts:
        with pytest.raises(Forbidden, match="team owners and platform admins"):
            attempt()
    assert world() == before and not WebhookDelivery.objects.exists()


def test_a_team_has_at_most_the_configured_number_of_endpoints(
    settings, alice, bob, dave, team_a, team_b, hook_url, dispatched
):
    settings.BERTH_TEAM_WEBHOOK_LIMIT = 2
    for name in ("one", "two"):
        services.webhook_endpoint_create(actor=alice, team=team_a, name=name, url=hook_url, events=["tenant.ready"])
    with pytest.raises(ValidationError) as refused:
        services.webhook_endpoint_create(actor=alice, team=team_a, name="three", url=hook_url, events=["tenant.ready"])
    assert "the most a team may have" in refused.value.messages[0] and not hasattr(refused.value, "error_dict")
    services.webhook_endpoint_create(actor=bob, team=team_b, name="b", url=hook_url, events=["tenant.ready"])
    services.webhook_endpoint_create(actor=dave, team=team_a, name="by an admin", url=hook_url, events=["tenant.ready"])
    assert WebhookEndpoint.objects.filter(team=team_a).count() == 3


def test_a_team_endpoint_hears_only_its_teams_tenants_even_after_a_transfer(
    alice, bob, team_a, team_b, ready_tenant, small, hook_url, dispatched
):
    for_a, _ = services.webhook_endpoint_create(actor=alice, team=team_a, name="a", url=hook_url, events=SUBSCRIBABLE)
    for_b, _ = services.webhook_endpoint_create(actor=bob, team=team_b, name="b", url=hook_url, events=SUBSCRIBABLE)
    shop = ready_tenant(name="shop", tier=small)  # small: a transfer within budget completes on acceptance

    def heard() -> dict[str, set[int]]:
        found: dict[str, set[int]] = {}
        for event, endpoint_id in WebhookDelivery.objects.filter(tenant=shop).values_list("event", "endpoint_id"):
            found.setdefault(event, set()).add(endpoint_id)
        WebhookDelivery.objects.all().delete()
        return found

    assert heard() == {"request.decided": {for_a.pk}, "tenant.ready": {for_a.pk}}
    req = services.transfer_ask(tenant=shop, target_team=team_b, actor=alice)
    services.transfer_accept(tenant_request=req, actor=bob)
    # Both teams hear of the offer and of the move (the old team's access ends with it) ...
    moved = heard()
    assert moved["transfer.asked"] == moved["tenant.transferred"] == {for_a.pk, for_b.pk}
    assert moved["request.decided"] == {for_a.pk}  # the request was team-a's
    # ... and from then on only team-b hears of the tenant.
    shop.refresh_from_db()
    services.tenant_remind_expiry(tenant=shop)
    services.tenant_mark_failed(tenant=shop, reason="quota")
    assert heard() == {"tenant.expiring": {for_b.pk}, "tenant.failed": {for_b.pk}}


def test_a_stale_copy_never_undoes_a_rotation_or_another_owners_change(alice, amir, team_a, alices_endpoint):
    """Two owners at once: the page or the API read the endpoint before another request rotated its secret and
    changed its events; saving the stale copy changes only what it was asked to."""
    stale = WebhookEndpoint.objects.get(pk=alices_endpoint.pk)
    rotated = services.webhook_endpoint_rotate_secret(endpoint=alices_endpoint, actor=alice)
    services.webhook_endpoint_update(endpoint=alices_endpoint, actor=alice, team=team_a, events=["tenant.expiring"])
    services.webhook_endpoint_update(endpoint=stale, actor=alice, team=team_a, name="renamed")
    now = WebhookEndpoint.objects.get(pk=alices_endpoint.pk)
    assert unseal(now.secret_sealed) == rotated
    assert (now.name, now.events) == ("renamed", ["tenant.expiring"])
    # A stale copy of a now-disabled endpoint leaves it disabled unless the change says otherwise.
    services.webhook_endpoint_update(endpoint=now, actor=alice, team=team_a, is_active=False)
    services.webhook_endpoint_update(endpoint=stale, actor=alice, team=team_a, name="again")
    assert not WebhookEndpoint.objects.get(pk=now.pk).is_active


def test_a_change_to_an_endpoint_removed_meanwhile_is_not_found(alice, team_a, alices_endpoint, dispatched):
    stale = WebhookEndpoint.objects.get(pk=alices_endpoint.pk)
    services.webhook_endpoint_delete(endpoint=alices_endpoint, actor=alice)
    before = world()
    for change in (
        lambda: services.webhook_endpoint_test(endpoint=stale, actor=alice),
        lambda: services.webhook_endpoint_update(endpoint=stale, actor=alice, team=team_a, name="back"),
        lambda: services.webhook_endpoint_rotate_secret(endpoint=stale, actor=alice),
        lambda: services.webhook_endpoint_delete(endpoint=stale, actor=alice),
    ):
        with pytest.raises(NoLongerExists):
            change()
    assert world() == before and not WebhookDelivery.objects.exists() and not dispatched
    assert isinstance(to_api_exception(NoLongerExists("gone")), NotFound)


def test_a_removal_between_reading_and_acting_answers_404_in_the_api_and_on_the_page(
    api, client, monkeypatch, alice, team_a, receiver, dispatched
):
    """Another owner removes the endpoint after the request read it and before the service locked it."""

    def removed_after_reading(read):
        def read_then_removed(*args):
            endpoint = read(*args)
            WebhookEndpoint.objects.filter(pk=endpoint.pk).delete()
            return endpoint

        return read_then_removed

    monkeypatch.setattr(TeamWebhookViewSet, "endpoint", removed_after_reading(TeamWebhookViewSet.endpoint))
    monkeypatch.setattr(team_webhook_pages, "_endpoint", removed_after_reading(team_webhook_pages._endpoint))
    client.force_login(alice)
    url = receiver().url()
    for method, action in (("post", "test/"), ("post", "rotate-secret/"), ("patch", ""), ("delete", "")):
        endpoint, _ = services.webhook_endpoint_create(
            actor=alice, team=team_a, name="x", url=url, events=["tenant.ready"]
        )
        answer = getattr(api(alice), method)(f"{API}/team-a/webhooks/{endpoint.pk}/{action}", {}, format="json")
        assert answer.status_code == 404, (method, action, answer.content)
    for action in ("test/", "rotate/", "delete/"):
        endpoint, _ = services.webhook_endpoint_create(
            actor=alice, team=team_a, name="x", url=url, events=["tenant.ready"]
        )
        assert client.post(f"/teams/team-a/webhooks/{endpoint.pk}/{action}").status_code == 404, action
    assert not WebhookDelivery.objects.exists()
    assert not AuditEvent.objects.filter(action__in=["webhook.test", "webhook.rotate_secret", "webhook.update"])


def test_a_test_event_waits_for_the_last_one_to_finish(api, client, alice, alices_endpoint, dispatched):
    one = f"{API}/team-a/webhooks/{alices_endpoint.pk}/"
    first = api(alice).post(f"{one}test/")
    assert first.status_code == 202, first.content
    again = api(alice).post(f"{one}test/")
    assert again.status_code == 409 and "still being sent" in again.json()["detail"], again.content
    client.force_login(alice)
    page = client.post(f"/teams/team-a/webhooks/{alices_endpoint.pk}/test/", follow=True)
    assert page.status_code == 200 and "still being sent" in page.content.decode()
    assert WebhookDelivery.objects.count() == 1
    assert AuditEvent.objects.filter(action="webhook.test").count() == 1
    WebhookDelivery.objects.update(status="failed")  # given up: the owner may try again
    assert api(alice).post(f"{one}test/").status_code == 202 and WebhookDelivery.objects.count() == 2


def test_an_endpoint_whose_deliveries_keep_failing_is_turned_off_until_an_owner_turns_it_on(
    api, client, settings, alice, amir, team_a, receiver, dispatched
):
    settings.BERTH_WEBHOOK_DISABLE_AFTER_FAILURES = 3
    answers = iter([410, 200, 410, 410, 410])  # 410 Gone: given up at once
    hooks = receiver(respond=lambda got: next(answers, 200))
    endpoint, _ = services.webhook_endpoint_create(
        actor=alice, team=team_a, name="gone", url=hooks.url(), events=["tenant.ready"]
    )

    def ping() -> str:
        delivery = services.webhook_endpoint_test(endpoint=endpoint, actor=alice)
        return services.webhook_deliver(delivery_id=str(delivery.pk))

    assert [ping(), ping()] == ["failed", "delivered"]  # a delivery that went through starts the count anew
    assert [ping(), ping()] == ["failed", "failed"]
    assert WebhookEndpoint.objects.get(pk=endpoint.pk).is_active
    assert ping() == "failed"
    off = WebhookEndpoint.objects.get(pk=endpoint.pk)
    assert not off.is_active and off.disabled_at is not None
    assert "the last 3 deliveries were all given up (HTTP 410)" in off.disabled_reason
    (event,) = AuditEvent.objects.filter(action="webhook.disable")
    assert (event.actor, event.actor_name, event.team) == (None, "system", team_a)
    assert event.before["is_active"] and not event.after["is_active"]
    # A delivery refused because the endpoint is off is not another failure of the receiver.
    assert ping() == "failed" and WebhookEndpoint.objects.get(pk=endpoint.pk).consecutive_failures == 3
    one = f"{API}/team-a/webhooks/{endpoint.pk}/"
    shown = api(amir).get(one).json()
    assert shown["is_active"] is False and shown["disabled_reason"] == off.disabled_reason and shown["disabled_at"]
    client.force_login(amir)
    assert off.disabled_reason in client.get("/teams/team-a/").content.decode()
    assert api(amir).patch(one, {"is_active": True}, format="json").status_code == 403
    turned_on = api(alice).patch(one, {"is_active": True}, format="json")
    assert turned_on.status_code == 200 and turned_on.json()["disabled_reason"] == ""
    on = WebhookEndpoint.objects.get(pk=endpoint.pk)
    assert on.is_active and on.consecutive_failures == 0 and on.disabled_at is None


def test_a_team_owner_is_not_told_where_a_name_resolves_and_a_platform_admin_is(
    api, alice, dave, team_a, monkeypatch, dispatched
):
    answers = {"localhost": "127.0.0.2", "db.corp.test": "10.1.2.3", "meta.corp.test": "169.254.169.254"}
    monkeypatch.setattr(targets, "resolve", lambda host, port: [ipaddress.ip_address(answers.get(host) or host)])
    for host, address in answers.items():
        body = {"name": "x", "url": f"https://{host}/hook", "events": ["tenant.ready"]}
        owner = api(alice).post(f"{API}/team-a/webhooks/", body, format="json")
        assert owner.status_code == 400 and address not in owner.content.decode()
        assert owner.json()["url"] == [
            f"{host} resolves to an address that is not public; webhooks go to public addresses only (a platform "
            "admin may allow private ones for an endpoint)."
        ]
        admin = api(dave).post(f"{API}/team-a/webhooks/", body, format="json")
        assert admin.status_code == 400 and f"{host} resolves to {address} is" in admin.json()["url"][0]
    # An address typed into the URL itself is the owner's own: the refusal may name it.
    typed = api(alice).post(f"{API}/team-a/webhooks/", {**body, "url": "http://127.0.0.2/"}, format="json")
    assert typed.json()["url"][0].startswith("127.0.0.2 is a loopback address")
    assert not WebhookEndpoint.objects.exists()


def test_the_delivery_log_never_shows_where_a_name_resolves(monkeypatch):
    monkeypatch.setattr(targets, "resolve", lambda host, port: [ipaddress.ip_address("10.9.8.7")])
    outcome = sender.post(url="https://rebound.test/x", body=b"{}", headers={}, allow_private=False, timeout=1)
    assert outcome.permanent and "10.9.8.7" not in outcome.error and "not public" in outcome.error


# --- API ----------------------------------------------------------------------------------------


def test_members_read_the_endpoints_without_url_paths_or_secrets(
    api, alice, amir, vera, dave, alices_endpoint, django_assert_max_num_queries
):
    for person in (alice, amir, vera, dave):
        with django_assert_max_num_queries(6):
            page = api(person).get(f"{API}/team-a/webhooks/")
        assert page.status_code == 200, page.content
        (row,) = page.json()["results"]
        assert row == api(person).get(f"{API}/team-a/webhooks/{alices_endpoint.pk}/").json()
        assert row["team"] == "team-a" and row["url_origin"].startswith("http://127.0.0.1:")
        assert row["events"] == ["tenant.failed", "tenant.ready"] and row["created_by"] == "alice"
        assert row["last_delivery_status"] is None and "secret" not in row and "PATHSECRET" not in str(row)


def test_another_teams_slug_or_endpoint_is_404_for_every_method(api, bob, carol, erin, alices_endpoint, hook_url):
    before = world()
    base = f"{API}/team-a/webhooks/"
    one = f"{base}{alices_endpoint.pk}/"
    for person in (bob, carol, erin):
        client = api(person)
        for response in (
            client.get(base),
            client.get(one),
            client.get(f"{one}deliveries/"),
            client.post(base, {"name": "x", "url": hook_url, "events": ["tenant.ready"]}, format="json"),
            client.patch(one, {"name": "x"}, format="json"),
            client.delete(one),
            client.post(f"{one}rotate-secret/"),
            client.post(f"{one}test/"),
        ):
            assert response.status_code == 404, (person, response.request["PATH_INFO"], response.content)
    # team-a's endpoint under team-b's slug, for team-b's own owner: not there either.
    assert api(bob).get(f"{API}/team-b/webhooks/{alices_endpoint.pk}/").status_code == 404
    assert api(bob).delete(f"{API}/team-b/webhooks/{alices_endpoint.pk}/").status_code == 404
    assert world() == before


def test_an_owner_creates_changes_rotates_tests_and_deletes_through_the_api(api, alice, hook_url, dispatched):
    client = api(alice)
    created = client.post(
        f"{API}/team-a/webhooks/",
        {"name": "alerts", "url": hook_url, "events": ["tenant.failed"], "format": "slack"},
        format="json",
    )
    assert created.status_code == 201, created.content
    body = created.json()
    endpoint = WebhookEndpoint.objects.get()
    assert body["secret"] == unseal(endpoint.secret_sealed) and body["id"] == endpoint.pk
    assert body["team"] == "team-a" and body["format"] == "slack" and "PATHSECRET" not in str(body)
    one = f"{API}/team-a/webhooks/{endpoint.pk}/"
    assert "secret" not in client.get(one).json()
    changed = client.patch(one, {"events": ["tenant.ready", "tenant.ready"], "is_active": False}, format="json")
    assert changed.status_code == 200 and changed.json()["events"] == ["tenant.ready"]
    assert changed.json()["is_active"] is False and changed.json()["name"] == "alerts"
    rotated = client.post(f"{one}rotate-secret/")
    assert rotated.status_code == 200 and rotated.json()["secret"] != body["secret"]
    endpoint.refresh_from_db()
    assert unseal(endpoint.secret_sealed) == rotated.json()["secret"]
    pinged = client.post(f"{one}test/")
    assert pinged.status_code == 202 and pinged.json()["event"] == "ping" and pinged.json()["status"] == "pending"
    deliveries = client.get(f"{one}deliveries/").json()
    assert deliveries["count"] == 1 and deliveries["results"][0]["id"] == pinged.json()["id"]
    assert "payload" not in deliveries["results"][0]
    assert client.get(one).json()["last_delivery_status"] == "pending"
    assert client.delete(one).status_code == 204 and not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize("who", ["amir", "vera"])
def test_members_and_viewers_cannot_write_through_the_api(api, request, who, alices_endpoint, hook_url):
    client = api(request.getfixturevalue(who))
    before = world()
    one = f"{API}/team-a/webhooks/{alices_endpoint.pk}/"
    for response in (
        client.post(f"{API}/team-a/webhooks/", {"name": "x", "url": hook_url, "events": ["tenant.ready"]}, "json"),
        client.patch(one, {"name": "x"}, format="json"),
        client.delete(one),
        client.post(f"{one}rotate-secret/"),
        client.post(f"{one}test/"),
    ):
        assert response.status_code == 403 and "team owners and platform admins" in response.json()["detail"]
    assert world() == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "http://169.254.169.254/latest/meta-data/"}, "url"),
        ({"url": "file:///etc/passwd"}, "url"),
        ({"url": "http://user:pw@127.0.0.1/"}, "url"),
        ({"url": 5}, "url"),
        ({"url": "http://[::1]/" + "a" * 2000}, "url"),
        ({"url": "http://a\x00b/"}, "url"),
        ({"url": "http://[::1/"}, "url"),  # brackets that hold no IPv6 address
        ({"url": "http://[zz]/"}, "url"),
        ({"url": "http://a]/"}, "url"),
        ({"name": ""}, "name"),
        ({"name": ["x"]}, "name"),
        ({"events": []}, "events"),
        ({"events": "tenant.ready"}, "events"),
        ({"events": [1]}, "events"),
        ({"events": [["tenant.ready"]]}, "events"),
        ({"events": ["tenant.ready\x00"]}, "events"),
        ({"events": ["ping"]}, "events"),
        ({"events": {"0": "tenant.ready"}}, "events"),
        ({"format": "xml"}, "format"),
        ({"secret": "whsec_short"}, "secret"),
        ({"is_active": "yes"}, "is_active"),
        ({"allow_private_network": True}, "allow_private_network"),
        ({"team": "team-b"}, "team"),
        ({"team": None}, "team"),
        ({"url_origin": "https://example.com"}, "url_origin"),
        ({"created_by": "dave"}, "created_by"),
        ({"id": 7}, "id"),
    ],
)
def test_bad_input_is_a_field_error_and_nothing_is_kept(api, alice, team_a, hook_url, body, field):
    before = world()
    data = {"name": "x", "url": hook_url, "events": ["tenant.ready"], **body}
    response = api(alice).post(f"{API}/team-a/webhooks/", data, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json() and all(isinstance(m, str) for m in response.json()[field])
    assert world() == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"team": "team-b"}, "team"),
        ({"allow_private_network": True}, "allow_private_network"),
        ({"url": "http://127.0.0.2/"}, "url"),
        ({"events": []}, "events"),
        ({"name": "  "}, "name"),
        ({"secret": "whsec_" + "A" * 44}, "secret"),
    ],
)
def test_a_bad_change_is_a_field_error_and_nothing_changes(api, alice, alices_endpoint, body, field):
    before = world()
    response = api(alice).patch(f"{API}/team-a/webhooks/{alices_endpoint.pk}/", body, format="json")
    assert response.status_code == 400 and field in response.json(), response.content
    assert world() == before


def test_the_cap_is_a_400_that_says_why(api, settings, alice, hook_url):
    settings.BERTH_TEAM_WEBHOOK_LIMIT = 1
    body = {"name": "x", "url": hook_url, "events": ["tenant.ready"]}
    assert api(alice).post(f"{API}/team-a/webhooks/", body, format="json").status_code == 201
    refused = api(alice).post(f"{API}/team-a/webhooks/", body, format="json")
    assert refused.status_code == 400 and "the most a team may have" in refused.json()["non_field_errors"][0]


def test_platform_admins_manage_any_teams_endpoints_and_may_allow_private_addresses(
    api, dave, alices_endpoint, monkeypatch
):
    monkeypatch.setattr(targets, "resolve", lambda host, port: [ipaddress.ip_address("10.1.2.3")])
    one = f"{API}/team-a/webhooks/{alices_endpoint.pk}/"
    changed = api(dave).patch(one, {"url": "https://relay.internal.test/", "allow_private_network": True}, "json")
    assert changed.status_code == 200 and changed.json()["allow_private_network"] is True
    assert api(dave).delete(one).status_code == 204


def test_a_team_token_reaches_only_its_team(token_client, alice, bob, team_a, team_b, alices_endpoint):
    assert token_client(alice, team=team_a).get(f"{API}/team-a/webhooks/").json()["count"] == 1
    assert token_client(bob, team=team_b).get(f"{API}/team-a/webhooks/").status_code == 404


def test_an_endpoint_id_past_any_integer_is_404_not_500(api, alice, team_a):
    for path in (f"{API}/team-a/webhooks/{'9' * 19}/", f"{API}/team-a/webhooks/{'9' * 30}/deliveries/"):
        assert api(alice).get(path).status_code == 404


# --- The schema ---------------------------------------------------------------------------------


@pytest.fixture
def schema(api, erin) -> dict:
    response = api(erin).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi")
    return yaml.safe_load(response.content)


def test_the_schema_says_what_the_endpoints_answer(schema):
    paths = schema["paths"]
    listing, one = paths["/api/v1/teams/{slug}/webhooks/"], paths["/api/v1/teams/{slug}/webhooks/{id}/"]
    assert set(listing) == {"get", "post"} and set(one) == {"get", "patch", "delete"}
    assert set(paths["/api/v1/teams/{slug}/webhooks/{webhook_id}/deliveries/"]) == {"get"}
    ref = "#/components/schemas/"
    assert listing["post"]["responses"]["201"]["content"]["application/json"]["schema"]["$ref"] == (
        ref + "WebhookEndpointCreated"
    )
    rotate = paths["/api/v1/teams/{slug}/webhooks/{id}/rotate-secret/"]["post"]["responses"]
    assert rotate["200"]["content"]["application/json"]["schema"]["$ref"] == ref + "WebhookSecret"
    assert "202" in paths["/api/v1/teams/{slug}/webhooks/{id}/test/"]["post"]["responses"]
    assert "204" in one["delete"]["responses"]
    for path, operations in paths.items():
        if "/webhooks/" not in path:
            continue
        for method, operation in operations.items():
            responses = operation["responses"]
            assert "404" in responses and "400" in responses, (method, path)
            assert ("403" in responses) == (method != "get"), (method, path)
            assert ("409" in responses) == path.endswith("/test/"), (method, path)  # a test event still pending
    components = schema["components"]["schemas"]
    assert "secret" not in components["WebhookEndpoint"]["properties"]
    assert "url" not in components["WebhookEndpoint"]["properties"]
    assert "payload" not in components["WebhookDelivery"]["properties"]
    assert "secret" in components["WebhookEndpointCreated"]["required"]
    for name in ("WebhookEndpointCreateRequest", "PatchedWebhookEndpointUpdateRequest"):
        assert components[name]["additionalProperties"] is False
        assert not {"team", "url_origin", "created_by"} & set(components[name]["properties"])
        assert components[name]["properties"]["events"]["items"] == {"$ref": ref + "EventsEnum"}
    assert components["EventsEnum"]["enum"] == SUBSCRIBABLE


# --- The team's page ----------------------------------------------------------------------------


def _secret_on(html: str) -> str:
    found = re.search(r'<code id="webhook-secret">([^<]+)</code>', html)
    return found.group(1) if found else ""


def test_the_page_shows_members_the_endpoints_and_owners_the_forms(client, alice, amir, carol, alices_endpoint):
    client.force_login(amir)
    html = client.get("/teams/team-a/").content.decode()
    assert 'id="notifications-title"' in html and "payments" in html and "PATHSECRET" not in html
    assert "/teams/team-a/webhooks/" not in html.replace("/api/v1/teams/team-a/webhooks/", "")  # no forms
    client.force_login(carol)  # an approver sees the team's tenants, not where its notifications go
    html = client.get("/teams/team-a/").content.decode()
    assert client.get("/teams/team-a/").status_code == 200 and "notifications-title" not in html
    client.force_login(alice)
    html = client.get("/teams/team-a/").content.decode()
    for action in ("test/", "rotate/#notifications", "delete/", "#notifications"):
        assert f'action="/teams/team-a/webhooks/{alices_endpoint.pk}/{action}"' in html
    assert 'action="/teams/team-a/webhooks/#notifications"' in html and "PATHSECRET" not in html


def test_an_owner_adds_an_endpoint_on_the_page_and_sees_its_secret_once(client, alice, hook_url, dispatched):
    client.force_login(alice)
    form = {"new-hook-name": "alerts", "new-hook-url": hook_url, "new-hook-format": "json"}
    form["new-hook-events"] = ["tenant.ready", "tenant.failed"]
    for field, changed in (("url", "http://169.254.169.254/"), ("events", ""), ("name", " ")):
        refused = client.post("/teams/team-a/webhooks/", {**form, f"new-hook-{field}": changed})
        assert refused.status_code == 200 and not WebhookEndpoint.objects.exists()
        errors = refused.context["notifications"]["add_form"].errors
        assert list(errors) == [field], errors
        assert 'id="new-hook-error-title"' in refused.content.decode()
    assert (
        "public addresses only"
        in client.post("/teams/team-a/webhooks/", {**form, "new-hook-url": "http://169.254.169.254/"})
        .context["notifications"]["add_form"]
        .errors["url"][0]
    )
    added = client.post("/teams/team-a/webhooks/", form)
    assert added.status_code == 200 and "no-store" in added["Cache-Control"]
    endpoint = WebhookEndpoint.objects.get()
    assert _secret_on(added.content.decode()) == unseal(endpoint.secret_sealed)
    assert endpoint.team.slug == "team-a" and endpoint.events == ["tenant.failed", "tenant.ready"]
    assert _secret_on(client.get("/teams/team-a/").content.decode()) == ""


def test_an_owner_changes_rotates_tests_and_removes_on_the_page(client, alice, alices_endpoint, receiver):
    client.force_login(alice)
    pk = alices_endpoint.pk
    prefix = f"hook-{pk}"
    refused = client.post(
        f"/teams/team-a/webhooks/{pk}/",
        {
            f"{prefix}-name": "x",
            f"{prefix}-url": "http://127.0.0.2/",
            f"{prefix}-format": "json",
            f"{prefix}-events": "tenant.ready",
        },
    )
    assert refused.status_code == 200 and list(refused.context["notifications"]["rows"][0]["form"].errors) == ["url"]
    assert refused.context["notifications"]["rows"][0]["open"]
    saved = client.post(
        f"/teams/team-a/webhooks/{pk}/",
        {f"{prefix}-name": "renamed", f"{prefix}-format": "slack", f"{prefix}-events": ["tenant.expiring"]},
    )
    assert saved.status_code == 302 and saved["Location"] == "/teams/team-a/#notifications"
    alices_endpoint.refresh_from_db()
    assert (alices_endpoint.name, alices_endpoint.format, alices_endpoint.is_active) == ("renamed", "slack", False)
    assert "PATHSECRET" in (unseal(alices_endpoint.url_sealed) or "")  # an empty URL keeps the stored one
    rotated = client.post(f"/teams/team-a/webhooks/{pk}/rotate/")
    alices_endpoint.refresh_from_db()
    assert _secret_on(rotated.content.decode()) == unseal(alices_endpoint.secret_sealed)
    assert client.post(f"/teams/team-a/webhooks/{pk}/test/").status_code == 302
    assert WebhookDelivery.objects.get().event == "ping"
    assert client.post(f"/teams/team-a/webhooks/{pk}/delete/").status_code == 302
    assert not WebhookEndpoint.objects.exists()


def test_the_pages_forms_refuse_members_and_other_teams(client, amir, bob, carol, alices_endpoint, hook_url):
    before = world()
    pk = alices_endpoint.pk
    form = {"new-hook-name": "x", "new-hook-url": hook_url, "new-hook-format": "json", "new-hook-events": "ping"}
    for person, status in ((amir, 403), (bob, 404), (carol, 404)):
        client.force_login(person)
        assert client.post("/teams/team-a/webhooks/", form).status_code == status
        for action in ("rotate/", "test/", "delete/"):
            assert client.post(f"/teams/team-a/webhooks/{pk}/{action}").status_code == status
    assert world() == before


def test_writes_count_against_the_write_throttle_and_reads_do_not(api, monkeypatch, alice, alices_endpoint):
    monkeypatch.setattr(SharedRateThrottle, "THROTTLE_RATES", {"writes": "3/min"})
    client = api(alice)
    one = f"{API}/team-a/webhooks/{alices_endpoint.pk}/"
    answers = [client.patch(one, {"name": f"n{i}"}, format="json").status_code for i in range(3)]
    answers.append(client.post(f"{one}rotate-secret/").status_code)
    assert answers == [200, 200, 200, 429]
    assert client.get(one).status_code == 200 and client.get(f"{one}deliveries/").status_code == 200
