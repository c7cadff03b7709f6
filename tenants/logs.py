"""Structured logs: one JSON object per line, with the request id, user and tenant of the work in hand, secrets removed.

The web (tenants.middleware.RequestIdMiddleware) and the Celery worker (worker.signals) bind the context with
``bound``; a task carries the request id of the web request that enqueued it in its message headers. The
filters sit on the handler in settings.LOGGING, so every record that reaches it is redacted and carries the
context, whichever logger it came from (Django's, Celery's, the kubernetes client's).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

request_id_var: ContextVar[str] = ContextVar("berth_request_id", default="")
user_var: ContextVar[str] = ContextVar("berth_user", default="")
tenant_id_var: ContextVar[str] = ContextVar("berth_tenant_id", default="")
# The web request in hand: its user is read when a record is written (DRF authenticates inside the view).
http_request_var: ContextVar[Any] = ContextVar("berth_http_request", default=None)

_VARS: dict[str, ContextVar[Any]] = {
    "request_id": request_id_var,
    "user": user_var,
    "tenant_id": tenant_id_var,
    "http_request": http_request_var,
}


@contextmanager
def bound(**values: Any) -> Iterator[None]:
    """Bind request_id, user, tenant_id or http_request for the block (None leaves a value as it is)."""
    tokens = [(_VARS[name], _VARS[name].set(value)) for name, value in values.items() if value is not None]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def bind(**values: Any) -> None:
    """Bind for the rest of the current context (a view naming its tenant, say); ``bound`` resets it."""
    for name, value in values.items():
        if value is not None:
            _VARS[name].set(value)


# --- Redaction -----------------------------------------------------------------------------------------------------
_REDACTED = "[redacted]"
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # PEM private keys, whole.
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)", re.S), _REDACTED),
    # Authorization headers, in any spelling (HTTP_AUTHORIZATION, 'Authorization': '...').
    (
        re.compile(r"""((?:HTTP_)?authorization['"]?\s*[:=]\s*['"]?)(?:(?:bearer|token|basic)\s+)?[^\s'",}]+""", re.I),
        r"\1" + _REDACTED,
    ),
    # Credentials after an auth scheme.
    (re.compile(r"\b(Bearer|bearer|Token|Basic)(\s+)[A-Za-z0-9._~+/=-]{16,}"), r"\1\2" + _REDACTED),
    # Berth API tokens (tenants.services.api_tokens) wherever they appear.
    (re.compile(r"\bbrt_[A-Za-z0-9]+_[A-Za-z0-9_-]+"), "brt_" + _REDACTED),
    # JSON Web Tokens (ServiceAccount tokens, OIDC access, ID and refresh tokens).
    (re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), _REDACTED),
    # Credentials in a query string, also URL-encoded inside another one (``next=%2F...%3Fcode%3D...``): an
    # access log writes the whole request line. OAuth's authorization code is one; its state is not a secret.
    (
        re.compile(
            r"((?:[?&;]|%3F|%26)(?:code|code_verifier|device_code|access_token|id_token|refresh_token|token"
            r"|client_secret|client_assertion|assertion|subject_token|actor_token|password|passwd|secret|api_key"
            r"|apikey|key|sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token)(?:=|%3D))"
            r"(?:(?!%26)[^&;\s'\"#])+",
            re.I,
        ),
        r"\1" + _REDACTED,
    ),
    # Secret-looking keys in kubeconfigs, YAML, JSON, dict reprs and query strings.
    (
        re.compile(
            r"""(['"]?\b(?:token|access_token|refresh_token|id_token|client-key-data|client-certificate-data|"""
            r"""password|passwd|client_secret|secret|api_key|sessionid|csrftoken)['"]?\s*[:=]\s*['"]?)"""
            r"""[^\s'",}&]+""",
            re.I,
        ),
        r"\1" + _REDACTED,
    ),
]


def _project_secrets() -> list[str]:
    """The values of the project's own secrets from the settings, when they are configured."""
    try:
        from django.conf import settings

        if not settings.configured:
            return []
        names = (
            "SECRET_KEY",
            "BERTH_SECRETS_KEY",
            "OIDC_RP_CLIENT_SECRET",
            "BERTH_METRICS_TOKEN",
            "BERTH_ALERTMANAGER_TOKEN",
        )
        values = [str(getattr(settings, name, "") or "") for name in names]
    except Exception:  # settings that cannot load must not stop a log line
        return []
    return [value for value in values if len(value) >= 8]


def redact(text: str) -> str:
    """``text`` without credentials: tokens, keys, Authorization values and the project's secrets."""
    for value in _project_secrets():
        text = text.replace(value, _REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class RedactFilter(logging.Filter):
    """Renders the message (and the traceback) once, redacted, so no formatter sees the raw arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: log what there is rather than lose the line
            message = f"{record.msg!r} {record.args!r}"
        record.msg = redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def _user_of(request: Any) -> str:
    """The signed-in user's name, without triggering a lazy lookup (a log line never queries the database)."""
    if request is None:
        return ""
    user = request.__dict__.get("user")
    if user is None:
        return ""
    from django.utils.functional import empty

    user = getattr(user, "_wrapped", user)
    if user is empty or not getattr(user, "is_authenticated", False):
        return ""
    return str(getattr(user, "username", ""))


class ContextFilter(logging.Filter):
    """Adds request_id, user and tenant_id (empty outside any request or task)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        record.user = user_var.get() or _user_of(http_request_var.get())
        record.tenant_id = tenant_id_var.get()
        return True


# Attributes every LogRecord has; anything else came from ``extra=`` and goes into the JSON object.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
_CONTEXT = ("request_id", "user", "tenant_id")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC), level, logger, message, request_id, user, tenant_id, extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, tz=dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        for name in _CONTEXT:
            entry[name] = getattr(record, name, "")
        for name, value in vars(record).items():
            if name not in _STANDARD and name not in entry:
                entry[name] = value if isinstance(value, (int, float, bool)) or value is None else redact(str(value))
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(self.formatException(record.exc_info))
        if record.exc_text:
            entry["exc"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """The readable format for development (LOG_FORMAT=text), with the same context."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s [%(request_id)s %(user)s %(tenant_id)s] %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        for name in _CONTEXT:
            if not hasattr(record, name):
                setattr(record, name, "")
        return super().format(record)
