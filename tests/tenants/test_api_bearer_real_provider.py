"""The API against real access tokens from the dev OIDC provider.

The unit-level refusals are in test_api_oidc_bearer.py.
"""

from __future__ import annotations

import base64
import json

import pytest
from rest_framework.test import APIClient

from devcluster.oidc import API_RESOURCE
from tenants.api.authentication import _jwks_client
from tenants.models import Membership


@pytest.fixture
def provider_settings(settings, oidc_provider):
    env = oidc_provider.portal_env()
    settings.OIDC_OP_ISSUER = env["OIDC_OP_ISSUER"]
    settings.OIDC_OP_JWKS_ENDPOINT = env["OIDC_OP_JWKS_ENDPOINT"]
    settings.OIDC_API_AUDIENCE = env["OIDC_API_AUDIENCE"]
    settings.OIDC_VERIFY_SSL = env["OIDC_CA_BUNDLE"]
    _jwks_client.cache_clear()
    yield settings
    _jwks_client.cache_clear()


def _get_me(token: str):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api.get("/api/v1/me/")


def test_alices_access_token_from_the_provider_signs_her_in_with_her_team(db, provider_settings, oidc_tokens):
    token = oidc_tokens("alice", resource=API_RESOURCE)["access_token"]
    response = _get_me(token)
    assert response.status_code == 200, response.content
    assert response.json()["teams"] == [{"team": "team-payments", "role": "owner"}]
    assert Membership.objects.get(user__username="alice").role == "owner"


def test_a_token_for_another_audience_or_tampered_is_refused(db, provider_settings, oidc_tokens):
    id_token = oidc_tokens("alice")["id_token"]  # audience: the client, not this API's resource
    provider_settings.OIDC_API_AUDIENCE = "urn:someone-else"
    assert _get_me(oidc_tokens("alice", resource=API_RESOURCE)["access_token"]).status_code == 401
    provider_settings.OIDC_API_AUDIENCE = "berth-portal"
    header, payload, signature = oidc_tokens("bob", resource=API_RESOURCE)["access_token"].split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["groups"] = ["berth-admins"]
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    assert _get_me(f"{header}.{forged}.{signature}").status_code == 401
    assert _get_me(id_token + "x").status_code == 401


def test_a_real_id_token_is_refused_as_a_bearer_token_even_when_the_audience_is_misconfigured(
    db, provider_settings, oidc_tokens
):
    """The attack: an ID token's audience is the portal's client id. With the API's own audience it fails on
    audience; with an audience misconfigured to the client id, its type (not at+jwt) still refuses it."""
    id_token = oidc_tokens("alice")["id_token"]
    assert _get_me(id_token).status_code == 401
    provider_settings.OIDC_API_AUDIENCE = "berth-portal"
    response = _get_me(id_token)
    assert response.status_code == 401 and "Not an access token" in response.json()["detail"]
    assert not Membership.objects.filter(user__username="alice").exists()
