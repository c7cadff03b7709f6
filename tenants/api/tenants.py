"""Tenants: list and read them, and act on one: decommission, transfer, retry, kubeconfig, isolation check, sleep
and wake (tenants.services.sleep; 202 while the worker scales, ``sleep_state`` says when it has), right-sizing
(a suggestion with its evidence, accepted as a change_tier request or dismissed), and its alerts (read only)."""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request as ApiRequest
from rest_framework.response import Response

from tenants import models, selectors, services
from tenants.api import serializers as s
from tenants.api.base import (
    BerthViewSet,
    ListViewSet,
    actor_of,
    credential_scope,
    idempotency_key,
    idempotency_parameter,
    kubeconfig_response,
)
from tenants.api.filters import TenantFilter
from tenants.api.parsers import BoundedJSONParser
from tenants.rightsizing import BASIS_CHOICES, Assessment


class TenantViewSet(ListViewSet, mixins.RetrieveModelMixin):
    serializer_class = s.TenantSerializer
    list_params = frozenset({"status"})
    filterset_class = TenantFilter
    visible_to = staticmethod(selectors.tenants_visible_to)
    load = staticmethod(s.TenantSerializer.load)

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

    @extend_schema(
        request=None,
        responses={202: s.TenantSerializer},
        description="Put the tenant to sleep (team owners and platform admins; the tier must allow it): its "
        "Deployments and StatefulSets are scaled to zero and its CronJobs suspended, each remembering what it "
        "was. 409 when it is already asleep, not ready, or its tier or kind cannot sleep (the reason says which).",
    )
    @action(detail=True, methods=["post"])
    def sleep(self, request: ApiRequest, pk=None) -> Response:
        tenant = services.tenant_sleep(tenant=self.get_object(), actor=actor_of(request), ctx=self.ctx())
        return Response(s.TenantSerializer(tenant).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        request=None,
        responses={202: s.TenantSerializer},
        description="Wake the tenant (team owners and platform admins): each workload gets back exactly what it "
        "had. 409 when it is not asleep, or waking would take the team over its budget.",
    )
    @action(detail=True, methods=["post"])
    def wake(self, request: ApiRequest, pk=None) -> Response:
        tenant = services.tenant_wake(tenant=self.get_object(), actor=actor_of(request), ctx=self.ctx())
        return Response(s.TenantSerializer(tenant).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        request=s.SleepScheduleInputSerializer,
        responses=s.TenantSerializer,
        description="Set the weekly sleep schedule, read in the team's time zone: asleep every night from "
        "`nights.start` to `nights.end` (an end before the start wraps past midnight; the same time is refused) "
        "and, with `weekends`, all of Saturday and Sunday. `nights` null: no nightly sleep. JSON only. 409 when "
        "the tenant is being removed, or a schedule is set where the tier or the kind cannot sleep.",
    )
    @action(detail=True, methods=["post"], url_path="sleep-schedule", parser_classes=[BoundedJSONParser])
    def sleep_schedule(self, request: ApiRequest, pk=None) -> Response:
        tenant = self.get_object()
        body = s.SleepScheduleInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        tenant = services.tenant_set_sleep_schedule(
            tenant=tenant,
            actor=actor_of(request),
            ctx=self.ctx(),
            **body.validated_data,
        )
        return Response(s.TenantSerializer(tenant).data)


# --- Right-sizing ---------------------------------------------------------------------------------------------------
FINGERPRINT = r"^[0-9a-f]{64}$"


class RightsizingEvidenceSerializer(serializers.Serializer):
    resource = serializers.CharField(
        help_text="The quota resource, e.g. requests.cpu, or measured.cpu / measured.memory: what the containers used."
    )
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
    limit = serializers.FloatField(
        min_value=0,
        allow_null=True,
        help_text="measured.memory only: the limits.memory quota its near-limit days are counted against; "
        "null for every other resource.",
    )


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
    basis = serializers.ChoiceField(
        choices=BASIS_CHOICES,
        help_text="What CPU and memory were judged on: what the containers used, as the cluster's Prometheus "
        "measured it (when it covers enough of the window), or what the pods requested.",
    )
    basis_label = serializers.CharField(help_text="The basis, in words.")
    measured_seconds = serializers.FloatField(min_value=0, help_text="Of the window, how much was measured.")
    measured_coverage = serializers.FloatField(
        min_value=0, max_value=1, help_text="Share of the window measured usage covers."
    )
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
        "basis": found.basis,
        "basis_label": found.basis_label,
        "measured_seconds": found.measured_seconds,
        "measured_coverage": found.measured_coverage,
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
            idempotency_parameter(
                "Repeat the accept safely: the same key for the same suggestion returns the first "
                "request; the same key for anything else answers 409."
            )
        ],
    )
    @action(detail=True, methods=["post"], url_path="rightsizing/accept")
    def rightsizing_accept(self, request: ApiRequest, pk=None) -> Response:
        tenant = self.get_object()  # 404 for what is not the caller's, before anything about the body
        body = RightsizingAcceptSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key = idempotency_key(request)
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


class TenantAlertSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField(help_text="The rule's alertname, e.g. BerthTenantCrashLooping.")
    status = serializers.ChoiceField(choices=models.TenantAlert.Status.choices)
    severity = serializers.CharField(help_text="The rule's severity label, e.g. warning ('' when none).")
    summary = serializers.CharField(help_text="What the rule says about it ('' when it says nothing).")
    labels = serializers.DictField(
        child=serializers.CharField(), help_text="The alert's labels: namespace, and pod, container or resource."
    )
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField(allow_null=True, help_text="When it resolved; null while it fires.")
    notified = serializers.SerializerMethodField(help_text="Whether the team was told of its last transition.")
    suppressed_reason = serializers.CharField(
        help_text="Why its last transition was not sent: asleep, or not ready ('' when it was sent)."
    )

    def get_notified(self, alert: models.TenantAlert) -> bool:
        return alert.notified_at is not None and not alert.suppressed_reason


class TenantAlertsSerializer(serializers.Serializer):
    firing = TenantAlertSerializer(many=True, help_text=f"At most {selectors.ALERTS_FIRING_SHOWN}, newest first.")
    resolved = TenantAlertSerializer(
        many=True, help_text=f"The {selectors.ALERTS_RESOLVED_SHOWN} most recently resolved."
    )


class TenantAlertsViewSet(BerthViewSet):
    """/tenants/{id}/alerts/: beside TenantViewSet, on the same tenants, scoped the same way."""

    serializer_class = TenantAlertsSerializer
    schema_model = models.Tenant

    def scoped_queryset(self):
        return self.for_token_team(selectors.tenants_visible_to(user=actor_of(self.request)))

    @extend_schema(
        request=None,
        responses=TenantAlertsSerializer,
        description="The alerts Prometheus fired about the tenant's workloads (quota nearly full, crash loops, OOM "
        "kills), as Alertmanager sent them to Berth: those firing and the most recently resolved. Read only; 404 "
        "for a tenant the caller may not see.",
    )
    @action(detail=True, methods=["get"], url_path="alerts")
    def alerts(self, request: ApiRequest, pk=None) -> Response:
        tenant = self.get_object()
        return Response(TenantAlertsSerializer(selectors.tenant_alerts(tenant=tenant)).data)
