"""Signing in (through the organisation's OpenID Connect provider) and out."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render, resolve_url
from mozilla_django_oidc.views import OIDCLogoutView

from tenants.views.common import safe_next


def login(request: HttpRequest) -> HttpResponse:
    default = resolve_url(settings.LOGIN_REDIRECT_URL)
    next_url = safe_next(request, default)
    if request.user.is_authenticated:
        return redirect(next_url)
    return render(request, "pages/login.html", {"next": next_url})


class LogoutView(OIDCLogoutView):
    """POST only: end the Django session, then the provider's (``tenants.auth.provider_logout_url``)."""

    http_method_names = ["post"]
