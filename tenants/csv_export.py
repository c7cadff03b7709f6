"""The audit trail as CSV, for the API and the pages (cost reports: tenants.costs.csv)."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable, Iterator

from django.http import StreamingHttpResponse

from tenants.models import AuditEvent

COLUMNS = [
    "at",
    "actor_name",
    "team",
    "object_type",
    "object_id",
    "action",
    "before",
    "after",
    "request_id",
    "source_ip",
    "user_agent",
]


class Echo:
    def write(self, value: str) -> str:
        return value


# Spreadsheet formula injection: a spreadsheet starts a formula wherever a cell can begin with one of
# these (full-width forms included). A cell can begin at the start of a value, and also after any
# character some spreadsheet takes for a separator when it guesses the CSV dialect (a European locale
# splits on ';'), so every such position is neutralised with a leading apostrophe.
_FORMULA = re.compile(r"(^|[,;\t\r\n|])([ \t\r\n]*)([=+\-@\uff1d\uff0b\uff0d\uff20])")


def safe_cell(value: str) -> str:
    return _FORMULA.sub(r"\1\2'\3", value)


def _rows(events: Iterable[AuditEvent]) -> Iterator[list[str]]:
    yield COLUMNS
    for e in events:
        yield [
            safe_cell(str(v))
            for v in (
                e.at.isoformat(),
                e.actor_name,
                e.team.slug if e.team else "",
                e.object_type,
                e.object_id,
                e.action,
                json.dumps(e.before, sort_keys=True),
                json.dumps(e.after, sort_keys=True),
                e.request_id,
                e.source_ip or "",
                e.user_agent,
            )
        ]


def audit_csv_response(events: Iterable[AuditEvent]) -> StreamingHttpResponse:
    writer = csv.writer(Echo())
    response = StreamingHttpResponse(
        (writer.writerow(row) for row in _rows(events)), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = 'attachment; filename="berth-audit.csv"'
    return response


# --- Showback: one row per cost line (tenants.selectors.CostReport); the totals are the sums of these rows ------
