"""REST API for right-sizing: a tenant's suggestion with its evidence, and accepting it (a change_tier request)."""

from __future__ import annotations

from django.core.validators import RegexValidator
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request as ApiRequest
from rest_framework.response import Response

from tenants import models, selectors, services
from tenants.api import serializers as s
from tenants.api.views import _IDEMPOTENCY_KEY, BerthViewSet, actor_of, credential_scope, field_error
from tenants.rightsizing import Assessment

FINGERPRINT = r"^[0-9a-f]{64}$"


class RightsizingEvidenceSerializer(serializers.Serializer):
    resource = serializers.CharField(help_text="The quota resource, e.g. requests.cpu.")
    label = serializers.CharField()  # type: ignore[assignment]  # a declared field, popped from the class by DRF
    average = serializers.FloatField(min_value=0, help_text="Time-weighted average while awake, in base units.")
    peak = serializers.FloatField(min_value=0, help_text="The highest reading, in base units (cores, bytes, counts).")
    quota = serializers.FloatField(min_value=0, help_text="The quota at the latest reading, in base units.")
    average_share = serializers.FloatField(
        min_value=0, allow_null=True, help_text="average / quota; null when the quota is 0."
    )
    peak_share = serializers.FloatField(
        min_value=0, allow_null=True, help_text="peak / quota; null when the quota is 0."
    )
    near_limit_days = serializers.IntegerField(min_value=0, help_text="Days whose peak reached the near-limit share.")


class RightsizingSuggestionSerializer(serializers.Serializer):
    direction = serializers.ChoiceField(choices=[("down", "Smaller tier"), ("up", "Larger tier")])
    tier = serializers.CharField(source="target.name", help_text="The suggested tier.")
    tier_display_name = serializers.CharField(source="target.display_name")
    reason = serializers.CharField(help_text="The evidence, in words.")
    fingerprint = serializers.RegexField(
        FINGERPRINT, help_text="Send it back to accept exactly this suggestion (a changed one answers 409)."
    )


class RightsizingSerializer(serializers.Serializer):
    tenant = serializers.UUIDField()
    tier = serializers.CharField(help_text="The tenant's current tier.")
    window_start = serializers.DateField(help_text="First UTC day read.")
    window_end = serializers.DateField(help_text="Last UTC day read (yesterday).")
    days = serializers.IntegerField(min_value=1)
    covered_seconds = serializers.FloatField(min_value=0)
    coverage = serializers.FloatField(min_value=0, max_value=1, help_text="Share of the window readings cover.")
    evidence = RightsizingEvidenceSerializer(many=True)
    suggestion = RightsizingSuggestionSerializer(allow_null=True)
    notes = serializers.ListField(child=serializers.CharField(), help_text="Why there is no suggestion, if not.")


def rightsizing_data(tenant: models.Tenant, found: Assessment) -> dict:
    """The API's (and the page's) view of an assessment."""
    return {
        "tenant": tenant.pk,
        "tier": tenant.tier.name,
        "window_start": found.window_start,
        "window_end": found.window_end,
        "days": found.days,
        "covered_seconds": found.covered_seconds,
        "coverage": found.coverage,
        "evidence": found.evidence,
        "suggestion": found if found.target is not None else None,
        "notes": list(found.notes),
    }


class RightsizingAcceptSerializer(s.Input):
    """Which suggestion the owner accepts: its fingerprint. Unknown fields are refused."""

    fingerprint = s.TextField(
        validators=[RegexValidator(FINGERPRINT, "The fingerprint of the suggestion shown (64 hex digits).")],
        help_text="The suggestion's fingerprint, as GET …/rightsizing/ gave it.",
    )


class RightsizingDismissSerializer(RightsizingAcceptSerializer):
    """Which suggestion the owner dismisses: its fingerprint. Unknown fields are refused."""


class TenantRightsizingViewSet(BerthViewSet):
    """/tenants/{id}/rightsizing/: beside TenantViewSet, on the same tenants, scoped the same way."""

    serializer_class = RightsizingSerializer
    schema_model = models.Tenant

    def scoped_queryset(self):
        return self.for_token_team(selectors.tenants_visible_to(user=actor_of(self.request)))

    @extend_schema(
        request=None,
        responses=RightsizingSerializer,
        description="The tenant's right-sizing: its usage over the last days on its tier (evidence per resource) "
        "and, when it used under the configured share of its tier or ran near its limits, the suggested tier.",
    )
    @action(detail=True, methods=["get"], url_path="rightsizing")
    def rightsizing(self, request: ApiRequest, pk=None) -> Response:
        tenant = self.get_object()
        found = services.rightsizing_assess(tenant=tenant)
        return Response(RightsizingSerializer(rightsizing_data(tenant, found)).data)

    @extend_schema(
        description="Accept the suggestion shown (team owners and platform admins): files a change_tier request "
        "as POST /api/v1/requests/ would (budget, approval, auto-approval of downgrades where the tier allows). "
        "409 when the suggestion changed since it was shown, or the tenant cannot take a request now.",
        request=RightsizingAcceptSerializer,
        responses={201: s.RequestSerializer},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                {"type": "string", "pattern": f"^{_IDEMPOTENCY_KEY.pattern}$", "maxLength": 64},
                OpenApiParameter.HEADER,
                required=False,
                description="Repeat the accept safely: the same key for the same suggestion returns the first "
                "request; the same key for anything else answers 409.",
            )
        ],
    )
    @action(detail=True, methods=["post"], url_path="rightsizing/accept")
    def rightsizing_accept(self, request: ApiRequest, pk=None) -> Response:
        tenant = self.get_object()  # 404 for what is not the caller's, before anything about the body
        body = RightsizingAcceptSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key = request.headers.get("Idempotency-Key", "")
        if key and not _IDEMPOTENCY_KEY.fullmatch(key):
            raise field_error("Idempotency-Key", "At most 64 printable ASCII characters.")
        req = services.rightsizing_accept(
            tenant=tenant,
            actor=actor_of(request),
            fingerprint=body.validated_data["fingerprint"],
            idempotency_key=key,
            idempotency_scope=credential_scope(request),
            ctx=self.ctx(),
        )
        return Response(s.RequestSerializer(req).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        description="Dismiss the suggestion shown (team owners and platform admins): that change is not suggested "
        "again for as many days as the rule reads; a different suggestion shows at once. Answers the right-sizing "
        "as it is now. 409 when the suggestion changed since it was shown.",
        request=RightsizingDismissSerializer,
        responses=RightsizingSerializer,
    )
    @action(detail=True, methods=["post"], url_path="rightsizing/dismiss")
    def rightsizing_dismiss(self, request: ApiRequest, pk=None) -> Response:
        tenant = self.get_object()  # 404 for what is not the caller's, before anything about the body
        body = RightsizingDismissSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        found = services.rightsizing_dismiss(
            tenant=tenant, actor=actor_of(request), fingerprint=body.validated_data["fingerprint"], ctx=self.ctx()
        )
        return Response(RightsizingSerializer(rightsizing_data(tenant, found)).data)
