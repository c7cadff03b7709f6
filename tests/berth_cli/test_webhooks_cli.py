"""`berth webhooks list/create/delete --team` against a live portal: an owner registers an endpoint (its URL read
from stdin, its secret printed once), members list it, another team's owner finds nothing, the owner removes it."""

from __future__ import annotations

import pytest

from tenants import services
from tenants.models import AuditEvent, WebhookEndpoint
from tenants.sealing import unseal
from tests.fixtures import TokenFactory
from tests.plugins.portal import BerthRunner

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_owner_creates_lists_and_deletes_a_teams_webhook(
    berth: BerthRunner, api_token: TokenFactory, alice, amir, bob, receiver
):
    owner, member, other = api_token(alice), api_token(amir), api_token(bob)
    url = receiver().url("/services/T0/B0/PATHSECRET")
    args = ["webhooks", "create", "--team", "team-a", "--name", "#alerts", "--url-stdin", "--format", "slack"]
    created = berth(*args, "--event", "tenant.failed", "--event", "tenant.ready", input=url + "\n", token=owner)
    assert created.code == 0, created.stderr
    endpoint = WebhookEndpoint.objects.get()
    assert (
        f"Signing secret (shown once; the receiver checks every delivery with it): {unseal(endpoint.secret_sealed)}"
        in (created.stdout)
    )
    assert endpoint.team.slug == "team-a" and endpoint.events == ["tenant.failed", "tenant.ready"]
    assert "PATHSECRET" not in created.stdout + created.stderr

    listed = berth("webhooks", "list", "--team", "team-a", token=member)
    assert listed.code == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split()[:3] == ["ID", "NAME", "FORMAT"]
    assert row.split() == [
        str(endpoint.pk),
        "#alerts",
        "slack",
        endpoint.url_origin,
        "tenant.failed,tenant.ready",
        "yes",
        "-",
    ]
    assert berth("webhooks", "list", "--team", "team-a", "-o", "json", token=member).json()[0]["id"] == endpoint.pk

    refused = berth("webhooks", "delete", "#alerts", "--team", "team-a", token=member)
    assert refused.code != 0 and "team owners and platform admins" in refused.stderr
    hidden = berth("webhooks", "list", "--team", "team-a", token=other)
    assert hidden.code != 0 and WebhookEndpoint.objects.exists()
    bad = berth(
        "webhooks",
        "create",
        "--team",
        "team-a",
        "--name",
        "x",
        "--url",
        "http://169.254.169.254/",
        "--event",
        "ping",
        token=owner,
    )
    assert bad.code != 0 and "url:" in bad.stderr and "events:" in bad.stderr

    removed = berth("webhooks", "delete", "#alerts", "--team", "team-a", token=owner)
    assert removed.code == 0, removed.stderr
    assert not WebhookEndpoint.objects.exists()
    assert AuditEvent.objects.filter(action="webhook.delete", actor=alice).exists()


def test_delete_by_name_never_takes_a_name_of_digits_for_another_endpoints_id(
    berth: BerthRunner, api_token: TokenFactory, alice, team_a, receiver
):
    """An endpoint named like another's id: the name is the one removed; an id is said with --id."""
    url = receiver().url()
    first, _ = services.webhook_endpoint_create(
        actor=alice, team=team_a, name="payments", url=url, events=["tenant.ready"]
    )
    named_like_an_id, _ = services.webhook_endpoint_create(
        actor=alice, team=team_a, name=str(first.pk), url=url, events=["tenant.ready"]
    )
    owner = api_token(alice)
    removed = berth("webhooks", "delete", str(first.pk), "--team", "team-a", token=owner)
    assert removed.code == 0, removed.stderr
    assert list(WebhookEndpoint.objects.values_list("pk", flat=True)) == [first.pk]
    unknown = berth("webhooks", "delete", "999999", "--team", "team-a", token=owner)
    assert unknown.code != 0 and "no webhook named '999999'; give its --id" in unknown.stderr
    for args in ([], ["payments", "--id", str(first.pk)]):
        usage = berth("webhooks", "delete", *args, "--team", "team-a", token=owner)
        assert usage.code != 0 and "NAME or its --id" in usage.stderr
    assert WebhookEndpoint.objects.filter(pk=first.pk).exists()
    by_id = berth("webhooks", "delete", "--id", str(first.pk), "--team", "team-a", token=owner)
    assert by_id.code == 0, by_id.stderr
    assert not WebhookEndpoint.objects.exists() and named_like_an_id.pk != first.pk
