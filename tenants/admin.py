"""Django admin for platform admins: clusters, tiers, teams and webhooks are edited here; the audit trail and
the webhook delivery log are read-only."""

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html

from tenants import services
from tenants.audit import AuditContext
from tenants.costs.prices import today_utc
from tenants.errors import InvalidTransition
from tenants.models import (
    ApiToken,
    AuditEvent,
    Cluster,
    ClusterPrice,
    EventType,
    Membership,
    Team,
    Tenant,
    TenantAlert,
    TenantRequest,
    Tier,
    User,
    WebhookDelivery,
    WebhookEndpoint,
)
from tenants.sealing import unseal


@admin.register(User)
class BerthUserAdmin(UserAdmin):
    list_display = ["username", "display_name", "email", "is_platform_admin", "is_approver", "last_login"]
    readonly_fields = ["oidc_subject", "is_platform_admin", "is_approver", "last_login", "date_joined"]
    fieldsets = (
        *(UserAdmin.fieldsets or ()),
        (
            "Berth (mirrored from OIDC groups)",
            {"fields": ["oidc_subject", "display_name", "is_platform_admin", "is_approver"]},
        ),
    )


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
    list_display = [
        "slug",
        "name",
        "oidc_group",
        "budget_cpu_millis",
        "budget_memory_mib",
        "budget_storage_gib",
        "budget_tenants",
        "time_zone",
    ]
    search_fields = ["slug", "name", "oidc_group"]
    inlines = [MembershipInline]


@admin.register(Tier)
class TierAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "display_name",
        "cpu_limit_millis",
        "memory_limit_mib",
        "storage_gib",
        "pod_security_level",
        "auto_approve",
        "auto_approve_downgrades",
        "sleep_allowed",
        "viewers_read_logs",
        "is_active",
    ]
    list_filter = ["is_active", "auto_approve", "auto_approve_downgrades", "pod_security_level", "sleep_allowed"]

    def save_model(self, request, obj, form, change) -> None:
        if not change:
            super().save_model(request, obj, form, change)
            return
        stored = Tier.objects.get(pk=obj.pk)
        # Forms report JSON fields as changed when only their text differs; audit real changes only.
        changes = {
            name: form.cleaned_data[name]
            for name in form.changed_data
            if form.cleaned_data[name] != getattr(stored, name)
        }
        services.tier_update(tier=stored, actor=request.user, changes=changes, ctx=AuditContext.from_http(request))
        self.message_user(request, "Tier saved; live tenants on it will be re-applied.", messages.INFO)


class ClusterPriceInline(admin.TabularInline):
    """The cluster's price history, read-only: prices are set on the Cluster prices page (audited)."""

    model = ClusterPrice
    extra = 0
    can_delete = False
    fields = readonly_fields = (
        "effective_from",
        "currency",
        "cpu_core_hour",
        "memory_gib_hour",
        "storage_gib_month",
        "created_by",
    )
    verbose_name_plural = "Prices (history; set new ones under Cluster prices)"

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "api_url", "public_endpoint", "access_mode", "is_active"]
    readonly_fields = ["physical_id"]
    filter_horizontal = ["tiers"]
    inlines = [ClusterPriceInline]

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        # Which API server this record points at decides which other records share its namespaces.
        services.cluster_identify(cluster=obj)


# --- Cluster prices (showback) ----------------------------------------------------------


class ClusterPriceForm(forms.ModelForm):
    class Meta:
        model = ClusterPrice
        fields = ["cluster", "effective_from", "currency", "cpu_core_hour", "memory_gib_hour", "storage_gib_month"]

    def clean(self) -> dict:
        data = super().clean() or {}
        errors = services.cluster_price_errors(
            effective_from=data.get("effective_from"),
            currency=data.get("currency", ""),
            prices={name: data.get(name) for name in ("cpu_core_hour", "memory_gib_hour", "storage_gib_month")},
        )
        for name, message in errors.items():
            if name not in self.errors:
                self.add_error(name, message)
        return data


@admin.register(ClusterPrice)
class ClusterPriceAdmin(admin.ModelAdmin):
    """New prices take effect today or later; a row already in effect is never edited (past months keep it)."""

    form = ClusterPriceForm
    list_display = [
        "cluster",
        "effective_from",
        "currency",
        "cpu_core_hour",
        "memory_gib_hour",
        "storage_gib_month",
        "created_by",
        "created_at",
    ]
    list_filter = ["cluster", "currency"]
    date_hierarchy = "effective_from"

    def has_change_permission(self, request, obj=None) -> bool:
        in_effect = obj is not None and obj.effective_from < today_utc()
        return super().has_change_permission(request, obj) and not in_effect

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def get_readonly_fields(self, request, obj=None) -> list[str]:
        # A row's cluster and day are its identity: another day is another row.
        return ["cluster", "effective_from"] if obj is not None else []

    def save_model(self, request, obj, form, change) -> None:
        data = form.cleaned_data
        saved = services.cluster_set_prices(
            cluster=obj.cluster,
            actor=_actor(request),
            effective_from=obj.effective_from,
            currency=data["currency"],
            cpu_core_hour=data["cpu_core_hour"],
            memory_gib_hour=data["memory_gib_hour"],
            storage_gib_month=data["storage_gib_month"],
            ctx=AuditContext.from_http(request),
        )
        obj.pk = saved.pk
        obj._state.adding = False
        obj.refresh_from_db()


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


@admin.register(TenantAlert)
class TenantAlertAdmin(ReadOnlyAdmin):
    """Alerts Alertmanager sent (tenants.services.alerts); the platform team reads them across tenants here."""

    list_display = ["starts_at", "name", "tenant", "status", "severity", "notified_at", "suppressed_reason"]
    list_filter = ["status", "name", "severity"]
    list_select_related = ["tenant"]
    search_fields = ["name", "tenant__name", "tenant__namespace", "fingerprint"]


@admin.register(TenantRequest)
class RequestAdmin(ReadOnlyAdmin):
    list_display = ["name", "action", "team", "target_team", "tier", "status", "requested_by", "created_at"]
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


# --- Webhooks -----------------------------------------------------------------------------------


class WebhookEndpointForm(forms.ModelForm):
    """The URL and the secret are written, never read back: both are sealed, and a URL's path may be a credential."""

    url = forms.CharField(
        max_length=2000,
        required=False,
        label="URL",
        help_text="https://… of the receiver (for Slack, the incoming webhook's URL). It is resolved now and before "
        "every delivery; loopback, link-local and (unless allowed below) private addresses are refused.",
    )
    events = forms.MultipleChoiceField(
        choices=[(e.value, f"{e.value}: {e.label}") for e in EventType if e != EventType.PING],
        widget=forms.CheckboxSelectMultiple,
    )
    secret = forms.CharField(
        required=False,
        label="Signing secret",
        widget=forms.PasswordInput(render_value=False),
        help_text="whsec_ and base64 of 24 to 64 bytes, if the receiver dictates one; leave empty to have one "
        "generated. It is shown once, after saving.",
    )

    class Meta:
        model = WebhookEndpoint
        fields = ["name", "team", "url", "format", "events", "allow_private_network", "is_active", "secret"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields[
                "url"
            ].help_text = f"Now {self.instance.url_origin}/… (the path is not shown). Leave empty to keep it."
        else:
            self.fields["url"].required = True

    def stored_url(self) -> str:
        return (unseal(self.instance.url_sealed) or "") if self.instance.pk else ""

    def clean(self) -> dict:
        data = super().clean() or {}
        url = data.get("url") or self.stored_url()
        if not url or self.errors:
            return data
        try:
            services.webhook_endpoint_validate(
                name=data.get("name", ""),
                url=url,
                events=data.get("events", []),
                format=data.get("format", ""),
                allow_private_network=bool(data.get("allow_private_network")),
                secret=data.get("secret", ""),
            )
        except ValidationError as exc:
            for field, problems in exc.message_dict.items():
                self.add_error(field if field in self.fields else None, problems)
        return data


def _actor(request: HttpRequest) -> User:
    assert isinstance(request.user, User)  # the admin site lets only signed-in staff in
    return request.user


def _secret_page(request: HttpRequest, endpoint: WebhookEndpoint, secret: str) -> HttpResponse:
    """The one response that shows a signing secret: not kept by caches or the back button."""
    response = TemplateResponse(
        request,
        "admin/tenants/webhookendpoint/secret.html",
        {
            "title": f"Signing secret of {endpoint.name}",
            "endpoint": endpoint,
            "secret": secret,
            "change_url": reverse("admin:tenants_webhookendpoint_change", args=[endpoint.pk]),
            "opts": WebhookEndpoint._meta,
        },
    )
    add_never_cache_headers(response)
    return response


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    form = WebhookEndpointForm
    list_display = ["name", "scope", "url_origin", "format", "event_list", "is_active", "allow_private_network"]
    list_filter = ["is_active", "format", "team"]
    search_fields = ["name", "url_origin"]
    readonly_fields = [
        "url_origin",
        "disabled_reason",
        "disabled_at",
        "created_by",
        "created_at",
        "updated_at",
        "delivery_log",
    ]
    actions = ["send_test_event", "rotate_secret"]

    def get_fields(self, request, obj=None) -> list:
        fields = list(super().get_fields(request, obj))
        # A secret is given once, when the endpoint is added; later it is rotated from the list, never typed over.
        return [f for f in fields if f != "secret"] if obj is not None else fields

    @admin.display(description="For")
    def scope(self, obj: WebhookEndpoint) -> str:
        return obj.team.slug if obj.team else "every team"

    @admin.display(description="Events")
    def event_list(self, obj: WebhookEndpoint) -> str:
        return ", ".join(obj.events)

    @admin.display(description="Deliveries")
    def delivery_log(self, obj: WebhookEndpoint) -> str:
        if not obj.pk:
            return "-"
        url = reverse("admin:tenants_webhookdelivery_changelist") + f"?endpoint__id__exact={obj.pk}"
        return format_html('<a href="{}">Delivery log</a>', url)

    def save_model(self, request, obj, form, change) -> None:
        data = form.cleaned_data
        common = {
            "actor": request.user,
            "name": data["name"],
            "events": list(data["events"]),
            "team": data.get("team"),
            "format": data["format"],
            "allow_private_network": bool(data.get("allow_private_network")),
            "ctx": AuditContext.from_http(request),
        }
        if change:
            services.webhook_endpoint_update(
                endpoint=WebhookEndpoint.objects.get(pk=obj.pk),
                url=data.get("url", ""),
                is_active=bool(data.get("is_active")),
                **common,
            )
        else:
            created, secret = services.webhook_endpoint_create(
                url=data["url"], secret=data.get("secret", ""), is_active=bool(data.get("is_active")), **common
            )
            obj.pk = created.pk
            obj._state.adding = False
            request.webhook_secret = secret  # shown once by response_add
        obj.refresh_from_db()

    def response_add(self, request, obj, post_url_continue=None) -> HttpResponse:
        secret = getattr(request, "webhook_secret", "")
        return _secret_page(request, obj, secret) if secret else super().response_add(request, obj, post_url_continue)

    def delete_model(self, request, obj) -> None:
        services.webhook_endpoint_delete(endpoint=obj, actor=request.user, ctx=AuditContext.from_http(request))

    def delete_queryset(self, request, queryset) -> None:
        for endpoint in queryset:
            self.delete_model(request, endpoint)

    @admin.action(description="Send a test event (ping)")
    def send_test_event(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        queued = 0
        for endpoint in queryset:
            try:
                services.webhook_endpoint_test(
                    endpoint=endpoint, actor=_actor(request), ctx=AuditContext.from_http(request)
                )
            except InvalidTransition as exc:  # an earlier test event still pending
                self.message_user(request, str(exc), messages.WARNING)
            else:
                queued += 1
        self.message_user(request, f"Queued a test event for {queued} endpoint(s); see the delivery log.")

    @admin.action(description="Rotate the signing secret")
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> HttpResponse | None:
        if queryset.count() != 1:
            self.message_user(request, "Rotate one endpoint's secret at a time.", messages.ERROR)
            return None
        endpoint = queryset.get()
        secret = services.webhook_endpoint_rotate_secret(
            endpoint=endpoint, actor=_actor(request), ctx=AuditContext.from_http(request)
        )
        return _secret_page(request, endpoint, secret)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "endpoint",
        "event",
        "tenant",
        "sequence",
        "status",
        "attempts",
        "response_code",
        "duration_ms",
        "last_error",
    ]
    list_filter = ["status", "event", "endpoint"]
    list_select_related = ["endpoint", "tenant"]
    search_fields = ["event_id", "tenant__name"]
