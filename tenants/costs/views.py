"""Showback on the pages: a team's page (its tenants, budget, costs and notifications) and the costs section
of a tenant's page.

The figures are the API's (tenants.team_costs / tenant_costs): the selected month in full, and the
totals of the months before it, each a link to its own month.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import BadRequest
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from tenants import selectors
from tenants.costs import showback
from tenants.costs.selectors import CostReport, team_costs, tenant_costs
from tenants.models import LIVE_STATUSES, Team
from tenants.views.common import AuthedRequest
from tenants.views.quota import budget_rows
from tenants.views.team_webhooks import notifications_context

MONTHS_SHOWN = 6
Reports = Callable[[list[dt.date]], dict[dt.date, CostReport]]


def costs_context(request: AuthedRequest, reports_for: Reports, export_url: str) -> dict:
    """The selected month (``?month=``, default this month) and the totals of the months before it."""
    now = timezone.now()
    today = now.astimezone(dt.UTC).date()
    value = request.GET.get("month")
    try:
        month = showback.parse_month(value) if value is not None else today.replace(day=1)
    except showback.MonthError as exc:
        raise BadRequest(f"month: {exc}") from exc
    months = [month]
    while len(months) < MONTHS_SHOWN:
        months.append(showback.previous_month(months[-1]))
    reports = reports_for(months)
    label = showback.month_label(month)
    return {
        "report": reports[month],
        "label": label,
        "is_current": month == today.replace(day=1),
        "export_url": f"{export_url}?month={label}",
        "history": [
            {"label": showback.month_label(m), "totals": reports[m].totals, "selected": m == month} for m in months
        ],
        "later": showback.month_label(showback.next_month(month)) if month < today.replace(day=1) else "",
    }


def tenant_costs_context(request: AuthedRequest, tenant) -> dict:
    return costs_context(
        request,
        lambda months: tenant_costs(tenant=tenant, months=months, now=timezone.now()),
        reverse("api-tenant-costs-export", args=[tenant.pk]),
    )


def team_page(request: AuthedRequest, team: Team, **notifications: Any) -> HttpResponse:
    """The team's page; ``notifications``: what a webhook form just did (tenants.views.team_webhook_pages)."""
    user = request.user
    tenants = selectors.tenants_visible_to(user=user).filter(team=team, status__in=LIVE_STATUSES).order_by("name")
    costs = costs_context(
        request,
        lambda months: team_costs(team=team, months=months, now=timezone.now()),
        reverse("api-team-costs-export", args=[team.slug]),
    )
    return render(
        request,
        "pages/team_detail.html",
        {
            "team": team,
            "role": selectors.team_role_of(user=user, team=team),
            "tenants": tenants,
            "budget_rows": budget_rows(selectors.team_budget(team=team)),
            "costs": costs,
            "members": selectors.team_members(team=team),
            "notifications": notifications_context(request, team, **notifications),
        },
    )


def visible_team(request: AuthedRequest, slug: str) -> Team:
    """The team if the signed-in user may see its page (members, approvers, platform admins); 404 otherwise."""
    return get_object_or_404(selectors.with_allocation(selectors.teams_visible_to(user=request.user)), slug=slug)


@login_required
@require_GET
def team_detail(request: AuthedRequest, slug: str) -> HttpResponse:
    """A team's tenants, budget, costs and notifications: for its members, approvers and platform admins (404 for
    others)."""
    return team_page(request, visible_team(request, slug))
