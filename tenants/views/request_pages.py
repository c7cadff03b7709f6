"""Asking for a tenant, and deciding on or cancelling a request."""

from __future__ import annotations

import logging

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from tenants import hooks, selectors, services
from tenants.errors import InvalidTransition
from tenants.forms import ApproveForm, RejectForm, RequestCreateForm
from tenants.models import Allocation, Membership, Team, TenantRequest, Tier
from tenants.views.common import MOVING_STATUSES, POLL_TRIGGER, AuthedRequest, call, deny, safe_next
from tenants.views.quota import budget_fits, budget_rows, request_budget_effect

logger = logging.getLogger(__name__)


# --- New request ---------------------------------------------------------------------


def _create_form(request: AuthedRequest, data=None) -> RequestCreateForm:
    user = request.user
    form = RequestCreateForm(
        data,
        teams=selectors.teams_where_can_request(user=user).order_by("slug"),
        tiers=selectors.tiers_available(),
        clusters=list(selectors.clusters_available()),
    )
    # Picking a team or a tier swaps in that team's budget panel, with what the tier would take from it.
    form.fields["team"].widget.attrs.update(_budget_panel_htmx())
    return form


def _budget_panel_htmx() -> dict[str, str]:
    return {
        "hx-get": reverse("request-budget"),
        "hx-target": "#team-budget",
        "hx-swap": "outerHTML",
        "hx-include": "[name='team'], [name='tier']:checked",
    }


def _budget_context(team: Team | None, tier: Tier | None) -> dict:
    if team is None:
        return {"budget_team": None, "budget_rows": []}
    rows = budget_rows(selectors.team_budget(team=team), adding=Allocation.of(tier) if tier else None)
    return {"budget_team": team, "budget_tier": tier, "budget_rows": rows, "budget_fits": budget_fits(rows)}


def _chosen_tier(form: RequestCreateForm) -> Tier | None:
    """The tier the form shows as chosen: the one posted, else the first offered (checked by default)."""
    tiers = list(form.queryset_of("tier"))
    posted = form["tier"].value()
    return next((t for t in tiers if str(t.pk) == str(posted)), tiers[0] if tiers else None)


# Never cached: going Back must show a fresh idempotency key, or an edited resubmission would return the old request.
@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def request_new(request: AuthedRequest) -> HttpResponse:
    if not selectors.teams_where_can_request(user=request.user).exists():
        raise deny(
            request,
            "You are not an owner or member of any team, so you cannot ask for a tenant. "
            "Team membership comes from your organisation's groups.",
        )
    form = _create_form(request, request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            req = call(
                request,
                services.request_submit,
                actor=request.user,
                action=TenantRequest.Action.CREATE,
                team=data["team"],
                kind=data["kind"],
                name=data["name"],
                tier=data["tier"],
                cluster=data["cluster"],
                purpose=data["purpose"],
                requested_expiry=data["requested_expiry"],
                idempotency_key=data["idempotency_key"],
                idempotency_scope="session",
            )
        except ValidationError as exc:
            form.add_service_errors(exc)
        except InvalidTransition as exc:
            form.add_error(None, str(exc))
        else:
            _announce_submitted(request, req)
            return redirect("request-detail", pk=req.pk)
    team = getattr(form, "cleaned_data", {}).get("team") or form.queryset_of("team").first()
    tier = _chosen_tier(form)
    return render(
        request,
        "pages/request_new.html",
        {
            "form": form,
            "tiers": form.queryset_of("tier"),
            "chosen_tier": tier,
            "budget_url": reverse("request-budget"),
            **_budget_context(team, tier),
        },
    )


def _announce_submitted(request: AuthedRequest, req: TenantRequest) -> None:
    if req.status == TenantRequest.Status.APPROVED and req.auto_approved:
        messages.success(
            request, f"{req.name} was approved automatically by tier {req.tier.display_name}; provisioning has started."
        )
    elif req.status == TenantRequest.Status.PENDING:
        messages.success(request, f"Your request for {req.name} was sent to the approvers.")


@login_required
@require_GET
def request_budget(request: AuthedRequest) -> HttpResponse:
    """The budget panel of the request form for the team picked (htmx swaps it in on change)."""
    team = get_object_or_404(selectors.teams_where_can_request(user=request.user), pk=request.GET.get("team") or 0)
    tier_pk = request.GET.get("tier", "")
    tier = selectors.tiers_available().filter(pk=tier_pk).first() if tier_pk.isdigit() else None
    return render(request, "fragments/team_budget.html", _budget_context(team, tier))


# --- Request detail ------------------------------------------------------------------


def _can_cancel(request: AuthedRequest, req: TenantRequest) -> bool:
    user = request.user
    if req.status != TenantRequest.Status.PENDING:
        return False
    return (
        req.requested_by_id == user.pk
        or user.is_platform_admin
        or selectors.team_role_of(user=user, team=req.team) == Membership.Role.OWNER
    )


def _manifest_preview(req: TenantRequest) -> tuple[str | None, bool]:
    """(YAML, failed): what approving would apply; a broken renderer must not take the approval page down."""
    if req.status != TenantRequest.Status.PENDING or req.action not in (
        TenantRequest.Action.CREATE,
        TenantRequest.Action.CHANGE_TIER,
    ):
        return None, False
    worker = hooks.installed()
    if worker is None:
        return None, False
    try:
        return worker.manifest_preview(req.tenant, tier=req.tier), False
    except Exception:
        logger.exception("manifest preview failed for request %s", req.pk)
        return None, True


def _object_count(manifests: str | None) -> int | None:
    """How many objects a manifest preview applies: one ``kind:`` at the top level of each document."""
    return None if manifests is None else sum(1 for line in manifests.splitlines() if line.startswith("kind:"))


def _status_context(req: TenantRequest) -> dict:
    polling = req.status == TenantRequest.Status.PENDING or req.tenant.status in MOVING_STATUSES
    return {"req": req, "tenant": req.tenant, "poll_trigger": POLL_TRIGGER if polling else ""}


def _detail_context(request: AuthedRequest, req: TenantRequest, **forms) -> dict:
    user = request.user
    history = (
        selectors.audit_events_visible_to(user=user)
        .filter(object_id__in=[str(req.pk), str(req.tenant_id)])
        .order_by("at", "id")
    )
    manifest_preview, preview_failed = _manifest_preview(req)
    budget = request_budget_effect(req) if req.status == TenantRequest.Status.PENDING else None
    context = {
        **_status_context(req),
        # What an approver reads first: the tier, the budget after approval, how much gets applied.
        "summary": {
            "budget": budget,
            "fits": None if budget is None else budget_fits(budget),
            "objects": _object_count(manifest_preview),
        },
        "history": history,
        "can_decide": user.can_decide
        and req.requested_by_id != user.pk
        and req.status == TenantRequest.Status.PENDING
        # A transfer comes to approvers once the receiving team accepted it, and not to the one who did.
        and (req.action != TenantRequest.Action.TRANSFER or (req.accepted_at and req.accepted_by_id != user.pk)),
        "can_accept_transfer": selectors.transfers_awaiting_acceptance(user=user).filter(pk=req.pk).exists(),
        "can_cancel": _can_cancel(request, req),
        "approve_form": forms.get("approve_form") or ApproveForm(prefix="approve"),
        "reject_form": forms.get("reject_form") or RejectForm(prefix="reject"),
        "preview_failed": preview_failed,
    }
    if manifest_preview is not None:
        context["manifest_preview"] = manifest_preview
    return context


def _visible_request(request: AuthedRequest, pk) -> TenantRequest:
    return get_object_or_404(selectors.requests_visible_to(user=request.user), pk=pk)


@login_required
@require_GET
def request_detail(request: AuthedRequest, pk) -> HttpResponse:
    req = _visible_request(request, pk)
    return render(request, "pages/request_detail.html", _detail_context(request, req))


@login_required
@require_GET
def request_status(request: AuthedRequest, pk) -> HttpResponse:
    """The polled status panel; asks for a full reload once something final happened, so actions are current."""
    req = _visible_request(request, pk)
    context = _status_context(req)
    response = render(request, "fragments/request_status.html", context)
    shown = (request.GET.get("request"), request.GET.get("tenant"))
    if shown[0] and shown != (req.status, req.tenant.status) and not context["poll_trigger"]:
        response["HX-Refresh"] = "true"
    return response


# --- Decisions -------------------------------------------------------------------------


@login_required
@require_POST
def request_approve(request: AuthedRequest, pk) -> HttpResponse:
    req = _visible_request(request, pk)
    form = ApproveForm(request.POST, prefix="approve")
    if not form.is_valid():
        return render(request, "pages/request_detail.html", _detail_context(request, req, approve_form=form))
    try:
        req = call(
            request,
            services.request_approve,
            tenant_request=req,
            actor=request.user,
            comment=form.cleaned_data["comment"],
        )
    except (ValidationError, InvalidTransition) as exc:
        messages.error(request, f"{req.name} was not approved: {' '.join(_messages(exc))}")
    else:
        messages.success(request, f"Approved: {req.get_action_display().lower()} {req.name} for {req.team.slug}.")
    return redirect(safe_next(request, reverse("request-detail", args=[req.pk])))


@login_required
@require_POST
def request_reject(request: AuthedRequest, pk) -> HttpResponse:
    req = _visible_request(request, pk)
    form = RejectForm(request.POST, prefix="reject")
    if form.is_valid():
        try:
            req = call(
                request,
                services.request_reject,
                tenant_request=req,
                actor=request.user,
                reason=form.cleaned_data["reason"],
            )
        except ValidationError as exc:
            form.add_service_errors(exc)
        except InvalidTransition as exc:
            messages.error(request, f"{req.name} was not rejected: {exc}")
            return redirect("request-detail", pk=req.pk)
        else:
            messages.success(request, f"Rejected: {req.get_action_display().lower()} {req.name} for {req.team.slug}.")
            return redirect(safe_next(request, reverse("request-detail", args=[req.pk])))
    return render(request, "pages/request_detail.html", _detail_context(request, req, reject_form=form))


@login_required
@require_POST
def request_cancel(request: AuthedRequest, pk) -> HttpResponse:
    req = _visible_request(request, pk)
    try:
        req = call(request, services.request_cancel, tenant_request=req, actor=request.user)
    except InvalidTransition as exc:
        messages.error(request, f"The request was not cancelled: {exc}")
    else:
        messages.success(request, f"Your request for {req.name} was cancelled.")
    return redirect("request-detail", pk=req.pk)


def _messages(exc: Exception) -> list[str]:
    return exc.messages if isinstance(exc, ValidationError) else [str(exc)]
