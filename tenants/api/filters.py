"""Query filters of the list endpoints; a malformed value is a field error (400), never a database error."""

from __future__ import annotations

import datetime as dt
from typing import Any

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import ProhibitNullCharactersValidator
from django.db.models import QuerySet, Subquery
from django_filters.constants import EMPTY_VALUES
from django_filters.fields import ChoiceField, IsoDateTimeField

from tenants.models import AuditEvent, Tenant, TenantRequest


class UtcIsoDateTimeField(IsoDateTimeField):
    """An RFC 3339 date-time, handed to the database in UTC.

    Any offset RFC 3339 allows (up to ±23:59) is valid, but PostgreSQL refuses offsets past ±15:59, and a
    time at the edge of Python's years 1..9999 may fall outside them once moved to UTC. As a bound of a
    range, such a time means "from the beginning" or "to the end", so it is clamped there.
    """

    def to_python(self, value: object) -> dt.datetime | None:
        if value == "":  # django-filter would take ``since=`` for no filter at all
            raise ValidationError(self.error_messages["invalid"], code="invalid")
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


class StrictChoiceField(ChoiceField):
    """One of the choices; ``status=`` (blank) is not one of them, where django-filter reads it as no filter."""

    def to_python(self, value: object) -> str:
        if value == "":
            raise ValidationError(self.error_messages["invalid_choice"], code="invalid_choice", params={"value": ""})
        return super().to_python(value)


class EnumFilter(django_filters.ChoiceFilter):
    field_class = StrictChoiceField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, empty_label=None, **kwargs)


class TextField(forms.CharField):
    """Any text, a NUL character included (which Django's CharField refuses): see TextFilter."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators = [v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)]


class TextFilter(django_filters.CharFilter):
    """An exact (or prefix) match on text. Nothing stored contains a NUL character, which PostgreSQL cannot
    even compare: such a value matches nothing, like any other name that does not exist."""

    field_class = TextField

    def filter(self, qs: QuerySet[Any], value: str) -> QuerySet[Any]:
        if value and "\x00" in value:
            return qs.none()
        return super().filter(qs, value)


class ByNameFilter(TextFilter):
    """An exact match on a related row's unique name (``team__slug``, ``cluster__name``), as a scalar subquery.

    ``team_id = (SELECT id FROM team WHERE slug = …)`` selects the same rows as a join on the team's slug, but
    PostgreSQL knows the one id before it reads the table: a page walks the (team, ordering) index and stops
    after 50 rows, where through a join it fetched every row of the team and sorted them.
    """

    def filter(self, qs: QuerySet[Any], value: str) -> QuerySet[Any]:
        if value in EMPTY_VALUES:
            return qs
        if "\x00" in value:
            return qs.none()
        relation, key = self.field_name.split("__")
        related = qs.model._meta.get_field(relation).related_model
        one = related._default_manager.filter(**{key: value}).order_by().values("pk")[:1]
        return qs.filter(**{relation: Subquery(one)})


class BerthFilterSet(django_filters.FilterSet):
    """A FilterSet whose form class is made once, not on every request (django-filter makes a new class each time).

    django-filter builds it from the instance's filters so that an instance may change them; these never do,
    and each form instance copies the fields it is given anyway.
    """

    _form_class: type[forms.Form] | None = None

    def get_form_class(self) -> type[forms.Form]:
        cls = type(self)
        if cls.__dict__.get("_form_class") is None:
            cls._form_class = super().get_form_class()
        return cls.__dict__["_form_class"]


class AuditEventFilter(BerthFilterSet):
    team = ByNameFilter(field_name="team__slug")
    actor = TextFilter(field_name="actor_name")
    action = TextFilter(field_name="action", lookup_expr="startswith")
    object_type = TextFilter()
    object_id = TextFilter()
    since = UtcIsoDateTimeFilter(field_name="at", lookup_expr="gte")
    until = UtcIsoDateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["team", "actor", "action", "object_type", "object_id", "since", "until"]


class RequestFilter(BerthFilterSet):
    team = ByNameFilter(field_name="team__slug")
    status = EnumFilter(choices=TenantRequest.Status.choices)
    action = EnumFilter(choices=TenantRequest.Action.choices)

    class Meta:
        model = TenantRequest
        fields = ["team", "status", "action"]


class TenantFilter(BerthFilterSet):
    team = ByNameFilter(field_name="team__slug")
    status = django_filters.MultipleChoiceFilter(choices=Tenant._meta.get_field("status").choices)
    cluster = ByNameFilter(field_name="cluster__name")

    class Meta:
        model = Tenant
        fields = ["team", "status", "cluster"]
