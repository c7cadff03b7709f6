import django_filters

from tenants.models import AuditEvent, Tenant, TenantRequest


class AuditEventFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    actor = django_filters.CharFilter(field_name="actor_name")
    action = django_filters.CharFilter(field_name="action", lookup_expr="startswith")
    object_type = django_filters.CharFilter()
    object_id = django_filters.CharFilter()
    since = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="gte")
    until = django_filters.IsoDateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["team", "actor", "action", "object_type", "object_id", "since", "until"]


class RequestFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    status = django_filters.ChoiceFilter(choices=TenantRequest.Status.choices)
    action = django_filters.ChoiceFilter(choices=TenantRequest.Action.choices)

    class Meta:
        model = TenantRequest
        fields = ["team", "status", "action"]


class TenantFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    status = django_filters.MultipleChoiceFilter(choices=Tenant._meta.get_field("status").choices)
    cluster = django_filters.CharFilter(field_name="cluster__name")

    class Meta:
        model = Tenant
        fields = ["team", "status", "cluster"]
