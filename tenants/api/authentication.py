"""API authentication: portal API tokens (``Token brt_…``) and OIDC access tokens (``Bearer …``)."""

from __future__ import annotations

import datetime as dt
import hmac
import json
import logging
import re
from typing import Any

import jwt
from django.conf import settings
from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import OuterRef
from django.utils import timezone
from rest_framework import authentication, exceptions

from tenants import identity, selectors, services
from tenants.audit import AuditContext
from tenants.errors import SignInRequired
from tenants.identity import jwks_client as _jwks_client
from tenants.models import ApiToken

logger = logging.getLogger(__name__)

# What services.api_token_create hands out: brt_<8 hex>_<urlsafe>. Anything else is refused before a query.
_TOKEN_SHAPE = re.compile(re.escape(services.TOKEN_PREFIX) + r"([0-9a-f]{8})_[A-Za-z0-9_-]{16,100}")


def credential(request, keyword: str) -> str | None:
    """The credential after ``keyword`` in the Authorization header; None when the header uses another scheme.

    An address that failed too often this minute is refused (429) before its credential is even looked at.
    """
    parts = authentication.get_authorization_header(request).split()
    if not parts or parts[0].decode(errors="replace") != keyword:
        return None
    wait = services.auth_failure_wait(source_ip=request.META.get("REMOTE_ADDR"))
    if wait is not None:
        raise exceptions.Throttled(wait=wait, detail="Too many failed sign-ins from your address.")
    if len(parts) != 2:
        raise exceptions.AuthenticationFailed("Malformed Authorization header.")
    return parts[1].decode(errors="replace")


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):
        plaintext = credential(request, self.keyword)
        if plaintext is None:
            return None
        shape = _TOKEN_SHAPE.fullmatch(plaintext)
        if shape is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        token = (
            ApiToken.objects.select_related("user", "team")
            .annotate(user_team_ids=ArraySubquery(selectors.team_ids_of(user=OuterRef("user_id"))))
            .filter(prefix=shape.group(1))
            .first()
        )
        if token is None or not hmac.compare_digest(token.digest, services.api_token_digest(plaintext)):
            raise exceptions.AuthenticationFailed("Invalid token.")
        if token.revoked_at is not None or token.expires_at <= timezone.now() or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Token expired or revoked.")
        user = token.user
        if services.identity_is_fresh(user=user):
            # Read in the token's statement: the teams that scope what this request may list. (When the provider
            # is asked again, below, its answer may change them: the selectors read them afterwards then.)
            user.credential_team_ids = token.user_team_ids
        else:
            # The provider has not confirmed this person lately: ask it now, once, before trusting the token.
            services.user_recheck(user=user, ctx=AuditContext.from_http(request))
            user.refresh_from_db()
            if not user.is_active:
                raise exceptions.AuthenticationFailed("Token expired or revoked.")
            if not services.identity_is_fresh(user=user):
                raise exceptions.AuthenticationFailed(
                    "Berth could not confirm your identity with the identity provider lately: sign in to the "
                    "portal again to keep using your API tokens."
                )
        if token.team is not None and not services.is_writer(user=user, team=token.team):
            raise exceptions.AuthenticationFailed("Token expired or revoked.")
        services.api_token_touch(token=token)
        return user, token

    def authenticate_header(self, request) -> str:
        return self.keyword


def verify_access_token(token: str) -> dict:
    """Claims of a JWT access token signed by the configured issuer for this API, or AuthenticationFailed."""
    if not settings.OIDC_OP_JWKS_ENDPOINT or not settings.OIDC_OP_ISSUER:
        raise exceptions.AuthenticationFailed("OIDC bearer tokens are not configured.")
    try:
        header = jwt.get_unverified_header(token)
        if header.get("alg") != settings.OIDC_RP_SIGN_ALGO:
            raise exceptions.AuthenticationFailed("Unsupported token algorithm.")
        key = _jwks_client(settings.OIDC_OP_JWKS_ENDPOINT).get_signing_key_from_jwt(token)
        claims = jwt.decode(
            token,
            key.key,
            algorithms=[settings.OIDC_RP_SIGN_ALGO],
            audience=settings.OIDC_API_AUDIENCE,
            issuer=settings.OIDC_OP_ISSUER,
            # iat: when the provider vouched for the groups the token carries (see OidcBearerAuthentication).
            options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            leeway=30,
        )
        _require_access_token(header, claims)
        return claims
    except exceptions.AuthenticationFailed:
        raise
    except (jwt.PyJWKClientError, json.JSONDecodeError) as exc:  # unreachable, or not a JWKS document
        logger.warning("JWKS lookup failed: %s", exc)
        raise exceptions.AuthenticationFailed("Token signing key not found.") from None
    except jwt.PyJWTError as exc:  # InvalidTokenError, and also a key the JWKS or the token makes unusable
        raise exceptions.AuthenticationFailed(f"Invalid token: {exc}.") from None


# What an ID token, a refresh token or a logout token says it is (Keycloak's "typ" claim): never API credentials.
_NOT_ACCESS_TOKENS = {"id", "refresh", "logout", "offline"}


def _require_access_token(header: dict[str, Any], claims: dict[str, Any]) -> None:
    """Refuse a token signed by the right issuer for the right audience that is not an access token for us.

    An RFC 9068 access token says so in its header (``typ: at+jwt``). Providers that do not follow it
    (Keycloak) are accepted only for clients named in OIDC_API_CLIENTS, and never when the token says
    it is an ID, refresh or logout token.
    """
    typ = str(header.get("typ", "")).lower().removeprefix("application/")
    if str(claims.get("typ", "")).lower() in _NOT_ACCESS_TOKENS:
        raise exceptions.AuthenticationFailed("This is not an access token (an ID or refresh token?).")
    if typ == "at+jwt":
        return
    client = claims.get("azp") or claims.get("client_id")
    if client not in settings.OIDC_API_CLIENTS:
        raise exceptions.AuthenticationFailed(
            "Not an access token for this API: expected an RFC 9068 (at+jwt) token, or one issued to a client "
            "allowed by OIDC_API_CLIENTS."
        )


class OidcBearerAuthentication(authentication.BaseAuthentication):
    """An OIDC access token (JWT) for this API: signature, issuer, audience and expiry checked locally.

    A token is used until it expires, so it may be older than what the provider has said since: its groups
    count only when it was issued after the user's last identity check, and it is refused when the provider
    ended the user's session after issuing it (services.user_sync_from_claims).
    """

    keyword = "Bearer"

    def authenticate(self, request):
        token = credential(request, self.keyword)
        if token is None:
            return None
        claims = verify_access_token(token)
        ctx = AuditContext.from_http(request)
        issued_at = dt.datetime.fromtimestamp(int(claims["iat"]), tz=dt.UTC)
        try:
            user = services.user_sync_from_claims(claims=claims, ctx=ctx, issued_at=issued_at)
        except SignInRequired as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        if "groups" not in claims and user.is_active and not services.identity_is_fresh(user=user):
            # The access token names the person but not their groups: ask the provider, with that token.
            try:
                current = identity.userinfo(token)
            except identity.IdentityUnreachable:
                raise exceptions.AuthenticationFailed(
                    "Berth could not confirm your groups with the provider."
                ) from None
            user = services.user_sync_from_claims(claims={"groups": [], **current, "sub": claims["sub"]}, ctx=ctx)
        if not user.is_active:
            raise exceptions.AuthenticationFailed("User inactive.")
        return user, None

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="berth"'
