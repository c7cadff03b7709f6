"""Personal and team API tokens: the plaintext is shown once, in the response to the POST that made it."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods, require_POST

from tenants import selectors, services
from tenants.errors import InvalidTransition
from tenants.forms import ApiTokenForm
from tenants.views.common import AuthedRequest, call


def _form(request: AuthedRequest, data=None) -> ApiTokenForm:
    return ApiTokenForm(data, teams=selectors.teams_where_owner(user=request.user).order_by("slug"))


@login_required
@require_http_methods(["GET", "POST"])
def tokens(request: AuthedRequest) -> HttpResponse:
    form = _form(request, request.POST if request.method == "POST" else None)
    created = plaintext = None
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            created, plaintext = call(
                request,
                services.api_token_create,
                actor=request.user,
                name=data["name"],
                expires_in_days=data["expires_in_days"],
                team=data.get("team"),
            )
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            form = _form(request)
    response = render(
        request,
        "pages/tokens.html",
        {
            "form": form,
            "tokens": selectors.api_tokens_of(user=request.user),
            "created": created,
            "plaintext": plaintext,
            "now": timezone.now(),
            # The portal as this browser reaches it, for the ready-to-paste curl and berth lines.
            "api_base": request.build_absolute_uri("/").rstrip("/"),
        },
    )
    # The one response that carries a plaintext token must not be kept by a cache or the back button.
    add_never_cache_headers(response)
    return response


@login_required
@require_POST
def token_revoke(request: AuthedRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(selectors.api_tokens_of(user=request.user), pk=pk)
    try:
        call(request, services.api_token_revoke, token=token, actor=request.user)
    except InvalidTransition as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Token “{token.name}” ({token.prefix}…) was revoked.")
    return redirect("tokens")
