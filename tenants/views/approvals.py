"""The approval queue: pending requests an approver may decide, oldest first."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from tenants import selectors
from tenants.views.common import AuthedRequest, deny

PAGE_SIZE = 25


@login_required
@require_GET
def approvals(request: AuthedRequest) -> HttpResponse:
    if not request.user.can_decide:
        raise deny(request, "The approval queue is for approvers and platform admins.")
    page = Paginator(selectors.requests_awaiting_decision(user=request.user), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    # The inline forms post the fields of ApproveForm / RejectForm (prefixes "approve" and "reject").
    return render(request, "pages/approvals.html", {"page": page})
