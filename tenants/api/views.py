"""REST API v1. Each view parses input, calls one service and serializes the result."""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request as HttpRequest
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from tenants import selectors, services
from tenants.api import serializers as s
from tenants.api.errors import to_api_exception
from tenants.api.filters import AuditEventFilter, RequestFilter, TenantFilter
from tenants.audit import AuditContext
from tenants.csv_export import audit_csv_response


class WriteThrottle(ScopedRateThrottle):
    """Throttle writes only; reads stay cheap for dashboards and CI polling."""

    def allow_request(self, request, view) -> bool:
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return True
        return super().allow_request(request, view)


def call(service, **kwargs):
    """Run a service, turning domain errors into API errors."""
    try:
        return service(**kwargs)
    except Exception as exc:
        converted = to_api_exception(exc)
        if converted is exc:
            raise
        raise converted from exc


class BerthViewSet(viewsets.GenericViewSet):
    throttle_classes = [WriteThrottle]
    throttle_scope = "writes"

    def ctx(self) -> AuditContext:
        return AuditContext.from_http(self.request)


class MeView(APIView):
    @extend_schema(responses=s.MeSerializer)
    def get(self, request: HttpRequest) -> Response:
        return Response(s.MeSerializer(request.user).data)


class TeamViewSet(mixins.ListModelMixin, BerthViewSet):
    serializer_class = s.TeamSerializer

    def get_queryset(self):
        return selectors.teams_visible_to(user=self.request.user)


class TierViewSet(mixins.ListModelMixin, BerthViewSet):
    serializer_class = s.TierSerializer

    def get_queryset(self):
        return selectors.tiers_available()


class ClusterViewSet(mixins.ListModelMixin, BerthViewSet):
    serializer_class = s.ClusterSerializer

    def get_queryset(self):
        return selectors.clusters_available()


class RequestViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, BerthViewSet):
    serializer_class = s.RequestSerializer
    filterset_class = RequestFilter

    def get_queryset(self):
        return selectors.requests_visible_to(user=self.request.user)

    @extend_schema(
        request=s.RequestCreateSerializer,
        responses={201: s.RequestSerializer},
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER, required=False,
                                     description="Repeat a POST safely: the same key returns the first request.")],
    )
    def create(self, request: HttpRequest) -> Response:
        data = s.RequestCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = dict(data.validated_data)
        user = request.user
        if v.get("team") is not None and not selectors.teams_visible_to(user=user).filter(pk=v["team"].pk).exists():
            raise serializers.ValidationError({"team": [f"Object with slug={v['team'].slug} does not exist."]})
        if v.get("tenant"):
            v["tenant"] = selectors.tenants_visible_to(user=user).filter(pk=v["tenant"]).first()
            if v["tenant"] is None:
                raise serializers.ValidationError({"tenant": ["No such tenant."]})
        key = request.headers.get("Idempotency-Key", "")[:64]
        req = call(services.request_submit, actor=user, idempotency_key=key, ctx=self.ctx(), **v)
        return Response(s.RequestSerializer(req).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.DecisionSerializer, responses=s.RequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request: HttpRequest, pk=None) -> Response:
        body = s.DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        req = call(services.request_approve, request=self.get_object(), actor=request.user, ctx=self.ctx(), **body.validated_data)
        return Response(s.RequestSerializer(req).data)

    @extend_schema(request=s.RejectSerializer, responses=s.RequestSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request: HttpRequest, pk=None) -> Response:
        body = s.RejectSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        req = call(services.request_reject, request=self.get_object(), actor=request.user, ctx=self.ctx(), **body.validated_data)
        return Response(s.RequestSerializer(req).data)

    @extend_schema(request=None, responses=s.RequestSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: HttpRequest, pk=None) -> Response:
        req = call(services.request_cancel, request=self.get_object(), actor=request.user, ctx=self.ctx())
        return Response(s.RequestSerializer(req).data)


class TenantViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, BerthViewSet):
    serializer_class = s.TenantSerializer
    filterset_class = TenantFilter

    def get_queryset(self):
        return selectors.tenants_visible_to(user=self.request.user)

    @extend_schema(request=s.DecommissionSerializer, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def decommission(self, request: HttpRequest, pk=None) -> Response:
        body = s.DecommissionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        tenant = call(services.tenant_decommission, tenant=self.get_object(), actor=request.user, ctx=self.ctx(), **body.validated_data)
        return Response(s.TenantSerializer(tenant).data)

    @extend_schema(request=None, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def retry(self, request: HttpRequest, pk=None) -> Response:
        tenant = call(services.tenant_retry, tenant=self.get_object(), actor=request.user, ctx=self.ctx())
        return Response(s.TenantSerializer(tenant).data)


class AuditEventViewSet(mixins.ListModelMixin, BerthViewSet):
    serializer_class = s.AuditEventSerializer
    filterset_class = AuditEventFilter

    def get_queryset(self):
        return selectors.audit_events_visible_to(user=self.request.user)

    @extend_schema(filters=True, responses={(200, "text/csv"): str})
    @action(detail=False, methods=["get"], url_path="export")
    def export(self, request: HttpRequest) -> Response:
        events = self.filter_queryset(self.get_queryset()).iterator(chunk_size=500)
        return audit_csv_response(events)


class ApiTokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    expires_in_days = serializers.IntegerField(min_value=1, max_value=365, default=30)
    team = serializers.SlugRelatedField(slug_field="slug", queryset=selectors.Team.objects.all(), required=False, allow_null=True)


class ApiTokenViewSet(mixins.ListModelMixin, BerthViewSet):
    serializer_class = s.ApiTokenSerializer

    def get_queryset(self):
        return selectors.api_tokens_of(user=self.request.user)

    @extend_schema(request=ApiTokenCreateSerializer, responses={201: s.ApiTokenSerializer})
    def create(self, request: HttpRequest) -> Response:
        body = ApiTokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        token, plaintext = call(services.api_token_create, actor=request.user, ctx=self.ctx(), **body.validated_data)
        return Response({**s.ApiTokenSerializer(token).data, "token": plaintext}, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=s.ApiTokenSerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request: HttpRequest, pk=None) -> Response:
        token = get_object_or_404(self.get_queryset(), pk=pk)
        token = call(services.api_token_revoke, token=token, actor=request.user, ctx=self.ctx())
        return Response(s.ApiTokenSerializer(token).data)
