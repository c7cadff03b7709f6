"""Input parsing and output shapes; no business rules (those live in tenants.services)."""

from __future__ import annotations

from django.core.validators import RegexValidator
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
    Tier,
    User,
)
from tenants.services.credentials import LIFETIME_FLOOR_SECONDS
from tenants.validation import DNS1123_LABEL, DNS1123_LABEL_MESSAGE


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
        fields = ["slug", "name", "oidc_group", "budget"]

    def get_budget(self, team: Team) -> dict:
        return selectors.team_budget(team=team)


class TierSerializer(serializers.ModelSerializer):
    clusters: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", many=True, read_only=True
    )

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
            "node_selector",
            "allowed_priority_classes",
            "allowed_storage_classes",
            "api_fairness",
            "max_credential_lifetime_seconds",
            "default_expiry_days",
            "max_expiry_days",
            "auto_approve",
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


class TenantSerializer(serializers.ModelSerializer):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    tier: serializers.SlugRelatedField[Tier] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(slug_field="name", read_only=True)
    monitoring_links = serializers.SerializerMethodField()

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
        ]

    def get_monitoring_links(self, tenant: Tenant) -> list[dict]:
        return selectors.monitoring_links(tenant=tenant)


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
