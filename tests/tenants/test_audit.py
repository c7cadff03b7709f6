"""tenants.audit: every service leaves a complete, redacted, append-only record."""

from __future__ import annotations

import pytest
from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.db import connection, transaction
from django.db.utils import ProgrammingError
from django.test import RequestFactory

from tenants import audit, services
from tenants.audit import REDACTED, AuditContext, redact
from tenants.errors import Forbidden
from tenants.models import AuditEvent, Tenant, TenantRequest, TenantStatus

from .conftest import CTX

pytestmark = pytest.mark.django_db

JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLWJ5dGVz"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAsecretbody\nmoresecret==\n-----END RSA PRIVATE KEY-----"


def only_event(action: str, **filters) -> AuditEvent:
    return AuditEvent.objects.get(action=action, **filters)


def assert_context(event: AuditEvent, ctx: AuditContext = CTX) -> None:
    assert (event.request_id, event.source_ip, event.user_agent) == (ctx.request_id, ctx.source_ip, ctx.user_agent)


# --- what each service records ----------------------------------------------------------


def test_submit_records_actor_team_object_and_context(submit, alice, team_a):
    req = submit(name="web", ctx=CTX)
    event = only_event("request.submit")
    assert (event.actor, event.actor_name, event.team) == (alice, "alice", team_a)
    assert (event.object_type, event.object_id) == ("request", str(req.pk))
    assert event.before == {}
    assert event.after == {
        "action": "create",
        "kind": "namespace",
        "name": "web",
        "team": "team-a",
        "tier": "medium",
        "cluster": "dev",
        "status": "pending",
        "requested_expiry": req.requested_expiry.isoformat(),
    }
    assert_context(event)
    assert event.at is not None


def test_approve_records_the_request_and_the_tenant_move(submit, carol, team_a):
    req = services.request_approve(tenant_request=submit(), actor=carol, comment="fine", ctx=CTX)
    decision = only_event("request.approve")
    assert (decision.actor, decision.actor_name, decision.team, decision.object_id) == (
        carol,
        "carol",
        team_a,
        str(req.pk),
    )
    assert decision.before == {"status": "pending"}
    assert decision.after == {"status": "approved", "comment": "fine", "auto": False}
    assert_context(decision)
    move = only_event("tenant.approve")
    assert (move.object_type, move.object_id, move.actor) == ("tenant", str(req.tenant_id), carol)
    assert (move.before["status"], move.after["status"]) == ("requested", "approved")
    assert_context(move)


def test_reject_records_the_reason(submit, carol):
    req = services.request_reject(tenant_request=submit(), actor=carol, reason="Use shared", ctx=CTX)
    event = only_event("request.reject")
    assert event.after == {"status": "rejected", "reason": "Use shared"}
    assert_context(event)
    assert only_event("tenant.reject", object_id=str(req.tenant_id)).after["reason"] == "Use shared"


def test_cancel_is_recorded_for_request_and_tenant(submit, alice):
    req = services.request_cancel(tenant_request=submit(), actor=alice, ctx=CTX)
    assert_context(only_event("request.cancel", object_id=str(req.pk), actor=alice))
    assert_context(only_event("tenant.cancel", object_id=str(req.tenant_id), actor=alice))


def test_decommission_records_before_and_after(ready_tenant, alice, team_a):
    tenant = services.tenant_decommission(tenant=ready_tenant(), actor=alice, reason="done", ctx=CTX)
    event = only_event("tenant.decommission")
    assert (event.actor, event.team, event.object_id) == (alice, team_a, str(tenant.pk))
    assert event.before == {
        "status": "ready",
        "tier": "medium",
        "expires_at": tenant.expires_at.isoformat(),
        "generation": 1,
    }
    assert event.after == {**event.before, "status": "decommissioning", "reason": "done"}
    assert_context(event)


def test_retry_is_recorded(ready_tenant, dave):
    tenant = services.tenant_mark_failed(tenant=ready_tenant(), reason="x")
    services.tenant_retry(tenant=tenant, actor=dave, ctx=CTX)
    event = only_event("tenant.retry")
    assert (event.actor_name, event.before["status"], event.after["status"]) == ("dave", "failed", "approved")
    assert_context(event)


def test_worker_transitions_are_recorded_as_the_system(ready_tenant):
    ready_tenant()
    event = only_event("tenant.ready")
    assert (event.actor, event.actor_name, event.user_agent) == (None, "system", "berth-worker")


def test_token_create_and_revoke_are_recorded_without_the_secret(alice):
    token, plaintext = services.api_token_create(actor=alice, name="ci", expires_in_days=7, ctx=CTX)
    services.api_token_revoke(token=token, actor=alice, ctx=CTX)
    created = only_event("api_token.create")
    assert (created.object_type, created.object_id, created.after["prefix"]) == (
        "apitoken",
        str(token.pk),
        token.prefix,
    )
    assert_context(created)
    assert_context(only_event("api_token.revoke"))
    rows = list(AuditEvent.objects.values_list("before", "after"))
    assert plaintext not in str(rows) and token.digest not in str(rows)


def test_tier_update_is_recorded_without_a_team(dave, medium):
    services.tier_update(tier=medium, actor=dave, changes={"max_pods": 7}, ctx=CTX)
    event = only_event("tier.update")
    assert (event.team, event.object_type, event.object_id) == (None, "tier", str(medium.pk))
    assert_context(event)


def test_a_kubeconfig_issue_is_recorded_never_the_credential(ready_tenant, alice, worker_hooks, monkeypatch):
    monkeypatch.setattr(worker_hooks, "issue_kubeconfig", lambda grant: f"token: {JWT}\n")
    tenant = ready_tenant()
    services.tenant_issue_kubeconfig(tenant=tenant, actor=alice, ctx=CTX)
    event = only_event("tenant.kubeconfig_issued")
    assert (event.actor, event.object_id, event.after["namespace"]) == (alice, str(tenant.pk), tenant.namespace)
    assert JWT not in str(event.after)
    assert_context(event)


# --- the audit row shares the service's transaction -------------------------------------


def test_when_the_audit_write_fails_the_state_change_is_undone(submit, carol, monkeypatch):
    req = submit()
    real_record = audit.record

    def failing_record(**kwargs):
        if kwargs["action"] == "tenant.approve":
            raise RuntimeError("audit store unavailable")
        return real_record(**kwargs)

    monkeypatch.setattr(audit, "record", failing_record)
    with pytest.raises(RuntimeError):
        services.request_approve(tenant_request=req, actor=carol)
    assert TenantRequest.objects.get(pk=req.pk).status == TenantRequest.Status.PENDING
    assert Tenant.objects.get(pk=req.tenant_id).status == TenantStatus.REQUESTED
    assert not AuditEvent.objects.filter(action="request.approve").exists()


def test_a_refused_action_leaves_no_audit_row(submit, amir):
    req = submit()
    before = AuditEvent.objects.count()
    with pytest.raises(Forbidden):
        services.request_approve(tenant_request=req, actor=amir)
    assert AuditEvent.objects.count() == before


# --- redaction ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "token",
        "access_token",
        "refreshToken",
        "password",
        "db_passwd",
        "client_secret",
        "kubeconfig",
        "credential",
        "private_key",
        "Authorization",
        "client-key",
        "client_key",
        "client-key-data",
        "key_data",
        "digest",
        "api_key",
        "apiKey",
        "aws_access_key_id",
        "passphrase",
        "cookie",
    ],
)
def test_secret_looking_keys_are_redacted(key):
    assert redact({key: "anything", "name": "ci"}) == {key: REDACTED, "name": "ci"}


@pytest.mark.parametrize(
    ("value", "secret"),
    [
        (f"id token {JWT} here", JWT),
        ("brt_0a1b2c3d_Qm9iIGhhcyBhIHZlcnkgbG9uZyB0b2tlbg", "brt_0a1b2c3d_Qm9iIGhhcyBhIHZlcnkgbG9uZyB0b2tlbg"),
        ("sent Bearer abcdefghijklmnop123", "abcdefghijklmnop123"),
        (PEM, "secretbody"),
        (PEM, "moresecret"),
        ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n(truncated", "MIIEvQIBADANBg"),
    ],
)
def test_secret_looking_values_are_redacted(value, secret):
    cleaned = redact({"note": value})["note"]
    assert secret not in cleaned and REDACTED in cleaned


def test_redaction_reaches_into_nested_lists_and_dicts():
    data = {
        "items": [{"password": "x"}, JWT, ("brt_0a1b2c3d_" + "a" * 40,)],
        "nested": {"deeper": {"kubeconfig": {"a": 1}}},
    }
    assert redact(data) == {
        "items": [{"password": REDACTED}, REDACTED, [REDACTED]],
        "nested": {"deeper": {"kubeconfig": REDACTED}},
    }


def test_counts_and_flags_about_secrets_are_kept_but_not_numbers_that_may_be_secrets():
    data = {"tokens_revoked": 3, "api_tokens_paused": 0, "token_count": 2, "password_set": True, "token": None}
    assert redact(data) == data
    assert redact({"token": 123456, "password": 4321, "pin_token_revoked": "x"}) == {
        "token": REDACTED,
        "password": REDACTED,
        "pin_token_revoked": REDACTED,
    }


def test_ordinary_values_are_kept():
    data = {"name": "web", "count": 3, "ok": True, "none": None, "tier": "medium", "note": "key rotation planned"}
    assert redact(data) == data


def test_redaction_happens_before_the_row_is_written(alice):
    audit.record(
        actor=alice, action="test.secret", object_type="x", before={"password": "hunter2"}, after={"log": f"got {JWT}"}
    )
    row = AuditEvent.objects.get(action="test.secret")
    assert row.before == {"password": REDACTED} and JWT not in row.after["log"]


def test_nul_characters_and_oversized_context_do_not_break_the_write(alice):
    ctx = AuditContext(request_id="r" * 100, source_ip="192.0.2.1", user_agent="ua\x00" + "x" * 1000)
    audit.record(actor=alice, action="test.nul", object_type="session", after={"path\x00": "/api/\x00x"}, ctx=ctx)
    row = AuditEvent.objects.get(action="test.nul")
    assert row.after == {"path": "/api/x"} and len(row.user_agent) == 400 and len(row.request_id) == 64


# --- append-only ----------------------------------------------------------------------
# pgtrigger's RAISE EXCEPTION (SQLSTATE P0001) reaches Django as ProgrammingError.


@pytest.fixture
def event(alice) -> AuditEvent:
    return audit.record(actor=alice, action="test.row", object_type="x", after={"v": 1})


@pytest.mark.parametrize(
    "sql",
    ["UPDATE tenants_auditevent SET action = 'forged' WHERE id = %s", "DELETE FROM tenants_auditevent WHERE id = %s"],
)
def test_the_database_refuses_raw_update_and_delete(event, sql):
    with (
        pytest.raises(ProgrammingError, match="Cannot update or delete"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql, [event.pk])
    assert AuditEvent.objects.get(pk=event.pk).action == "test.row"


def test_the_database_refuses_orm_update(event):
    with pytest.raises(ProgrammingError), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).update(actor_name="mallory")
    with pytest.raises(ProgrammingError), transaction.atomic():
        event.actor_name = "mallory"
        event.save()
    assert AuditEvent.objects.get(pk=event.pk).actor_name == "alice"


def test_the_database_refuses_orm_delete(event):
    with pytest.raises(ProgrammingError), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).delete()
    with pytest.raises(ProgrammingError), transaction.atomic():
        event.delete()
    assert AuditEvent.objects.filter(pk=event.pk).exists()


# --- sign-in, sign-out, refusals --------------------------------------------------------


def test_login_and_logout_are_recorded_with_where_they_came_from(alice):
    request = RequestFactory().get("/", REMOTE_ADDR="198.51.100.4", HTTP_USER_AGENT="Firefox", HTTP_X_REQUEST_ID="abc")
    user_logged_in.send(sender=type(alice), request=request, user=alice)
    user_logged_out.send(sender=type(alice), request=request, user=alice)
    login, logout = only_event("auth.login"), only_event("auth.logout")
    assert (login.actor, login.object_type, login.source_ip, login.user_agent, login.request_id) == (
        alice,
        "session",
        "198.51.100.4",
        "Firefox",
        "abc",
    )
    assert (logout.actor, logout.actor_name) == (alice, "alice")


def test_a_real_session_login_and_logout_fire_the_audit(client, alice):
    client.force_login(alice)
    client.logout()
    assert list(AuditEvent.objects.order_by("id").values_list("action", "actor_name")) == [
        ("auth.login", "alice"),
        ("auth.logout", "alice"),
    ]


def test_logout_of_an_anonymous_session_is_recorded_as_anonymous():
    user_logged_out.send(sender=None, request=None, user=None)
    assert only_event("auth.logout").actor_name == "anonymous"


def test_an_api_refusal_is_recorded_as_authz_denied(submit, amir, api):
    req = submit()
    response = api(amir).post(
        f"/api/v1/requests/{req.pk}/approve/", {}, format="json", HTTP_USER_AGENT="curl/8", REMOTE_ADDR="192.0.2.9"
    )
    assert response.status_code == 403
    event = only_event("authz.denied")
    assert (event.actor, event.actor_name, event.source_ip, event.user_agent) == (amir, "amir", "192.0.2.9", "curl/8")
    assert event.after["method"] == "POST" and event.after["path"] == f"/api/v1/requests/{req.pk}/approve/"
    assert event.request_id  # set by RequestIdMiddleware


def test_a_bad_api_token_is_recorded_as_auth_token_failed(api):
    response = api().get(
        "/api/v1/tenants/", HTTP_AUTHORIZATION="Token brt_deadbeef_" + "x" * 43, REMOTE_ADDR="192.0.2.10"
    )
    assert response.status_code == 401
    event = only_event("auth.token_failed")
    assert (event.actor, event.actor_name, event.source_ip) == (None, "anonymous", "192.0.2.10")
    assert "brt_deadbeef" not in str(event.after)


def test_context_from_http_prefers_the_middlewares_request_id():
    request = RequestFactory().get("/", HTTP_X_REQUEST_ID="from-header", HTTP_USER_AGENT="u" * 500)
    request.request_id = "from-middleware"  # type: ignore[attr-defined]  # set by RequestIdMiddleware
    ctx = AuditContext.from_http(request)
    assert (ctx.request_id, ctx.source_ip, len(ctx.user_agent)) == ("from-middleware", "127.0.0.1", 400)


@pytest.mark.parametrize(
    ("value", "exported"),
    [
        ("=cmd|'/c calc'!A1", "'=cmd|'/c calc'!A1"),
        ("web", "web"),
        ("  =1+2", "  '=1+2"),  # leading blanks are skipped by spreadsheets
        ("name;=HYPERLINK(1)", "name;'=HYPERLINK(1)"),  # a ';' list separator starts a new cell
        ("a,@SUM(A1)", "a,'@SUM(A1)"),
        ("line\n-2+3", "line\n'-2+3"),
        ("\uff1dcmd", "'\uff1dcmd"),  # the full-width equals sign
        ("a|+1", "a|'+1"),
        ("2026-11-23T08:00:00+00:00", "2026-11-23T08:00:00+00:00"),
    ],
)
def test_csv_cells_cannot_start_a_formula_anywhere_a_spreadsheet_may_split(value, exported):
    from tenants.csv_export import safe_cell

    assert safe_cell(value) == exported
