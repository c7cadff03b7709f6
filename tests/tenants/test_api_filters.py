"""The list filters' cleaning (BerthFilterSet.cleaned) says exactly what django-filter's form says, for any query."""

from __future__ import annotations

from typing import Any

import pytest
from django import forms
from django.http import QueryDict
from django_filters.utils import translate_validation
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import ValidationError

from tenants.api.filters import AuditEventFilter, BerthFilterSet, RequestFilter, TenantFilter, _plain_form

FILTERSETS = [AuditEventFilter, RequestFilter, TenantFilter]


def _by_form(filterset: type[BerthFilterSet], data: QueryDict) -> tuple[str, Any]:
    form = filterset(data={}).get_form_class()(data=data)
    if form.is_valid():
        return "ok", form.cleaned_data
    return "400", translate_validation(form.errors).detail


def _by_cleaned(filterset: type[BerthFilterSet], data: QueryDict) -> tuple[str, Any]:
    try:
        return "ok", filterset.cleaned(data)
    except ValidationError as error:
        return "400", error.detail


def _same(filterset: type[BerthFilterSet], query: QueryDict) -> None:
    by_form, by_cleaned = _by_form(filterset, query), _by_cleaned(filterset, query)
    assert by_cleaned == by_form, query
    if by_form[0] == "400":  # the codes too, which ErrorDetail's == leaves out
        assert {k: [e.code for e in v] for k, v in by_cleaned[1].items()} == {
            k: [e.code for e in v] for k, v in by_form[1].items()
        }


QUERIES = [
    "",
    "team=team-a",
    "team=",
    "team=%00",
    "team=" + "t" * 5000,
    "status=ready&status=failed",
    "status=ready&status=%00",
    "status=",
    "status=nope",
    "action=create",
    "action=",
    "cluster=dev&team=team-b&limit=5&offset=3&unknown=1",
    "since=2024-01-01T00:00:00Z&until=2024-02-01T00:00:00%2B02:00",
    "since=0001-01-01T00:00:00%2B23:59",
    "until=9999-12-31T23:59:59-23:59",
    "since=",
    "since=yesterday&until=2024-13-01",
    "actor=system ✓&action=test.&object_type=tenant&object_id=%00",
    "team=a&team=b",
]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("filterset", FILTERSETS)
def test_cleaning_answers_as_the_form_does(filterset, query):
    assert _plain_form(filterset(data={}).get_form_class())
    _same(filterset, QueryDict(query))


_names = st.sampled_from(sorted({n for f in FILTERSETS for n in f.base_filters} | {"limit", "other"}))
_values = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["ready", "failed", "create", "2024-01-01T00:00:00Z", "2024-01-01", "", "\x00", "team-a"]),
)


@settings(max_examples=300, deadline=None)
@given(filterset=st.sampled_from(FILTERSETS), pairs=st.lists(st.tuples(_names, _values), max_size=6))
def test_cleaning_answers_as_the_form_does_for_any_parameters(filterset, pairs):
    query = QueryDict(mutable=True)
    for name, value in pairs:
        query.appendlist(name, value)
    _same(filterset, query)


def test_a_form_that_cleans_more_than_its_fields_is_cleaned_by_the_form():
    class Checked(forms.Form):
        def clean(self) -> dict[str, Any]:
            raise forms.ValidationError("no")

    class Field(forms.Form):
        name = forms.CharField(required=False)

        def clean_name(self) -> str:
            return "changed"

    class Disabled(forms.Form):
        name = forms.CharField(required=False, disabled=True)

    class Base(forms.Form):
        def _post_clean(self) -> None:
            self.add_error(None, "no")

    class Derived(Base):
        name = forms.CharField(required=False)

    assert not any(map(_plain_form, [Checked, Field, Disabled, Base, Derived]))
    assert _plain_form(TenantFilter(data={}).get_form_class())
