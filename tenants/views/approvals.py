"""The approval queue: pending requests an approver may decide, oldest first."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from tenants import selectors
from tenants.models import Team, TenantRequest
from tenants.views.common import AuthedRequest, deny
from tenants.views.quota import budget_fits, request_budget_effect

PAGE_SIZE = 25


@login_required
@require_GET
def approvals(request: AuthedRequest) -> HttpResponse:
    if not request.user.can_decide:
        raise deny(request, "The approval queue is for approvers and platform admins.")
    queue = selectors.requests_awaiting_decision(user=request.user).select_related("tenant__tier")
    page = Paginator(queue, PAGE_SIZE).get_page(request.GET.get("page"))
    requests = list(page.object_list)
    teams = {
        t.pk: t
        for t in selectors.with_allocation(
            selectors.teams_visible_to(user=request.user).filter(pk__in={r.team_id for r in requests})
        )
    }
    # The inline forms post the fields of ApproveForm / RejectForm (prefixes "approve" and "reject").
    return render(
        request,
        "pages/approvals.html",
        {"page": page, "rows": [_row(r, teams.get(r.team_id)) for r in requests]},
    )


def _row(req: TenantRequest, team: Team | None) -> dict:
    budget = request_budget_effect(req, team=team)
    return {"req": req, "budget": budget, "fits": None if budget is None else budget_fits(budget)}
