"""Right-sizing on the tenant page: the suggestion with its evidence, and the owner's one-click accept."""

from __future__ import annotations

from dataclasses import dataclass

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from tenants import services
from tenants.errors import InvalidTransition
from tenants.forms import IdempotentForm
from tenants.models import Tenant, TenantRequest
from tenants.prometheus import prometheus_url_for
from tenants.rightsizing import DRIVERS, MEASURED_FITS, Assessment, Policy
from tenants.services.tenant_requests import downgrade_approves_itself
from tenants.views.common import AuthedRequest, call, visible_tenant


class RightsizingAcceptForm(IdempotentForm):
    """The suggestion shown, by fingerprint: a changed one is refused rather than filed unseen."""

    fingerprint = forms.RegexField(regex=r"^[0-9a-f]{64}$", widget=forms.HiddenInput)


@dataclass(frozen=True)
class EvidenceRow:
    label: str
    average: str
    peak: str
    near_limit_days: int


def _percent(share: float | None) -> str:
    return "—" if share is None else f"{share:.0%}"


def evidence_used(found: Assessment, tenant: Tenant) -> str:
    """Which evidence CPU and memory were judged on, and why, in words."""
    if found.basis == "measured":
        return (
            f"CPU and memory judged on what the containers used, as the cluster's Prometheus measured it "
            f"({found.measured_coverage:.0%} of the window)."
        )
    if not prometheus_url_for(tenant.cluster.prometheus):
        why = "this cluster has no Prometheus to measure them"
    elif found.measured_seconds <= 0:
        why = "no measured usage recorded in the window yet"
    else:
        why = (
            f"measured usage covers {found.measured_coverage:.0%} of the window, "
            f"{Policy.from_settings().min_coverage:.0%} needed"
        )
    return f"CPU and memory judged on what the pods requested of the quota ({why})."


def rightsizing_context(*, tenant: Tenant, is_owner: bool, can_change: bool) -> dict:
    """The tenant page's right-sizing card: what the rule found, and the accept form for owners who can act."""
    found: Assessment = services.rightsizing_assess(tenant=tenant)
    rows = [
        EvidenceRow(e.label, _percent(e.average_share), _percent(e.peak_share), e.near_limit_days)
        for e in found.evidence
        if e.resource in DRIVERS or e.resource in MEASURED_FITS or e.near_limit_days
    ]
    can_accept = found.target is not None and is_owner and can_change
    return {
        "rightsizing": found,
        "rightsizing_rows": rows,
        "rightsizing_evidence_used": evidence_used(found, tenant),
        "rightsizing_form": RightsizingAcceptForm(initial={"fingerprint": found.fingerprint}) if can_accept else None,
        "rightsizing_auto_approves": found.target is not None
        and (found.target.auto_approve or downgrade_approves_itself(current=tenant.tier, target=found.target)),
    }


@login_required
@require_POST
def tenant_rightsizing_accept(request: AuthedRequest, pk) -> HttpResponse:
    """File the suggested tier change as the owner saw it (services.rightsizing_accept)."""
    tenant = visible_tenant(request, pk)
    form = RightsizingAcceptForm(request.POST)
    if not form.is_valid():
        messages.error(request, "That suggestion could not be read; look at the current one and try again.")
        return redirect("tenant-detail", pk=tenant.pk)
    try:
        req = call(
            request,
            services.rightsizing_accept,
            tenant=tenant,
            actor=request.user,
            fingerprint=form.cleaned_data["fingerprint"],
            idempotency_key=form.cleaned_data["idempotency_key"],
            idempotency_scope="session",
        )
    except InvalidTransition as exc:
        messages.error(request, str(exc))
        return redirect("tenant-detail", pk=tenant.pk)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("tenant-detail", pk=tenant.pk)
    if req.status == TenantRequest.Status.APPROVED:
        messages.success(request, f"{tenant.name} moves to tier {req.tier.display_name}: approved automatically.")
    else:
        messages.success(
            request, f"Your request to move {tenant.name} to tier {req.tier.display_name} was sent to the approvers."
        )
    return redirect("request-detail", pk=req.pk)


@login_required
@require_POST
def tenant_rightsizing_dismiss(request: AuthedRequest, pk) -> HttpResponse:
    """Hide the suggestion shown for a window's length (services.rightsizing_dismiss)."""
    tenant = visible_tenant(request, pk)
    form = RightsizingAcceptForm(request.POST)
    if not form.is_valid():
        messages.error(request, "That suggestion could not be read; look at the current one and try again.")
        return redirect("tenant-detail", pk=tenant.pk)
    try:
        found = call(
            request,
            services.rightsizing_dismiss,
            tenant=tenant,
            actor=request.user,
            fingerprint=form.cleaned_data["fingerprint"],
        )
    except InvalidTransition as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, " ".join(found.notes) or "Suggestion dismissed.")
    return redirect("tenant-detail", pk=tenant.pk)
