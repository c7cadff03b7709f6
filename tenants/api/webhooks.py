"""A team's webhook endpoints: /teams/{slug}/webhooks/ and each endpoint's recent deliveries.

The team's members (any role) and platform admins list and read them; owners and platform admins change
them through tenants.services (the same checks, SSRF rules and signing as the admin's). Another team's slug
or endpoint is 404, never 403. Nothing answered carries a URL's path or a signing secret, except the new
secret once, in the answer to the create or the rotation that made it. Global endpoints (no team) are the
platform admins', in the Django admin only.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request as ApiRequest
from rest_framework.response import Response
from rest_framework.utils import html

from tenants import models, selectors, services
from tenants.api import serializers as s
from tenants.api.base import BerthViewSet, actor_of, of_team
from tenants.services.webhooks import SUBSCRIBABLE

SLUG_PARAMETER = OpenApiParameter(
    "slug", {"type": "string", "pattern": "^[-a-zA-Z0-9_]+$"}, OpenApiParameter.PATH, description="The team's slug."
)
ID_PARAMETER = OpenApiParameter("id", int, OpenApiParameter.PATH, description="The endpoint's id.")
WEBHOOK_ID_PARAMETER = OpenApiParameter("webhook_id", int, OpenApiParameter.PATH, description="The endpoint's id.")
EVENT_LIST_SCHEMA = {
    "type": "array",
    "items": {"type": "string", "enum": SUBSCRIBABLE},
    "description": "The events to send (at least one).",
}


@extend_schema_field({**EVENT_LIST_SCHEMA, "minItems": 1})
class EventsField(serializers.ListField):
    """A list of event names; its errors are flat text, as every field error of the API is (FieldErrors)."""

    child = serializers.CharField()

    def to_internal_value(self, data: Any) -> list[str]:
        if html.is_html_input(data):
            data = html.parse_html_list(data, default=[])
        if isinstance(data, (str, dict)) or not isinstance(data, list):
            self.fail("not_a_list", input_type=type(data).__name__)
        if not all(isinstance(item, str) and "\x00" not in item and len(item) <= 40 for item in data):
            raise serializers.ValidationError(f"Event names, from: {', '.join(SUBSCRIBABLE)}.")
        return list(data)


class WebhookEndpointSerializer(serializers.ModelSerializer):
    """An endpoint as its team sees it: the URL's origin only (its path may be a credential), never the secret."""

    team: serializers.SlugRelatedField[models.Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    events = serializers.SerializerMethodField()
    created_by: serializers.SlugRelatedField[models.User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True, help_text="Who registered it (null: a removed user)."
    )
    last_delivery_status = serializers.ChoiceField(
        choices=models.WebhookDelivery.Status.choices,
        read_only=True,
        allow_null=True,
        help_text="How the latest delivery went; null before the first.",
    )
    last_delivery_at = serializers.DateTimeField(read_only=True, allow_null=True)

    class Meta:
        model = models.WebhookEndpoint
        fields = [
            "id",
            "name",
            "team",
            "url_origin",
            "format",
            "events",
            "is_active",
            "disabled_reason",
            "disabled_at",
            "allow_private_network",
            "created_by",
            "created_at",
            "updated_at",
            "last_delivery_status",
            "last_delivery_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "url_origin": {"help_text": "scheme://host[:port] of the URL; its path is never shown."},
            "allow_private_network": {"help_text": "Whether a platform admin allowed private addresses for it."},
            "disabled_reason": {
                "help_text": "Why Berth turned it off by itself (BERTH_WEBHOOK_DISABLE_AFTER_FAILURES deliveries in "
                "a row given up); empty otherwise. Setting is_active to true turns it on again and clears it."
            },
            "disabled_at": {"help_text": "When Berth turned it off by itself; null otherwise."},
        }

    @extend_schema_field(EVENT_LIST_SCHEMA)
    def get_events(self, endpoint: models.WebhookEndpoint) -> list[str]:
        return list(endpoint.events)


class WebhookEndpointCreatedSerializer(WebhookEndpointSerializer):
    secret = serializers.CharField(read_only=True, help_text="The signing secret: shown this once, never again.")

    class Meta(WebhookEndpointSerializer.Meta):
        fields = [*WebhookEndpointSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class WebhookSecretSerializer(serializers.Serializer):
    secret = serializers.CharField(help_text="The new signing secret: shown this once; deliveries now use it.")


class WebhookEndpointCreateSerializer(s.Input):
    """A new endpoint of the team in the path. Unknown fields (``team``, ``url_origin``, ``created_by``) are refused."""

    name = s.TextField(max_length=100)
    url = s.TextField(max_length=2000, help_text="https://… of the receiver (for Slack, its incoming webhook URL).")
    format = serializers.ChoiceField(choices=models.WebhookEndpoint.Format.choices, default="json")
    events = EventsField()
    secret = s.TextField(
        required=False,
        allow_blank=True,
        default="",
        help_text="whsec_ and base64 of 24 to 64 bytes, if the receiver dictates one; empty: one is generated.",
    )
    is_active = s.StrictBooleanField(default=True)
    allow_private_network = s.StrictBooleanField(
        default=False, help_text="Private addresses for this URL: platform admins only."
    )


class WebhookEndpointUpdateSerializer(s.Input):
    """What changes; what is left out stays. A new URL loses a platform admin's private-address allowance."""

    name = s.TextField(max_length=100, required=False)
    url = s.TextField(max_length=2000, required=False, help_text="A new URL; left out, the current one stays.")
    format = serializers.ChoiceField(choices=models.WebhookEndpoint.Format.choices, required=False)
    events = EventsField(required=False)
    is_active = s.StrictBooleanField(required=False)
    allow_private_network = s.StrictBooleanField(
        required=False, help_text="Private addresses for this URL: only platform admins turn it on."
    )


class WebhookDeliverySerializer(serializers.ModelSerializer):
    """One event for the endpoint and how sending it went; never its body."""

    class Meta:
        model = models.WebhookDelivery
        fields = [
            "id",
            "event_id",
            "event",
            "tenant",
            "sequence",
            "status",
            "attempts",
            "response_code",
            "last_error",
            "duration_ms",
            "created_at",
            "last_attempt_at",
            "next_attempt_at",
            "finished_at",
        ]
        read_only_fields = fields


class _TeamScoped(BerthViewSet):
    """The team in the path: one of the caller's (any role), any for platform admins, narrowed to a team
    token's team; 404 otherwise, before anything about the body."""

    def team(self) -> models.Team:
        if not hasattr(self, "_team"):
            teams = self.for_token_team(selectors.webhook_teams_of(user=actor_of(self.request)), lookup="pk")
            self._team = get_object_or_404(teams, slug=self.kwargs["slug"])
        return self._team


@extend_schema(parameters=[SLUG_PARAMETER])
class TeamWebhookViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _TeamScoped):
    """The team's webhook endpoints (not the global ones, which are the platform admins')."""

    serializer_class = WebhookEndpointSerializer
    schema_model = models.WebhookEndpoint
    lookup_value_regex = "[0-9]{1,18}"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def scoped_queryset(self) -> QuerySet[models.WebhookEndpoint]:
        return selectors.webhook_endpoints_of(team=self.team())

    def endpoint(self) -> models.WebhookEndpoint:
        """The endpoint in the path, one of the team's: 404 otherwise, before anything about the body."""
        endpoint: models.WebhookEndpoint = self.get_object()
        return endpoint

    def answer(self, pk: int, code: int = status.HTTP_200_OK, **extra: str) -> Response:
        endpoint = selectors.webhook_endpoints_of(team=self.team()).get(pk=pk)
        return Response({**WebhookEndpointSerializer(endpoint).data, **extra}, status=code)

    @extend_schema(
        parameters=[ID_PARAMETER],
        description="One endpoint of the team (members and platform admins).",
    )
    def retrieve(self, request: ApiRequest, *args: Any, **kwargs: Any) -> Response:
        return super().retrieve(request, *args, **kwargs)

    @extend_schema(
        request=WebhookEndpointCreateSerializer,
        responses={201: WebhookEndpointCreatedSerializer},
        description="Register an endpoint for the team's events (team owners and platform admins). The URL is "
        "resolved now and before every delivery; loopback, link-local and private addresses are refused. The "
        "answer carries the signing secret, this once. 400 when the team already has BERTH_TEAM_WEBHOOK_LIMIT.",
    )
    def create(self, request: ApiRequest, *args: Any, **kwargs: Any) -> Response:
        team = self.team()
        body = WebhookEndpointCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        endpoint, secret = services.webhook_endpoint_create(
            actor=actor_of(request), team=team, ctx=self.ctx(), **body.validated_data
        )
        return self.answer(endpoint.pk, status.HTTP_201_CREATED, secret=secret)

    @extend_schema(
        parameters=[ID_PARAMETER],
        request=WebhookEndpointUpdateSerializer,
        responses=WebhookEndpointSerializer,
        description="Change an endpoint (team owners and platform admins): what is left out stays. It stays the "
        "team's; a new URL is checked as on creation.",
    )
    def partial_update(self, request: ApiRequest, *args: Any, **kwargs: Any) -> Response:
        endpoint = self.endpoint()
        body = WebhookEndpointUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.webhook_endpoint_update(
            endpoint=endpoint, actor=actor_of(request), team=endpoint.team, ctx=self.ctx(), **body.validated_data
        )
        return self.answer(endpoint.pk)

    @extend_schema(
        parameters=[ID_PARAMETER],
        responses={204: None},
        description="Remove an endpoint and its delivery log (team owners and platform admins); to keep the log, "
        "set is_active to false instead.",
    )
    def destroy(self, request: ApiRequest, *args: Any, **kwargs: Any) -> Response:
        services.webhook_endpoint_delete(endpoint=self.endpoint(), actor=actor_of(request), ctx=self.ctx())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        parameters=[ID_PARAMETER],
        request=None,
        responses=WebhookSecretSerializer,
        description="A new signing secret (team owners and platform admins), answered this once; deliveries "
        "signed from now on use it.",
    )
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request: ApiRequest, *args: Any, **kwargs: Any) -> Response:
        secret = services.webhook_endpoint_rotate_secret(
            endpoint=self.endpoint(), actor=actor_of(request), ctx=self.ctx()
        )
        return Response(WebhookSecretSerializer({"secret": secret}).data)

    @extend_schema(
        parameters=[ID_PARAMETER],
        request=None,
        responses={202: WebhookDeliverySerializer},
        description="Queue a `ping` event to the endpoint (team owners and platform admins); its delivery shows "
        "how it went. 409 while an earlier test event to it is still pending.",
    )
    @action(detail=True, methods=["post"])
    def test(self, request: ApiRequest, *args: Any, **kwargs: Any) -> Response:
        delivery = services.webhook_endpoint_test(endpoint=self.endpoint(), actor=actor_of(request), ctx=self.ctx())
        return Response(WebhookDeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)


@extend_schema(
    parameters=[SLUG_PARAMETER, WEBHOOK_ID_PARAMETER],
    description="An endpoint's deliveries, newest first: the event, its status, attempts and the last answer "
    "or error (members and platform admins). Bodies are never shown. Kept BERTH_WEBHOOK_LOG_DAYS once finished.",
)
class TeamWebhookDeliveryViewSet(mixins.ListModelMixin, _TeamScoped):
    serializer_class = WebhookDeliverySerializer
    schema_model = models.WebhookDelivery

    def scoped_queryset(self) -> QuerySet[models.WebhookDelivery]:
        endpoints = of_team(models.WebhookEndpoint.objects.all(), self.team().pk)
        endpoint = get_object_or_404(endpoints, pk=self.kwargs["webhook_id"])
        return selectors.webhook_deliveries_of(endpoint=endpoint)
