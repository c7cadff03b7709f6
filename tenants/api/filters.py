"""Query filters of the list endpoints; a malformed value is a field error (400), never a database error."""

from __future__ import annotations

import datetime as dt

import django_filters
from django_filters.fields import IsoDateTimeField

from tenants.models import AuditEvent, Tenant, TenantRequest


class UtcIsoDateTimeField(IsoDateTimeField):
    """An RFC 3339 date-time, handed to the database in UTC.

    Any offset RFC 3339 allows (up to ±23:59) is valid, but PostgreSQL refuses offsets past ±15:59, and a
    time at the edge of Python's years 1..9999 may fall outside them once moved to UTC. As a bound of a
    range, such a time means "from the beginning" or "to the end", so it is clamped there.
    """

    def to_python(self, value: object) -> dt.datetime | None:
        parsed = super().to_python(value)
        if parsed is None:
            return None
        try:
            return parsed.astimezone(dt.UTC)
        except OverflowError:
            edge = dt.datetime.min if parsed.year == dt.MINYEAR else dt.datetime.max
            return edge.replace(tzinfo=dt.UTC)


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


class AuditEventFilter(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug")
    actor = django_filters.CharFilter(field_name="actor_name")
    action = django_filters.CharFilter(field_name="action", lookup_expr="startswith")
    object_type = django_filters.CharFilter()
    object_id = django_filters.CharFilter()
    since = UtcIsoDateTimeFilter(field_name="at", lookup_expr="gte")
    until = UtcIsoDateTimeFilter(field_name="at", lookup_expr="lt")

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
