"""Writing the audit trail. Services call ``record`` inside their own transaction."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db import models

from tenants.models import AuditEvent, Team, User

REDACTED = "[redacted]"
_SECRET_KEY = re.compile(r"(token|secret|password|passwd|kubeconfig|credential|private|authorization|client-key|key-data|digest)", re.I)
_SECRET_VALUE = re.compile(r"(eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*|brt_[A-Za-z0-9_-]{16,}|-----BEGIN [A-Z ]*PRIVATE KEY-----)")


@dataclass(frozen=True)
class AuditContext:
    """Where an action came from; built by the page or API layer, passed explicitly."""

    request_id: str = ""
    source_ip: str | None = None
    user_agent: str = ""

    @classmethod
    def from_http(cls, request: Any) -> "AuditContext":
        meta = request.META
        return cls(
            request_id=getattr(request, "request_id", "") or meta.get("HTTP_X_REQUEST_ID", "")[:64],
            source_ip=meta.get("REMOTE_ADDR") or None,
            user_agent=meta.get("HTTP_USER_AGENT", "")[:400],
        )


SYSTEM = AuditContext(request_id="", source_ip=None, user_agent="berth-worker")


def redact(data: Any) -> Any:
    """A copy of ``data`` with secret-looking keys and values replaced."""
    if isinstance(data, dict):
        return {k: (REDACTED if _SECRET_KEY.search(str(k)) else redact(v)) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact(v) for v in data]
    if isinstance(data, str) and _SECRET_VALUE.search(data):
        return _SECRET_VALUE.sub(REDACTED, data)
    return data


def record(
    *,
    actor: User | None,
    action: str,
    obj: models.Model | None = None,
    object_type: str = "",
    object_id: str = "",
    team: Team | None = None,
    before: dict | None = None,
    after: dict | None = None,
    ctx: AuditContext = SYSTEM,
    actor_name: str = "",
) -> AuditEvent:
    if obj is not None:
        object_type = object_type or obj._meta.model_name
        object_id = object_id or str(obj.pk)
    if actor is not None and not getattr(actor, "is_authenticated", False):
        actor = None
    return AuditEvent.objects.create(
        actor=actor,
        actor_name=actor_name or (actor.username if actor else "system"),
        team=team,
        object_type=object_type,
        object_id=object_id,
        action=action,
        before=redact(before or {}),
        after=redact(after or {}),
        request_id=ctx.request_id,
        source_ip=ctx.source_ip,
        user_agent=ctx.user_agent,
    )
