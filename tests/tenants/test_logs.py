"""Structured logs: redaction of every kind of credential, the JSON shape, and the request context in each line."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from tenants import logs
from tenants.metrics import API_ERRORS, HTTP_REQUESTS

JWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6IngifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJlLWJ5dGVz"
API_TOKEN = "brt_0a1b2c3d_R2V0IHlvdXIgb3duIHRva2VuLCB0aGlzIG9uZSBpcyBtaW5l"
KUBECONFIG = f"""apiVersion: v1
kind: Config
users:
- name: berth
  user:
    token: {JWT}
    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQo=
"""
PEM_BODY = "MHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oVbqt4iBVwGEoAoGCCqGSM49"
PEM = f"-----BEGIN EC PRIVATE KEY-----\n{PEM_BODY}\n-----END EC PRIVATE KEY-----"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"Authorization: Bearer {JWT}", JWT),
        ("{'HTTP_AUTHORIZATION': 'Token " + API_TOKEN + "'}", API_TOKEN),
        (f"calling with Bearer sk-{'x' * 30}", "x" * 30),
        (f"token {API_TOKEN} refused", API_TOKEN),
        (f"TokenRequest answered {JWT}", JWT),
        (KUBECONFIG, JWT),
        (KUBECONFIG, "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQo="),
        (f"key material {PEM} end", PEM_BODY),
        ('{"refresh_token": "opaque-refresh-value-123", "x": 1}', "opaque-refresh-value-123"),
        ("POST /oidc/token?client_secret=s3cr3t-value&code=x", "s3cr3t-value"),
        ("password=hunter2hunter2", "hunter2hunter2"),
        ('"GET /oidc/callback/?code=Xq9-authcode_1&state=abc HTTP/1.1" 302', "Xq9-authcode_1"),
        ("GET /oidc/callback/?state=abc&code=Xq9-authcode_1", "Xq9-authcode_1"),
        ("GET /login/?next=%2Foidc%2Fcallback%2F%3Fcode%3DXq9-authcode_1%26state%3Dx", "Xq9-authcode_1"),
        ("GET /cb?id_token=opaque-id-value&access_token=opaque-at-value", "opaque-id-value"),
        ("GET /cb?id_token=opaque-id-value&access_token=opaque-at-value", "opaque-at-value"),
        ("GET /x?code_verifier=verifier-value-1", "verifier-value-1"),
    ],
)
def test_credentials_are_redacted(text, secret):
    assert secret not in logs.redact(text)
    assert "[redacted]" in logs.redact(text)


def test_the_projects_own_secrets_are_redacted(settings):
    settings.BERTH_SECRETS_KEY = "sealing-key-" + "q" * 20
    line = f"key={settings.SECRET_KEY} sealing {settings.BERTH_SECRETS_KEY} client {settings.OIDC_RP_CLIENT_SECRET}"
    redacted = logs.redact(line)
    for value in (settings.SECRET_KEY, settings.BERTH_SECRETS_KEY, settings.OIDC_RP_CLIENT_SECRET):
        assert value not in redacted


def test_ordinary_prose_is_left_alone():
    text = "token requested for namespace t1-checkout (lifetime 600s); Token count 3; tenant ready"
    assert logs.redact(text) == text


def test_a_query_strings_state_and_ordinary_parameters_are_kept():
    line = '"GET /oidc/callback/?code=abc123&state=s-42&iss=https%3A%2F%2Fidp HTTP/1.1" 302; exit code 3'
    assert logs.redact(line) == (
        '"GET /oidc/callback/?code=[redacted]&state=s-42&iss=https%3A%2F%2Fidp HTTP/1.1" 302; exit code 3'
    )


@pytest.fixture
def console() -> Iterator[io.StringIO]:
    """What the configured console handler (settings.LOGGING: filters and JSON formatter) writes."""
    handler = next(h for h in logging.getLogger().handlers if getattr(h, "name", "") == "console")
    assert isinstance(handler, logging.StreamHandler)
    buffer = io.StringIO()
    previous = handler.setStream(buffer)
    try:
        yield buffer
    finally:
        handler.setStream(previous)


def lines(buffer: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]


def test_log_lines_are_json_with_context_and_redacted_arguments(console):
    assert settings.LOG_FORMAT == "json"
    with logs.bound(request_id="req-1", tenant_id="t-1", user="alice"):
        logging.getLogger("berth.test").warning("kubeconfig %s for %s", KUBECONFIG, "alice", extra={"n": 3})
    (entry,) = lines(console)
    assert entry["request_id"] == "req-1" and entry["tenant_id"] == "t-1" and entry["user"] == "alice"
    assert entry["level"] == "WARNING" and entry["logger"] == "berth.test" and entry["n"] == 3
    assert JWT not in console.getvalue() and "[redacted]" in entry["message"]


def test_a_traceback_is_redacted_too(console):
    try:
        raise RuntimeError(f"cluster said no to Bearer {JWT}")
    except RuntimeError:
        logging.getLogger("berth.test").exception("failed")
    (entry,) = lines(console)
    assert "RuntimeError" in entry["exc"] and JWT not in console.getvalue()


@pytest.mark.django_db
def test_each_request_logs_one_json_line_with_its_request_id_user_and_tenant(console, alice, api_token):
    token = api_token(alice)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}", HTTP_X_REQUEST_ID="trace-42")
    tenant_id = "0b5f3b9e-6d4e-4c1e-9f51-3b0a2a1c9d10"
    before = API_ERRORS.labels("404")._value.get()
    answered = HTTP_REQUESTS.labels("404")._value.get()
    response = client.get(f"/api/v1/tenants/{tenant_id}/")
    assert response.status_code == 404 and response["X-Request-ID"] == "trace-42"
    entry = next(e for e in lines(console) if e["logger"] == "berth.request")
    assert entry["message"] == f"GET /api/v1/tenants/{tenant_id}/ 404"
    assert (entry["request_id"], entry["user"], entry["tenant_id"]) == ("trace-42", "alice", tenant_id)
    assert entry["status"] == 404 and isinstance(entry["duration_ms"], int)
    assert token not in console.getvalue()
    assert API_ERRORS.labels("404")._value.get() == before + 1
    assert HTTP_REQUESTS.labels("404")._value.get() == answered + 1


@pytest.mark.django_db
def test_an_unsafe_incoming_request_id_is_replaced(client):
    response = client.get("/api/v1/me/", HTTP_X_REQUEST_ID="bad id\nInjected: yes")
    assert response.status_code == 401
    assert response["X-Request-ID"] != "bad id\nInjected: yes" and len(response["X-Request-ID"]) == 32
