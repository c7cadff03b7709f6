"""Domain errors → HTTP: field errors 400, Forbidden 403, NoLongerExists 404, InvalidTransition 409, what the
cluster refused the team its own status; refusals are audited."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import loader
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from tenants import services
from tenants.audit import AuditContext
from tenants.errors import (
    Busy,
    ClusterRefused,
    ClusterUnavailable,
    Forbidden,
    InvalidTransition,
    NoLongerExists,
    database_unavailable,
)
from tenants.models import User


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class Unavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "cluster_unavailable"


# --- The portal's own database away (restarting, failing over, unreachable) ------------------------------------------
# Every request needs PostgreSQL (sessions, tokens, the rows themselves), so while it is away the portal answers 503
# with a body that says so and when to try again, never a 500: a client retries (a POST with the same
# Idempotency-Key is safe to repeat) and a person sees a page that says what is going on.
DATABASE_RETRY_AFTER_SECONDS = 5
DATABASE_UNAVAILABLE = (
    "The portal's database is not reachable at the moment; try again in a few seconds. "
    "A POST repeated with the same Idempotency-Key is not applied twice."
)
logger = logging.getLogger(__name__)


class DatabaseUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "database_unavailable"
    default_detail = DATABASE_UNAVAILABLE


def database_unavailable_response(request: HttpRequest) -> HttpResponse:
    """503 with Retry-After: the API's JSON error body under /api/, else the error page, rendered without the
    request (its context processors and the signed-in person all need the database)."""
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"detail": DATABASE_UNAVAILABLE}, status=503)
    else:
        response = HttpResponse(loader.render_to_string("503.html"), status=503)
    response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
    return response


def to_api_exception(exc: Exception) -> Exception:
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        return exceptions.ValidationError(detail)
    if isinstance(exc, Forbidden):
        return exceptions.PermissionDenied(str(exc))
    if isinstance(exc, InvalidTransition):
        return Conflict(str(exc))
    if isinstance(exc, NoLongerExists):
        return exceptions.NotFound(str(exc))
    if isinstance(exc, ClusterUnavailable):
        return Unavailable(str(exc))
    if isinstance(exc, Busy):  # too many of the person's slow reads at once (tenants.concurrency)
        return exceptions.Throttled(wait=1, detail=str(exc))
    if isinstance(exc, ClusterRefused):  # what the API server refused the team's own identity
        if exc.status == 404:
            return exceptions.NotFound(str(exc))
        if exc.status == 400:
            return exceptions.ValidationError({"non_field_errors": [str(exc)]})
        return exceptions.PermissionDenied(str(exc))
    return exc


def exception_handler(exc: Exception, context: dict) -> Response | None:
    if database_unavailable(exc):
        logger.warning("database unavailable: %s", str(exc).strip()[:300])
        response = drf_exception_handler(DatabaseUnavailable(), context)
        if response is not None:
            response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
        return response
    exc = to_api_exception(exc)
    request = context.get("request")
    if request is not None and isinstance(exc, (exceptions.PermissionDenied, exceptions.AuthenticationFailed)):
        user = getattr(request, "user", None)
        known = user if isinstance(user, User) and user.is_authenticated else None
        action = "authz.denied" if isinstance(exc, exceptions.PermissionDenied) else "auth.token_failed"
        ctx = AuditContext.from_http(request)
        detail = {"method": request.method, "path": request.path[:200], "reason": str(exc.detail)[:200]}
        if known is not None:  # a known person is accountable for each refusal
            services.auth_record(user=known, action=action, ctx=ctx, actor_name=known.username, detail=detail)
        else:  # anyone else is counted, and audited in bulk (see tenants/services/auth_failures.py)
            services.auth_failure_record(action=action, ctx=ctx, detail=detail)
    return drf_exception_handler(exc, context)


# Django's own error pages (a URL no route matches, a request Django refuses before any view) are HTML; under
# /api/ they are the API's JSON error body instead, as the schema documents.
def _api_or_page(page: Callable[..., HttpResponse], status_code: int, detail: str) -> Callable[..., HttpResponse]:
    def handler(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": detail}, status=status_code)
        return page(request, *args, **kwargs)

    return handler


not_found = _api_or_page(defaults.page_not_found, 404, "Not found.")
_bad_request = _api_or_page(defaults.bad_request, 400, "Bad request.")


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's 400 (a request it refuses before any view); under /api/ a body over DATA_UPLOAD_MAX_MEMORY_SIZE
    (refused by its Content-Length, or once that much was read) says so."""
    if request.path.startswith("/api/") and isinstance(exception, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return JsonResponse({"detail": f"The request body is larger than {limit} bytes."}, status=400)
    return _bad_request(request, exception)


_server_error = _api_or_page(defaults.server_error, 500, "Server error.")


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's 500 handler: an uncaught exception. One that says the database is away (raised before any view,
    by the session or authentication middleware, or in a page) answers 503 instead."""
    if database_unavailable(sys.exc_info()[1]):
        return database_unavailable_response(request)
    return _server_error(request)
