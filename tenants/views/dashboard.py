"""The landing page: my teams' tenants, open requests and budgets; the queue size for approvers."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone

from tenants import selectors
from tenants.models import LIVE_STATUSES, TenantRequest
from tenants.views.common import AuthedRequest
from tenants.views.fleet_pages import fleet_summary
from tenants.views.quota import budget_rows

DASHBOARD_LIMIT = 50


@login_required
def dashboard(request: AuthedRequest) -> HttpResponse:
    user = request.user
    memberships = list(selectors.memberships_of(user=user))
    team_ids = [m.team_id for m in memberships]
    tenants = list(
        selectors.tenants_visible_to(user=user)
        .filter(team_id__in=team_ids, status__in=LIVE_STATUSES)
        .order_by("expires_at", "name")[:DASHBOARD_LIMIT]
    )
    open_requests = list(
        selectors.requests_visible_to(user=user)
        .filter(status=TenantRequest.Status.PENDING)
        .filter(Q(team_id__in=team_ids) | Q(requested_by=user))
        .order_by("created_at")[:DASHBOARD_LIMIT]
    )
    teams = {t.pk: t for t in selectors.with_allocation(selectors.teams_visible_to(user=user).filter(pk__in=team_ids))}
    budgets = [
        {
            "team": teams[m.team_id],
            "role": m.get_role_display(),
            "rows": budget_rows(selectors.team_budget(team=teams[m.team_id])),
        }
        for m in memberships
        if m.team_id in teams
    ]
    return render(
        request,
        "pages/dashboard.html",
        {
            "tenants": tenants,
            "open_requests": open_requests,
            "budgets": budgets,
            "limit": DASHBOARD_LIMIT,
            "expiring_before": timezone.now() + dt.timedelta(days=settings.BERTH_EXPIRY_REMINDER_DAYS),
            "can_request": selectors.teams_where_can_request(user=user).exists(),
            "incoming_transfers": list(selectors.transfers_awaiting_acceptance(user=user)[:DASHBOARD_LIMIT]),
            # Platform admins and approvers answer for every team's tenants: the fleet in figures, linked to its view.
            "fleet": fleet_summary(user=user) if user.can_decide else None,
        },
    )
