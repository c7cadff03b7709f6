"""What an event says: Berth's versioned JSON (``version: 1``) or a Slack message.

Bodies are rendered when the event happens and stored with each delivery, so every attempt sends (and
signs) the same bytes. Event data goes through the audit trail's redaction: a token pasted into a reason
or a purpose never leaves Berth.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from tenants.audit import redact
from tenants.models import EventType, Team, Tenant, WebhookEndpoint

VERSION = 1
SLACK_FIELD_LIMIT = 500


@dataclass(frozen=True)
class Event:
    """Something people should hear about: the same event goes out by email and by webhook."""

    type: str
    team: Team | None
    tenant: Tenant | None
    summary: str  # one line for people: a Slack message, an email subject
    link: str  # the portal page about it (BERTH_PUBLIC_URL)
    link_label: str
    data: dict[str, Any] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)  # label → value, shown in Slack messages
    id: uuid.UUID = field(default_factory=uuid.uuid4)
    occurred_at: dt.datetime = field(default_factory=timezone.now)


def tenant_json(tenant: Tenant) -> dict[str, Any]:
    return {
        "id": str(tenant.pk),
        "name": tenant.name,
        "namespace": tenant.namespace,
        "kind": tenant.kind,
        "cluster": tenant.cluster.name,
        "tier": tenant.tier.name,
        "status": tenant.status,
        "expires_at": tenant.expires_at.isoformat() if tenant.expires_at else None,
    }


def berth_json(event: Event, *, sequence: int) -> dict[str, Any]:
    return {
        "version": VERSION,
        "id": str(event.id),
        "type": event.type,
        "timestamp": event.occurred_at.isoformat(),
        "sequence": sequence,
        "summary": redact(event.summary),
        "url": event.link,
        "team": {"slug": event.team.slug, "name": event.team.name} if event.team else None,
        "tenant": tenant_json(event.tenant) if event.tenant else None,
        "data": redact(event.data),
    }


def slack_escape(text: str) -> str:
    """Slack's mrkdwn control characters: without this a purpose could say <!channel> or hide a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str) -> str:
    return text if len(text) <= SLACK_FIELD_LIMIT else text[: SLACK_FIELD_LIMIT - 1] + "…"


def slack(event: Event) -> dict[str, Any]:
    """An incoming-webhook message: the summary, the details, and a button to the page (the approval page for
    a request that waits for a decision)."""
    summary = slack_escape(redact(event.summary))
    button: dict[str, Any] = {
        "type": "button",
        "text": {"type": "plain_text", "text": event.link_label},
        "url": event.link,
    }
    if event.type == EventType.REQUEST_SUBMITTED:
        button["style"] = "primary"
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": summary}}]
    if event.details:
        blocks[0]["fields"] = [
            {"type": "mrkdwn", "text": f"*{slack_escape(label)}*\n{slack_escape(_clip(redact(value) or '-'))}"}
            for label, value in list(event.details.items())[:10]
        ]
    blocks.append({"type": "actions", "elements": [button]})
    return {"text": f"{summary} <{event.link}|{slack_escape(event.link_label)}>", "blocks": blocks}


def render(event: Event, *, format: str, sequence: int) -> dict[str, Any]:
    if format == WebhookEndpoint.Format.SLACK:
        return slack(event)
    return berth_json(event, sequence=sequence)


def body(payload: dict[str, Any]) -> bytes:
    """The exact bytes sent and signed: compact, keys sorted, the same for every attempt."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
