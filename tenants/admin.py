"""Django admin for platform admins: clusters, tiers and teams are edited here; the audit trail is read-only."""
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin

from tenants import services
from tenants.audit import AuditContext
from tenants.models import ApiToken, AuditEvent, Cluster, Membership, Request, Team, Tenant, Tier, User


@admin.register(User)
class BerthUserAdmin(UserAdmin):
    list_display = ["username", "display_name", "email", "is_platform_admin", "is_approver", "last_login"]
    readonly_fields = ["oidc_subject", "is_platform_admin", "is_approver", "last_login", "date_joined"]
    fieldsets = UserAdmin.fieldsets + (("Berth (mirrored from OIDC groups)", {"fields": ["oidc_subject", "display_name", "is_platform_admin", "is_approver"]}),)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    readonly_fields = ["user", "role"]
    can_delete = False
    verbose_name_plural = "Members (mirrored from the groups claim at each sign-in)"

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "oidc_group", "budget_cpu_millis", "budget_memory_mib", "budget_storage_gib", "budget_tenants"]
    search_fields = ["slug", "name", "oidc_group"]
    inlines = [MembershipInline]


@admin.register(Tier)
class TierAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "cpu_limit_millis", "memory_limit_mib", "storage_gib", "pod_security_level", "auto_approve", "is_active"]
    list_filter = ["is_active", "auto_approve", "pod_security_level"]

    def save_model(self, request, obj, form, change) -> None:
        if not change:
            super().save_model(request, obj, form, change)
            return
        stored = Tier.objects.get(pk=obj.pk)
        # Forms report JSON fields as changed when only their text differs; audit real changes only.
        changes = {name: form.cleaned_data[name] for name in form.changed_data if form.cleaned_data[name] != getattr(stored, name)}
        services.tier_update(tier=stored, actor=request.user, changes=changes, ctx=AuditContext.from_http(request))
        self.message_user(request, "Tier saved; live tenants on it will be re-applied.", messages.INFO)


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "api_url", "public_endpoint", "access_mode", "is_active"]
    filter_horizontal = ["tiers"]


class ReadOnlyAdmin(admin.ModelAdmin):
    """State changes go through services (pages and API), never through admin edits."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Tenant)
class TenantAdmin(ReadOnlyAdmin):
    list_display = ["name", "namespace", "team", "tier", "cluster", "status", "expires_at"]
    list_filter = ["status", "cluster", "tier"]
    search_fields = ["name", "namespace"]


@admin.register(Request)
class RequestAdmin(ReadOnlyAdmin):
    list_display = ["name", "action", "team", "tier", "status", "requested_by", "created_at"]
    list_filter = ["status", "action"]


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = ["name", "prefix", "user", "team", "expires_at", "revoked_at"]
    exclude = ["digest"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["at", "actor_name", "action", "object_type", "object_id", "team", "source_ip"]
    list_filter = ["action", "object_type"]
    search_fields = ["actor_name", "object_id", "request_id"]
