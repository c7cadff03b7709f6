"""The audit trail, filtered like the API's, paged, and exported as CSV."""

from __future__ import annotations

import datetime as dt
import uuid

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse, QueryDict, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from tenants import selectors
from tenants.api.filters import AuditEventFilter
from tenants.csv_export import audit_csv_response
from tenants.models import AuditEvent
from tenants.views.common import AuthedRequest

PAGE_SIZE = 50
OBJECT_TYPES = ["tenant", "request", "apitoken", "session", "team", "tier"]


def _filter_data(query: QueryDict) -> QueryDict:
    """The page's date pickers mean whole days: "until 2025-05-31" includes that day."""
    data = query.copy()
    until = data.get("until", "")
    try:
        day = dt.date.fromisoformat(until)
    except ValueError:
        return data
    data["until"] = (day + dt.timedelta(days=1)).isoformat()
    return data


_DETAIL_PAGES = {"tenant": "tenant-detail", "request": "request-detail"}


def _link(event: AuditEvent) -> str:
    """The page of the event's object, for tenants and requests (whose ids are UUIDs)."""
    name = _DETAIL_PAGES.get(event.object_type)
    if name is None:
        return ""
    try:
        return reverse(name, args=[uuid.UUID(event.object_id)])
    except ValueError:
        return ""


def _filtered(request: AuthedRequest) -> AuditEventFilter:
    return AuditEventFilter(_filter_data(request.GET), queryset=selectors.audit_events_visible_to(user=request.user))


@login_required
@require_GET
def audit(request: AuthedRequest) -> HttpResponse:
    events = _filtered(request)
    page = Paginator(events.qs, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "pages/audit.html",
        {
            "page": page,
            "rows": [{"event": event, "link": _link(event)} for event in page.object_list],
            "errors": events.errors,
            "filters": request.GET,
            "teams": selectors.teams_visible_to(user=request.user).order_by("slug"),
            "object_types": OBJECT_TYPES,
        },
    )


@login_required
@require_GET
def audit_export(request: AuthedRequest) -> StreamingHttpResponse:
    return audit_csv_response(_filtered(request).qs.iterator(chunk_size=500))
