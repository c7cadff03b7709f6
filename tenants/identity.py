"""Asking the OpenID Connect provider again, without the person: who is this, and which groups are they in?

Used to re-check users between sign-ins (``services.user_recheck``): a refresh-token grant answers with
a fresh ID token, whose claims are verified here like any other. An ``invalid_grant`` means the provider no
longer honours the session: it expired, was logged out, or the provider forgot it in a restart. Only when the
provider says why, and the reason is the person (disabled, deleted), is it news about the person.
Nothing here is logged with a token in it.
"""

from __future__ import annotations

import json
import logging
import re
import ssl
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jwt
import requests
from django.conf import settings

logger = logging.getLogger(__name__)
TIMEOUT_SECONDS = 10


class SessionEnded(Exception):
    """The provider refused the refresh token (``invalid_grant``): the session is over; the person may not be."""


class IdentityGone(SessionEnded):
    """The provider refused the refresh token and said the person is disabled or unknown there."""


# How providers say the refusal is about the person, not the session: Keycloak answers "User disabled" (and
# "Unknown user" for one deleted while the session lived); oidc-provider keeps its reason to its own log.
_ABOUT_THE_PERSON = re.compile(
    r"\b(user|account)\b.{0,20}\b(disabled|deactivated|locked|not found|deleted|removed)\b"
    r"|\bunknown (user|account)\b",
    re.I,
)


class IdentityUnreachable(Exception):
    """The provider could not be asked right now (network, 5xx, a malformed answer)."""


@dataclass(frozen=True)
class Refreshed:
    claims: dict[str, Any]
    refresh_token: str  # the one to keep (providers may rotate it)


JWKS_REFETCH_SECONDS = 2.0


@lru_cache(maxsize=4)
def jwks_client(url: str) -> jwt.PyJWKClient:
    ssl_context = None
    if isinstance(settings.OIDC_VERIFY_SSL, str):
        ssl_context = ssl.create_default_context(cafile=settings.OIDC_VERIFY_SSL)
    # A token signed with a key the cached set lacks (the provider rotated its keys, or restarted with new ones)
    # forces a refetch; at most one per JWKS_REFETCH_SECONDS, so garbage key ids cannot hammer the provider, and
    # a rotation costs the first sign-ins after it no more than that.
    return jwt.PyJWKClient(
        url, cache_keys=True, lifespan=300, ssl_context=ssl_context, cooldown_duration=JWKS_REFETCH_SECONDS
    )


def verify_id_token(token: str) -> dict[str, Any]:
    """The claims of an ID token issued to this portal by the configured provider (jwt errors otherwise)."""
    key = jwks_client(settings.OIDC_OP_JWKS_ENDPOINT).get_signing_key_from_jwt(token)
    claims: dict[str, Any] = jwt.decode(
        token,
        key.key,
        algorithms=[settings.OIDC_RP_SIGN_ALGO],
        audience=settings.OIDC_RP_CLIENT_ID,
        issuer=settings.OIDC_OP_ISSUER,
        options={"require": ["exp", "iss", "aud", "sub"]},
        leeway=30,
    )
    return claims


def _post(url: str, data: dict[str, str]) -> requests.Response:
    try:
        return requests.post(url, data=data, verify=settings.OIDC_VERIFY_SSL, timeout=TIMEOUT_SECONDS)
    except requests.RequestException as exc:
        raise IdentityUnreachable(f"the provider's token endpoint: {type(exc).__name__}") from None


def refresh(refresh_token: str) -> Refreshed:
    """A refresh-token grant for this portal's client: the person's current claims, verified."""
    response = _post(
        settings.OIDC_OP_TOKEN_ENDPOINT,
        {
            "grant_type": "refresh_token",
            "refresh_token": refresh_token,
            "client_id": settings.OIDC_RP_CLIENT_ID,
            "client_secret": settings.OIDC_RP_CLIENT_SECRET,
        },
    )
    try:
        body = response.json()
    except ValueError:
        raise IdentityUnreachable(f"the provider answered {response.status_code} without JSON") from None
    if response.status_code in (400, 401) and body.get("error") == "invalid_grant":
        said = str(body.get("error_description") or "invalid_grant")[:200]
        raise (IdentityGone if _ABOUT_THE_PERSON.search(said) else SessionEnded)(said)
    if response.status_code != 200 or not body.get("id_token"):
        raise IdentityUnreachable(f"the provider answered {response.status_code} {body.get('error', '')}".strip())
    try:
        claims = verify_id_token(body["id_token"])
    except (jwt.PyJWTError, jwt.PyJWKClientError, json.JSONDecodeError) as exc:
        raise IdentityUnreachable(f"the refreshed ID token did not verify: {type(exc).__name__}") from None
    if "groups" not in claims and body.get("access_token") and settings.OIDC_OP_USER_ENDPOINT:
        claims = {**userinfo(body["access_token"]), **claims}
    return Refreshed(claims, body.get("refresh_token") or refresh_token)


def userinfo(access_token: str) -> dict[str, Any]:
    """The userinfo endpoint's claims for ``access_token``."""
    try:
        response = requests.get(
            settings.OIDC_OP_USER_ENDPOINT,
            headers={"Authorization": f"Bearer {access_token}"},
            verify=settings.OIDC_VERIFY_SSL,
            timeout=TIMEOUT_SECONDS,
        )
        response.raise_for_status()
        claims: dict[str, Any] = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise IdentityUnreachable(f"the provider's userinfo endpoint: {type(exc).__name__}") from None
    return claims
