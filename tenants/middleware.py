"""Request ids for the audit trail, and OIDC session refresh for pages only."""

from __future__ import annotations

import re
import uuid

from django.http import HttpResponse
from mozilla_django_oidc.middleware import SessionRefresh

_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class RequestIdMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.META.get("HTTP_X_REQUEST_ID", "")
        request.request_id = incoming if _SAFE_ID.match(incoming) else uuid.uuid4().hex
        response = self.get_response(request)
        response["X-Request-ID"] = request.request_id
        return response


class OidcSessionRefresh(SessionRefresh):
    """Re-check the IdP session when the ID token ages (pages only; the API authenticates each call)."""

    def is_refreshable_url(self, request) -> bool:
        if not request.session.get("oidc_id_token_expiration"):
            return False  # a session not made by OIDC (e.g. a test's force_login)
        return super().is_refreshable_url(request)


class HealthzMiddleware:
    """Answers /healthz first, before host validation: probes use whatever Host header they like."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path == "/healthz" and request.method in ("GET", "HEAD"):
            return HttpResponse("ok", content_type="text/plain")
        return self.get_response(request)
