"""Interactive sign-in: OpenID Connect authorization code with PKCE on a loopback port, like kubelogin.

The CLI is a public client (no secret). It listens on 127.0.0.1 on a free port, sends the browser to
the provider's authorization endpoint with an S256 code challenge and a random state, takes the code
on ``http://127.0.0.1:<port>/callback``, and redeems it at the token endpoint with the verifier. Only
the access token (sent to the API as ``Bearer``) and the refresh token are kept, in the 0600 config file.
"""

from __future__ import annotations

import base64
import hashlib
import html
import secrets
import sys
import threading
import time
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import requests

from berth_cli.config import OidcSettings
from berth_cli.errors import CliError, Exit

CALLBACK_PATH = "/callback"
# Refresh a little before the access token runs out, so a request never leaves with a token about to expire.
_EXPIRY_MARGIN_SECONDS = 60
_HTTP_TIMEOUT_SECONDS = 15


def pkce_pair() -> tuple[str, str]:
    """(code_verifier, S256 code_challenge) as RFC 7636 describes."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _verify(settings: OidcSettings) -> str | bool:
    return settings.ca_file or True


def discover(settings: OidcSettings) -> dict[str, Any]:
    url = settings.issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        response = requests.get(url, verify=_verify(settings), timeout=_HTTP_TIMEOUT_SECONDS, allow_redirects=False)
    except requests.RequestException as error:
        raise CliError(f"cannot reach the OIDC provider at {settings.issuer}: {error}") from None
    if response.status_code != 200:
        raise CliError(f"OIDC discovery at {url} answered {response.status_code}")
    document: dict[str, Any] = response.json()
    if document.get("issuer") != settings.issuer.rstrip("/"):
        raise CliError(f"OIDC discovery names issuer {document.get('issuer')!r}, not {settings.issuer!r}")
    return document


@dataclass
class _Callback:
    state: str
    code: str = ""
    error: str = ""


def _handler(result: _Callback, done: threading.Event) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            if url.path != CALLBACK_PATH:
                self.send_error(404)
                return
            query = {key: values[0] for key, values in parse_qs(url.query).items()}
            if not secrets.compare_digest(query.get("state", ""), result.state):
                # Not our sign-in (a stale tab, or a page trying to plant its own code): ignore it.
                self._page(400, "This sign-in link is not the one berth is waiting for.")
                return
            if "error" in query:
                result.error = f"{query['error']}: {query.get('error_description', '')}".strip(": ")
                self._page(400, f"Sign-in failed: {result.error}")
            else:
                result.code = query.get("code", "")
                self._page(200, "Signed in. You can close this tab and return to the terminal.")
            done.set()

        def _page(self, status: int, message: str) -> None:
            body = f"<!doctype html><title>berth</title><p>{html.escape(message)}</p>".encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # the query string carries the code: never log it
            return

    return Handler


def login(
    settings: OidcSettings,
    *,
    open_browser: bool = True,
    port: int = 0,
    timeout: float = 300.0,
    announce: Callable[[str], None] | None = None,
) -> OidcSettings:
    """Sign in interactively; returns ``settings`` with fresh tokens."""
    endpoints = discover(settings)
    result = _Callback(state=secrets.token_urlsafe(24))
    done = threading.Event()
    server = HTTPServer(("127.0.0.1", port), _handler(result, done))
    redirect_uri = f"http://127.0.0.1:{server.server_address[1]}{CALLBACK_PATH}"
    verifier, challenge = pkce_pair()
    query = {
        "client_id": settings.client_id,
        "response_type": "code",
        "scope": settings.scopes,
        "redirect_uri": redirect_uri,
        "state": result.state,
        "nonce": secrets.token_urlsafe(16),
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    url = f"{endpoints['authorization_endpoint']}?{urlencode(query)}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    try:
        (announce or _announce)(url)
        if open_browser:
            webbrowser.open(url)
        if not done.wait(timeout):
            raise CliError(f"no sign-in within {timeout:.0f}s", Exit.TIMEOUT)
    finally:
        server.shutdown()
        server.server_close()
    if result.error or not result.code:
        raise CliError(f"the provider refused the sign-in: {result.error or 'no code'}", Exit.AUTH)
    tokens = _token_request(
        settings,
        endpoints["token_endpoint"],
        {
            "grant_type": "authorization_code",
            "code": result.code,
            "code_verifier": verifier,
            "redirect_uri": redirect_uri,
        },
    )
    return _with_tokens(settings, tokens)


def _announce(url: str) -> None:
    print(f"Sign in at:\n  {url}", file=sys.stderr, flush=True)


def _token_request(settings: OidcSettings, endpoint: str, data: dict[str, str]) -> dict[str, Any]:
    data = {**data, "client_id": settings.client_id}
    if settings.resource:
        data["resource"] = settings.resource
    try:
        response = requests.post(endpoint, data=data, verify=_verify(settings), timeout=_HTTP_TIMEOUT_SECONDS)
    except requests.RequestException as error:
        raise CliError(f"cannot reach the OIDC token endpoint: {error}") from None
    if response.status_code != 200:
        try:
            reason = response.json().get("error_description") or response.json().get("error")
        except ValueError:
            reason = response.text[:200]
        raise CliError(f"the OIDC provider refused the token request: {reason}", Exit.AUTH)
    tokens: dict[str, Any] = response.json()
    if not tokens.get("access_token"):
        raise CliError("the OIDC provider sent no access token", Exit.AUTH)
    return tokens


def _with_tokens(settings: OidcSettings, tokens: dict[str, Any]) -> OidcSettings:
    settings.access_token = str(tokens["access_token"])
    # Public clients may get a new refresh token on each use (rotation); keep the old one if none came.
    settings.refresh_token = str(tokens.get("refresh_token") or settings.refresh_token)
    settings.expires_at = time.time() + float(tokens.get("expires_in") or 300)
    return settings


def needs_refresh(settings: OidcSettings) -> bool:
    return not settings.access_token or time.time() > settings.expires_at - _EXPIRY_MARGIN_SECONDS


def refresh(settings: OidcSettings) -> OidcSettings:
    """New tokens from the refresh token; AUTH when there is none or the provider refuses it."""
    if not settings.refresh_token:
        raise CliError("the OIDC sign-in has expired; run: berth login --oidc", Exit.AUTH)
    endpoints = discover(settings)
    tokens = _token_request(
        settings, endpoints["token_endpoint"], {"grant_type": "refresh_token", "refresh_token": settings.refresh_token}
    )
    return _with_tokens(settings, tokens)


def revoke(settings: OidcSettings) -> bool:
    """Revoke the refresh token at the provider (RFC 7009), so a copy of the config is worth nothing; best effort."""
    if not settings.refresh_token:
        return False
    try:
        endpoint = discover(settings).get("revocation_endpoint")
        if not endpoint:
            return False
        data = {"token": settings.refresh_token, "token_type_hint": "refresh_token", "client_id": settings.client_id}
        response = requests.post(endpoint, data=data, verify=_verify(settings), timeout=_HTTP_TIMEOUT_SECONDS)
    except (CliError, requests.RequestException):
        return False
    return response.status_code == 200
