"""A tenant's page: status, quota usage, isolation report, monitoring, and what its team may ask for."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from tenants import selectors, services
from tenants.costs.views import tenant_costs_context
from tenants.errors import ClusterUnavailable, InvalidTransition
from tenants.forms import TENANT_REQUEST_FORMS, ChangeTierForm, DecommissionForm, IdempotentForm, KubeconfigForm
from tenants.models import Membership, Tenant, TenantRequest, TenantStatus
from tenants.services.transfers import TRANSFERABLE_KINDS
from tenants.views.common import MOVING_STATUSES, POLL_TRIGGER, AuthedRequest, call, deny, tenant_action, visible_tenant
from tenants.views.metrics import metrics_context
from tenants.views.quota import UsageRow, usage_rows
from tenants.views.rightsizing_pages import rightsizing_context
from tenants.views.sleep_pages import sleep_context
from tenants.views.workload_pages import workload_context

S = TenantStatus
DECOMMISSIONABLE = frozenset({S.APPROVED, S.PROVISIONING, S.READY, S.FAILED})
RECENT_EVENTS = 10
RECENT_REQUESTS = 10


def _permissions(request: AuthedRequest, tenant: Tenant, pending: TenantRequest | None) -> dict[str, bool]:
    """Which actions to offer; the services decide again when one is used."""
    user = request.user
    role = selectors.team_role_of(user=user, team=tenant.team)
    owner = user.is_platform_admin or role == Membership.Role.OWNER
    writer = owner or role == Membership.Role.MEMBER
    return {
        "is_owner": owner,
        "can_change": writer and tenant.status == S.READY and pending is None,
        "can_request_delete": writer and not owner and tenant.status in (S.READY, S.FAILED) and pending is None,
        "can_decommission": owner and tenant.status in DECOMMISSIONABLE,
        "can_transfer": owner and tenant.status == S.READY and pending is None and tenant.kind in TRANSFERABLE_KINDS,
        "can_retry": owner and tenant.status == S.FAILED,
        # A diverged tenant waits for a platform admin: recreate it or forget it (services.divergence).
        "can_resolve_divergence": user.is_platform_admin and tenant.status == S.DIVERGED,
        "can_check_isolation": (role is not None or user.is_platform_admin) and tenant.status == S.READY,
        "can_get_kubeconfig": (role is not None or user.is_platform_admin) and tenant.status == S.READY,
    }


def _tier_choices(tenant: Tenant):
    return tenant.cluster.tiers.filter(is_active=True).exclude(pk=tenant.tier_id).order_by("order", "name")


def _request_form(action: str, tenant: Tenant, data=None) -> IdempotentForm:
    prefix, form_class = TENANT_REQUEST_FORMS[action]
    if form_class is ChangeTierForm:
        return form_class(data, prefix=prefix, tiers=_tier_choices(tenant))
    return form_class(data, prefix=prefix)


def _status_context(tenant: Tenant) -> dict:
    return {"tenant": tenant, "poll_trigger": POLL_TRIGGER if tenant.status in MOVING_STATUSES else ""}


# The page's tabs: the overview (status, access, the main quotas, what to do next) and one tab per subject.
TABS = {
    "overview": "Overview",
    "quota": "Quota",
    "metrics": "Metrics",
    "events": "Events and logs",
    "security": "Security",
    "costs": "Costs",
    "activity": "Activity",
}
# The quotas the overview shows, the first of each group the tenant has: CPU, memory, storage and pods.
KEY_QUOTAS: tuple[tuple[str, ...], ...] = (
    ("limits.cpu", "requests.cpu", "cpu"),
    ("limits.memory", "requests.memory", "memory"),
    ("requests.storage",),
    ("pods",),
)


def _key_usage(rows: list[UsageRow]) -> list[UsageRow]:
    by_resource = {row.resource: row for row in rows}
    return [
        next(by_resource[r] for r in group if r in by_resource)
        for group in KEY_QUOTAS
        if by_resource.keys() & set(group)
    ]


def isolation_summary(report: dict) -> dict | None:
    """The isolation report for people: counts, and the checks that did not pass before those that did."""
    checks = report.get("checks")
    if checks is None:
        return None
    passed = [c for c in checks if c.get("passed")]
    unproven = [c for c in checks if not c.get("passed") and c.get("proven") is False]
    failed = [c for c in checks if not c.get("passed") and c.get("proven") is not False]
    return {
        "passed": bool(report.get("passed")),
        "total": len(checks),
        "passed_count": len(passed),
        "failed_count": len(failed),
        "unproven_count": len(unproven),
        "checks": [*failed, *unproven, *passed],
    }


def _detail_context(
    request: AuthedRequest, tenant: Tenant, bound: IdempotentForm | None = None, tab: str = "overview"
) -> dict:
    user = request.user
    requests = selectors.requests_visible_to(user=user).filter(tenant=tenant)
    pending = requests.filter(status=TenantRequest.Status.PENDING).first()
    forms = {action: _request_form(action, tenant) for action in TENANT_REQUEST_FORMS}
    if bound is not None:
        forms[bound.action] = bound
    permissions = _permissions(request, tenant, pending)
    usage = usage_rows(tenant.quota_usage)
    context = {
        **_status_context(tenant),
        **permissions,
        "tab": tab,
        "tabs": TABS.items(),
        "can_change_tier": permissions["can_change"]
        and forms[TenantRequest.Action.CHANGE_TIER].queryset_of("tier").exists(),
        "pending_request": pending,
        "change_form": forms[TenantRequest.Action.CHANGE_TIER],
        "extend_form": forms[TenantRequest.Action.EXTEND],
        "delete_form": forms[TenantRequest.Action.DELETE],
        "open_form": bound.action if bound is not None else "",
        "usage": usage,
        "key_usage": _key_usage(usage),
        "isolation": isolation_summary(tenant.isolation_report or {}),
        "monitoring_links": selectors.monitoring_links(tenant=tenant),
        "kubeconfig_form": KubeconfigForm(tier=tenant.tier) if permissions["can_get_kubeconfig"] else None,
        **rightsizing_context(tenant=tenant, is_owner=permissions["is_owner"], can_change=permissions["can_change"]),
        **sleep_context(request, tenant),
    }
    # What only one tab shows is read for that tab only.
    if tab == "overview":
        context["alerts"] = selectors.tenant_alerts(tenant=tenant)
    if tab == "activity":
        context["requests"] = requests.order_by("-created_at")[:RECENT_REQUESTS]
        context["events"] = selectors.audit_events_visible_to(user=user).filter(object_id=str(tenant.pk))[
            :RECENT_EVENTS
        ]
    if tab == "costs":
        context["costs"] = tenant_costs_context(request, tenant)
    if tab == "metrics":
        context["metrics"] = metrics_context(tenant, request.GET.get("range"))
    if tab == "events":
        context |= workload_context(request, tenant)
    return context


@never_cache  # its forms carry idempotency keys (see request_new)
@login_required
@require_GET
def tenant_detail(request: AuthedRequest, pk) -> HttpResponse:
    tenant = visible_tenant(request, pk)
    # A month asked for (the costs card's links, a shared link) is a look at the costs.
    tab = request.GET.get("tab") or ("costs" if "month" in request.GET else "overview")
    if tab not in TABS:
        tab = "overview"
    return render(request, "pages/tenant_detail.html", _detail_context(request, tenant, tab=tab))


@login_required
@require_GET
def tenant_status(request: AuthedRequest, pk) -> HttpResponse:
    """The polled status panel; once the tenant settles, a full reload brings the actions up to date."""
    tenant = visible_tenant(request, pk)
    context = _status_context(tenant)
    response = render(request, "fragments/tenant_status.html", context)
    shown = request.GET.get("shown")
    if shown and shown != tenant.status and not context["poll_trigger"]:
        response["HX-Refresh"] = "true"
    return response


@login_required
@require_POST
def tenant_request(request: AuthedRequest, pk) -> HttpResponse:
    """Ask for a tier change, more time or deletion: one form each, one service."""
    tenant = visible_tenant(request, pk)
    action = request.POST.get("action", "")
    if action not in TENANT_REQUEST_FORMS:
        return HttpResponseBadRequest("Unknown action.")
    form = _request_form(action, tenant, request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            req = call(
                request,
                services.request_submit,
                actor=request.user,
                action=action,
                tenant=tenant,
                tier=data.get("tier"),
                purpose=data.get("purpose", ""),
                requested_expiry=data.get("requested_expiry"),
                idempotency_key=data["idempotency_key"],
                idempotency_scope="session",
            )
        except ValidationError as exc:
            form.add_service_errors(exc)
        except InvalidTransition as exc:
            messages.error(request, str(exc))
            return redirect("tenant-detail", pk=tenant.pk)
        else:
            if req.status == TenantRequest.Status.APPROVED:
                messages.success(request, f"{req.get_action_display()} for {tenant.name} was approved automatically.")
            else:
                messages.success(
                    request,
                    f"Your request to {req.get_action_display().lower()} {tenant.name} was sent to the approvers.",
                )
            return redirect("request-detail", pk=req.pk)
    return render(request, "pages/tenant_detail.html", _detail_context(request, tenant, bound=form))


@login_required
@require_http_methods(["GET", "POST"])
def tenant_decommission(request: AuthedRequest, pk) -> HttpResponse:
    """A confirmation step, then the tenant is removed from its cluster."""
    tenant = visible_tenant(request, pk)
    if not _permissions(request, tenant, None)["can_decommission"]:
        if tenant.status not in DECOMMISSIONABLE:
            messages.error(request, f"A tenant that is {tenant.get_status_display().lower()} cannot be decommissioned.")
            return redirect("tenant-detail", pk=tenant.pk)
        raise deny(
            request, "Only team owners and platform admins can decommission; members can submit a delete request."
        )
    form = DecommissionForm(request.POST if request.method == "POST" else None, tenant_name=tenant.name)
    if request.method == "POST" and form.is_valid():
        try:
            call(
                request,
                services.tenant_decommission,
                tenant=tenant,
                actor=request.user,
                reason=form.cleaned_data["reason"],
            )
        except InvalidTransition as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"{tenant.name} is being decommissioned.")
        return redirect("tenant-detail", pk=tenant.pk)
    return render(request, "pages/tenant_decommission.html", {"tenant": tenant, "form": form})


@login_required
@require_POST
def tenant_retry(request: AuthedRequest, pk) -> HttpResponse:
    return tenant_action(request, pk, services.tenant_retry, lambda tenant: f"Trying {tenant.name} again.")


@login_required
@require_POST
def tenant_isolation_check(request: AuthedRequest, pk) -> HttpResponse:
    return tenant_action(
        request,
        pk,
        services.tenant_request_isolation_check,
        lambda tenant: "The isolation checks will run again in a moment.",
    )


@login_required
@require_POST
def tenant_kubeconfig(request: AuthedRequest, pk) -> HttpResponse:
    """Download a kubeconfig with a fresh short-lived credential (audited; never stored)."""
    tenant = visible_tenant(request, pk)
    form = KubeconfigForm(request.POST, tier=tenant.tier)
    if not form.is_valid():
        messages.error(request, "Choose how long the credential should last.")
        return redirect("tenant-detail", pk=tenant.pk)
    try:
        text = call(
            request,
            services.tenant_issue_kubeconfig,
            tenant=tenant,
            actor=request.user,
            lifetime_seconds=form.cleaned_data["lifetime_seconds"],
        )
    except (InvalidTransition, ClusterUnavailable) as exc:
        messages.error(request, f"No kubeconfig right now: {exc}")
        return redirect("tenant-detail", pk=tenant.pk)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("tenant-detail", pk=tenant.pk)
    response = HttpResponse(text, content_type="application/yaml")
    response["Content-Disposition"] = f'attachment; filename="{tenant.cluster.name}-{tenant.namespace}.kubeconfig.yaml"'
    response["Cache-Control"] = "no-store"
    return response
