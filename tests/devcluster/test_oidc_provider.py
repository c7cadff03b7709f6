"""The local OIDC provider, spoken to over real HTTPS as the portal and kubectl will.

Run alone: pytest -p tests.plugins.oidc -p no:django tests/devcluster/test_oidc_provider.py
"""

from __future__ import annotations

import os
import re
import time
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import jwt
import pytest
import requests

from devcluster.oidc import (
    API_AUDIENCE,
    API_RESOURCE,
    API_SCOPE,
    KUBECTL_CLIENT_ID,
    PORTAL_CLIENT_ID,
    PORTAL_CLIENT_SECRET,
    SCOPES,
    OidcProvider,
)
from devcluster.pki import CertificateAuthority
from devcluster.process import ComponentFailed
from tests.plugins.oidc import (
    PORTAL_REDIRECT_URI,
    SignInRefused,
    browser,
    pkce_pair,
    redeem,
    sign_in,
    token_request,
)


def verify_jwt(provider: OidcProvider, token: str, *, audience: str) -> dict[str, Any]:
    """Check signature (RS256, key from the JWKS), issuer, audience and expiry; return the claims."""
    jwks = requests.get(provider.discovery()["jwks_uri"], verify=str(provider.ca_file), timeout=10).json()
    key = jwt.PyJWKSet.from_dict(jwks)[jwt.get_unverified_header(token)["kid"]]
    return jwt.decode(token, key=key, algorithms=["RS256"], audience=audience, issuer=provider.issuer)


def query_of(location: str) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}


def test_discovery_offers_rs256_only_pkce_and_the_endpoints_clients_use(oidc_provider: OidcProvider) -> None:
    discovery = oidc_provider.discovery()

    assert discovery["issuer"] == oidc_provider.issuer
    assert re.fullmatch(r"https://127\.0\.0\.1:\d+", oidc_provider.issuer)
    assert discovery["id_token_signing_alg_values_supported"] == ["RS256"]
    assert discovery["code_challenge_methods_supported"] == ["S256"]
    assert {"openid", "profile", "email", "groups", "offline_access"} <= set(discovery["scopes_supported"])
    assert {"groups", "email", "name", "preferred_username"} <= set(discovery["claims_supported"])
    assert set(discovery["token_endpoint_auth_methods_supported"]) == {
        "client_secret_basic",
        "client_secret_post",
        "none",
    }
    for endpoint in (
        "authorization_endpoint",
        "token_endpoint",
        "userinfo_endpoint",
        "jwks_uri",
        "end_session_endpoint",
    ):
        assert discovery[endpoint].startswith(f"{oidc_provider.issuer}/")


def test_portal_env_names_the_endpoints_the_ca_and_the_portal_client(oidc_provider: OidcProvider) -> None:
    env = oidc_provider.portal_env()

    assert env["OIDC_OP_ISSUER"] == oidc_provider.issuer
    assert env["OIDC_OP_USER_ENDPOINT"] == oidc_provider.discovery()["userinfo_endpoint"]
    assert env["OIDC_OP_LOGOUT_ENDPOINT"] == oidc_provider.discovery()["end_session_endpoint"]
    assert env["OIDC_CA_BUNDLE"] == str(oidc_provider.ca_file)
    assert (env["OIDC_RP_CLIENT_ID"], env["OIDC_RP_CLIENT_SECRET"]) == (PORTAL_CLIENT_ID, PORTAL_CLIENT_SECRET)
    assert env["OIDC_API_AUDIENCE"] == API_AUDIENCE


def test_jwks_publishes_an_rs256_signing_key_and_no_private_parts(oidc_provider: OidcProvider) -> None:
    keys = requests.get(oidc_provider.discovery()["jwks_uri"], verify=str(oidc_provider.ca_file), timeout=10).json()[
        "keys"
    ]

    assert [(key["kty"], key["alg"], key["use"]) for key in keys] == [("RSA", "RS256", "sig")]
    assert keys[0]["kid"]
    assert not {"d", "p", "q", "dp", "dq", "qi"} & set(keys[0])


def test_alice_signs_in_with_pkce_and_her_id_token_carries_her_groups(oidc_provider: OidcProvider) -> None:
    session = browser(oidc_provider)
    verifier, challenge = pkce_pair()
    authorize = session.get(
        oidc_provider.discovery()["authorization_endpoint"],
        allow_redirects=False,
        params={
            "client_id": PORTAL_CLIENT_ID,
            "response_type": "code",
            "scope": SCOPES,
            "redirect_uri": PORTAL_REDIRECT_URI,
            "state": "s-1",
            "nonce": "n-1",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        },
    )
    assert authorize.is_redirect, authorize.text

    login_page = session.get(urljoin(authorize.url, authorize.headers["Location"]), allow_redirects=False)
    assert login_page.status_code == 200
    for hook in ('<label for="username">', 'id="username"', '<label for="password">', 'id="password"'):
        assert hook in login_page.text
    assert login_page.text.count('type="submit"') == 1
    action = re.search(r'<form[^>]*action="([^"]+)"', login_page.text).group(1)

    response = session.post(
        urljoin(login_page.url, action), allow_redirects=False, data={"username": "alice", "password": "alice-pass"}
    )
    # Consent is automatic for Berth's own clients: only redirects until the client's URI.
    for _ in range(6):
        assert response.is_redirect, response.text
        location = urljoin(response.url, response.headers["Location"])
        if location.startswith(PORTAL_REDIRECT_URI):
            break
        response = session.get(location, allow_redirects=False)
    callback = query_of(location)
    assert callback["state"] == "s-1"
    assert callback["iss"] == oidc_provider.issuer

    tokens = token_request(
        oidc_provider,
        {
            "grant_type": "authorization_code",
            "code": callback["code"],
            "code_verifier": verifier,
            "redirect_uri": PORTAL_REDIRECT_URI,
        },
    ).json()

    assert jwt.get_unverified_header(tokens["id_token"])["alg"] == "RS256"
    claims = verify_jwt(oidc_provider, tokens["id_token"], audience=PORTAL_CLIENT_ID)
    assert claims["iss"] == oidc_provider.issuer
    assert claims["aud"] == PORTAL_CLIENT_ID
    assert claims["nonce"] == "n-1"
    assert claims["sub"] == claims["preferred_username"] == "alice"
    assert claims["groups"] == ["team-payments:owner"]
    assert claims["email"] == "alice@example.test"
    assert claims["email_verified"] is True
    assert claims["name"] == "Alice Andersen"
    assert tokens["refresh_token"]


def test_the_code_is_refused_without_the_right_pkce_verifier(oidc_provider: OidcProvider) -> None:
    authorization = sign_in(oidc_provider, "amir")

    response = token_request(
        oidc_provider,
        {
            "grant_type": "authorization_code",
            "code": authorization.code,
            "code_verifier": pkce_pair()[0],
            "redirect_uri": authorization.redirect_uri,
        },
    )

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"


def test_authorization_without_pkce_is_refused(oidc_provider: OidcProvider) -> None:
    response = requests.get(
        oidc_provider.discovery()["authorization_endpoint"],
        verify=str(oidc_provider.ca_file),
        allow_redirects=False,
        timeout=10,
        params={
            "client_id": PORTAL_CLIENT_ID,
            "response_type": "code",
            "scope": SCOPES,
            "redirect_uri": PORTAL_REDIRECT_URI,
            "state": "s",
        },
    )

    callback = query_of(response.headers["Location"])
    assert callback["error"] == "invalid_request"
    assert "PKCE" in callback["error_description"]


def test_userinfo_returns_the_same_identity_for_the_default_access_token(oidc_provider: OidcProvider) -> None:
    tokens = redeem(oidc_provider, sign_in(oidc_provider, "vera"))

    response = requests.get(
        oidc_provider.discovery()["userinfo_endpoint"],
        verify=str(oidc_provider.ca_file),
        timeout=10,
        headers={"Authorization": f"Bearer {tokens['access_token']}"},
    )

    assert response.status_code == 200, response.text
    assert response.json() == {
        "sub": "vera",
        "preferred_username": "vera",
        "name": "Vera Vogel",
        "email": "vera@example.test",
        "email_verified": True,
        "groups": ["team-search:viewer"],
    }


def test_refresh_grant_gives_a_confidential_client_new_tokens(oidc_provider: OidcProvider) -> None:
    tokens = redeem(oidc_provider, sign_in(oidc_provider, "bob"), auth_method="client_secret_post")

    refreshed = token_request(
        oidc_provider,
        {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]},
        auth_method="client_secret_post",
    )

    assert refreshed.status_code == 200, refreshed.text
    body = refreshed.json()
    assert body["access_token"] != tokens["access_token"]
    claims = verify_jwt(oidc_provider, body["id_token"], audience=PORTAL_CLIENT_ID)
    assert claims["sub"] == "bob"
    assert claims["groups"] == ["team-search:owner"]


def test_a_token_request_for_the_api_gets_a_jwt_access_token_for_the_portal(oidc_provider: OidcProvider) -> None:
    authorization = sign_in(oidc_provider, "carol", scope=f"{SCOPES} {API_SCOPE}")
    tokens = redeem(oidc_provider, authorization, resource=API_RESOURCE)

    claims = verify_jwt(oidc_provider, tokens["access_token"], audience=API_AUDIENCE)

    assert jwt.get_unverified_header(tokens["access_token"]) == {
        "alg": "RS256",
        "typ": "at+jwt",
        "kid": jwt.get_unverified_header(tokens["id_token"])["kid"],
    }
    assert claims["iss"] == oidc_provider.issuer
    assert claims["aud"] == API_AUDIENCE != PORTAL_CLIENT_ID
    assert claims["client_id"] == PORTAL_CLIENT_ID
    assert claims["sub"] == claims["preferred_username"] == "carol"
    assert claims["groups"] == ["berth-approvers"]
    assert claims["scope"] == API_SCOPE
    assert claims["exp"] > time.time()


def test_refreshing_with_the_api_resource_gets_a_fresh_api_jwt(oidc_provider: OidcProvider) -> None:
    tokens = redeem(oidc_provider, sign_in(oidc_provider, "dave"))

    refreshed = token_request(
        oidc_provider,
        {
            "grant_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            "resource": API_RESOURCE,
        },
    )

    assert refreshed.status_code == 200, refreshed.text
    claims = verify_jwt(oidc_provider, refreshed.json()["access_token"], audience=API_AUDIENCE)
    assert claims["sub"] == "dave"
    assert claims["groups"] == ["berth-admins"]


def test_wrong_password_is_refused_and_the_form_says_so(oidc_provider: OidcProvider) -> None:
    with pytest.raises(SignInRefused, match="refused alice's password"):
        sign_in(oidc_provider, "alice", "not-alice-pass")
    with pytest.raises(SignInRefused, match="refused"):
        sign_in(oidc_provider, "nobody", "nobody-pass")


def test_a_group_removed_at_the_provider_is_gone_at_the_next_sign_in(
    oidc_provider: OidcProvider, set_oidc_groups
) -> None:
    set_oidc_groups("amir", ["team-payments", "team-search:viewer"])
    before = redeem(oidc_provider, sign_in(oidc_provider, "amir"))
    assert verify_jwt(oidc_provider, before["id_token"], audience=PORTAL_CLIENT_ID)["groups"] == [
        "team-payments",
        "team-search:viewer",
    ]

    set_oidc_groups("amir", ["team-payments"])
    after = redeem(oidc_provider, sign_in(oidc_provider, "amir"))

    assert verify_jwt(oidc_provider, after["id_token"], audience=PORTAL_CLIENT_ID)["groups"] == ["team-payments"]
    refreshed = token_request(oidc_provider, {"grant_type": "refresh_token", "refresh_token": before["refresh_token"]})
    assert verify_jwt(oidc_provider, refreshed.json()["id_token"], audience=PORTAL_CLIENT_ID)["groups"] == [
        "team-payments",
    ]


def test_erin_without_groups_gets_an_empty_groups_claim(oidc_provider: OidcProvider) -> None:
    tokens = redeem(oidc_provider, sign_in(oidc_provider, "erin"))

    assert verify_jwt(oidc_provider, tokens["id_token"], audience=PORTAL_CLIENT_ID)["groups"] == []


def test_kubectl_signs_in_as_a_public_client_on_its_loopback_port(oidc_provider: OidcProvider) -> None:
    authorization = sign_in(
        oidc_provider,
        "bob",
        client_id=KUBECTL_CLIENT_ID,
        redirect_uri="http://localhost:18000",
        scope="openid profile email groups",
    )

    tokens = redeem(oidc_provider, authorization, client_secret=None)

    claims = verify_jwt(oidc_provider, tokens["id_token"], audience=KUBECTL_CLIENT_ID)
    assert claims["groups"] == ["team-search:owner"]
    refreshed = token_request(
        oidc_provider,
        {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]},
        client_id=KUBECTL_CLIENT_ID,
        client_secret=None,
    )
    assert refreshed.status_code == 200, refreshed.text


def test_the_portal_callback_is_accepted_on_any_loopback_port_but_nowhere_else(oidc_provider: OidcProvider) -> None:
    sign_in(oidc_provider, "alice", redirect_uri="http://localhost:41234/oidc/callback/")

    for foreign in ("http://127.0.0.1:8765/elsewhere/", "http://evil.example/oidc/callback/"):
        response = requests.get(
            oidc_provider.discovery()["authorization_endpoint"],
            verify=str(oidc_provider.ca_file),
            allow_redirects=False,
            timeout=10,
            params={
                "client_id": PORTAL_CLIENT_ID,
                "response_type": "code",
                "scope": SCOPES,
                "redirect_uri": foreign,
                "code_challenge": pkce_pair()[1],
                "code_challenge_method": "S256",
            },
        )
        assert response.status_code == 400
        assert "redirect_uri did not match" in response.text


def test_prompt_consent_shows_a_consent_page_with_one_allow_button(oidc_provider: OidcProvider) -> None:
    session = browser(oidc_provider)
    sign_in(oidc_provider, "amir", session=session)
    verifier, challenge = pkce_pair()

    response = session.get(
        oidc_provider.discovery()["authorization_endpoint"],
        params={
            "client_id": PORTAL_CLIENT_ID,
            "response_type": "code",
            "scope": f"{SCOPES} offline_access",
            "redirect_uri": PORTAL_REDIRECT_URI,
            "prompt": "consent",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        },
    )

    assert response.status_code == 200
    assert "Allow access?" in response.text
    assert "offline_access" in response.text
    assert response.text.count('type="submit"') == 1
    action = re.search(r'<form[^>]*action="([^"]+)"', response.text).group(1)
    allowed = session.post(urljoin(response.url, action), allow_redirects=False)
    assert allowed.status_code == 303


def test_logout_returns_to_the_portal_and_ends_the_sessions_refresh_token(oidc_provider: OidcProvider) -> None:
    session = browser(oidc_provider)
    tokens = redeem(oidc_provider, sign_in(oidc_provider, "alice", session=session))
    # As the portal asks: its client_id and its sign-in page, no id_token_hint.
    post_logout = "http://127.0.0.1:8765/login/"

    confirm = session.get(
        oidc_provider.discovery()["end_session_endpoint"],
        params={
            "client_id": PORTAL_CLIENT_ID,
            "post_logout_redirect_uri": post_logout,
            "state": "bye",
        },
    )
    assert confirm.status_code == 200, confirm.text
    assert confirm.text.count('type="submit"') == 1
    form_action = re.search(r'<form[^>]*action="([^"]+)"', confirm.text).group(1)
    xsrf = re.search(r'name="xsrf" value="([^"]+)"', confirm.text).group(1)
    done = session.post(urljoin(confirm.url, form_action), data={"xsrf": xsrf, "logout": "yes"}, allow_redirects=False)

    assert done.status_code == 303
    assert done.headers["Location"] == f"{post_logout}?state=bye"
    refreshed = token_request(oidc_provider, {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]})
    assert refreshed.status_code == 400
    assert refreshed.json()["error"] == "invalid_grant"


def test_a_provider_started_with_given_tls_stops_without_leaving_its_process(tmp_path) -> None:
    ca = CertificateAuthority("test-control-plane-ca")
    cert_pem, key_pem = ca.issue_serving_cert(["127.0.0.1", "localhost"])
    with OidcProvider(cert_pem=cert_pem, key_pem=key_pem, ca_cert_pem=ca.cert_pem, data_dir=tmp_path) as provider:
        pid = provider.pid
        assert pid is not None
        assert provider.ca_file.read_text() == ca.cert_pem
        assert provider.discovery()["issuer"] == provider.issuer

    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert '"event":"listening"' in (tmp_path / "provider.log").read_text()


def test_a_broken_client_config_stops_the_start_with_the_reason() -> None:
    broken = {
        "client_id": "x",
        "client_secret": "s",
        "token_endpoint_auth_method": "bogus",
        "redirect_uris": ["http://127.0.0.1/cb"],
    }

    with pytest.raises(ComponentFailed, match="token_endpoint_auth_method must be"):
        with OidcProvider(clients=[broken]):
            pass
