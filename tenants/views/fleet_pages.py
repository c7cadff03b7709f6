"""All tenants: the fleet view for platform admins and approvers (and, scoped, anyone): filters, sorting, paging
and a CSV export of the same rows, all on the server."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, cast

from django import forms
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count, Q, QuerySet
from django.db.models.fields.json import KT
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from tenants import selectors
from tenants.csv_export import tenants_csv_response
from tenants.models import LIVE_STATUSES, Tenant, TenantKind, TenantStatus, User
from tenants.views.common import AuthedRequest

PAGE_SIZE = 50
# Sort keys → the columns they order by (name last, so equal keys keep a stable order across pages).
SORTS: dict[str, tuple[str, ...]] = {
    "name": ("name", "id"),
    "team": ("team__slug", "name", "id"),
    "cluster": ("cluster__name", "name", "id"),
    "tier": ("tier__name", "name", "id"),
    "kind": ("kind", "name", "id"),
    "status": ("status", "name", "id"),
    "expires": ("expires_at", "name", "id"),
    "created": ("created_at", "id"),
}
COLUMNS = [
    ("name", "Name"),
    ("team", "Team"),
    ("cluster", "Cluster"),
    ("tier", "Tier"),
    ("kind", "Kind"),
    ("status", "Status"),
    (None, "Isolation"),
    ("expires", "Expires"),
]
LIVE = ""  # the status filter's default: every live tenant
EVERY = "any"


def expiring_before() -> dt.datetime:
    return timezone.now() + dt.timedelta(days=settings.BERTH_EXPIRY_REMINDER_DAYS)


class FleetFilterForm(forms.Form):
    q = forms.CharField(label="Name contains", required=False, max_length=63)
    team = forms.ChoiceField(label="Team", required=False)
    cluster = forms.ChoiceField(label="Cluster", required=False)
    tier = forms.ChoiceField(label="Tier", required=False)
    kind = forms.ChoiceField(label="Kind", required=False, choices=[("", "Any"), *TenantKind.choices])
    status = forms.ChoiceField(
        label="Status",
        required=False,
        choices=[(LIVE, "Live (not deleted)"), *TenantStatus.choices, (EVERY, "Any, deleted too")],
    )
    expiring = forms.BooleanField(label="Expiring soon", required=False)
    isolation_failing = forms.BooleanField(label="Failing isolation", required=False)
    sort = forms.ChoiceField(required=False, choices=[(k, k) for key in SORTS for k in (key, f"-{key}")])

    def __init__(self, data: Any, *, user: User) -> None:
        super().__init__(data)
        for field, names in (
            ("team", self._names(selectors.teams_visible_to(user=user), "slug")),
            ("cluster", self._names(selectors.clusters_available(), "name")),
            ("tier", self._names(selectors.tiers_available(), "name")),
        ):
            cast(forms.ChoiceField, self.fields[field]).choices = [("", "Any"), *names]

    @staticmethod
    def _names(qs: QuerySet[Any], field: str) -> list[tuple[str, str]]:
        return [(name, name) for name in qs.order_by(field).values_list(field, flat=True).distinct()]

    def filter(self, qs: QuerySet[Tenant]) -> QuerySet[Tenant]:
        if not self.is_valid():  # a value not offered (another team's slug, say) matches nothing
            return qs.none()
        data = self.cleaned_data
        status = data.get("status", LIVE)
        if status == LIVE:
            qs = qs.filter(status__in=LIVE_STATUSES)
        elif status != EVERY:
            qs = qs.filter(status=status)
        for field, lookup in (("team", "team__slug"), ("cluster", "cluster__name"), ("tier", "tier__name")):
            if data.get(field):
                qs = qs.filter(**{lookup: data[field]})
        if data.get("kind"):
            qs = qs.filter(kind=data["kind"])
        if data.get("q"):
            qs = qs.filter(name__icontains=data["q"])
        if data.get("expiring"):
            qs = qs.filter(expires_at__lt=expiring_before())
        if data.get("isolation_failing"):
            qs = qs.filter(isolation_report__passed=False)
        sort = data.get("sort") or "name"
        order = SORTS[sort.lstrip("-")]
        return qs.order_by(*(f"-{column}" if sort.startswith("-") else column for column in order))


@dataclass(frozen=True)
class Column:
    label: str
    key: str | None
    aria_sort: str  # "ascending", "descending" or "" (not sorted by it)
    next_sort: str


def _columns(sort: str) -> list[Column]:
    columns = []
    for key, label in COLUMNS:
        if key is None:
            columns.append(Column(label, None, "", ""))
            continue
        ascending, descending = sort == key, sort == f"-{key}"
        aria = "ascending" if ascending else "descending" if descending else ""
        columns.append(Column(label, key, aria, f"-{key}" if ascending else key))
    return columns


def _form(request: AuthedRequest) -> tuple[FleetFilterForm, QuerySet[Tenant]]:
    form = FleetFilterForm(request.GET, user=request.user)
    # A row needs the isolation report's verdict, not the report (22 checks with their evidence) nor the usage.
    rows = (
        selectors.tenants_visible_to(user=request.user)
        .defer("isolation_report", "quota_usage", "owned_uids", "rightsizing_dismissed")
        .annotate(isolation_passed=KT("isolation_report__passed"))
    )
    return form, form.filter(rows)


@login_required
@require_GET
def fleet(request: AuthedRequest) -> HttpResponse:
    form, tenants = _form(request)
    page = Paginator(tenants, PAGE_SIZE).get_page(request.GET.get("page"))
    sort = (form.cleaned_data.get("sort") if form.is_valid() else "") or "name"
    return render(
        request,
        "pages/fleet.html",
        {
            "form": form,
            "page": page,
            "columns": _columns(sort),
            "expiring_before": expiring_before(),
            "filtered": any(value for key, value in request.GET.items() if key not in ("page", "sort")),
        },
    )


@login_required
@require_GET
def fleet_export(request: AuthedRequest) -> StreamingHttpResponse:
    _, tenants = _form(request)
    return tenants_csv_response(tenants.iterator(chunk_size=500))


def fleet_summary(*, user: User) -> dict[str, int]:
    """What a platform admin or approver sees of the fleet on the dashboard, in two queries.

    The counts of plain columns are one aggregate, read from the index tenant_live_summary alone. The failing
    isolation reports are counted on their own, with the conditions of the partial index
    tenant_live_isolation_failing: that count reads the few failing tenants' index entries only, where a filter of
    the aggregate read every live tenant's report (some kilobytes of JSON each) and grew with the fleet.
    """
    live = selectors.tenants_visible_to(user=user).filter(status__in=LIVE_STATUSES)
    summary = live.aggregate(
        live=Count("id"),
        failed=Count("id", filter=Q(status=TenantStatus.FAILED)),
        expiring=Count("id", filter=Q(expires_at__lt=expiring_before())),
    )
    summary["isolation_failing"] = live.filter(isolation_report__passed=False).count()
    return summary
