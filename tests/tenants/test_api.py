"""The REST API v1: every endpoint, every error path, and no N+1 on lists."""

from __future__ import annotations

import csv
import datetime as dt
import io
import uuid
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone
from rest_framework import serializers

from tenants import audit, dispatch, services
from tenants.api.serializers import AuditEventSerializer
from tenants.api.throttling import WriteThrottle
from tenants.models import AuditEvent, Team, Tenant, TenantRequest, TenantStatus

pytestmark = pytest.mark.django_db

API = "/api/v1"


def create_body(**overrides) -> dict:
    return {"team": "team-a", "name": "web", "tier": "medium", "cluster": "dev", "purpose": "payments", **overrides}


# --- me, teams, tiers, clusters ---------------------------------------------------------


def test_me_describes_the_caller(api, alice):
    body = api(alice).get(f"{API}/me/").json()
    assert body == {
        "username": "alice",
        "display_name": "",
        "email": "alice@example.test",
        "teams": [{"team": "team-a", "role": "owner"}],
        "platform_roles": [],
    }


def test_me_names_platform_roles(api, dave, carol):
    assert api(dave).get(f"{API}/me/").json()["platform_roles"] == ["admin"]
    assert api(carol).get(f"{API}/me/").json()["platform_roles"] == ["approver"]


def test_teams_lists_the_callers_teams_with_their_budget(api, alice, team_b, make_tenant, team_a, medium):
    make_tenant(team=team_a, created_by=alice, tier=medium)
    body = api(alice).get(f"{API}/teams/").json()
    assert body["count"] == 1
    (team,) = body["results"]
    assert (team["slug"], team["name"], team["oidc_group"]) == ("team-a", "Team A", "team-a")
    assert team["budget"]["cpu_millis"] == {"used": 8000, "total": 16000, "remaining": 8000}
    assert team["budget"]["tenants"] == {"used": 1, "total": 10, "remaining": 9}


def test_approvers_list_every_team(api, carol, team_a, team_b):
    assert [t["slug"] for t in api(carol).get(f"{API}/teams/").json()["results"]] == ["team-a", "team-b"]


def test_tiers_lists_active_tiers_with_their_clusters(api, erin, cluster, large):
    large.is_active = False
    large.save()
    tiers = api(erin).get(f"{API}/tiers/").json()["results"]
    assert [(t["name"], t["clusters"], t["auto_approve"]) for t in tiers] == [
        ("small", ["dev"], True),
        ("medium", ["dev"], False),
    ]
    assert tiers[0]["max_credential_lifetime_seconds"] == 3600


def test_clusters_lists_active_clusters_with_tiers_and_kinds(api, erin, cluster):
    (body,) = api(erin).get(f"{API}/clusters/").json()["results"]
    assert body == {
        "name": "dev",
        "display_name": "Dev cluster",
        "public_endpoint": "https://dev.example.test:6443",
        "access_mode": "token",
        "kinds": ["namespace", "vcluster"],
        "tiers": ["small", "medium", "large"],
        "namespace_prefix": "",
    }
    assert "credential_ref" not in body and "api_url" not in body


# --- requests -------------------------------------------------------------------------


def test_alice_submits_a_request(api, alice, cluster):
    response = api(alice).post(f"{API}/requests/", create_body(), format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["status"], body["team"], body["tier"], body["cluster"], body["requested_by"]) == (
        "pending",
        "team-a",
        "medium",
        "dev",
        "alice",
    )
    assert Tenant.objects.get(pk=body["tenant"]).status == TenantStatus.REQUESTED


def test_a_small_request_is_auto_approved_over_the_api(
    api, alice, cluster, dispatched, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        body = api(alice).post(f"{API}/requests/", create_body(tier="small"), format="json").json()
    assert body["status"] == "approved" and body["auto_approved"] and body["decided_by"] is None
    assert dispatched == [(dispatch.PROVISION, (body["tenant"],))]


def test_the_idempotency_key_header_returns_the_first_request(api, alice, cluster):
    client = api(alice)
    first = client.post(f"{API}/requests/", create_body(), format="json", HTTP_IDEMPOTENCY_KEY="run-1").json()
    again = client.post(f"{API}/requests/", create_body(), format="json", HTTP_IDEMPOTENCY_KEY="run-1")
    assert again.status_code == 201 and again.json()["id"] == first["id"]


def test_a_replayed_key_with_another_body_answers_409_and_creates_nothing(api, alice, cluster):
    client = api(alice)
    first = client.post(f"{API}/requests/", create_body(), format="json", HTTP_IDEMPOTENCY_KEY="run-2")
    assert first.status_code == 201
    other = client.post(f"{API}/requests/", create_body(name="other"), format="json", HTTP_IDEMPOTENCY_KEY="run-2")
    assert other.status_code == 409 and "another request" in other.json()["detail"]
    assert TenantRequest.objects.count() == 1


@pytest.mark.parametrize("key", ["k" * 65, "with space", "tab\tkey", "nul\x00key", "ümlaut"])
def test_a_malformed_idempotency_key_is_a_field_error(api, alice, cluster, key):
    response = api(alice).post(f"{API}/requests/", create_body(), format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert response.status_code == 400 and "Idempotency-Key" in response.json()


def test_a_change_request_names_the_tenant(api, alice, ready_tenant):
    tenant = ready_tenant()
    response = api(alice).post(f"{API}/requests/", {"action": "delete", "tenant": str(tenant.pk)}, format="json")
    assert response.status_code == 201, response.content
    assert (response.json()["action"], response.json()["tenant"]) == ("delete", str(tenant.pk))


def test_requests_are_listed_for_the_team_and_filtered(api, alice, submit, carol):
    pending = submit(name="one")
    services.request_reject(tenant_request=submit(name="two"), actor=carol, reason="no")
    client = api(alice)
    assert client.get(f"{API}/requests/").json()["count"] == 2
    body = client.get(f"{API}/requests/", {"status": "pending"}).json()
    assert [r["id"] for r in body["results"]] == [str(pending.pk)]
    assert client.get(f"{API}/requests/", {"team": "team-b"}).json()["count"] == 0
    assert client.get(f"{API}/requests/", {"status": "bogus"}).status_code == 400


def test_a_request_is_retrieved_by_id(api, alice, submit):
    req = submit()
    body = api(alice).get(f"{API}/requests/{req.pk}/").json()
    assert (body["id"], body["name"], body["purpose"]) == (str(req.pk), "web", "")


def test_carol_approves_over_the_api(api, carol, submit, dispatched, django_capture_on_commit_callbacks):
    req = submit()
    with django_capture_on_commit_callbacks(execute=True):
        response = api(carol).post(f"{API}/requests/{req.pk}/approve/", {"comment": "ok"}, format="json")
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["decided_by"], response.json()["decision_comment"]) == (
        "approved",
        "carol",
        "ok",
    )
    assert dispatched == [(dispatch.PROVISION, (str(req.tenant_id),))]


def test_approve_takes_an_empty_body(api, carol, submit):
    assert api(carol).post(f"{API}/requests/{submit().pk}/approve/").status_code == 200


def test_carol_rejects_with_a_reason(api, carol, submit):
    req = submit()
    response = api(carol).post(f"{API}/requests/{req.pk}/reject/", {"reason": "use shared"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "rejected"


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "   "}])
def test_a_reject_without_a_reason_is_a_field_error(api, carol, submit, body):
    response = api(carol).post(f"{API}/requests/{submit().pk}/reject/", body, format="json")
    assert response.status_code == 400 and "reason" in response.json()


def test_the_requester_cancels(api, amir, submit):
    response = api(amir).post(f"{API}/requests/{submit(actor=amir).pk}/cancel/")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"


def test_approve_after_reject_is_409(api, carol, dave, submit):
    req = submit()
    api(carol).post(f"{API}/requests/{req.pk}/reject/", {"reason": "no"}, format="json")
    response = api(dave).post(f"{API}/requests/{req.pk}/approve/")
    assert response.status_code == 409 and "rejected" in response.json()["detail"]


def test_a_member_approving_is_403(api, amir, submit):
    response = api(amir).post(f"{API}/requests/{submit().pk}/approve/")
    assert response.status_code == 403 and "approvers" in response.json()["detail"]


def test_approving_your_own_request_is_403(api, dave, submit):
    response = api(dave).post(f"{API}/requests/{submit(actor=dave).pk}/approve/")
    assert response.status_code == 403


def test_a_viewer_submitting_is_403(api, vera, cluster):
    response = api(vera).post(f"{API}/requests/", create_body(), format="json")
    assert response.status_code == 403
    assert not TenantRequest.objects.exists()


@pytest.mark.parametrize("verb", ["approve", "reject", "cancel"])
def test_bob_gets_404_for_alices_request(api, bob, submit, verb):
    req = submit()
    client = api(bob)
    assert client.get(f"{API}/requests/{req.pk}/").status_code == 404
    assert client.post(f"{API}/requests/{req.pk}/{verb}/", {"reason": "x"}, format="json").status_code == 404
    assert TenantRequest.objects.get(pk=req.pk).status == TenantRequest.Status.PENDING


def test_bob_naming_team_a_gets_a_field_error_not_a_403(api, bob, cluster):
    response = api(bob).post(f"{API}/requests/", create_body(team="team-a"), format="json")
    assert response.status_code == 400 and response.json() == {"team": ["Object with slug=team-a does not exist."]}


def test_bob_naming_alices_tenant_gets_a_field_error(api, bob, ready_tenant):
    response = api(bob).post(f"{API}/requests/", {"action": "delete", "tenant": str(ready_tenant().pk)}, format="json")
    assert response.status_code == 400 and response.json() == {"tenant": ["No such tenant."]}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "web", "tier": "medium", "cluster": "dev"}, "team"),
        ({"team": "team-a", "name": "web", "cluster": "dev"}, "tier"),
        ({"team": "team-a", "name": "web", "tier": "medium"}, "cluster"),
        (create_body(name="Bad_Name"), "name"),
        (create_body(name="kube-system"), "name"),
        (create_body(name="x" * 64), "name"),
        (create_body(tier="gigantic"), "tier"),
        (create_body(cluster="nowhere"), "cluster"),
        (create_body(team="team-zzz"), "team"),
        (create_body(kind="lxc"), "kind"),
        (create_body(action="resize"), "action"),
        (create_body(requested_expiry="2020-01-01"), "requested_expiry"),
        (create_body(requested_expiry="tomorrow"), "requested_expiry"),
        (create_body(tenant="not-a-uuid", action="delete"), "tenant"),
        ({"action": "delete"}, "tenant"),
    ],
)
def test_bad_fields_are_400_with_the_field_named(api, alice, cluster, body, field):
    response = api(alice).post(f"{API}/requests/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()


def test_malformed_json_is_400(api, alice, cluster):
    response = api(alice).post(f"{API}/requests/", data='{"team": "team-a",', content_type="application/json")
    assert response.status_code == 400 and "JSON parse error" in response.json()["detail"]


def test_an_unsupported_media_type_is_415(api, alice, cluster):
    assert api(alice).post(f"{API}/requests/", data="team=a", content_type="text/plain").status_code == 415


GARBAGE = [
    [],
    [create_body()],
    "just a string",
    12,
    None,
    True,
    {"team": ["team-a"]},
    {"team": {"slug": "team-a"}},
    {"team": 5},
    {"tier": None},
    {"tier": ["medium"]},
    {"name": "x" * 100_000},
    {"purpose": "p" * 100_000},
    {"name": "a\x00b"},
    {"purpose": "a\x00b"},
    {"team": "team-a\x00"},
    {"tier": "\x00"},
    {"cluster": "dev\x00"},
    {"kind": "\x00"},
    {"name": {"a": 1}},
    {"name": ["web"]},
    {"name": True},
    {"purpose": {"a": 1}},
    {"requested_expiry": 12},
    {"requested_expiry": "9999-12-31"},
    {"requested_expiry": "0001-01-01"},
    {"requested_expiry": "2024-02-30"},
    {"requested_expiry": ["2030-01-01"]},
    {"tenant": 7},
    {"tenant": str(uuid.uuid4())},
    {"tenant": "\x00"},
    {"action": "delete", "tenant": None},
    {"action": None},
    {"kind": ["namespace"]},
]


@pytest.mark.parametrize("payload", GARBAGE, ids=[f"garbage{i}" for i in range(len(GARBAGE))])
def test_garbage_request_payloads_are_4xx_never_500(api, alice, cluster, payload):
    body = payload if not isinstance(payload, dict) else create_body(**payload)
    response = api(alice).post(f"{API}/requests/", body, format="json")
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])


@pytest.mark.parametrize(
    "payload",
    [
        [],
        "x",
        5,
        None,
        {"comment": {"a": 1}},
        {"comment": "c" * 5000},
        {"reason": ["x"]},
        {"reason": "a\x00b"},
        {"comment": "a\x00b"},
    ],
)
@pytest.mark.parametrize("verb", ["approve", "reject"])
def test_garbage_decision_payloads_are_4xx_never_500(api, carol, submit, payload, verb):
    response = api(carol).post(f"{API}/requests/{submit().pk}/{verb}/", payload, format="json")
    assert response.status_code in (200, 400), response.content[:300]


@pytest.mark.parametrize(
    "path",
    [
        "requests/not-a-uuid/",
        "requests/not-a-uuid/approve/",
        "requests/12345/reject/",
        "requests/%00/",
        "tenants/not-a-uuid/",
        "tenants/not-a-uuid/decommission/",
        "tenants/00000000-0000-0000-0000-000000000000/retry/",
        "tokens/abc/revoke/",
        "tokens/99999999999999999999999/revoke/",
        "tokens/-1/revoke/",
        "tokens/%00/revoke/",
    ],
)
def test_odd_ids_in_the_url_are_404_never_500(api, dave, path):
    client = api(dave)
    if path.endswith(("approve/", "reject/", "decommission/", "retry/", "revoke/")):
        response = client.post(f"{API}/{path}", {"reason": "x"}, format="json")
    else:
        response = client.get(f"{API}/{path}")
    assert response.status_code == 404, (response.status_code, response.content[:200])


# --- tenants --------------------------------------------------------------------------


def test_tenants_list_and_detail_with_monitoring_links(api, alice, ready_tenant):
    tenant = ready_tenant()
    client = api(alice)
    listed = client.get(f"{API}/tenants/").json()
    assert listed["count"] == 1
    detail = client.get(f"{API}/tenants/{tenant.pk}/").json()
    assert (detail["id"], detail["name"], detail["namespace"], detail["status"], detail["team"], detail["tier"]) == (
        str(tenant.pk),
        "web",
        "web",
        "ready",
        "team-a",
        "medium",
    )
    assert detail["monitoring_links"] == [
        {"name": "Grafana", "url": "https://grafana.example.test/d/ns?var-namespace=web"}
    ]


def test_tenants_are_filtered_by_status_team_and_cluster(api, dave, make_tenant, team_a, team_b, alice, bob):
    make_tenant(team=team_a, created_by=alice, status=TenantStatus.READY)
    make_tenant(team=team_a, created_by=alice, status=TenantStatus.FAILED)
    make_tenant(team=team_b, created_by=bob, status=TenantStatus.READY)
    client = api(dave)
    assert client.get(f"{API}/tenants/", {"status": "ready"}).json()["count"] == 2
    assert client.get(f"{API}/tenants/?status=ready&status=failed").json()["count"] == 3
    assert client.get(f"{API}/tenants/", {"team": "team-b"}).json()["count"] == 1
    assert client.get(f"{API}/tenants/", {"cluster": "elsewhere"}).json()["count"] == 0
    assert client.get(f"{API}/tenants/", {"status": "sleeping"}).status_code == 400


def test_alice_decommissions_over_the_api(api, alice, ready_tenant, dispatched, django_capture_on_commit_callbacks):
    tenant = ready_tenant()
    dispatched.clear()
    with django_capture_on_commit_callbacks(execute=True):
        response = api(alice).post(f"{API}/tenants/{tenant.pk}/decommission/", {"reason": "done"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "decommissioning"
    assert dispatched == [(dispatch.DECOMMISSION, (str(tenant.pk),))]


def test_a_member_decommissioning_is_403(api, amir, ready_tenant):
    assert api(amir).post(f"{API}/tenants/{ready_tenant().pk}/decommission/").status_code == 403


def test_decommissioning_twice_is_409(api, alice, ready_tenant):
    tenant = ready_tenant()
    client = api(alice)
    assert client.post(f"{API}/tenants/{tenant.pk}/decommission/").status_code == 200
    assert client.post(f"{API}/tenants/{tenant.pk}/decommission/").status_code == 409


def test_alice_retries_a_failed_tenant(api, alice, ready_tenant):
    tenant = services.tenant_mark_failed(tenant=ready_tenant(), reason="x")
    response = api(alice).post(f"{API}/tenants/{tenant.pk}/retry/")
    assert response.status_code == 200 and response.json()["status"] == "approved"


def test_retrying_a_ready_tenant_is_409(api, alice, ready_tenant):
    assert api(alice).post(f"{API}/tenants/{ready_tenant().pk}/retry/").status_code == 409


@pytest.mark.parametrize("verb", ["decommission", "retry"])
def test_bob_gets_404_for_alices_tenant(api, bob, ready_tenant, verb):
    tenant = ready_tenant()
    client = api(bob)
    assert client.get(f"{API}/tenants/{tenant.pk}/").status_code == 404
    assert client.post(f"{API}/tenants/{tenant.pk}/{verb}/").status_code == 404
    assert Tenant.objects.get(pk=tenant.pk).status == TenantStatus.READY


@pytest.mark.parametrize("payload", [[], "x", 5, {"reason": {"a": 1}}, {"reason": "r" * 5000}, {"reason": "a\x00b"}])
def test_garbage_decommission_payloads_are_400(api, alice, ready_tenant, payload):
    assert (
        api(alice).post(f"{API}/tenants/{ready_tenant().pk}/decommission/", payload, format="json").status_code == 400
    )


# --- audit events ---------------------------------------------------------------------


def test_audit_events_are_listed_for_the_team_and_filtered(api, alice, submit, carol, bob, team_b):
    req = submit()
    services.request_approve(tenant_request=req, actor=carol)
    audit.record(actor=bob, action="test.secret_of_b", object_type="x", team=team_b)
    client = api(alice)
    actions = [e["action"] for e in client.get(f"{API}/audit-events/").json()["results"]]
    assert "request.submit" in actions and "request.approve" in actions and "test.secret_of_b" not in actions
    assert [e["action"] for e in client.get(f"{API}/audit-events/", {"action": "request."}).json()["results"]] == [
        "request.approve",
        "request.submit",
    ]
    assert len(client.get(f"{API}/audit-events/", {"actor": "carol"}).json()["results"]) == 2
    assert (
        len(
            client.get(f"{API}/audit-events/", {"object_type": "tenant", "object_id": str(req.tenant_id)}).json()[
                "results"
            ]
        )
        == 1
    )
    assert len(client.get(f"{API}/audit-events/", {"team": "team-a"}).json()["results"]) == 3


def test_audit_events_filter_by_time(api, dave, alice):
    audit.record(actor=alice, action="test.one", object_type="x")
    client = api(dave)
    past = (timezone.now() - dt.timedelta(hours=1)).isoformat()
    future = (timezone.now() + dt.timedelta(hours=1)).isoformat()
    assert len(client.get(f"{API}/audit-events/", {"since": past}).json()["results"]) == 1
    assert client.get(f"{API}/audit-events/", {"since": future}).json() == {"next": None, "results": []}
    assert client.get(f"{API}/audit-events/", {"until": past}).json()["results"] == []
    assert client.get(f"{API}/audit-events/", {"since": "yesterday"}).status_code == 400


def test_audit_events_serialize_every_field(api, alice, team_a):
    audit.record(
        actor=alice,
        action="test.shape",
        object_type="thing",
        object_id="7",
        team=team_a,
        before={"a": 1},
        after={"b": 2},
        ctx=audit.AuditContext("rid", "192.0.2.1", "ua"),
    )
    (event,) = api(alice).get(f"{API}/audit-events/").json()["results"]
    assert {k: v for k, v in event.items() if k not in ("id", "at")} == {
        "actor_name": "alice",
        "team": "team-a",
        "object_type": "thing",
        "object_id": "7",
        "action": "test.shape",
        "before": {"a": 1},
        "after": {"b": 2},
        "request_id": "rid",
        "source_ip": "192.0.2.1",
        "user_agent": "ua",
    }


@pytest.mark.usefixtures("varied")
def test_audit_event_is_rendered_as_drf_would():
    """AuditEventSerializer writes its fields out from the rows it loads; DRF's own walk over the same fields of
    the same events, as model instances, renders the same."""
    rows = {row["id"]: row for row in AuditEventSerializer.load(AuditEvent.objects.all())}
    events = AuditEvent.objects.select_related("team")
    serializer: serializers.ModelSerializer = AuditEventSerializer()
    assert len(events) == len(rows) == 40
    for event in events:
        written_out = serializer.to_representation(rows[event.pk])
        assert list(written_out) == AuditEventSerializer.Meta.fields
        assert written_out == serializers.ModelSerializer.to_representation(serializer, event)


def test_the_audit_export_is_a_filtered_csv(api, alice, submit, bob, team_b):
    submit()
    audit.record(actor=bob, action="test.hidden", object_type="x", team=team_b)
    audit.record(actor=alice, action="=cmd|'/c calc'!A1", object_type="x")
    response = api(alice).get(f"{API}/audit-events/export/")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert 'attachment; filename="berth-audit.csv"' == response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0][:6] == ["at", "actor_name", "team", "object_type", "object_id", "action"]
    actions = [r[5] for r in rows[1:]]
    assert "request.submit" in actions and "test.hidden" not in actions
    assert "'=cmd|'/c calc'!A1" in actions  # no spreadsheet formula injection
    only = api(alice).get(f"{API}/audit-events/export/", {"action": "request."})
    assert [r[5] for r in list(csv.reader(io.StringIO(b"".join(only.streaming_content).decode())))[1:]] == [
        "request.submit"
    ]


def test_the_audit_export_refuses_a_bad_filter(api, alice):
    assert api(alice).get(f"{API}/audit-events/export/", {"since": "not-a-time"}).status_code == 400


# --- authentication -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "me/"),
        ("get", "teams/"),
        ("get", "tiers/"),
        ("get", "clusters/"),
        ("get", "requests/"),
        ("post", "requests/"),
        ("get", "tenants/"),
        ("get", "audit-events/"),
        ("get", "audit-events/export/"),
        ("get", "tokens/"),
        ("post", "tokens/"),
        ("post", f"requests/{uuid.uuid4()}/approve/"),
        ("post", f"tenants/{uuid.uuid4()}/decommission/"),
        ("post", "tokens/1/revoke/"),
    ],
)
def test_every_endpoint_needs_credentials(api, method, path):
    response = getattr(api(), method)(f"{API}/{path}")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_a_session_sign_in_works_for_reads(client, alice):
    client.force_login(alice)
    assert client.get(f"{API}/me/").json()["username"] == "alice"


def test_a_session_write_needs_the_csrf_token(alice, cluster):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    response = client.post(f"{API}/requests/", create_body(), content_type="application/json")
    assert response.status_code == 403 and "CSRF" in response.json()["detail"]


# --- throttling -----------------------------------------------------------------------


def test_writes_are_throttled_and_reads_are_not(api, alice, monkeypatch):
    monkeypatch.setattr(WriteThrottle, "THROTTLE_RATES", {"writes": "3/min"})
    client = api(alice)
    codes = [client.post(f"{API}/tokens/", {"name": f"t{i}"}, format="json").status_code for i in range(4)]
    assert codes == [201, 201, 201, 429]
    assert all(client.get(f"{API}/tokens/").status_code == 200 for _ in range(5))


def test_the_write_budget_is_per_person(api, alice, amir, monkeypatch):
    monkeypatch.setattr(WriteThrottle, "THROTTLE_RATES", {"writes": "1/min"})
    assert api(alice).post(f"{API}/tokens/", {"name": "a"}, format="json").status_code == 201
    assert api(alice).post(f"{API}/tokens/", {"name": "b"}, format="json").status_code == 429
    assert api(amir).post(f"{API}/tokens/", {"name": "c"}, format="json").status_code == 201


# --- query counts: lists cost the same for 3 rows and for 30 --------------------------

# The page's ids, its COUNT when the page does not tell it, the page's rows (tenants.api.pagination);
# audit events add the caller's team ids.
# The same bound for 3 rows, 30 and 60 (a full page of 50, so the COUNT runs): no N+1.
LIST_QUERIES = 4


def _fill_requests(n: int, *, team, user, cluster, tier) -> None:
    for i in range(n):
        tenant = Tenant.objects.create(
            name=f"q{i}", namespace=f"q{i}", team=team, tier=tier, cluster=cluster, created_by=user
        )
        TenantRequest.objects.create(
            action="create",
            name=tenant.name,
            team=team,
            tier=tier,
            cluster=cluster,
            tenant=tenant,
            requested_by=user,
            decided_by=user if i % 2 else None,
        )


@pytest.mark.parametrize("rows", [3, 30, 60])
def test_the_requests_list_has_no_n_plus_1(api, alice, team_a, cluster, medium, rows, django_assert_max_num_queries):
    _fill_requests(rows, team=team_a, user=alice, cluster=cluster, tier=medium)
    client = api(alice)
    with django_assert_max_num_queries(LIST_QUERIES):
        assert client.get(f"{API}/requests/").json()["count"] == rows


@pytest.mark.parametrize("rows", [3, 30, 60])
def test_the_tenants_list_has_no_n_plus_1(api, alice, team_a, cluster, medium, rows, django_assert_max_num_queries):
    _fill_requests(rows, team=team_a, user=alice, cluster=cluster, tier=medium)
    client = api(alice)
    with django_assert_max_num_queries(LIST_QUERIES):
        body = client.get(f"{API}/tenants/").json()
    assert body["count"] == rows and all(t["monitoring_links"] for t in body["results"])


@pytest.mark.parametrize("rows", [3, 30, 60])
def test_the_audit_events_list_has_no_n_plus_1(api, alice, team_a, rows, django_assert_max_num_queries):
    for i in range(rows):
        audit.record(actor=alice, action=f"test.{i}", object_type="x", team=team_a if i % 2 else None)
    client = api(alice)
    with django_assert_max_num_queries(LIST_QUERIES):
        body = client.get(f"{API}/audit-events/").json()
    assert len(body["results"]) == min(rows, 50) and (body["next"] is None) == (rows <= 50)


def test_a_token_holders_audit_page_is_two_statements(token_client, alice, team_a, django_assert_num_queries):
    """The token's statement reads the holder's teams too: the page's own statement is the only other one."""
    audit.record(actor=None, action="test.team", object_type="x", team=team_a)
    client = token_client(alice)
    client.get(f"{API}/audit-events/")  # the token's first use is written down (once a minute)
    with django_assert_num_queries(2):
        body = client.get(f"{API}/audit-events/?team=team-a").json()
    assert [event["action"] for event in body["results"]] == ["test.team"]


@pytest.mark.parametrize("rows", [3, 30])
def test_the_teams_list_has_no_n_plus_1(api, dave, alice, cluster, medium, rows, django_assert_max_num_queries):
    for i in range(rows):
        team = Team.objects.create(slug=f"team-q{i}", name=f"Q{i}", oidc_group=f"team-q{i}")
        Tenant.objects.create(
            name=f"q{i}", namespace=f"q{i}", team=team, tier=medium, cluster=cluster, created_by=alice
        )
    client = api(dave)
    with django_assert_max_num_queries(LIST_QUERIES):
        body = client.get(f"{API}/teams/").json()
    assert body["count"] == rows + 1  # and team-a, alice's
    assert all(t["budget"]["tenants"]["used"] == 1 for t in body["results"] if t["slug"].startswith("team-q"))


@pytest.mark.parametrize("rows", [3, 30])
def test_the_tokens_list_has_no_n_plus_1(api, alice, team_a, rows, django_assert_max_num_queries):
    for i in range(rows):
        services.api_token_create(actor=alice, name=f"t{i}", expires_in_days=1, team=team_a if i % 2 else None)
    client = api(alice)
    with django_assert_max_num_queries(LIST_QUERIES):
        assert client.get(f"{API}/tokens/").json()["count"] == rows


@pytest.mark.parametrize("path", ["requests/", "tenants/"])
def test_offset_page_links_keep_every_parameter_as_sent(api, alice, team_a, cluster, medium, path):
    """``next`` and ``previous`` carry the query as the client sent it, non-ASCII included (the raw query string
    reaches Django as Latin-1: rebuilt from it, ``✓`` came back as three other characters), with the page's
    limit and offset; the first page's ``previous`` has no offset."""
    _fill_requests(5, team=team_a, user=alice, cluster=cluster, tier=medium)
    client = api(alice)

    def query_of(link: str) -> dict[str, list[str]]:
        split = urlsplit(link)
        assert split.path == f"{API}/{path}"
        return parse_qs(split.query, keep_blank_values=True)

    body = client.get(f"{API}/{path}?note=✓ é&limit=2&offset=2&team=team-a&blank=").json()
    assert query_of(body["next"]) == {
        "blank": [""],
        "limit": ["2"],
        "note": ["✓ é"],
        "offset": ["4"],
        "team": ["team-a"],
    }
    assert query_of(body["previous"]) == {"blank": [""], "limit": ["2"], "note": ["✓ é"], "team": ["team-a"]}
    body = client.get(body["next"]).json()
    assert body["next"] is None and len(body["results"]) == 1
    assert query_of(body["previous"])["offset"] == ["2"]
    assert client.get(f"{API}/{path}?limit=2").json()["previous"] is None


def test_the_openapi_schema_renders(api, erin):
    response = api(erin).get("/api/schema/")
    assert response.status_code == 200 and b"/api/v1/requests/" in response.content


@pytest.mark.parametrize(
    "query",
    [
        "limit=abc",
        "limit=-1",
        "offset=-5",
        "offset=99999999999999999999",
        "limit=100000",
        "team=%00",
        "status=%00",
        "cluster=%00",
        "team=" + "t" * 10_000,
        "status=ready&status=%00",
    ],
)
@pytest.mark.parametrize("path", ["requests/", "tenants/", "audit-events/", "audit-events/export/"])
def test_odd_query_strings_on_lists_are_never_500(api, dave, path, query):
    assert api(dave).get(f"{API}/{path}?{query}").status_code in (200, 400)


@pytest.mark.parametrize("query", ["since=%00", "action=%00", "object_id=%00", "actor=%00x", "until=2024-13-01"])
def test_odd_audit_filters_are_400_or_empty_never_500(api, dave, query):
    assert api(dave).get(f"{API}/audit-events/?{query}").status_code in (200, 400)


# --- kubeconfigs and isolation checks (the credential itself comes from the worker's hook) ---


@pytest.fixture
def fake_issuer(worker_hooks) -> list[tuple]:
    """Stands in for the worker's TokenRequest: records what was asked, returns a recognisable kubeconfig."""
    return worker_hooks.grants


@pytest.mark.parametrize(("who", "role"), [("alice", "edit"), ("amir", "edit"), ("vera", "view"), ("dave", "edit")])
def test_the_team_gets_a_kubeconfig_with_its_role(api, ready_tenant, fake_issuer, who, role, request):
    tenant = ready_tenant()
    response = api(request.getfixturevalue(who)).post(
        f"{API}/tenants/{tenant.pk}/kubeconfig/", {"lifetime_seconds": 900}, format="json"
    )
    assert response.status_code == 200 and response["Content-Type"] == "application/yaml"
    assert response["Cache-Control"] == "no-store"
    assert fake_issuer == [("web", role, 900)]
    assert AuditEvent.objects.filter(action="tenant.kubeconfig_issued", object_id=str(tenant.pk)).count() == 1


def test_bob_gets_404_for_alices_kubeconfig(api, bob, ready_tenant, fake_issuer):
    assert api(bob).post(f"{API}/tenants/{ready_tenant().pk}/kubeconfig/").status_code == 404
    assert fake_issuer == []


def test_an_approver_outside_the_team_gets_no_credentials(api, carol, ready_tenant, fake_issuer):
    assert api(carol).post(f"{API}/tenants/{ready_tenant().pk}/kubeconfig/").status_code == 403
    assert fake_issuer == []


@pytest.mark.parametrize("lifetime", [599, 3601, -1, "long", [1]])
def test_a_lifetime_outside_600_to_the_tiers_maximum_is_400(api, alice, ready_tenant, fake_issuer, small, lifetime):
    tenant = ready_tenant(tier=small)  # small allows at most 3600 s
    response = api(alice).post(f"{API}/tenants/{tenant.pk}/kubeconfig/", {"lifetime_seconds": lifetime}, format="json")
    assert response.status_code == 400 and fake_issuer == []


def test_no_kubeconfig_before_the_tenant_is_ready(api, alice, submit, fake_issuer):
    assert api(alice).post(f"{API}/tenants/{submit().tenant_id}/kubeconfig/").status_code == 409


def test_the_merged_kubeconfig_covers_my_ready_tenants(api, alice, ready_tenant, fake_issuer):
    ready_tenant(name="one")
    ready_tenant(name="two")
    response = api(alice).get(f"{API}/kubeconfig/")
    assert response.status_code == 200 and sorted(name for name, _, _ in fake_issuer) == ["one", "two"]


def test_a_team_token_cannot_fetch_the_merged_kubeconfig_but_can_fetch_its_tenants(
    token_client, alice, team_a, ready_tenant, fake_issuer
):
    tenant = ready_tenant()
    scoped = token_client(alice, team=team_a)
    assert scoped.get(f"{API}/kubeconfig/").status_code == 403
    assert scoped.post(f"{API}/tenants/{tenant.pk}/kubeconfig/").status_code == 200


def test_an_isolation_check_is_queued_for_a_ready_tenant(
    api, amir, ready_tenant, dispatched, django_capture_on_commit_callbacks
):
    tenant = ready_tenant()
    dispatched.clear()
    with django_capture_on_commit_callbacks(execute=True):
        response = api(amir).post(f"{API}/tenants/{tenant.pk}/isolation-check/")
    assert response.status_code == 202
    assert dispatched == [(dispatch.ISOLATION_CHECK, (str(tenant.pk),))]


def test_bob_gets_404_for_an_isolation_check_on_alices_tenant(api, bob, ready_tenant):
    assert api(bob).post(f"{API}/tenants/{ready_tenant().pk}/isolation-check/").status_code == 404


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "kubeconfig/"),
        ("post", f"tenants/{uuid.uuid4()}/kubeconfig/"),
        ("post", f"tenants/{uuid.uuid4()}/isolation-check/"),
    ],
)
def test_credential_endpoints_need_credentials(api, method, path):
    assert getattr(api(), method)(f"{API}/{path}").status_code == 401
