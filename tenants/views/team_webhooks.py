"""The Notifications section of a team's page: the team's webhook endpoints, and the forms its owners use."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from tenants import selectors, services
from tenants.forms import WebhookEndpointForm
from tenants.models import Team, WebhookEndpoint
from tenants.views.common import AuthedRequest

ADD_PREFIX = "new-hook"


def notifications_context(
    request: AuthedRequest,
    team: Team,
    *,
    add_form: WebhookEndpointForm | None = None,
    edit_form: WebhookEndpointForm | None = None,
    secret: str = "",
    secret_for: WebhookEndpoint | None = None,
) -> dict[str, Any]:
    """What the section shows: nothing for people outside the team (approvers see its tenants, not where its
    notifications go); the endpoints for its members; the forms, for its owners and platform admins. A form
    that was just refused comes back with its errors; a secret just made is shown this once."""
    user = request.user
    if not selectors.webhook_teams_of(user=user).filter(pk=team.pk).exists():
        return {"visible": False}
    can_manage = services.is_owner_or_admin(user=user, team=team)
    endpoints = list(selectors.webhook_endpoints_of(team=team))
    rows = []
    for endpoint in endpoints:
        form = None
        if can_manage:
            refused = edit_form is not None and edit_form.endpoint is not None and edit_form.endpoint.pk == endpoint.pk
            form = edit_form if refused else WebhookEndpointForm(endpoint=endpoint)
        rows.append({"endpoint": endpoint, "form": form, "open": form is edit_form and edit_form is not None})
    limit = settings.BERTH_TEAM_WEBHOOK_LIMIT
    return {
        "visible": True,
        "can_manage": can_manage,
        "rows": rows,
        "add_form": add_form or WebhookEndpointForm(prefix=ADD_PREFIX),
        "add_open": add_form is not None,
        "secret": secret,
        "secret_for": secret_for,
        "limit": limit,
        "at_limit": len(endpoints) >= limit and not user.is_platform_admin,
    }
