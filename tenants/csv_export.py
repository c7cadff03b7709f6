"""The audit trail as CSV, for the API and the pages (cost reports: tenants.costs.csv)."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from django.http import StreamingHttpResponse

from tenants.models import Tenant

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


# What a row of the CSV is read from: an event's ``values`` with these keys (the API's list rows have them all).
ROW = [name if name != "team" else "team__slug" for name in COLUMNS]


def _rows(events: Iterable[dict[str, Any]]) -> Iterator[list[str]]:
    yield COLUMNS
    for e in events:
        yield [
            safe_cell(str(v))
            for v in (
                e["at"].isoformat(),
                e["actor_name"],
                e["team__slug"] or "",
                e["object_type"],
                e["object_id"],
                e["action"],
                json.dumps(e["before"], sort_keys=True),
                json.dumps(e["after"], sort_keys=True),
                e["request_id"],
                e["source_ip"] or "",
                e["user_agent"],
            )
        ]


def audit_csv_response(events: Iterable[dict[str, Any]]) -> StreamingHttpResponse:
    """The CSV of ``events``, rows of ``values`` holding the keys of ROW."""
    writer = csv.writer(Echo())
    response = StreamingHttpResponse(
        (writer.writerow(row) for row in _rows(events)), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = 'attachment; filename="berth-audit.csv"'
    return response


# --- The fleet view's tenants (tenants/views/fleet_pages.py) ----------------------------------------------------
TENANT_COLUMNS = [
    "id",
    "name",
    "team",
    "cluster",
    "tier",
    "kind",
    "status",
    "status_reason",
    "isolation_passed",
    "expires_at",
    "created_at",
]


def _tenant_rows(tenants: Iterable[Tenant]) -> Iterator[list[str]]:
    yield TENANT_COLUMNS
    for t in tenants:
        # The fleet view annotates the verdict alone (tenants.views.fleet_pages); a plain row carries the report.
        passed = getattr(t, "isolation_passed", None)
        if passed is None and "isolation_report" in t.__dict__:
            passed = (t.isolation_report or {}).get("passed")
        yield [
            safe_cell(str(v))
            for v in (
                t.pk,
                t.name,
                t.team.slug,
                t.cluster.name,
                t.tier.name,
                t.kind,
                t.status,
                t.status_reason,
                "" if passed is None else str(passed in (True, "true")).lower(),
                t.expires_at.isoformat() if t.expires_at else "",
                t.created_at.isoformat(),
            )
        ]


def tenants_csv_response(tenants: Iterable[Tenant]) -> StreamingHttpResponse:
    writer = csv.writer(Echo())
    response = StreamingHttpResponse(
        (writer.writerow(row) for row in _tenant_rows(tenants)), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = 'attachment; filename="berth-tenants.csv"'
    return response


# --- Showback: one row per cost line (tenants.selectors.CostReport); the totals are the sums of these rows ------
