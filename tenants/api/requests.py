"""Requests: submit, list and read them, and decide, cancel, accept or decline them."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request as ApiRequest
from rest_framework.response import Response

from tenants import models, selectors, services
from tenants.api import serializers as s
from tenants.api.base import (
    ListViewSet,
    actor_of,
    credential_scope,
    field_error,
    idempotency_key,
    idempotency_parameter,
)
from tenants.api.filters import RequestFilter


class RequestViewSet(ListViewSet, mixins.RetrieveModelMixin):
    serializer_class = s.RequestSerializer
    filterset_class = RequestFilter
    visible_to = staticmethod(selectors.requests_visible_to)
    load = staticmethod(s.RequestSerializer.load)

    schema_model = models.TenantRequest

    @extend_schema(
        request=s.RequestCreateSerializer,
        responses={201: s.RequestSerializer},
        parameters=[
            idempotency_parameter(
                "Repeat a POST safely: the same key, from the same person, credential and team, "
                "returns the first request; the same key with a different request answers 409."
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
        key = idempotency_key(request)
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
