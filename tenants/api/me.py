"""The caller: who they are (``/me/``) and one kubeconfig for every tenant they may reach (``/kubeconfig/``)."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions
from rest_framework.request import Request as ApiRequest
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants import services
from tenants.api import serializers as s
from tenants.api.base import OneValueEach, actor_of, kubeconfig_response, token_team_id
from tenants.api.throttling import SharedRateThrottle
from tenants.audit import AuditContext
from tenants.services.credentials import LIFETIME_FLOOR_SECONDS


class MeView(APIView):
    @extend_schema(responses=s.MeSerializer)
    def get(self, request: ApiRequest) -> Response:
        return Response(s.MeSerializer(actor_of(request)).data)


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
