"""OpenID Connect sign-in: groups claim → teams and platform roles on every login."""

from __future__ import annotations

import logging
from urllib.parse import urlencode

from django.conf import settings
from django.core.exceptions import ValidationError
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView

from tenants import services
from tenants.audit import AuditContext
from tenants.models import User

logger = logging.getLogger(__name__)


class BerthOidcBackend(OIDCAuthenticationBackend):
    def get_userinfo(self, access_token, id_token, payload):
        """The verified ID token's claims, completed by the userinfo endpoint."""
        claims = dict(payload or {})
        try:
            claims.update(super().get_userinfo(access_token, id_token, payload))
        except Exception as exc:  # userinfo is optional when the ID token carries the claims
            if not claims:
                raise
            logger.info("userinfo endpoint unavailable (%s); using ID token claims", type(exc).__name__)
        return claims

    def verify_claims(self, claims) -> bool:
        return bool(claims.get("sub"))

    def filter_users_by_claims(self, claims):
        return User.objects.filter(oidc_subject=str(claims.get("sub", "")), is_active=True)

    def get_token(self, payload):
        """The provider's tokens; the refresh token is kept (sealed) after sign-in to re-check groups later."""
        tokens = super().get_token(payload)
        self._refresh_token = str(tokens.get("refresh_token") or "")
        return tokens

    def _sync(self, claims) -> User | None:
        ctx = AuditContext.from_http(self.request) if getattr(self, "request", None) is not None else AuditContext()
        try:
            user = services.user_sync_from_claims(claims=claims, ctx=ctx)
        except ValidationError as exc:
            services.auth_failure_record(action="auth.login_refused", ctx=ctx, detail={"reason": str(exc)[:200]})
            return None
        refresh_token = getattr(self, "_refresh_token", "")
        if refresh_token:
            services.user_record_idp_session(user=user, refresh_token=refresh_token)
        return user

    def create_user(self, claims):
        return self._sync(claims)

    def update_user(self, user, claims):
        return self._sync(claims)


class AuditedCallbackView(OIDCAuthenticationCallbackView):
    def login_failure(self):
        reason = self.request.GET.get("error_description") or self.request.GET.get("error") or "rejected"
        services.auth_failure_record(
            action="auth.login_failed", ctx=AuditContext.from_http(self.request), detail={"reason": reason[:200]}
        )
        return super().login_failure()


def provider_logout_url(request) -> str:
    """End the session at the provider too (RP-initiated logout), then come back to the sign-in page."""
    endpoint = settings.OIDC_OP_LOGOUT_ENDPOINT
    back = request.build_absolute_uri(
        settings.LOGOUT_REDIRECT_URL if settings.LOGOUT_REDIRECT_URL.startswith("/") else "/login/"
    )
    if not endpoint:
        return back
    params = {"post_logout_redirect_uri": back, "client_id": settings.OIDC_RP_CLIENT_ID}
    return f"{endpoint}?{urlencode(params)}"
