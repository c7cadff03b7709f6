"""REST API v1. Each view parses input, calls one service and serializes the result."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.db.models import Model, QuerySet
from django.http import HttpResponse, StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request as ApiRequest
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants import models, selectors, services
from tenants.api import serializers as s
from tenants.api.authentication import OidcBearerAuthentication
from tenants.api.filters import AuditEventFilter, RequestFilter, TenantFilter
from tenants.api.pagination import NewestFirstPagination
from tenants.api.sleep_views import TenantSleepActions
from tenants.api.throttling import SharedRateThrottle, WriteThrottle
from tenants.audit import AuditContext
from tenants.csv_export import audit_csv_response
from tenants.models import ApiToken
from tenants.services.credentials import LIFETIME_FLOOR_SECONDS

_IDEMPOTENCY_KEY = re.compile(r"[!-~]{1,64}")


def actor_of(request: ApiRequest) -> models.User:
    """The signed-in caller (every API view requires authentication)."""
    user = request.user
    if not isinstance(user, models.User):
        raise exceptions.NotAuthenticated()
    return user


def credential_scope(request: ApiRequest) -> str:
    """Which credential made the call: a portal token (by id), an OIDC bearer token, or a browser session."""
    if isinstance(request.auth, ApiToken):
        return f"token:{request.auth.pk}"
    return "bearer" if isinstance(request.successful_authenticator, OidcBearerAuthentication) else "session"


def token_team_id(request: ApiRequest) -> int | None:
    """The one team an automation token acts for; None for a person's own credentials."""
    return request.auth.team_id if isinstance(request.auth, ApiToken) else None


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


# A list of what the caller may see (``visible_to``), narrowed to a team token's team and filtered. (A comment, not a
# docstring: the schema would take a docstring for the description of every view that inherits it.)
class ListViewSet(mixins.ListModelMixin, BerthViewSet):
    visible_to: Callable[..., QuerySet[Any]]

    def scoped_queryset(self):
        return self.for_token_team(type(self).visible_to(user=actor_of(self.request)))


class MeView(APIView):
    @extend_schema(responses=s.MeSerializer)
    def get(self, request: ApiRequest) -> Response:
        return Response(s.MeSerializer(actor_of(request)).data)


class TeamViewSet(mixins.ListModelMixin, BerthViewSet):
    serializer_class = s.TeamSerializer

    schema_model = models.Team

    def scoped_queryset(self):
        teams = self.for_token_team(selectors.teams_visible_to(user=actor_of(self.request)), lookup="pk")
        return selectors.with_allocation(teams)


class TierViewSet(mixins.ListModelMixin, BerthViewSet):
    serializer_class = s.TierSerializer

    schema_model = models.Tier

    def scoped_queryset(self):
        return selectors.tiers_available()


class ClusterViewSet(mixins.ListModelMixin, BerthViewSet):
    serializer_class = s.ClusterSerializer

    schema_model = models.Cluster

    def scoped_queryset(self):
        return selectors.clusters_available()


class RequestViewSet(ListViewSet, mixins.RetrieveModelMixin):
    serializer_class = s.RequestSerializer
    filterset_class = RequestFilter
    visible_to = staticmethod(selectors.requests_visible_to)

    schema_model = models.TenantRequest

    @extend_schema(
        request=s.RequestCreateSerializer,
        responses={201: s.RequestSerializer},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                {"type": "string", "pattern": f"^{_IDEMPOTENCY_KEY.pattern}$", "maxLength": 64},
                OpenApiParameter.HEADER,
                required=False,
                description="Repeat a POST safely: the same key, from the same person, credential and team, "
                "returns the first request; the same key with a different request answers 409.",
            )
        ],
    )
    def create(self, request: ApiRequest) -> Response:
        data = s.RequestCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = dict(data.validated_data)
        user = actor_of(request)
        teams = self.for_token_team(selectors.teams_visible_to(user=user), lookup="pk")
        if v.get("team") is not None and not teams.filter(pk=v["team"].pk).exists():
            raise field_error("team", f"Object with slug={v['team'].slug} does not exist.")
        if v.get("tenant"):
            v["tenant"] = self.for_token_team(selectors.tenants_visible_to(user=user)).filter(pk=v["tenant"]).first()
            if v["tenant"] is None:
                raise field_error("tenant", "No such tenant.")
        key = request.headers.get("Idempotency-Key", "")
        if key and not _IDEMPOTENCY_KEY.fullmatch(key):
            raise field_error("Idempotency-Key", "At most 64 printable ASCII characters.")
        req = services.request_submit(
            actor=user, idempotency_key=key, idempotency_scope=credential_scope(request), ctx=self.ctx(), **v
        )
        return Response(s.RequestSerializer(req).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.DecisionSerializer, responses=s.RequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request: ApiRequest, pk=None) -> Response:
        tenant_request = self.get_object()  # 404 for what is not the caller's, before anything about the body
        body = s.DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        req = services.request_approve(
            tenant_request=tenant_request,
            actor=actor_of(request),
            ctx=self.ctx(),
            **body.validated_data,
        )
        return Response(s.RequestSerializer(req).data)

    @extend_schema(request=s.RejectSerializer, responses=s.RequestSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request: ApiRequest, pk=None) -> Response:
        tenant_request = self.get_object()  # 404 for what is not the caller's, before anything about the body
        body = s.RejectSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        req = services.request_reject(
            tenant_request=tenant_request,
            actor=actor_of(request),
            ctx=self.ctx(),
            **body.validated_data,
        )
        return Response(s.RequestSerializer(req).data)

    @extend_schema(request=None, responses=s.RequestSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: ApiRequest, pk=None) -> Response:
        req = services.request_cancel(tenant_request=self.get_object(), actor=actor_of(request), ctx=self.ctx())
        return Response(s.RequestSerializer(req).data)

    @extend_schema(request=None, responses=s.RequestSerializer)
    @action(detail=True, methods=["post"])
    def accept(self, request: ApiRequest, pk=None) -> Response:
        """Accept a transfer offered to your team (its owners)."""
        req = services.transfer_accept(tenant_request=self.get_object(), actor=actor_of(request), ctx=self.ctx())
        return Response(s.RequestSerializer(req).data)

    @extend_schema(request=s.DeclineSerializer, responses=s.RequestSerializer)
    @action(detail=True, methods=["post"])
    def decline(self, request: ApiRequest, pk=None) -> Response:
        """Decline a transfer offered to your team (its owners)."""
        tenant_request = self.get_object()  # 404 for what is not the caller's, before anything about the body
        body = s.DeclineSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        req = services.transfer_decline(
            tenant_request=tenant_request, actor=actor_of(request), ctx=self.ctx(), **body.validated_data
        )
        return Response(s.RequestSerializer(req).data)


class TenantViewSet(TenantSleepActions, ListViewSet, mixins.RetrieveModelMixin):
    serializer_class = s.TenantSerializer
    list_params = frozenset({"status"})
    filterset_class = TenantFilter
    visible_to = staticmethod(selectors.tenants_visible_to)

    schema_model = models.Tenant

    @extend_schema(request=s.DecommissionSerializer, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def decommission(self, request: ApiRequest, pk=None) -> Response:
        tenant = self.get_object()  # 404 for what is not the caller's, before anything about the body
        body = s.DecommissionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        tenant = services.tenant_decommission(
            tenant=tenant,
            actor=actor_of(request),
            ctx=self.ctx(),
            **body.validated_data,
        )
        return Response(s.TenantSerializer(tenant).data)

    @extend_schema(request=s.TransferSerializer, responses={201: s.RequestSerializer})
    @action(detail=True, methods=["post"])
    def transfer(self, request: ApiRequest, pk=None) -> Response:
        """Offer the tenant to another team (owners and platform admins); an owner of that team accepts."""
        tenant = self.get_object()  # 404 for what is not the caller's, before anything about the body
        body = s.TransferSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        req = services.transfer_ask(tenant=tenant, actor=actor_of(request), ctx=self.ctx(), **body.validated_data)
        return Response(s.RequestSerializer(req).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def retry(self, request: ApiRequest, pk=None) -> Response:
        tenant = services.tenant_retry(tenant=self.get_object(), actor=actor_of(request), ctx=self.ctx())
        return Response(s.TenantSerializer(tenant).data)

    @extend_schema(request=s.KubeconfigSerializer, responses={(200, "application/yaml"): str})
    @action(detail=True, methods=["post"])
    def kubeconfig(self, request: ApiRequest, pk=None) -> HttpResponse:
        tenant = self.get_object()  # 404 for what is not the caller's, before anything about the body
        body = s.KubeconfigSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        text = services.tenant_issue_kubeconfig(
            tenant=tenant,
            actor=actor_of(request),
            ctx=self.ctx(),
            **body.validated_data,
        )
        return kubeconfig_response(text, "kubeconfig.yaml")

    @extend_schema(request=None, responses={202: None})
    @action(detail=True, methods=["post"], url_path="isolation-check")
    def isolation_check(self, request: ApiRequest, pk=None) -> Response:
        services.tenant_request_isolation_check(tenant=self.get_object(), actor=actor_of(request), ctx=self.ctx())
        return Response({"detail": "Isolation check queued."}, status=status.HTTP_202_ACCEPTED)


def kubeconfig_response(text: str, filename: str) -> HttpResponse:
    response = HttpResponse(text, content_type="application/yaml")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response


class MergedKubeconfigView(OneValueEach, APIView):
    throttle_classes = [SharedRateThrottle]
    throttle_scope = "writes"

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "lifetime_seconds",
                {"type": "integer", "minimum": LIFETIME_FLOOR_SECONDS},
                required=False,
                description="Token lifetime per tenant, capped at each tier's maximum (default: one hour or the "
                "maximum).",
            )
        ],
        responses={(200, "application/yaml"): str},
    )
    def get(self, request: ApiRequest) -> HttpResponse:
        if token_team_id(request) is not None:
            # The merged file spans all of the person's teams; an automation token acts for one.
            raise exceptions.PermissionDenied(
                "A team automation token gets kubeconfigs per tenant: POST /api/v1/tenants/{id}/kubeconfig/."
            )
        # A plain dict: from a QueryDict, DRF would take ``lifetime_seconds=`` (blank) for null. Other query
        # parameters are ignored, as on every other GET.
        body = s.KubeconfigSerializer(data={k: v for k, v in request.query_params.items() if k == "lifetime_seconds"})
        body.is_valid(raise_exception=True)
        text = services.user_issue_merged_kubeconfig(
            actor=actor_of(request),
            ctx=AuditContext.from_http(request),
            **body.validated_data,
        )
        return kubeconfig_response(text, "berth-kubeconfig.yaml")


class AuditEventViewSet(ListViewSet):
    serializer_class = s.AuditEventSerializer
    pagination_class = NewestFirstPagination
    filterset_class = AuditEventFilter
    visible_to = staticmethod(selectors.audit_events_visible_to)

    schema_model = models.AuditEvent

    @extend_schema(filters=True, responses={(200, "text/csv"): str})
    @action(detail=False, methods=["get"], url_path="export")
    def export(self, request: ApiRequest) -> StreamingHttpResponse:
        events = self.filter_queryset(self.get_queryset()).iterator(chunk_size=500)
        return audit_csv_response(events)


class ApiTokenCreateSerializer(s.Input):
    name = s.TextField(max_length=100)
    expires_in_days = serializers.IntegerField(min_value=1, max_value=365, default=30)
    team = s.LookupField(slug_field="slug", queryset=selectors.Team.objects.all(), required=False, allow_null=True)


class ApiTokenViewSet(mixins.ListModelMixin, BerthViewSet):
    serializer_class = s.ApiTokenSerializer

    schema_model = models.ApiToken

    def scoped_queryset(self):
        return self.for_token_team(selectors.api_tokens_of(user=actor_of(self.request)))

    @extend_schema(request=ApiTokenCreateSerializer, responses={201: s.ApiTokenSerializer})
    def create(self, request: ApiRequest) -> Response:
        body = ApiTokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        team = body.validated_data.get("team")
        if team is not None and not selectors.teams_visible_to(user=actor_of(request)).filter(pk=team.pk).exists():
            raise field_error("team", f"Object with slug={team.slug} does not exist.")
        if token_team_id(request) is not None:
            # A leaked automation token must not be able to mint others that outlive its revocation,
            # least of all a personal one with all of its owner's rights.
            raise exceptions.PermissionDenied("A team automation token cannot create tokens; a person creates them.")
        token, plaintext = services.api_token_create(actor=actor_of(request), ctx=self.ctx(), **body.validated_data)
        return Response({**s.ApiTokenSerializer(token).data, "token": plaintext}, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=s.ApiTokenSerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request: ApiRequest, pk=None) -> Response:
        token = services.api_token_revoke(token=self.get_object(), actor=actor_of(request), ctx=self.ctx())
        return Response(s.ApiTokenSerializer(token).data)
