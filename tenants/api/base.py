"""What every API view shares: who the caller is and with which credential, the Idempotency-Key header, field
errors, one value per query parameter, and the viewsets that scope every read to the caller."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.db.models import Model, QuerySet
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions, mixins, serializers, viewsets
from rest_framework.request import Request as ApiRequest

from tenants import models
from tenants.api.authentication import OidcBearerAuthentication
from tenants.api.throttling import WriteThrottle
from tenants.audit import AuditContext

IDEMPOTENCY_KEY = re.compile(r"[!-~]{1,64}")


def actor_of(request: ApiRequest) -> models.User:
    """The signed-in caller (every API view requires authentication)."""
    user = request.user
    if not isinstance(user, models.User):
        raise exceptions.NotAuthenticated()
    return user


def credential_scope(request: ApiRequest) -> str:
    """Which credential made the call: a portal token (by id), an OIDC bearer token, or a browser session."""
    if isinstance(request.auth, models.ApiToken):
        return f"token:{request.auth.pk}"
    return "bearer" if isinstance(request.successful_authenticator, OidcBearerAuthentication) else "session"


def token_team_id(request: ApiRequest) -> int | None:
    """The one team an automation token acts for; None for a person's own credentials."""
    return request.auth.team_id if isinstance(request.auth, models.ApiToken) else None


def field_error(field: str, message: str) -> serializers.ValidationError:
    return serializers.ValidationError({field: [message]})


class OneValueEach:
    """Refuses a query parameter given twice (``?limit=5&limit=x``) unless it is a list (``?status=a&status=b``).

    Django would read the last value and ignore the others, so a request could say two things and be
    answered for one of them.
    """

    list_params: frozenset[str] = frozenset()

    def initial(self, request: ApiRequest, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        for name, values in request.query_params.lists():
            if len(values) > 1 and name not in self.list_params:
                raise field_error(name, "Give this parameter once.")


class BerthViewSet(OneValueEach, viewsets.GenericViewSet):
    schema_model: type[Model]

    def get_queryset(self) -> QuerySet[Any]:
        if getattr(self, "swagger_fake_view", False):  # OpenAPI generation: there is no caller to scope to
            return self.schema_model._default_manager.none()
        return self.scoped_queryset()

    def scoped_queryset(self):
        raise NotImplementedError

    throttle_classes = [WriteThrottle]
    throttle_scope = "writes"

    def ctx(self) -> AuditContext:
        return AuditContext.from_http(self.request)

    def for_token_team(self, queryset, lookup: str = "team_id"):
        """Narrow ``queryset`` to the token's team when the caller uses a team automation token."""
        team_id = token_team_id(self.request)
        return queryset if team_id is None else of_team(queryset, team_id, lookup)


def of_team(queryset: QuerySet[Any], team_id: int, lookup: str = "team_id") -> QuerySet[Any]:
    return queryset.filter(**{lookup: team_id})


# A list of what the caller may see (``visible_to``), narrowed to a team token's team and filtered. A read (GET) loads
# only what its serializer shows (``load``, the serializer's): the selectors load whole related rows, for the pages and
# the services, and the unused columns (a tier's settings, a tenant's reports, a request's whole tenant) cost more to
# fetch and turn into objects than the rest of the page. An action (POST) reads the one row it acts on alone: the
# service loads the related rows it uses by their keys, which costs PostgreSQL less than planning a join of all of them
# (nine tables for a request). (A comment, not a docstring: the schema would take a docstring for the description of
# every view that inherits it.)
class ListViewSet(mixins.ListModelMixin, BerthViewSet):
    visible_to: Callable[..., QuerySet[Any]]
    load: Callable[[QuerySet[Any]], QuerySet[Any]]

    def scoped_queryset(self):
        queryset = self.for_token_team(type(self).visible_to(user=actor_of(self.request)))
        return type(self).load(queryset) if self.request.method == "GET" else queryset.select_related(None)


def idempotency_key(request: ApiRequest) -> str:
    """The request's Idempotency-Key ("" without one); a field error unless 1 to 64 printable ASCII characters."""
    key = request.headers.get("Idempotency-Key", "")
    if key and not IDEMPOTENCY_KEY.fullmatch(key):
        raise field_error("Idempotency-Key", "At most 64 printable ASCII characters.")
    return key


def idempotency_parameter(description: str) -> OpenApiParameter:
    """The Idempotency-Key header in the schema of a POST that takes one."""
    return OpenApiParameter(
        "Idempotency-Key",
        {"type": "string", "pattern": f"^{IDEMPOTENCY_KEY.pattern}$", "maxLength": 64},
        OpenApiParameter.HEADER,
        required=False,
        description=description,
    )


def kubeconfig_response(text: str, filename: str) -> HttpResponse:
    response = HttpResponse(text, content_type="application/yaml")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response
