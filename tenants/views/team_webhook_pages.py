"""A team's webhook endpoints on its page: add, change, remove, rotate the secret, send a test event.

Owners and platform admins act (tenants.services.webhooks decides; a refusal is an audited 403); another team's
page or endpoint is 404. A refused form comes back on the team's page with its errors by field; a new signing
secret is shown once, in the response to the POST that made it.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_POST

from tenants import selectors, services
from tenants.costs.views import team_page, visible_team
from tenants.errors import InvalidTransition
from tenants.forms import WebhookEndpointForm
from tenants.models import Team, WebhookEndpoint
from tenants.views.common import AuthedRequest, call, deny
from tenants.views.team_webhooks import ADD_PREFIX


def _team(request: AuthedRequest, slug: str) -> Team:
    """The team, if the user is one of its people or a platform admin (404 otherwise, approvers included); a
    member who is not an owner is refused (an audited 403) before the form is read."""
    team = visible_team(request, slug)
    if not selectors.webhook_teams_of(user=request.user).filter(pk=team.pk).exists():
        raise Http404("No such team.")
    if not services.is_owner_or_admin(user=request.user, team=team):
        raise deny(request, "Only team owners and platform admins can change webhooks.")
    return team


def _endpoint(team: Team, pk: int) -> WebhookEndpoint:
    return get_object_or_404(WebhookEndpoint.objects.select_related("team"), team=team, pk=pk)


def _back(team: Team) -> HttpResponse:
    return redirect(reverse("team-detail", args=[team.slug]) + "#notifications")


def _with_secret(request: AuthedRequest, team: Team, endpoint: WebhookEndpoint, secret: str) -> HttpResponse:
    """The one response that shows a signing secret: not kept by caches or the back button."""
    response = team_page(request, team, secret=secret, secret_for=endpoint)
    add_never_cache_headers(response)
    return response


@login_required
@require_POST
def team_webhook_add(request: AuthedRequest, slug: str) -> HttpResponse:
    team = _team(request, slug)
    form = WebhookEndpointForm(request.POST, prefix=ADD_PREFIX)
    if form.is_valid():
        data = form.cleaned_data
        try:
            endpoint, secret = call(
                request,
                services.webhook_endpoint_create,
                actor=request.user,
                team=team,
                name=data["name"],
                url=data["url"],
                format=data["format"],
                events=list(data["events"]),
                secret=data.get("secret", ""),
            )
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            return _with_secret(request, team, endpoint, secret)
    return team_page(request, team, add_form=form)


@login_required
@require_POST
def team_webhook_edit(request: AuthedRequest, slug: str, pk: int) -> HttpResponse:
    team = _team(request, slug)
    endpoint = _endpoint(team, pk)
    form = WebhookEndpointForm(request.POST, endpoint=endpoint)
    if form.is_valid():
        data = form.cleaned_data
        try:
            call(
                request,
                services.webhook_endpoint_update,
                endpoint=endpoint,
                actor=request.user,
                team=team,
                name=data["name"],
                url=data.get("url", ""),
                format=data["format"],
                events=list(data["events"]),
                is_active=bool(data.get("is_active")),
            )
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            messages.success(request, f"Saved the endpoint “{endpoint.name}”.")
            return _back(team)
    return team_page(request, team, edit_form=form)


@login_required
@require_POST
def team_webhook_delete(request: AuthedRequest, slug: str, pk: int) -> HttpResponse:
    team = _team(request, slug)
    endpoint = _endpoint(team, pk)
    call(request, services.webhook_endpoint_delete, endpoint=endpoint, actor=request.user)
    messages.success(request, f"Removed the endpoint “{endpoint.name}” and its delivery log.")
    return _back(team)


@login_required
@require_POST
def team_webhook_rotate(request: AuthedRequest, slug: str, pk: int) -> HttpResponse:
    team = _team(request, slug)
    endpoint = _endpoint(team, pk)
    secret = call(request, services.webhook_endpoint_rotate_secret, endpoint=endpoint, actor=request.user)
    return _with_secret(request, team, endpoint, secret)


@login_required
@require_POST
def team_webhook_test(request: AuthedRequest, slug: str, pk: int) -> HttpResponse:
    team = _team(request, slug)
    endpoint = _endpoint(team, pk)
    try:
        call(request, services.webhook_endpoint_test, endpoint=endpoint, actor=request.user)
    except InvalidTransition as exc:  # an earlier test event still pending
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Queued a test event for “{endpoint.name}”; its status shows here once it is sent.")
    return _back(team)
