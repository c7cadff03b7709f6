"""What every page view shares: calling services with the page's audit context, refusals, redirects."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils.http import url_has_allowed_host_and_scheme

from tenants import selectors, services
from tenants.audit import AuditContext
from tenants.errors import Forbidden, InvalidTransition, NoLongerExists
from tenants.models import Tenant, TenantStatus, User

T = TypeVar("T")


class AuthedRequest(HttpRequest):
    """A page request behind ``login_required``: its user is a signed-in Berth user."""

    user: User


# Statuses a worker or an approver will move on from by themselves: pages poll while a tenant is in one.
MOVING_STATUSES = frozenset(
    {
        TenantStatus.REQUESTED,
        TenantStatus.APPROVED,
        TenantStatus.PROVISIONING,
        TenantStatus.DECOMMISSIONING,
    }
)
POLL_TRIGGER = "every 3s"


def deny(request: AuthedRequest, reason: str) -> PermissionDenied:
    """A 403 for the page, with the refusal in the audit trail (as the API does)."""
    services.auth_record(
        user=request.user,
        action="authz.denied",
        ctx=AuditContext.from_http(request),
        actor_name=request.user.username,
        detail={"method": request.method, "path": request.path[:200], "reason": reason[:200]},
    )
    return PermissionDenied(reason)


def call(http_request: AuthedRequest, service: Callable[..., T], /, **kwargs) -> T:
    """Run ``service`` as the signed-in user would; ``Forbidden`` becomes an audited 403 page, ``NoLongerExists``
    (removed by someone else since the page read it) a 404.

    Positional-only, so a service's own keywords never clash with the page's request.
    ``ValidationError`` and ``InvalidTransition`` pass through: each page shows them its own way.
    """
    try:
        return service(ctx=AuditContext.from_http(http_request), **kwargs)
    except Forbidden as exc:
        raise deny(http_request, str(exc)) from exc
    except NoLongerExists as exc:
        raise Http404(str(exc)) from exc


def visible_tenant(request: AuthedRequest, pk) -> Tenant:
    """The tenant if the signed-in user may see it; 404 otherwise (another team's objects do not exist)."""
    return get_object_or_404(selectors.tenants_visible_to(user=request.user), pk=pk)


def tenant_action(
    request: AuthedRequest, pk, service: Callable[..., object], success: Callable[[Tenant], str]
) -> HttpResponse:
    """A tenant page's button: ``service`` on the visible tenant as the user, its refusal or ``success(tenant)``
    as a message, back to the tenant's page."""
    tenant = visible_tenant(request, pk)
    try:
        call(request, service, tenant=tenant, actor=request.user)
    except InvalidTransition as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, success(tenant))
    return redirect("tenant-detail", pk=tenant.pk)


def safe_next(request: HttpRequest, default: str) -> str:
    """The posted ``next`` URL if it stays on this site, else ``default``."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default
