"""OIDC access tokens as ``Authorization: Bearer``: verified locally against the issuer's JWKS.

The JWKS is served by a tiny http.server on 127.0.0.1; keys are made here. (A real provider is
exercised elsewhere; this is the unit level of tenants.api.authentication.)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from rest_framework import exceptions
from rest_framework.test import APIClient

from tenants.api import authentication
from tenants.models import AuditEvent, Membership, User

pytestmark = pytest.mark.django_db

ISSUER = "https://idp.example.test/realms/berth"
AUDIENCE = "berth-api"
KID = "test-key-1"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


PRIVATE_KEY = _new_key()
OTHER_KEY = _new_key()


class Jwks:
    """What the local JWKS endpoint serves; tests may change ``body``."""

    def __init__(self) -> None:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(PRIVATE_KEY.public_key()))
        self.body = json.dumps({"keys": [{**jwk, "kid": KID, "alg": "RS256", "use": "sig"}]}).encode()
        self.hits = 0
        self.url = ""


@pytest.fixture
def jwks(settings) -> Iterator[Jwks]:
    served = Jwks()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.hits += 1
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(served.body)

        def log_message(self, *args) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    served.url = f"http://127.0.0.1:{server.server_port}/jwks"
    settings.OIDC_OP_JWKS_ENDPOINT = served.url
    settings.OIDC_OP_ISSUER = ISSUER
    settings.OIDC_API_AUDIENCE = AUDIENCE
    authentication._jwks_client.cache_clear()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        authentication._jwks_client.cache_clear()


def claims(**overrides) -> dict:
    now = int(time.time())
    base = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "sub-nina",
        "iat": now,
        "exp": now + 300,
        "preferred_username": "nina",
        "email": "nina@example.test",
        "groups": ["team-pay:owner", "berth-approvers"],
    }
    return {k: v for k, v in {**base, **overrides}.items() if v is not None}


def sign(payload: dict, key: rsa.RSAPrivateKey = PRIVATE_KEY, kid: str = KID, typ: str = "at+jwt") -> str:
    """An RFC 9068 access token by default; ``typ="JWT"`` makes what ID tokens and Keycloak's tokens carry."""
    return jwt.encode(payload, key, algorithm="RS256", headers={"kid": kid, "typ": typ})


def unsigned(payload: dict, header: dict) -> str:
    return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(payload).encode())}"


def bearer(token: str, path: str = "/api/v1/me/"):
    return APIClient().get(path, HTTP_AUTHORIZATION=f"Bearer {token}")


def test_a_valid_access_token_signs_nina_in_and_syncs_her_groups(jwks):
    response = bearer(sign(claims()))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["username"] == "nina" and body["teams"] == [{"team": "team-pay", "role": "owner"}]
    assert body["platform_roles"] == ["approver"]
    assert Membership.objects.get(user__oidc_subject="sub-nina").role == "owner"


def test_verify_access_token_returns_the_claims(jwks):
    assert authentication.verify_access_token(sign(claims()))["sub"] == "sub-nina"


def test_the_jwks_is_fetched_once_and_cached(jwks):
    for _ in range(3):
        assert bearer(sign(claims())).status_code == 200
    assert jwks.hits == 1


def test_a_token_without_groups_leaves_memberships_alone(jwks):
    bearer(sign(claims()))
    assert bearer(sign(claims(groups=None))).status_code == 200
    assert Membership.objects.get(user__oidc_subject="sub-nina").role == "owner"
    assert User.objects.get(oidc_subject="sub-nina").is_approver


def _hs256_with_public_key_as_secret() -> str:
    header = {"alg": "HS256", "typ": "JWT", "kid": KID}
    signing_input = unsigned(claims(), header)
    secret = PRIVATE_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return f"{signing_input}.{_b64(hmac.new(secret, signing_input.encode(), hashlib.sha256).digest())}"


def _tampered() -> str:
    head, _, sig = sign(claims()).split(".")
    forged = _b64(json.dumps(claims(groups=["berth-admins"])).encode())
    return f"{head}.{forged}.{sig}"


BAD_TOKENS = {
    "wrong issuer": lambda: sign(claims(iss="https://evil.example.test")),
    "wrong audience": lambda: sign(claims(aud="another-client")),
    "expired": lambda: sign(claims(exp=int(time.time()) - 120)),
    "not yet valid": lambda: sign(claims(nbf=int(time.time()) + 600)),
    "tampered payload": _tampered,
    "signed by another key": lambda: sign(claims(), key=OTHER_KEY),
    "unknown kid": lambda: sign(claims(), key=OTHER_KEY, kid="other"),
    "alg none": lambda: unsigned(claims(), {"alg": "none", "typ": "JWT"}) + ".",
    "HS256 with the public key as secret": _hs256_with_public_key_as_secret,
    "no subject": lambda: sign(claims(sub=None)),
    "no expiry": lambda: sign(claims(exp=None)),
    "no audience": lambda: sign(claims(aud=None)),
    "an ID token (typ JWT, from a client not allowed)": lambda: sign(claims(azp="berth-portal"), typ="JWT"),
    "an ID token that says so": lambda: sign(claims(typ="ID")),
    "a refresh token": lambda: sign(claims(typ="Refresh")),
    "not a jwt": lambda: "not-a-jwt",
    "two parts": lambda: "eyJhbGciOiJSUzI1NiJ9.e30",
    "garbage base64": lambda: "eyJ!!!.###.$$$",
}


@pytest.mark.parametrize("make", BAD_TOKENS.values(), ids=BAD_TOKENS.keys())
def test_bad_access_tokens_are_401_and_audited(jwks, make):
    response = bearer(make())
    assert response.status_code == 401, response.content
    assert response["WWW-Authenticate"] == "Token"
    assert AuditEvent.objects.filter(action="auth.token_failed").count() == 1
    assert not User.objects.filter(oidc_subject="sub-nina", is_platform_admin=True).exists()


def test_an_allowed_clients_plain_jwt_access_token_is_accepted_but_never_its_id_token(jwks, settings):
    """Keycloak types its access tokens "JWT": those of clients named in OIDC_API_CLIENTS pass, its ID tokens not."""
    settings.OIDC_API_CLIENTS = ["berth-cli"]
    assert bearer(sign(claims(azp="berth-cli", typ="Bearer"), typ="JWT")).status_code == 200
    assert bearer(sign(claims(azp="berth-cli", typ="ID"), typ="JWT")).status_code == 401
    assert bearer(sign(claims(azp="another"), typ="JWT")).status_code == 401


def test_the_api_audience_may_not_be_a_client_id(settings):
    from tenants.checks import api_audience_is_not_a_client

    settings.OIDC_API_AUDIENCE = "berth-api"
    assert api_audience_is_not_a_client() == []
    settings.OIDC_API_AUDIENCE = settings.OIDC_RP_CLIENT_ID
    assert [e.id for e in api_audience_is_not_a_client()] == ["berth.E001"]


def test_verify_refuses_a_bad_token_with_authentication_failed(jwks):
    with pytest.raises(exceptions.AuthenticationFailed):
        authentication.verify_access_token(_hs256_with_public_key_as_secret())


@pytest.mark.parametrize(
    "body",
    [b"not json", b"{}", b'{"keys": []}', b'{"keys": [{"kty": "XYZ", "kid": "test-key-1"}]}', b'{"keys": "nope"}'],
)
def test_a_broken_jwks_is_401_not_500(jwks, body):
    jwks.body = body
    assert bearer(sign(claims())).status_code == 401


def test_an_unreachable_jwks_is_401_not_500(jwks, settings):
    settings.OIDC_OP_JWKS_ENDPOINT = "http://127.0.0.1:9/jwks"  # discard port: nothing listens
    assert bearer(sign(claims())).status_code == 401


def test_bearer_tokens_are_refused_when_oidc_is_not_configured(jwks, settings):
    settings.OIDC_OP_ISSUER = ""
    response = bearer(sign(claims()))
    assert response.status_code == 401 and "not configured" in response.json()["detail"]


def test_a_deactivated_user_cannot_use_a_valid_token(jwks):
    bearer(sign(claims()))
    User.objects.filter(oidc_subject="sub-nina").update(is_active=False)
    assert bearer(sign(claims())).status_code == 401


# --- a flood of bad credentials: limited per address, audited in bulk ---------------------------------


def _bad_from(address: str):
    return APIClient().get("/api/v1/me/", HTTP_AUTHORIZATION="Token brt_deadbeef_" + "x" * 40, REMOTE_ADDR=address)


def test_an_address_that_keeps_failing_gets_429_and_the_audit_trail_stays_small(settings):
    settings.BERTH_AUTH_FAILURES_PER_MINUTE = 20
    statuses = [_bad_from("198.51.100.7").status_code for _ in range(30)]
    assert statuses[:20] == [401] * 20 and set(statuses[20:]) == {429}
    rows = AuditEvent.objects.filter(action="auth.token_failed", source_ip="198.51.100.7")
    assert [r.after["failures_from_address_this_minute"] for r in rows.order_by("id")] == [1, 10]
    # Another address is not held back by the first one's failures.
    assert _bad_from("198.51.100.8").status_code == 401
    assert AuditEvent.objects.filter(source_ip="198.51.100.8").count() == 1


def test_many_addresses_cannot_grow_the_audit_trail_past_the_cap(settings):
    settings.BERTH_AUTH_FAILURE_ROWS_PER_MINUTE = 3
    for i in range(10):
        assert _bad_from(f"203.0.113.{i + 10}").status_code == 401
    assert AuditEvent.objects.filter(action="auth.token_failed").count() == 3
    assert AuditEvent.objects.filter(action="auth.failures_suppressed").count() == 1


def test_a_429_is_documented_with_retry_after(settings):
    settings.BERTH_AUTH_FAILURES_PER_MINUTE = 1
    _bad_from("192.0.2.55")
    response = _bad_from("192.0.2.55")
    assert response.status_code == 429 and 0 < int(response["Retry-After"]) <= 60
