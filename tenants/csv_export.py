"""CSV export of audit events, shared by the API and the audit page."""
from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator

from django.http import StreamingHttpResponse

from tenants.models import AuditEvent

COLUMNS = ["at", "actor_name", "team", "object_type", "object_id", "action", "before", "after", "request_id", "source_ip", "user_agent"]


class _Echo:
    def write(self, value: str) -> str:
        return value


def _safe(value: str) -> str:
    # Spreadsheet formula injection: a cell must not start with = + - @.
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def _rows(events: Iterable[AuditEvent]) -> Iterator[list[str]]:
    yield COLUMNS
    for e in events:
        yield [_safe(str(v)) for v in (
            e.at.isoformat(), e.actor_name, e.team.slug if e.team else "", e.object_type, e.object_id, e.action,
            json.dumps(e.before, sort_keys=True), json.dumps(e.after, sort_keys=True), e.request_id, e.source_ip or "", e.user_agent,
        )]


def audit_csv_response(events: Iterable[AuditEvent]) -> StreamingHttpResponse:
    writer = csv.writer(_Echo())
    response = StreamingHttpResponse((writer.writerow(row) for row in _rows(events)), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="berth-audit.csv"'
    return response
