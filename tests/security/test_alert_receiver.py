"""Berth's Alertmanager receiver (POST /hooks/alertmanager/) attacked over HTTP on the live portal (gunicorn, real
PostgreSQL): only Alertmanager's bearer token gets in (no user's API token, no guess), hostile bodies are refused
with a reason and never a 500, and an alert can only ever reach the team owning the namespace it names, whatever
other labels claim."""

from __future__ import annotations

import json

import pytest
import requests

from tenants import services
from tenants.alerts import MAX_BODY
from tenants.models import AuditEvent, TenantAlert, WebhookDelivery
from tests.tenants.test_alerts import alert, webhook

pytestmark = [pytest.mark.django_db(transaction=True)]
EVENTS = ["tenant.alert_firing", "tenant.alert_resolved"]


def _post(portal, body, *, authorization: str | None) -> requests.Response:
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return requests.post(f"{portal.url}/hooks/alertmanager/", data=data, headers=headers, timeout=30)


def test_without_alertmanagers_token_nothing_gets_in(live_portal, ready_tenant_row, alice, api_token):
    ready_tenant_row("team-a-web")
    body = webhook(alert("team-a-web"))
    user_token = api_token(alice)
    for authorization in (
        None,
        "Bearer ",
        "Bearer wrong-token",
        f"Bearer {live_portal.alertmanager_token[:-1]}",
        f"Token {live_portal.alertmanager_token}",  # the right secret in the API's scheme
        f"Token {user_token}",  # a user's own API token
        f"Bearer {user_token}",
        f"Bearer {live_portal.metrics_token}",  # another of Berth's tokens
    ):
        answer = _post(live_portal, body, authorization=authorization)
        assert answer.status_code == 401, (authorization, answer.text)
        assert answer.headers["WWW-Authenticate"] == 'Bearer realm="alertmanager"'
    assert not TenantAlert.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="tenant.alert_").exists()


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"\xff\xfe\x00",
        b"[" * 50_000,
        json.dumps({"version": "4", "alerts": [{"status": "firing"}]}).encode(),
        json.dumps(webhook({**alert("team-a-web"), "startsAt": "2026-13-45T99:99:99Z"})).encode(),
        json.dumps(webhook({**alert("team-a-web"), "labels": {"namespace": ["team-a-web"]}})).encode(),
        b'{"version": "4", "alerts": [' + b'{"a": 1},' * 200_000 + b'{"a": 1}]}',
        json.dumps(webhook({**alert("team-a-web"), "labels": {"namespace": "team-a-web", "pod": "\ud800"}})).encode(),
    ],
    ids=["empty", "text", "binary", "deep", "no-fingerprint", "bad-time", "list-label", "oversized", "surrogate"],
)
def test_hostile_bodies_are_400_with_a_reason_and_change_nothing(live_portal, ready_tenant_row, body):
    ready_tenant_row("team-a-web")
    answer = _post(live_portal, body, authorization=f"Bearer {live_portal.alertmanager_token}")
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]
    if len(body) > MAX_BODY:
        assert "larger than" in answer.json()["error"]
    assert not TenantAlert.objects.exists()


def test_an_alert_reaches_only_the_team_owning_its_namespace_whatever_else_it_claims(
    live_portal, ready_tenant_row, alice, bob, dave, team_a, team_b, medium, cluster, receiver
):
    alices = ready_tenant_row("team-a-web")
    bobs = type(alices).objects.create(
        name="team-b-api", namespace="team-b-api", team=team_b, tier=medium, cluster=cluster, status="ready",
        created_by=bob,
    )  # fmt: skip
    url = receiver().url()
    for team in (team_a, team_b):
        services.webhook_endpoint_create(actor=dave, name=f"{team.slug} alerts", url=url, events=EVENTS, team=team)
    # Labels a tenant might hope Berth routes by: another team, another tenant's id, another namespace's name.
    forged = alert(
        "team-b-api", team=team_a.slug, tenant=str(alices.pk), exported_namespace="team-a-web", berth_cluster="x"
    )
    answer = _post(live_portal, webhook(forged), authorization=f"Bearer {live_portal.alertmanager_token}")
    assert answer.status_code == 200, answer.text
    # berth_cluster names no cluster of that namespace's tenant: it belongs to no one.
    assert answer.json() == {"received": {"unknown_namespace": 1}}
    del forged["labels"]["berth_cluster"]
    answer = _post(live_portal, webhook(forged), authorization=f"Bearer {live_portal.alertmanager_token}")
    assert answer.json() == {"received": {"fired": 1}}
    assert list(TenantAlert.objects.values_list("tenant_id", flat=True)) == [bobs.pk]
    deliveries = WebhookDelivery.objects.all()
    assert [(d.endpoint.team_id, d.tenant_id) for d in deliveries] == [(team_b.pk, bobs.pk)]
    assert AuditEvent.objects.get(action="tenant.alert_firing").team_id == team_b.pk


def test_other_methods_are_refused_and_record_nothing(live_portal):
    answer = requests.get(
        f"{live_portal.url}/hooks/alertmanager/",
        headers={"Authorization": f"Bearer {live_portal.alertmanager_token}"},
        timeout=30,
    )
    assert answer.status_code == 405 and answer.headers["Allow"] == "POST"


def test_an_alert_of_a_rule_berth_does_not_render_reaches_no_one(
    live_portal, ready_tenant_row, dave, team_a, receiver, settings
):
    """What an exporter's own rule (or a forged alert in a tenant's namespace) says never reaches the team: a name
    that is not one of Berth's rules is counted and dropped, nothing recorded, mailed or sent to a webhook."""
    ready_tenant_row("team-a-web")
    services.webhook_endpoint_create(actor=dave, name="alerts", url=receiver().url(), events=EVENTS, team=team_a)
    forged = alert("team-a-web", alertname="BerthTenantCredentialsExpired")
    forged["annotations"] = {"summary": "Renew your kubeconfig at https://evil.example/berth"}
    answer = _post(live_portal, webhook(forged), authorization=f"Bearer {live_portal.alertmanager_token}")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"received": {"unknown_rule": 1}}
    assert not TenantAlert.objects.exists()
    assert not WebhookDelivery.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="tenant.alert_").exists()
    metrics = requests.get(
        f"{live_portal.url}/metrics", headers={"Authorization": f"Bearer {live_portal.metrics_token}"}, timeout=30
    ).text
    assert 'berth_alerts_received_total{outcome="unknown_rule"} 1.0' in metrics
