"""Presentation filters for Berth's pages: units people read, and the tone of a status badge."""

from __future__ import annotations

import datetime as dt
import json

from django import template
from django.utils import timezone
from django.utils.timesince import timesince

from tenants import audit
from tenants.models import KIND_NOTES

register = template.Library()

_TENANT_TONES = {
    "ready": "ok",
    "failed": "bad",
    "diverged": "bad",
    "rejected": "bad",
    "requested": "warn",
    "approved": "info busy",
    "provisioning": "info busy",
    "decommissioning": "info busy",
}
_REQUEST_TONES: dict[str, str] = {"pending": "warn", "approved": "ok", "rejected": "bad"}


def _classes(tone: str) -> str:
    return " ".join(f"badge--{t}" for t in tone.split())


@register.filter
def tenant_tone(status: str) -> str:
    """CSS modifiers for a tenant status badge (deleted and cancelled stay neutral)."""
    return _classes(_TENANT_TONES.get(status, "idle"))


@register.filter
def request_tone(status: str) -> str:
    """CSS modifiers for a request status badge: an approved request is done, not busy."""
    return _classes(_REQUEST_TONES.get(status, "idle"))


@register.filter
def kind_note(kind: str) -> str:
    """What a requester should know about a kind of tenant (tenants.models.KIND_NOTES)."""
    return KIND_NOTES.get(kind, "")


@register.filter
def cpu(millis: int | None) -> str:
    if millis is None:
        return "—"
    cores = millis / 1000
    return f"{cores:g} CPU"


@register.filter
def mib(value: int | None) -> str:
    if value is None:
        return "—"
    return f"{value / 1024:g} GiB" if value >= 1024 else f"{value} MiB"


@register.filter
def gib(value: int | None) -> str:
    return "—" if value is None else f"{value} GiB"


@register.filter
def duration(seconds: int | None) -> str:
    if seconds is None:
        return "—"
    if seconds % 86400 == 0:
        n, unit = seconds // 86400, "day"
    elif seconds % 3600 == 0:
        n, unit = seconds // 3600, "hour"
    elif seconds % 60 == 0:
        n, unit = seconds // 60, "minute"
    else:
        n, unit = seconds, "second"
    return f"{n} {unit}{'' if n == 1 else 's'}"


@register.filter
def pretty_json(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


@register.filter
def action_label(action: str) -> str:
    """An audit action as people read it: ``request.submit`` → "Request submitted"."""
    return audit.action_label(action)


@register.filter
def ago(moment: dt.datetime | None) -> str:
    """ "just now" for the last minute (not "0 minutes ago"), else "3 minutes ago"."""
    if moment is None:
        return ""
    if timezone.now() - moment < dt.timedelta(minutes=1):
        return "just now"
    return f"{timesince(moment)} ago"
