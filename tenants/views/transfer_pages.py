"""Transfers in the browser: an owner offers a tenant to another team; the receiving team's owners accept or
decline (on the dashboard and on the request's page)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from tenants import selectors, services
from tenants.errors import InvalidTransition
from tenants.forms import DeclineForm, TransferForm
from tenants.models import TenantRequest, TenantStatus
from tenants.views.common import AuthedRequest, call, deny, safe_next, visible_tenant


@login_required
@require_http_methods(["GET", "POST"])
def tenant_transfer(request: AuthedRequest, pk) -> HttpResponse:
    """Choose the receiving team, then the offer waits for one of its owners."""
    tenant = visible_tenant(request, pk)
    if not services.is_owner_or_admin(user=request.user, team=tenant.team):
        raise deny(request, "Only team owners and platform admins can move a tenant to another team.")
    if tenant.status != TenantStatus.READY:  # the service refuses it too; the form would only invite a refusal
        messages.error(request, f"{tenant.name} cannot be moved while it is {tenant.get_status_display().lower()}.")
        return redirect("tenant-detail", pk=tenant.pk)
    teams = selectors.transfer_targets(tenant=tenant)
    form = TransferForm(request.POST if request.method == "POST" else None, teams=teams)
    if request.method == "POST" and form.is_valid():
        try:
            req = call(
                request,
                services.transfer_ask,
                tenant=tenant,
                target_team=form.cleaned_data["target_team"],
                actor=request.user,
                purpose=form.cleaned_data["purpose"],
            )
        except ValidationError as exc:
            form.add_service_errors(exc)
        except InvalidTransition as exc:
            messages.error(request, f"{tenant.name} cannot be transferred now: {exc}")
            return redirect("tenant-detail", pk=tenant.pk)
        else:
            assert req.target_team is not None
            messages.success(
                request, f"{tenant.name} is offered to {req.target_team.slug}; one of its owners accepts or declines."
            )
            return redirect("request-detail", pk=req.pk)
    return render(request, "pages/tenant_transfer.html", {"tenant": tenant, "form": form})


def _visible_transfer(request: AuthedRequest, pk) -> TenantRequest:
    return get_object_or_404(
        selectors.requests_visible_to(user=request.user).filter(action=TenantRequest.Action.TRANSFER), pk=pk
    )


@login_required
@require_POST
def transfer_accept(request: AuthedRequest, pk) -> HttpResponse:
    req = _visible_transfer(request, pk)
    try:
        req = call(request, services.transfer_accept, tenant_request=req, actor=request.user)
    except InvalidTransition as exc:
        messages.error(request, f"The transfer of {req.name} was not accepted: {exc}")
    else:
        if req.status == TenantRequest.Status.APPROVED:
            messages.success(request, f"{req.name} now belongs to {req.target_team.slug if req.target_team else ''}.")
        else:
            messages.success(request, f"Accepted; an approver decides now: {req.approval_reason}")
    return redirect(safe_next(request, reverse("request-detail", args=[req.pk])))


@login_required
@require_POST
def transfer_decline(request: AuthedRequest, pk) -> HttpResponse:
    req = _visible_transfer(request, pk)
    form = DeclineForm(request.POST, prefix="decline")
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    try:
        req = call(request, services.transfer_decline, tenant_request=req, actor=request.user, reason=reason)
    except InvalidTransition as exc:
        messages.error(request, f"The transfer of {req.name} was not declined: {exc}")
    else:
        messages.success(request, f"Declined: {req.name} stays with {req.team.slug}.")
    return redirect(safe_next(request, reverse("request-detail", args=[req.pk])))
