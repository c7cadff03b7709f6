"""Alertmanager's webhook body (version 4), read as hostile input: every field checked and bounded.

Alertmanager posts a group of alerts (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config):

    {"version": "4", "status": "firing", "receiver": "berth", "groupKey": "...", "alerts": [
        {"status": "firing", "labels": {"alertname": "...", "namespace": "..."}, "annotations": {"summary": "..."},
         "startsAt": "2026-01-01T00:00:00.123456789Z", "endsAt": "0001-01-01T00:00:00Z", "fingerprint": "..."}]}

``parse`` turns it into ``Alert`` values or raises ``PayloadError`` with a message fit for the sender; nothing here
touches the database (tenants.services.alerts records them).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from typing import Any

MAX_BODY = 1024 * 1024  # bytes; the chart's and the dev cluster's Alertmanager send at most MAX_ALERTS per post
MAX_ALERTS = 200
MAX_LABELS = 40
MAX_KEY = 100
MAX_VALUE = 1000
_FINGERPRINT = re.compile(r"^[0-9a-f]{1,64}$")
# Go's RFC 3339 with up to nine fraction digits; Python keeps six.
_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$")
_ZERO_YEAR = 1  # Go's zero time (0001-01-01T00:00:00Z): no end known yet


class PayloadError(ValueError):
    """The body is not an Alertmanager webhook this receiver accepts; the message says why."""


@dataclass(frozen=True)
class Alert:
    status: str  # firing | resolved
    fingerprint: str
    starts_at: dt.datetime
    ends_at: dt.datetime | None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")

    @property
    def namespace(self) -> str:
        return self.labels.get("namespace", "")


def parse(body: bytes) -> list[Alert]:
    if len(body) > MAX_BODY:
        raise PayloadError(f"The body is larger than {MAX_BODY} bytes.")
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise PayloadError("The body is not JSON.") from None
    if not isinstance(document, dict):
        raise PayloadError("The body must be a JSON object.")
    if document.get("version") != "4":
        raise PayloadError('Only Alertmanager\'s webhook version "4" is accepted.')
    alerts = document.get("alerts")
    if not isinstance(alerts, list):
        raise PayloadError('"alerts" must be a list.')
    if len(alerts) > MAX_ALERTS:
        raise PayloadError(f'"alerts" holds more than {MAX_ALERTS} alerts (set max_alerts in Alertmanager).')
    return [_alert(i, item) for i, item in enumerate(alerts)]


def _alert(index: int, item: Any) -> Alert:
    where = f"alerts[{index}]"
    if not isinstance(item, dict):
        raise PayloadError(f"{where} must be an object.")
    status = item.get("status")
    if status not in ("firing", "resolved"):
        raise PayloadError(f'{where}.status must be "firing" or "resolved".')
    fingerprint = item.get("fingerprint")
    if not isinstance(fingerprint, str) or not _FINGERPRINT.match(fingerprint):
        raise PayloadError(f"{where}.fingerprint must be 1 to 64 lower-case hex digits.")
    starts_at = _time(item.get("startsAt"), f"{where}.startsAt")
    if starts_at is None:
        raise PayloadError(f"{where}.startsAt must be a time.")
    return Alert(
        status=status,
        fingerprint=fingerprint,
        starts_at=starts_at,
        ends_at=_time(item.get("endsAt"), f"{where}.endsAt"),
        labels=_strings(item.get("labels"), f"{where}.labels"),
        annotations=_strings(item.get("annotations", {}), f"{where}.annotations"),
    )


def _strings(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise PayloadError(f"{where} must be an object.")
    if len(value) > MAX_LABELS:
        raise PayloadError(f"{where} has more than {MAX_LABELS} entries.")
    result = {}
    for key, text in value.items():
        if not isinstance(text, str) or not key or len(key) > MAX_KEY or len(text) > MAX_VALUE:
            raise PayloadError(
                f"{where} must map names of 1 to {MAX_KEY} characters to strings of at most {MAX_VALUE}."
            )
        if "\x00" in key or "\x00" in text:
            raise PayloadError(f"{where} must not hold NUL characters.")
        try:  # JSON may escape a lone surrogate ("\ud800"), which no database or mail can hold
            key.encode("utf-8")
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise PayloadError(f"{where} must hold valid Unicode (no lone surrogates).") from None
        result[key] = text
    return result


def _time(value: Any, where: str) -> dt.datetime | None:
    """An RFC 3339 time in UTC; None for an absent or zero (Go's zero time) one."""
    if value is None or value == "":
        return None
    match = _TIME.match(value) if isinstance(value, str) else None
    if match is None:
        raise PayloadError(f"{where} must be an RFC 3339 time.")
    seconds, fraction, zone = match.groups()
    try:
        moment = dt.datetime.fromisoformat(seconds + (fraction or "")[:7] + ("+00:00" if zone == "Z" else zone))
    except ValueError:
        raise PayloadError(f"{where} must be an RFC 3339 time.") from None
    if moment.year <= _ZERO_YEAR:
        return None
    return moment.astimezone(dt.UTC)
