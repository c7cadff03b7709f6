"""Template context every page needs: the signed-in user's teams and the approval queue size."""
from __future__ import annotations

from tenants import selectors


def portal_context(request) -> dict:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {
        "my_memberships": list(selectors.memberships_of(user=user)),
        "pending_decisions": selectors.requests_awaiting_decision(user=user).count() if user.can_decide else 0,
    }
