"""Input parsing and output shapes; no business rules (those live in tenants.services)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.core.validators import RegexValidator
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.utils import html

from tenants import selectors
from tenants.models import (
    ApiToken,
    AuditEvent,
    Cluster,
    Membership,
    Team,
    Tenant,
    TenantKind,
    TenantRequest,
    TenantSleepPeriod,
    Tier,
    User,
)
from tenants.services.credentials import LIFETIME_FLOOR_SECONDS
from tenants.services.sleep import sleep_state
from tenants.validation import DNS1123_LABEL, DNS1123_LABEL_MESSAGE, EGRESS_PROTOCOLS


class MembershipSerializer(serializers.ModelSerializer):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Membership
        fields = ["team", "role"]


class MeSerializer(serializers.ModelSerializer):
    teams = serializers.SerializerMethodField()
    platform_roles = serializers.SerializerMethodField()

    class Meta:
        model = User
        fields = ["username", "display_name", "email", "teams", "platform_roles"]

    def get_teams(self, user: User) -> list[dict[str, str]]:
        return list(MembershipSerializer(selectors.memberships_of(user=user), many=True).data)

    def get_platform_roles(self, user: User) -> list[str]:
        return user.platform_roles


class TeamSerializer(serializers.ModelSerializer):
    budget = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["slug", "name", "oidc_group", "budget", "time_zone"]

    def get_budget(self, team: Team) -> dict:
        return selectors.team_budget(team=team)


class EgressPortSerializer(serializers.Serializer):
    protocol = serializers.ChoiceField(choices=EGRESS_PROTOCOLS, default="TCP")
    port = serializers.IntegerField(min_value=1, max_value=65535)


class EgressRuleSerializer(serializers.Serializer):
    """One destination a tier's pods may open connections to: a network, and the ports (none: every port)."""

    cidr = serializers.CharField()
    ports = EgressPortSerializer(many=True, required=False)


class TierSerializer(serializers.ModelSerializer):
    clusters: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", many=True, read_only=True
    )
    egress_allow = EgressRuleSerializer(many=True, read_only=True)

    class Meta:
        model = Tier
        fields = [
            "name",
            "display_name",
            "description",
            "cpu_request_millis",
            "cpu_limit_millis",
            "memory_request_mib",
            "memory_limit_mib",
            "storage_gib",
            "max_pods",
            "max_services",
            "max_load_balancers",
            "max_pvcs",
            "pod_security_level",
            "network_profile",
            "egress_allow",
            "node_selector",
            "allowed_priority_classes",
            "allowed_storage_classes",
            "api_fairness",
            "max_credential_lifetime_seconds",
            "default_expiry_days",
            "max_expiry_days",
            "auto_approve",
            "auto_approve_downgrades",
            "sleep_allowed",
            "sleep_budget",
            "sleep_after_idle_hours",
            "viewers_read_logs",
            "clusters",
        ]


class ClusterSerializer(serializers.ModelSerializer):
    tiers: serializers.SlugRelatedField[Tier] = serializers.SlugRelatedField(
        slug_field="name", many=True, read_only=True
    )

    class Meta:
        model = Cluster
        fields = ["name", "display_name", "public_endpoint", "access_mode", "kinds", "tiers", "namespace_prefix"]


class RequestSerializer(serializers.ModelSerializer):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    tier: serializers.SlugRelatedField[Tier] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    requested_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    decided_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    tenant = serializers.UUIDField(source="tenant_id", read_only=True)
    target_team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True, help_text="The receiving team of a transfer."
    )
    accepted_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True, help_text="Who accepted a transfer for its team."
    )

    class Meta:
        model = TenantRequest
        fields = [
            "id",
            "action",
            "kind",
            "name",
            "team",
            "tier",
            "cluster",
            "tenant",
            "purpose",
            "requested_expiry",
            "status",
            "requested_by",
            "created_at",
            "decided_by",
            "decided_at",
            "decision_comment",
            "auto_approved",
            "target_team",
            "accepted_by",
            "accepted_at",
            "approval_reason",
        ]

    @staticmethod
    def load(queryset: QuerySet[TenantRequest]) -> QuerySet[TenantRequest]:
        """``queryset`` reading what a request shows and no more (of the tenant, only its id)."""
        related = ["team", "tier", "cluster", "requested_by", "decided_by", "target_team", "accepted_by"]
        return (
            queryset.select_related(None)
            .select_related(*related)
            .only(
                *(name for name in RequestSerializer.Meta.fields if name not in related),
                *["team__slug", "tier__name", "cluster__name", "target_team__slug"],
                *["requested_by__username", "decided_by__username", "accepted_by__username"],
            )
        )


class Input(serializers.Serializer):
    """What a client sends: a field this serializer does not know is refused, not silently dropped.

    A misspelt ``lifetime_second`` would otherwise get the default lifetime without a word, and a body
    that is no form at all (``-1.5e48``) would pass for an empty one.
    """

    def validate(self, attrs):
        known = set(self.fields)
        unknown = sorted(str(key) for key in getattr(self.initial_data, "keys", dict)() if key not in known)
        if unknown:
            raise serializers.ValidationError({key: ["Unknown field."] for key in unknown})
        return attrs


class TextField(serializers.CharField):
    """Text, and only text: DRF's CharField would also take a JSON number (``"name": 0``) for its digits."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class LookupField(serializers.SlugRelatedField):
    """A lookup by slug or name that answers 400, not 500, for text PostgreSQL cannot compare (a NUL character)."""

    def to_internal_value(self, data):
        if isinstance(data, str) and "\x00" in data:
            self.fail("invalid")
        return super().to_internal_value(data)

    # DRF takes "" (in JSON, or an empty form field) for null in a relation; the schema says a name or null.
    def get_value(self, dictionary):
        if html.is_html_input(dictionary) and dictionary.get(self.field_name) == "":
            return ""
        return super().get_value(dictionary)

    def run_validation(self, data=serializers.empty):
        if data == "":
            self.fail("invalid")
        return super().run_validation(data)


class RequestCreateSerializer(Input):
    """What a client may send; lookups by slug so CI pipelines can use stable names."""

    # Transfers are asked for on the tenant: POST /api/v1/tenants/{id}/transfer/.
    action = serializers.ChoiceField(
        choices=[c for c in TenantRequest.Action.choices if c[0] != TenantRequest.Action.TRANSFER],
        default=TenantRequest.Action.CREATE,
    )
    kind = serializers.ChoiceField(choices=TenantKind.choices, default=TenantKind.NAMESPACE)
    name = TextField(
        max_length=63,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        # A tenant name is an RFC 1123 label (tenants.validation; the services check the rest); empty when the
        # request is about an existing tenant.
        validators=[RegexValidator(rf"\A{DNS1123_LABEL.pattern}\Z", DNS1123_LABEL_MESSAGE)],
    )
    team = LookupField(slug_field="slug", queryset=Team.objects.all(), required=False)
    tier = LookupField(slug_field="name", queryset=Tier.objects.all(), required=False)
    cluster = LookupField(slug_field="name", queryset=Cluster.objects.all(), required=False)
    tenant = serializers.UUIDField(required=False)
    purpose = TextField(max_length=2000, required=False, allow_blank=True, default="")
    requested_expiry = serializers.DateField(required=False, allow_null=True, default=None)


class DecisionSerializer(Input):
    comment = TextField(max_length=2000, required=False, allow_blank=True, default="")


class RejectSerializer(Input):
    reason = TextField(max_length=2000)


class TransferSerializer(Input):
    target_team = LookupField(
        slug_field="slug", queryset=Team.objects.all(), help_text="The team to offer the tenant to (its slug)."
    )
    purpose = TextField(max_length=2000, required=False, allow_blank=True, default="")


class DeclineSerializer(Input):
    reason = TextField(max_length=2000, required=False, allow_blank=True, default="")


class DecommissionSerializer(Input):
    reason = TextField(max_length=2000, required=False, allow_blank=True, default="")


# --- Sleep (tenants.services.sleep) ---------------------------------------------------------------------------------
HH_MM = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
SLEEP_STATES = ["awake", "falling_asleep", "asleep", "waking"]


class ClockTimeField(serializers.CharField):
    """A wall-clock time ``HH:MM`` (24 hours); a time of day, not a point in time, so no offset."""

    def __init__(self, **kwargs):
        super().__init__(
            max_length=5,
            min_length=5,
            validators=[RegexValidator(HH_MM, "A time of day as HH:MM (00:00 to 23:59).")],
            **kwargs,
        )

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)

    def run_validation(self, data=serializers.empty):
        value = super().run_validation(data)
        return dt.time.fromisoformat(value) if isinstance(value, str) else value

    def to_representation(self, value):
        return value.strftime("%H:%M") if isinstance(value, dt.time) else value


class StrictBooleanField(serializers.BooleanField):
    """JSON true or false only: DRF's BooleanField would also take 0, 1, "yes" and "on" for a boolean."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class NightsInputSerializer(serializers.Serializer):
    """Asleep every night from ``start`` to ``end``; an end before the start wraps past midnight.

    Its errors come as ``"field: message"`` strings under ``nights``, as the API's field errors are lists of
    text (FieldErrors), never nested objects.
    """

    def run_validation(self, data=serializers.empty):
        try:
            return super().run_validation(data)
        except serializers.ValidationError as exc:
            detail = exc.detail
            if isinstance(detail, dict):
                raise serializers.ValidationError(
                    [f"{key}: {message}" for key, messages in detail.items() for message in messages]
                ) from None
            raise

    start = ClockTimeField(help_text="Nightly sleep begins (team's time zone).")
    end = ClockTimeField(help_text="Nightly sleep ends (team's time zone); not the start.")

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(str(key) for key in data if key not in self.fields)
            if unknown:
                raise serializers.ValidationError({key: ["Unknown field."] for key in unknown})
        return super().to_internal_value(data)

    def validate(self, attrs):
        if attrs["start"] == attrs["end"]:
            raise serializers.ValidationError({"end": ["The end must differ from the start."]})
        return attrs


class SleepScheduleInputSerializer(Input):
    nights = NightsInputSerializer(
        required=False, allow_null=True, default=None, help_text="The nightly sleep; null: none."
    )
    weekends = StrictBooleanField(required=False, default=False, help_text="Asleep all Saturday and Sunday.")

    def validate(self, attrs):
        attrs = super().validate(attrs)
        nights = attrs.pop("nights", None) or {}
        return {**attrs, "start": nights.get("start"), "end": nights.get("end")}


class NightsSerializer(serializers.Serializer):
    start = ClockTimeField(source="sleep_schedule_start", read_only=True)
    end = ClockTimeField(source="sleep_schedule_end", read_only=True)


# One instance renders every tenant's nights and schedule: a serializer made for each row of a list copies its fields
# each time, which cost more than the rest of the row.
NIGHTS = NightsSerializer()


class SleepScheduleSerializer(serializers.Serializer):
    nights = serializers.SerializerMethodField()
    weekends = serializers.BooleanField(source="sleep_weekends", read_only=True)
    time_zone = serializers.CharField(source="team.time_zone", read_only=True)

    @extend_schema_field(NightsSerializer(allow_null=True))
    def get_nights(self, tenant: Tenant) -> dict | None:
        return NIGHTS.to_representation(tenant) if tenant.sleep_schedule_start is not None else None


SLEEP_SCHEDULE = SleepScheduleSerializer()


# The tenant's fields computed from other columns (TenantSerializer.load reads those).
TENANT_COMPUTED = {"monitoring_links", "sleep_state", "sleep_schedule"}


class TenantSerializer(serializers.ModelSerializer):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    tier: serializers.SlugRelatedField[Tier] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    monitoring_links = serializers.SerializerMethodField()
    sleep_state = serializers.SerializerMethodField()
    sleep_reason = serializers.SerializerMethodField()
    sleep_schedule = serializers.SerializerMethodField()

    class Meta:
        model = Tenant
        fields = [
            "id",
            "name",
            "namespace",
            "kind",
            "team",
            "tier",
            "cluster",
            "status",
            "status_reason",
            "purpose",
            "created_at",
            "ready_at",
            "expires_at",
            "quota_usage",
            "quota_usage_at",
            "isolation_report",
            "isolation_report_at",
            "monitoring_links",
            "sleep_state",
            "sleep_reason",
            "asleep_since",
            "sleep_note",
            "sleep_schedule",
        ]

    @staticmethod
    def load(queryset: QuerySet[Tenant]) -> QuerySet[Tenant]:
        """``queryset`` reading what a tenant shows and no more (its tier's and cluster's names, not all their
        settings; not who created it)."""
        return (
            queryset.select_related(None)
            .select_related("team", "tier", "cluster")
            .only(
                *(name for name in TenantSerializer.Meta.fields if name not in TENANT_COMPUTED),
                *["sleeping", "sleep_applied", "sleep_schedule_start", "sleep_schedule_end", "sleep_weekends"],
                *[
                    "team__slug",
                    "team__time_zone",
                    "tier__name",
                    "cluster__name",
                    "cluster__monitoring_links",
                    "cluster__prometheus",
                ],
            )
        )

    def get_monitoring_links(self, tenant: Tenant) -> list[dict]:
        return selectors.monitoring_links(tenant=tenant)

    @extend_schema_field(serializers.ChoiceField(choices=SLEEP_STATES))
    def get_sleep_state(self, tenant: Tenant) -> str:
        return sleep_state(tenant)

    @extend_schema_field(serializers.ChoiceField(choices=TenantSleepPeriod.Reason.choices, allow_null=True))
    def get_sleep_reason(self, tenant: Tenant) -> str | None:
        return tenant.sleep_reason or None

    @extend_schema_field(SleepScheduleSerializer)
    def get_sleep_schedule(self, tenant: Tenant) -> dict:
        return SLEEP_SCHEDULE.to_representation(tenant)


class AuditEventSerializer(serializers.ModelSerializer):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True
    )

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "at",
            "actor_name",
            "team",
            "object_type",
            "object_id",
            "action",
            "before",
            "after",
            "request_id",
            "source_ip",
            "user_agent",
        ]

    @staticmethod
    def load(queryset: QuerySet[AuditEvent]) -> QuerySet[AuditEvent, dict[str, Any]]:
        """``queryset`` as rows (``values``) of what an event shows and no more: its columns, and of its team the
        slug (``team__slug``). A page is 50 events: made into model instances, each with its team's, they cost
        more Python than rendering them, and nothing here needs an instance."""
        fields = AuditEventSerializer.Meta.fields
        return queryset.select_related(None).values(*(name if name != "team" else "team__slug" for name in fields))

    def to_representation(self, row: dict[str, Any]) -> dict[str, Any]:
        """A row of ``load`` as DRF's field-by-field walk would render the event, written out.

        The trail is read 50 events of 12 fields a page, and the walk (a lookup, a None test and a conversion per
        field) cost more Python than the rest of the page. The columns are what the walk would hand on unchanged
        (text, an int, JSON as loaded, an address as text); ``at`` is formatted by a DateTimeField, as the walk
        does. A field added to ``Meta.fields`` is added here too: test_audit_event_is_rendered_as_drf_would
        compares the two.
        """
        return {
            "id": row["id"],
            "at": _INSTANT.to_representation(row["at"]),
            "actor_name": row["actor_name"],
            "team": row["team__slug"],
            "object_type": row["object_type"],
            "object_id": row["object_id"],
            "action": row["action"],
            "before": row["before"],
            "after": row["after"],
            "request_id": row["request_id"],
            "source_ip": row["source_ip"],
            "user_agent": row["user_agent"],
        }


# How a ModelSerializer renders a model's DateTimeField (in the current time zone, ISO 8601, "Z" for UTC).
_INSTANT = serializers.DateTimeField(read_only=True)


class ApiTokenSerializer(serializers.ModelSerializer):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True
    )

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "team", "created_at", "expires_at", "revoked_at", "last_used_at"]


class KubeconfigSerializer(Input):
    lifetime_seconds = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        min_value=LIFETIME_FLOOR_SECONDS,
        help_text=f"Token lifetime; {LIFETIME_FLOOR_SECONDS} up to the tier's maximum (default: one hour or the "
        "maximum).",
    )
