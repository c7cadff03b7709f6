"""Template context every page needs: the signed-in user's teams and the approval queue size."""

from __future__ import annotations

from tenants import selectors
from tenants.models import Membership

_WRITER_ROLES = {Membership.Role.OWNER, Membership.Role.MEMBER}


def portal_context(request) -> dict:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    memberships = list(selectors.memberships_of(user=user))
    return {
        "my_memberships": memberships,
        "pending_decisions": selectors.requests_awaiting_decision(user=user).count() if user.can_decide else 0,
        # Whether to offer "New request" in the navigation (the page itself asks selectors again).
        "nav_can_request": user.is_platform_admin or any(m.role in _WRITER_ROLES for m in memberships),
        "nav_active": request.resolver_match.url_name if getattr(request, "resolver_match", None) else "",
    }
