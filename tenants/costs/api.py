"""Showback in the API: a team's and a tenant's costs for a month, as JSON or CSV (the same figures).

The figures come from tenants.costs.selectors.team_costs / tenant_costs (computed by tenants.costs.showback); the
views only find what the caller may see (404 otherwise), parse ``month`` and serialize.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request as ApiRequest
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants import selectors
from tenants.api.base import OneValueEach, actor_of, field_error, token_team_id
from tenants.api.throttling import WriteThrottle
from tenants.costs import showback
from tenants.costs.export import costs_csv_response
from tenants.costs.selectors import CostReport, team_costs, tenant_costs
from tenants.models import Team, Tenant


def _decimal(places: int, **kwargs: Any) -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=24, decimal_places=places, **kwargs)


@extend_schema_field({"type": "string", "pattern": "^[A-Z]{3}$", "description": "ISO 4217, e.g. EUR."})
class CurrencyField(serializers.CharField):
    pass


class FiguresSerializer(serializers.Serializer):
    cpu_core_hours = _decimal(
        4, help_text="CPU cores × hours: requested (allocation) or used (usage, see usage_basis)."
    )
    memory_gib_hours = _decimal(4, help_text="GiB of memory × hours: requested, or used (usage, see usage_basis).")
    storage_gib_months = _decimal(4, help_text="GiB of storage × months of 730 hours.")
    cpu = _decimal(2, help_text="What the CPU cost, in the line's currency.")
    memory = _decimal(2)
    storage = _decimal(2)
    total = _decimal(2, help_text="cpu + memory + storage.")


class CostLineSerializer(serializers.Serializer):
    tenant = serializers.UUIDField(source="tenant.pk")
    tenant_name = serializers.CharField(source="tenant.name")
    cluster = serializers.CharField(source="tenant.cluster.name")
    team = serializers.CharField(source="team.slug", help_text="The team that held the tenant on these days.")
    currency = CurrencyField(source="line.currency")
    live_hours = _decimal(2, source="line.live_hours")
    asleep_hours = _decimal(
        2, source="line.asleep_hours", help_text="Of the live hours, how many it slept (no CPU or memory cost)."
    )
    allocation = FiguresSerializer(source="line.allocation", help_text="From the tier's requests while live.")
    usage = FiguresSerializer(
        source="line.usage",
        help_text="From the usage history: CPU and memory as measured by the cluster's Prometheus where measured, "
        "as requested of the quota otherwise; storage as requested.",
    )
    usage_basis = serializers.ChoiceField(
        source="line.usage_basis",
        choices=[
            (showback.MEASURED, "Every day's CPU and memory measured"),
            (showback.REQUESTS, "CPU and memory as requested (nothing measured)"),
            (showback.MIXED, "Measured where measured, requested for the rest"),
            (showback.NONE, "No usage recorded"),
        ],
        help_text="What usage's CPU and memory come from.",
    )


class CostTotalSerializer(serializers.Serializer):
    currency = CurrencyField()
    allocation = FiguresSerializer()
    usage = FiguresSerializer()


class CostReportSerializer(serializers.Serializer):
    month = serializers.SerializerMethodField()
    period_start = serializers.DateTimeField()
    period_end = serializers.DateTimeField(help_text="The end of the month, or now for the month so far.")
    hours_per_month = serializers.SerializerMethodField(help_text="Storage is priced per GiB-month of these hours.")
    lines = CostLineSerializer(source="rows", many=True)
    totals = CostTotalSerializer(many=True, help_text="The lines summed per currency.")

    @extend_schema_field({"type": "string", "pattern": showback.MONTH_PATTERN})
    def get_month(self, report: CostReport) -> str:
        return showback.month_label(report.month)

    @extend_schema_field({"type": "integer", "enum": [showback.HOURS_PER_MONTH]})
    def get_hours_per_month(self, report: CostReport) -> int:
        return showback.HOURS_PER_MONTH


MONTH_PARAMETER = OpenApiParameter(
    "month",
    {"type": "string", "pattern": showback.MONTH_PATTERN},
    required=False,
    description="The UTC month, YYYY-MM (default: this month, so far). A month not begun yet has no costs.",
)
SLUG_PARAMETER = OpenApiParameter(
    "slug", {"type": "string", "pattern": "^[-a-zA-Z0-9_]+$"}, OpenApiParameter.PATH, description="The team's slug."
)
TEAM_COSTS = (
    "A team's showback for a month: one line per tenant it held (by UTC day), allocation-based (the tier's "
    "requests while live, CPU and memory not while asleep) and usage-based (CPU and memory measured by the "
    "cluster's Prometheus where measured, requested otherwise; storage requested; see usage_basis), priced with "
    "each cluster's prices of each day. Team members, approvers and platform admins; 404 for anyone else."
)
TENANT_COSTS = (
    "A tenant's showback for a month (the same figures as its team's): one line per team that held it and "
    "currency. Whoever sees the tenant; 404 for anyone else."
)


def month_of(request: ApiRequest, now: dt.datetime) -> dt.date:
    """The ``month`` query parameter (default this month); a field error when it is not one."""
    value = request.query_params.get("month")
    if value is None:
        return now.astimezone(dt.UTC).date().replace(day=1)
    try:
        return showback.parse_month(value)
    except showback.MonthError as exc:
        raise field_error("month", str(exc)) from exc


class _CostsView(OneValueEach, APIView):
    throttle_classes = [WriteThrottle]
    throttle_scope = "writes"

    def team(self, slug: str) -> Team:
        teams = selectors.teams_visible_to(user=actor_of(self.request))
        team_id = token_team_id(self.request)
        return get_object_or_404(teams if team_id is None else teams.filter(pk=team_id), slug=slug)

    def tenant(self, pk) -> Tenant:
        tenants = selectors.tenants_visible_to(user=actor_of(self.request))
        team_id = token_team_id(self.request)
        return get_object_or_404(tenants if team_id is None else tenants.filter(team_id=team_id), pk=pk)

    def team_report(self, slug: str) -> CostReport:
        team = self.team(slug)  # 404 for what is not the caller's, before anything about the query
        now = timezone.now()
        month = month_of(self.request, now)
        return team_costs(team=team, months=[month], now=now)[month]

    def tenant_report(self, pk) -> CostReport:
        tenant = self.tenant(pk)
        now = timezone.now()
        month = month_of(self.request, now)
        return tenant_costs(tenant=tenant, months=[month], now=now)[month]


class TeamCostsView(_CostsView):
    @extend_schema(parameters=[MONTH_PARAMETER, SLUG_PARAMETER], responses=CostReportSerializer, description=TEAM_COSTS)
    def get(self, request: ApiRequest, slug: str) -> Response:
        return Response(CostReportSerializer(self.team_report(slug)).data)


class TeamCostsExportView(_CostsView):
    @extend_schema(
        parameters=[MONTH_PARAMETER, SLUG_PARAMETER],
        responses={(200, "text/csv"): str},
        description=f"{TEAM_COSTS} As CSV, one row per line (the totals are their sums).",
    )
    def get(self, request: ApiRequest, slug: str) -> StreamingHttpResponse:
        report = self.team_report(slug)
        return costs_csv_response(report, f"berth-costs-{slug}-{showback.month_label(report.month)}.csv")


class TenantCostsView(_CostsView):
    @extend_schema(parameters=[MONTH_PARAMETER], responses=CostReportSerializer, description=TENANT_COSTS)
    def get(self, request: ApiRequest, id) -> Response:
        return Response(CostReportSerializer(self.tenant_report(id)).data)


class TenantCostsExportView(_CostsView):
    @extend_schema(
        parameters=[MONTH_PARAMETER],
        responses={(200, "text/csv"): str},
        description=f"{TENANT_COSTS} As CSV, one row per line (the totals are their sums).",
    )
    def get(self, request: ApiRequest, id) -> StreamingHttpResponse:
        report = self.tenant_report(id)
        return costs_csv_response(report, f"berth-costs-{id}-{showback.month_label(report.month)}.csv")
