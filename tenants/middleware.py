"""Request ids for the audit trail and the logs, /metrics, and OIDC session refresh for pages only."""

from __future__ import annotations

import hmac
import logging
import re
import time
import uuid

from django.conf import settings
from django.http import HttpResponse
from mozilla_django_oidc.middleware import SessionRefresh

from tenants import logs, metrics

_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
request_logger = logging.getLogger("berth.request")


class RequestIdMiddleware:
    """Takes a sane incoming X-Request-ID or makes one, echoes it, and binds it (and the user and tenant, once
    known) to every log line of the request; one log line per request, and API errors counted."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.META.get("HTTP_X_REQUEST_ID", "")
        request.request_id = incoming if _SAFE_ID.match(incoming) else uuid.uuid4().hex
        started = time.monotonic()
        with logs.bound(request_id=request.request_id, http_request=request, tenant_id=""):
            response = self.get_response(request)
            status = response.status_code
            metrics.request_answered(path=request.path, status=status)
            # The path only: a query string may carry what a log must not. This line stands for Django's own
            # 4xx/5xx warning, which comes after the request's context is gone (an uncaught exception is still
            # logged with its traceback, inside the context).
            request_logger.log(
                logging.ERROR if status >= 500 else logging.WARNING if status >= 400 else logging.INFO,
                "%s %s %s",
                request.method,
                request.path[:200],
                status,
                extra={"status": status, "duration_ms": round((time.monotonic() - started) * 1000)},
            )
            response._has_been_logged = True
        response["X-Request-ID"] = request.request_id
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):
        """Pages and API calls about one tenant (tenant-*, api-tenant-*) name it in their log lines."""
        match = request.resolver_match
        if match and (match.url_name or "").startswith(("tenant-", "api-tenant-")) and "pk" in view_kwargs:
            logs.bind(tenant_id=str(view_kwargs["pk"]))
        return None


class MetricsMiddleware:
    """``GET /metrics`` for Prometheus, before host validation and the HTTPS redirect (Prometheus scrapes pods by
    address, over the cluster network), with a bearer token: 404 when BERTH_METRICS_TOKEN is unset, 401 without
    the right one."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path != "/metrics":
            return self.get_response(request)
        expected = settings.BERTH_METRICS_TOKEN
        if not expected:
            return HttpResponse("Not found", status=404, content_type="text/plain")
        scheme, _, supplied = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(supplied.strip().encode(), expected.encode()):
            response = HttpResponse("Unauthorized", status=401, content_type="text/plain")
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
        if request.method not in ("GET", "HEAD"):
            return HttpResponse("Method not allowed", status=405, content_type="text/plain")
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return HttpResponse(generate_latest(metrics.scrape_registry()), content_type=CONTENT_TYPE_LATEST)


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
