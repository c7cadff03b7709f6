"""pytest plugin: one real OIDC provider per test run, and a browser-like sign-in.

Enabled by `pytest_plugins = [..., "tests.plugins.oidc"]` in tests/conftest.py (or
`-p tests.plugins.oidc`). Must not import Django: it also serves the devcluster tests.

    def test_api_accepts_alices_token(oidc_tokens):
        token = oidc_tokens("alice", resource=API_RESOURCE)["access_token"]

`sign_in()` walks the provider's real pages with a requests.Session, the way a
browser would (authorize, login form, consent when asked), and stops at the
redirect back to the client, without following it.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest
import requests

from devcluster.oidc import PORTAL_CLIENT_ID, PORTAL_CLIENT_SECRET, SCOPES, OidcProvider

# Any port works: the provider accepts registered loopback redirects on every port.
PORTAL_REDIRECT_URI = "http://127.0.0.1:8765/oidc/callback/"
_MAX_STEPS = 12
_FORM_ACTION = re.compile(r'<form[^>]*\baction="([^"]+)"')


class SignInRefused(AssertionError):
    """The provider refused the sign-in: wrong password, or an error sent back to the client."""


@dataclass(frozen=True)
class Authorization:
    """What the client receives on its redirect URI, plus what it kept for the token request."""

    code: str
    code_verifier: str
    redirect_uri: str
    client_id: str
    nonce: str


def browser(provider: OidcProvider) -> requests.Session:
    """A cookie-keeping session that trusts the provider's CA, like one browser profile."""
    session = requests.Session()
    session.verify = str(provider.ca_file)
    # Else REQUESTS_CA_BUNDLE, when set, silently wins over session.verify (a
    # long-standing requests quirk); proxies from the environment are unwanted for loopback too.
    session.trust_env = False
    return session


def pkce_pair() -> tuple[str, str]:
    """(code_verifier, S256 code_challenge)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def sign_in(
    provider: OidcProvider,
    username: str,
    password: str | None = None,
    *,
    client_id: str = PORTAL_CLIENT_ID,
    redirect_uri: str = PORTAL_REDIRECT_URI,
    scope: str = SCOPES,
    extra_params: dict[str, str] | None = None,
    session: requests.Session | None = None,
) -> Authorization:
    """Sign in at the provider's pages; the demo password is `<username>-pass`."""
    session = session or browser(provider)
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
        **(extra_params or {}),
    }
    response = session.get(provider.discovery()["authorization_endpoint"], params=params, allow_redirects=False)
    target = _walk_to_redirect(response, session, username, password, redirect_uri)
    return _authorization(target, state, verifier, redirect_uri, client_id, nonce)


def complete_sign_in(
    provider: OidcProvider, authorize_url: str, username: str, *, redirect_uri: str, password: str | None = None
) -> str:
    """Play the browser for a client that made its own authorization URL (the CLI, kubelogin):
    sign in at the provider's pages and return the URL it redirects to (``redirect_uri?code=…&state=…``)."""
    session = browser(provider)
    response = session.get(authorize_url, allow_redirects=False)
    return _walk_to_redirect(response, session, username, password, redirect_uri)


def _walk_to_redirect(
    response: requests.Response, session: requests.Session, username: str, password: str | None, redirect_uri: str
) -> str:
    credentials = {"username": username, "password": password or f"{username}-pass"}
    for _ in range(_MAX_STEPS):
        if response.is_redirect:
            target = urljoin(response.url, response.headers["Location"])
            if target.startswith(redirect_uri):
                return target
            response = session.get(target, allow_redirects=False)
            continue
        if response.status_code != 200:
            raise SignInRefused(f"{response.status_code} from {response.url}: {response.text[:500]}")
        if 'id="login-error"' in response.text:
            raise SignInRefused(f"the provider refused {username}'s password")
        action = _form_action(response)
        data = credentials if action.endswith("/login") else {}
        response = session.post(urljoin(response.url, action), data=data, allow_redirects=False)
    raise SignInRefused(f"no redirect back to {redirect_uri} after {_MAX_STEPS} steps")


def _form_action(response: requests.Response) -> str:
    match = _FORM_ACTION.search(response.text)
    if match is None:
        raise SignInRefused(f"no form on {response.url}: {response.text[:500]}")
    return match.group(1)


def _authorization(
    location: str, state: str, verifier: str, redirect_uri: str, client_id: str, nonce: str
) -> Authorization:
    query = {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}
    if "error" in query:
        raise SignInRefused(f"{query['error']}: {query.get('error_description', '')}")
    if query.get("state") != state:
        raise SignInRefused(f"state mismatch in {location}")
    return Authorization(query["code"], verifier, redirect_uri, client_id, nonce)


def token_request(
    provider: OidcProvider,
    data: dict[str, str],
    *,
    client_id: str = PORTAL_CLIENT_ID,
    client_secret: str | None = PORTAL_CLIENT_SECRET,
    auth_method: str = "client_secret_basic",
) -> requests.Response:
    """POST to the token endpoint, authenticating as the client (public clients: client_secret=None)."""
    auth = None
    data = {**data, "client_id": client_id}
    if client_secret is not None and auth_method == "client_secret_basic":
        auth = (client_id, client_secret)
    elif client_secret is not None:
        data["client_secret"] = client_secret
    return requests.post(
        provider.discovery()["token_endpoint"], data=data, auth=auth, verify=str(provider.ca_file), timeout=10
    )


def redeem(
    provider: OidcProvider,
    authorization: Authorization,
    *,
    client_secret: str | None = PORTAL_CLIENT_SECRET,
    resource: str | None = None,
    auth_method: str = "client_secret_basic",
) -> dict[str, Any]:
    """Exchange the code for tokens; `resource=API_RESOURCE` makes the access token a JWT for the portal API."""
    data = {
        "grant_type": "authorization_code",
        "code": authorization.code,
        "code_verifier": authorization.code_verifier,
        "redirect_uri": authorization.redirect_uri,
    }
    if resource:
        data["resource"] = resource
    response = token_request(
        provider, data, client_id=authorization.client_id, client_secret=client_secret, auth_method=auth_method
    )
    assert response.status_code == 200, response.text
    return response.json()


class GroupDirectory(Protocol):
    """What a provider (the dev provider, Keycloak) offers for a user's groups."""

    def user_groups(self, username: str) -> list[str]: ...

    def set_user_groups(self, username: str, groups: list[str]) -> None: ...


def group_changes_for_one_test(provider: GroupDirectory) -> Iterator[Callable[[str, list[str]], None]]:
    """The body of a fixture yielding set_groups(username, groups); every changed user's groups come back."""
    originals: dict[str, list[str]] = {}

    def set_groups(username: str, groups: list[str]) -> None:
        originals.setdefault(username, provider.user_groups(username))
        provider.set_user_groups(username, groups)

    yield set_groups
    for username, groups in originals.items():
        provider.set_user_groups(username, groups)


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    """The demo provider (clients berth-portal, kubectl, berth-cli; users alice, amir, bob, vera, carol, dave, erin).

    Shared by the run. Its data dir, with provider.log, stays under pytest's basetemp for post-mortems.
    """
    with OidcProvider(data_dir=tmp_path_factory.mktemp("oidc-provider")) as provider:
        yield provider


@pytest.fixture
def set_oidc_groups(oidc_provider: OidcProvider) -> Iterator[Callable[[str, list[str]], None]]:
    """Change a user's groups at the provider for one test; the old groups come back afterwards."""
    yield from group_changes_for_one_test(oidc_provider)


@pytest.fixture
def oidc_tokens(oidc_provider: OidcProvider) -> Callable[..., dict[str, Any]]:
    """tokens = oidc_tokens("alice", resource=API_RESOURCE): a fresh sign-in as the portal client."""

    def tokens(username: str, *, resource: str | None = None, scope: str = SCOPES) -> dict[str, Any]:
        return redeem(oidc_provider, sign_in(oidc_provider, username, scope=scope), resource=resource)

    return tokens
