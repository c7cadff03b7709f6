"""The audit trail, filtered like the API's, paged, and exported as CSV.

The page speaks to people where the API speaks to programs: empty fields mean "no filter", dates are whole days
in UTC, errors name the fields by their labels, objects by their names and events in words; quick filters and a
period ("last 24 hours") narrow it in one click. The filtering itself is the API's (AuditEventFilter).
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpResponse, QueryDict, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from tenants import selectors
from tenants.api.filters import AuditEventFilter
from tenants.csv_export import ROW, audit_csv_response
from tenants.forms import ISO_DATE_FORMAT, ISO_DATE_MESSAGE, IsoDateInput, parse_iso_date
from tenants.models import AuditEvent, TenantRequest, User
from tenants.views.common import AuthedRequest

PAGE_SIZE = 50
OBJECT_TYPES = ["tenant", "request", "apitoken", "session", "team", "tier"]
# The form's fields: the filter's name → (the label people see, the input's id).
FIELDS = {
    "team": ("Team", "f-team"),
    "actor": ("Actor", "f-actor"),
    "action": ("Action starts with", "f-action"),
    "object_type": ("Object type", "f-type"),
    "object_id": ("Object id", "f-id"),
    "within": ("Period", "f-within"),
    "since": ("From", "f-since"),
    "until": ("Until (inclusive)", "f-until"),
}
PERIODS = {"24h": ("Last 24 hours", dt.timedelta(hours=24)), "7d": ("Last 7 days", dt.timedelta(days=7))}
# The date fields, each a whole day in UTC: the days added to its midnight ("until 2025-05-31" includes that day).
DATE_FIELDS = {"since": 0, "until": 1}


def _filter_data(query: QueryDict) -> tuple[QueryDict, set[str]]:
    """The API filter's input from the page's: empty fields left out, and dates (YYYY-MM-DD) meaning whole days in
    UTC; with the date fields that hold no such date, which are left out too."""
    data = QueryDict(mutable=True)
    for key, values in query.lists():
        kept = [value for value in values if value != ""]
        if kept and key in FIELDS and key != "within":
            data.setlist(key, kept)
    not_dates = set()
    for key, extra_days in DATE_FIELDS.items():
        typed = data.get(key)
        if typed is None:
            continue
        try:
            day = parse_iso_date(typed)
            data[key] = dt.datetime.combine(day + dt.timedelta(days=extra_days), dt.time(), dt.UTC).isoformat()
        except (ValueError, OverflowError):  # not a date, or the last day there is (9999-12-31, plus one)
            not_dates.add(key)
            del data[key]
    return data, not_dates


@dataclass(frozen=True)
class FieldError:
    field: str
    label: str
    input_id: str
    message: str


class AuditPageFilter:
    """The API's AuditEventFilter with the page's own input: ISO dates, the period, and errors in the page's words."""

    def __init__(self, request: AuthedRequest) -> None:
        data, not_dates = _filter_data(request.GET)
        self.filterset = AuditEventFilter(data, queryset=selectors.audit_events_visible_to(user=request.user))
        self.within = request.GET.get("within", "")
        self.errors = [
            FieldError(field, *FIELDS[field], message)
            for field, messages in self.filterset.errors.items()
            for message in messages
        ]
        self.errors += [
            FieldError(field, *FIELDS[field], ISO_DATE_MESSAGE) for field in DATE_FIELDS if field in not_dates
        ]
        if self.within not in ("", *PERIODS):
            self.errors.append(FieldError("within", *FIELDS["within"], "Choose one of the periods offered."))

    def date_fields(self, query: QueryDict) -> list[dict[str, str]]:
        """The From and Until fields: label, id, the error at the field if any, and the input, holding what was
        typed and described by the format's hint and the error."""
        messages = {error.field: error.message for error in self.errors}
        fields = []
        for name in DATE_FIELDS:
            label, input_id = FIELDS[name]
            error = messages.get(name, "")
            attrs = {"id": input_id, "aria-describedby": f"{input_id}-hint" + (f" {input_id}-error" if error else "")}
            if error:
                attrs["aria-invalid"] = "true"
            input_html = IsoDateInput().render(name, query.get(name, ""), attrs=attrs)
            fields.append({"label": label, "id": input_id, "error": error, "input": input_html})
        return fields

    @property
    def qs(self) -> QuerySet[AuditEvent]:
        qs = self.filterset.qs
        if self.within in PERIODS:
            qs = qs.filter(at__gte=timezone.now() - PERIODS[self.within][1])
        return qs


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def _objects(user: User, events: list[AuditEvent]) -> dict[tuple[str, str], tuple[str, str]]:
    """(type, id) → (name, page) of the page's tenants, requests and teams the user may open: a query per kind."""
    ids: dict[str, set[uuid.UUID]] = {"tenant": set(), "request": set()}
    for event in events:
        if event.object_type in ids and (pk := _uuid(event.object_id)) is not None:
            ids[event.object_type].add(pk)
    found: dict[tuple[str, str], tuple[str, str]] = {}
    team_ids = {int(e.object_id) for e in events if e.object_type == "team" and e.object_id.isdigit()}
    if team_ids:
        for team_pk, slug in selectors.teams_visible_to(user=user).filter(pk__in=team_ids).values_list("pk", "slug"):
            found["team", str(team_pk)] = (slug, reverse("team-detail", args=[slug]))
    if ids["tenant"]:
        for pk, name in selectors.tenants_visible_to(user=user).filter(pk__in=ids["tenant"]).values_list("pk", "name"):
            found["tenant", str(pk)] = (name, reverse("tenant-detail", args=[pk]))
    if ids["request"]:
        requests = selectors.requests_visible_to(user=user).filter(pk__in=ids["request"])
        actions = dict(TenantRequest.Action.choices)
        for pk, action, name in requests.values_list("pk", "action", "name"):
            found["request", str(pk)] = (f"{actions.get(action, action)} {name}", reverse("request-detail", args=[pk]))
    return found


# Presets, each a whole filter of its own (the page adds one per team of the user's: templates/pages/audit.html).
QUICK_FILTERS = [("Last 24 hours", "within=24h"), ("Tenant events", "object_type=tenant")]


@login_required
@require_GET
def audit(request: AuthedRequest) -> HttpResponse:
    events = AuditPageFilter(request)
    page = Paginator(events.qs, PAGE_SIZE).get_page(request.GET.get("page"))
    on_page = list(page.object_list)
    objects = _objects(request.user, on_page)
    return render(
        request,
        "pages/audit.html",
        {
            "page": page,
            "rows": [
                {"event": event, "object": objects.get((event.object_type, event.object_id))} for event in on_page
            ],
            "errors": events.errors,
            "invalid": {error.field for error in events.errors},
            "filters": request.GET,
            "date_fields": events.date_fields(request.GET),
            "date_format": ISO_DATE_FORMAT,
            "teams": selectors.teams_visible_to(user=request.user).order_by("slug"),
            "object_types": OBJECT_TYPES,
            "periods": [(key, label) for key, (label, _) in PERIODS.items()],
            "quick_filters": QUICK_FILTERS,
        },
    )


@login_required
@require_GET
def audit_export(request: AuthedRequest) -> StreamingHttpResponse:
    return audit_csv_response(AuditPageFilter(request).qs.values(*ROW).iterator(chunk_size=500))
