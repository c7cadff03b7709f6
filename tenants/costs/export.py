"""Cost reports as CSV: the same figures as the JSON, one line per tenant, team and currency."""

from __future__ import annotations

import csv
from collections.abc import Iterator

from django.http import StreamingHttpResponse

from tenants.costs import showback
from tenants.costs.selectors import CostReport
from tenants.csv_export import Echo, safe_cell

FIGURES = ["cpu_core_hours", "memory_gib_hours", "storage_gib_months", "cpu", "memory", "storage", "total"]
COST_COLUMNS = [
    "month",
    "tenant_id",
    "tenant",
    "cluster",
    "team",
    "currency",
    "live_hours",
    "asleep_hours",
    *(f"allocation_{name}" for name in FIGURES),
    *(f"usage_{name}" for name in FIGURES),
    "usage_basis",
]


def _cost_rows(report: CostReport) -> Iterator[list[str]]:
    yield COST_COLUMNS
    month = showback.month_label(report.month)
    for row in report.rows:
        line = row.line
        figures = [str(getattr(f, name)) for f in (line.allocation, line.usage) for name in FIGURES]
        yield [
            safe_cell(str(v))
            for v in (
                month,
                row.tenant.pk,
                row.tenant.name,
                row.tenant.cluster.name,
                row.team.slug,
                line.currency,
                line.live_hours,
                line.asleep_hours,
                *figures,
                line.usage_basis,
            )
        ]


def costs_csv_response(report: CostReport, filename: str) -> StreamingHttpResponse:
    writer = csv.writer(Echo())
    response = StreamingHttpResponse(
        (writer.writerow(row) for row in _cost_rows(report)), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
