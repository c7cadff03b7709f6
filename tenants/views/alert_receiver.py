"""Alertmanager's webhook receiver: ``POST /hooks/alertmanager/`` (tenants.alerts, tenants.services.alerts).

Not a person's endpoint, so not under /api/: Alertmanager authenticates with the bearer token of
``BERTH_ALERTMANAGER_TOKEN`` (``http_config.authorization.credentials_file`` in its webhook receiver), compared in
constant time; no user session or API token is accepted here. 404 while the setting is unset. Answers are JSON:
200 with what the post did, 400 with ``error`` for a body that is not an Alertmanager v4 webhook, 401 without the
token. Alertmanager retries anything but a 2xx or 4xx, so a 400 is final for a body it cannot fix.
"""

from __future__ import annotations

import hmac
import logging

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from tenants import alerts, metrics, services
from tenants.audit import AuditContext

logger = logging.getLogger(__name__)


def _authorized(request: HttpRequest, expected: str) -> bool:
    scheme, _, supplied = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(supplied.strip().encode(), expected.encode())


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _body(request: HttpRequest) -> bytes:
    """At most one byte more than MAX_BODY, whatever Content-Length claims (tenants.alerts.parse refuses more)."""
    return request.read(alerts.MAX_BODY + 1)


@csrf_exempt
def alertmanager_webhook(request: HttpRequest) -> JsonResponse:
    expected = settings.BERTH_ALERTMANAGER_TOKEN
    if not expected:
        return _error(404, "Alerts are not received here: BERTH_ALERTMANAGER_TOKEN is not set.")
    if not _authorized(request, expected):
        response = _error(401, "Send Alertmanager's bearer token (BERTH_ALERTMANAGER_TOKEN).")
        response["WWW-Authenticate"] = 'Bearer realm="alertmanager"'
        return response
    if request.method != "POST":
        response = _error(405, "POST Alertmanager's webhook body here.")
        response["Allow"] = "POST"
        return response
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return _error(400, "Content-Length is not a number.")
    if declared > alerts.MAX_BODY:
        return _error(400, f"The body is larger than {alerts.MAX_BODY} bytes.")
    try:
        parsed = alerts.parse(_body(request))
    except alerts.PayloadError as exc:
        metrics.alerts_received(outcome="refused", count=1)
        return _error(400, str(exc))
    received = services.alerts_receive(alerts=parsed, ctx=AuditContext.from_http(request))
    for outcome, count in received.counts.items():
        metrics.alerts_received(outcome=outcome, count=count)
    if received.counts.get("unknown_namespace"):
        logger.info("alerts: %d alert(s) about namespaces of no tenant", received.counts["unknown_namespace"])
    return JsonResponse({"received": received.counts})
