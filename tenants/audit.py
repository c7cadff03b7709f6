"""Writing the audit trail. Services call ``record`` inside their own transaction."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db import models

from tenants.models import AuditEvent, Team, User

REDACTED = "[redacted]"
_SECRET_KEY = re.compile(
    r"(token|secret|password|passwd|passphrase|kubeconfig|credential|private|authorization|cookie|digest"
    r"|api[_-]?key|access[_-]?key|client[_-]?key|key[_-]?data)",
    re.I,
)
_SECRET_VALUE = re.compile(
    r"(eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"
    r"|brt_[A-Za-z0-9_-]{16,}"
    # Webhook signing secrets (Standard Webhooks) and Slack incoming-webhook URLs, whose path is the credential.
    r"|whsec_[A-Za-z0-9+/=]{16,}"
    r"|hooks\.slack\.com/services/[A-Za-z0-9/_-]+"
    r"|\bBearer\s+[A-Za-z0-9._~+/=-]{8,}"
    # The whole PEM block, not just its first line (to the end of the text when the END line is missing).
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----(?:.*?-----END [A-Z ]*PRIVATE KEY-----|.*))",
    re.S,
)


@dataclass(frozen=True)
class AuditContext:
    """Where an action came from; built by the page or API layer, passed explicitly."""

    request_id: str = ""
    source_ip: str | None = None
    user_agent: str = ""

    @classmethod
    def from_http(cls, request: Any) -> AuditContext:
        meta = request.META
        return cls(
            request_id=getattr(request, "request_id", "") or meta.get("HTTP_X_REQUEST_ID", "")[:64],
            source_ip=meta.get("REMOTE_ADDR") or None,
            user_agent=meta.get("HTTP_USER_AGENT", "")[:400],
        )


SYSTEM = AuditContext(request_id="", source_ip=None, user_agent="berth-worker")


# A count or a flag about secrets is not one: "tokens_revoked": 3 stays readable.
_COUNT_KEY = re.compile(r"(^(n|num|number)_|_(count|revoked|paused|issued|expired|created|deleted)$)", re.I)


def _hides_a_secret(key: Any, value: Any) -> bool:
    if not _SECRET_KEY.search(str(key)) or value is None or isinstance(value, bool):
        return False
    return not (isinstance(value, int) and _COUNT_KEY.search(str(key)))


def redact(data: Any) -> Any:
    """A copy of ``data`` with secret-looking keys and values replaced; NULs dropped (PostgreSQL refuses them)."""
    if isinstance(data, dict):
        return {_text(k): (REDACTED if _hides_a_secret(k, v) else redact(v)) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact(v) for v in data]
    if isinstance(data, str):
        return _SECRET_VALUE.sub(REDACTED, _text(data))
    return data


def _text(value: Any, limit: int | None = None) -> Any:
    if not isinstance(value, str):
        return value
    return value.replace("\x00", "")[:limit]


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
        object_type = object_type or str(getattr(obj, "audit_object_type", obj._meta.model_name))
        object_id = object_id or str(obj.pk)
    if actor is not None and not getattr(actor, "is_authenticated", False):
        actor = None
    return AuditEvent.objects.create(
        actor=actor,
        actor_name=_text(actor_name or (actor.username if actor else "system"), 255),
        team=team,
        object_type=_text(object_type, 40),
        object_id=_text(object_id, 64),
        action=action,
        before=redact(before or {}),
        after=redact(after or {}),
        request_id=_text(ctx.request_id, 64),
        source_ip=ctx.source_ip,
        user_agent=_text(ctx.user_agent, 400),
    )


# What each recorded action means, as people read it in the audit trail and a tenant's or request's history. The
# codes stay what the API, the CSV export and the filters speak.
ACTION_LABELS = {
    "api_token.create": "API token created",
    "api_token.revoke": "API token revoked",
    "auth.failures_suppressed": "Failed sign-ins counted together",
    "auth.login": "Signed in",
    "auth.login_failed": "Sign-in failed",
    "auth.login_refused": "Sign-in refused",
    "auth.logout": "Signed out",
    "auth.token_failed": "Credential refused",
    "authz.denied": "Action refused",
    "cluster.identity": "Cluster identity recorded",
    "cluster.prices": "Cluster prices changed",
    "membership.add": "Added to a team",
    "membership.change": "Team role changed",
    "membership.remove": "Removed from a team",
    "orphan.decommission": "Orphan namespace decommissioned",
    "orphan.reattach": "Orphan namespace re-attached",
    "request.approve": "Request approved",
    "request.cancel": "Request cancelled",
    "request.reject": "Request rejected",
    "request.submit": "Request submitted",
    "tenant.alert_firing": "Alert fired",
    "tenant.alert_resolved": "Alert resolved",
    "tenant.approve": "Tenant approved",
    "tenant.cancel": "Tenant cancelled",
    "tenant.change_tier": "Tier changed",
    "tenant.credentials_renewed": "Credentials renewed",
    "tenant.decommission": "Decommissioning started",
    "tenant.log_read_outside_team": "Pod log read from outside the team",
    "tenant.deleted": "Tenant deleted",
    "tenant.diverged": "Diverged from the cluster",
    "tenant.recreate": "Recreated after it diverged",
    "tenant.drift_repaired": "Drift repaired",
    "tenant.expiry_reminded": "Expiry reminder sent",
    "tenant.extend": "Expiry extended",
    "tenant.failed": "Tenant failed",
    "tenant.isolation_check_requested": "Isolation check requested",
    "tenant.isolation_checked": "Isolation checked",
    "tenant.kubeconfig_issued": "Kubeconfig issued",
    "tenant.provisioning": "Provisioning started",
    "tenant.ready": "Tenant ready",
    "tenant.reject": "Tenant rejected",
    "tenant.retry": "Provisioning retried",
    "tenant.rightsizing_accept": "Right-sizing accepted",
    "tenant.rightsizing_dismiss": "Right-sizing dismissed",
    "tenant.sleep_schedule_set": "Sleep schedule set",
    "tenant.slept": "Put to sleep",
    "tenant.woke": "Woken up",
    "tier.update": "Tier settings changed",
    "transfer.accept": "Transfer accepted",
    "transfer.approve": "Transfer approved",
    "transfer.ask": "Transfer offered",
    "transfer.complete": "Transfer completed",
    "transfer.decline": "Transfer declined",
    "user.deactivated": "User deactivated",
    "user.platform_roles": "Platform roles changed",
    "user.session_ended": "Session ended",
    "webhook.create": "Webhook created",
    "webhook.delete": "Webhook deleted",
    "webhook.rotate_secret": "Webhook secret rotated",
    "webhook.disable": "Webhook switched off after failed deliveries",
    "webhook.test": "Webhook tested",
    "webhook.update": "Webhook changed",
}


def action_label(action: str) -> str:
    """``tenant.ready`` → "Tenant ready"; a code without a label reads as its words (``x.a_b`` → "X: a b")."""
    if action in ACTION_LABELS:
        return ACTION_LABELS[action]
    noun, _, verb = action.partition(".")
    words = verb.replace("_", " ")
    return f"{noun.replace('_', ' ').capitalize()}: {words}" if words else noun.capitalize()
