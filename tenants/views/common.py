"""What every page view shares: calling services with the page's audit context, refusals, redirects."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest
from django.utils.http import url_has_allowed_host_and_scheme

from tenants import services
from tenants.audit import AuditContext
from tenants.errors import Forbidden
from tenants.models import TenantStatus, User

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
    """Run ``service`` as the signed-in user would; ``Forbidden`` becomes an audited 403 page.

    Positional-only, so a service's own keywords never clash with the page's request.
    ``ValidationError`` and ``InvalidTransition`` pass through: each page shows them its own way.
    """
    try:
        return service(ctx=AuditContext.from_http(http_request), **kwargs)
    except Forbidden as exc:
        raise deny(http_request, str(exc)) from exc


def safe_next(request: HttpRequest, default: str) -> str:
    """The posted ``next`` URL if it stays on this site, else ``default``."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default
