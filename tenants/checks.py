"""System checks (``manage.py check``): settings that would open a hole are errors, not surprises."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register


@register("security")
def api_audience_is_not_a_client(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """An ID token's audience is the client it was issued to: an API that accepted that audience would take
    ID tokens as bearer credentials."""
    clients = {settings.OIDC_RP_CLIENT_ID, *settings.OIDC_API_CLIENTS}
    if settings.OIDC_API_AUDIENCE in clients:
        return [
            Error(
                f"OIDC_API_AUDIENCE is {settings.OIDC_API_AUDIENCE!r}, which is also an OIDC client id: "
                "ID tokens issued to that client would be accepted as API bearer tokens.",
                hint="Give the API an audience of its own (e.g. berth-api) and have the provider put it in "
                "access tokens only.",
                id="berth.E001",
            )
        ]
    return []
