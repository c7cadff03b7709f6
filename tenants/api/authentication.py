"""API authentication: portal API tokens (``Token brt_…``) and OIDC access tokens (``Bearer …``)."""
from __future__ import annotations

import hmac
import json
import logging
import re
from functools import lru_cache

import jwt
from django.conf import settings
from django.utils import timezone
from rest_framework import authentication, exceptions

from tenants import services
from tenants.audit import AuditContext
from tenants.models import ApiToken

logger = logging.getLogger(__name__)

# What services.api_token_create hands out: brt_<8 hex>_<urlsafe>. Anything else is refused before a query.
_TOKEN_SHAPE = re.compile(re.escape(services.TOKEN_PREFIX) + r"([0-9a-f]{8})_[A-Za-z0-9_-]{16,100}")


def credential(request, keyword: str) -> str | None:
    """The credential after ``keyword`` in the Authorization header; None when the header uses another scheme."""
    parts = authentication.get_authorization_header(request).split()
    if not parts or parts[0].decode(errors="replace") != keyword:
        return None
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
        token = ApiToken.objects.select_related("user", "team").filter(prefix=shape.group(1)).first()
        if token is None or not hmac.compare_digest(token.digest, services.api_token_digest(plaintext)):
            raise exceptions.AuthenticationFailed("Invalid token.")
        if token.revoked_at is not None or token.expires_at <= timezone.now() or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Token expired or revoked.")
        services.api_token_touch(token=token)
        return token.user, token

    def authenticate_header(self, request) -> str:
        return self.keyword


@lru_cache(maxsize=4)
def _jwks_client(url: str) -> jwt.PyJWKClient:
    ssl_context = None
    if isinstance(settings.OIDC_VERIFY_SSL, str):
        import ssl

        ssl_context = ssl.create_default_context(cafile=settings.OIDC_VERIFY_SSL)
    return jwt.PyJWKClient(url, cache_keys=True, lifespan=300, ssl_context=ssl_context)


def verify_access_token(token: str) -> dict:
    """Claims of a JWT access token signed by the configured issuer for this API, or AuthenticationFailed."""
    if not settings.OIDC_OP_JWKS_ENDPOINT or not settings.OIDC_OP_ISSUER:
        raise exceptions.AuthenticationFailed("OIDC bearer tokens are not configured.")
    try:
        header = jwt.get_unverified_header(token)
        if header.get("alg") != settings.OIDC_RP_SIGN_ALGO:
            raise exceptions.AuthenticationFailed("Unsupported token algorithm.")
        key = _jwks_client(settings.OIDC_OP_JWKS_ENDPOINT).get_signing_key_from_jwt(token)
        return jwt.decode(
            token, key.key, algorithms=[settings.OIDC_RP_SIGN_ALGO], audience=settings.OIDC_API_AUDIENCE,
            issuer=settings.OIDC_OP_ISSUER, options={"require": ["exp", "iss", "aud", "sub"]}, leeway=30,
        )
    except exceptions.AuthenticationFailed:
        raise
    except (jwt.PyJWKClientError, json.JSONDecodeError) as exc:  # unreachable, or not a JWKS document
        logger.warning("JWKS lookup failed: %s", exc)
        raise exceptions.AuthenticationFailed("Token signing key not found.") from None
    except jwt.PyJWTError as exc:  # InvalidTokenError, and also a key the JWKS or the token makes unusable
        raise exceptions.AuthenticationFailed(f"Invalid token: {exc}.") from None


class OidcBearerAuthentication(authentication.BaseAuthentication):
    """An OIDC access token (JWT) for this API: signature, issuer, audience and expiry checked locally."""

    keyword = "Bearer"

    def authenticate(self, request):
        token = credential(request, self.keyword)
        if token is None:
            return None
        claims = verify_access_token(token)
        user = services.user_sync_from_claims(claims=claims, ctx=AuditContext.from_http(request))
        if not user.is_active:
            raise exceptions.AuthenticationFailed("User inactive.")
        return user, None

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="berth"'
