"""Paging of list endpoints: ``limit``/``offset``, bounded, and refused with a field error when malformed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db.models import QuerySet
from rest_framework import pagination, serializers
from rest_framework.request import Request as ApiRequest
from rest_framework.settings import api_settings

DEFAULT_LIMIT: int = api_settings.PAGE_SIZE or 50
MAX_LIMIT = 200
# PostgreSQL's OFFSET is a bigint; far below that, an offset past any real table is still answered (empty).
MAX_OFFSET = 2_147_483_647


def _bounded_int(request: ApiRequest, name: str, *, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > len(str(high)) or not low <= int(raw) <= high:
        raise serializers.ValidationError({name: [f"A whole number from {low} to {high}."]})
    return int(raw)


class BerthPagination(pagination.LimitOffsetPagination):
    """DRF's limit/offset paging, except that bad paging is a 400 instead of being silently replaced.

    A client asking for 100,000 rows or for offset -5 made a mistake it should hear about; clamping
    would hand it a page it did not ask for, and an unchecked offset reaches PostgreSQL as a DataError.
    """

    default_limit = DEFAULT_LIMIT
    max_limit = MAX_LIMIT

    def get_limit(self, request: ApiRequest) -> int:
        return _bounded_int(request, self.limit_query_param, default=DEFAULT_LIMIT, low=1, high=MAX_LIMIT)

    def get_offset(self, request: ApiRequest) -> int:
        return _bounded_int(request, self.offset_query_param, default=0, low=0, high=MAX_OFFSET)

    def paginate_queryset(
        self, queryset: QuerySet[Any] | Sequence[Any], request: ApiRequest, view: Any = None
    ) -> list[Any]:
        """The page's rows, picked by id first and then loaded with their relations (see page_ids)."""
        if not isinstance(queryset, QuerySet):
            return list(super().paginate_queryset(queryset, request, view) or [])
        window = self.page_ids(queryset, request)
        if not window:
            return []
        rows = {row.pk: row for row in queryset.filter(pk__in=window).order_by()}
        return [rows[pk] for pk in window if pk in rows]

    def page_ids(self, queryset: QuerySet[Any], request: ApiRequest) -> list[Any]:
        """The ids of the page asked for, in the queryset's order; sets what get_paginated_response needs.

        Sorting the caller's visible rows with every related table joined in makes PostgreSQL join them all
        before it keeps 50 (and plan a seven-way join each time); sorting ids alone (``values_list`` drops the
        ``select_related`` joins) and then loading 50 rows by id keeps a page's cost flat however many rows the
        team has.

        The total is counted only when the page does not tell it: a page that is neither full nor empty past
        the first row is the end of the list, so ``count`` is its offset plus its length, exactly as COUNT(*)
        would say.
        """
        return self.window(
            request,
            lambda offset, limit: list(queryset.values_list("pk", flat=True)[offset : offset + limit]),
            lambda: self.get_count(queryset),
        )

    def window(self, request: ApiRequest, ids: Callable[[int, int], list[Any]], count: Callable[[], int]) -> list[Any]:
        """The ids of the page asked for, from ``ids(offset, limit)``, counting with ``count()`` only when needed."""
        self.request = request
        self.limit = self.get_limit(request)
        self.offset = self.get_offset(request)
        window = ids(self.offset, self.limit)
        if 0 < len(window) < self.limit or (not window and self.offset == 0):
            self.count = self.offset + len(window)
        else:
            self.count = count()
        if self.count > self.limit and self.template is not None:
            self.display_page_controls = True
        return window

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        bounds = {
            self.limit_query_param: {"minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
            self.offset_query_param: {"minimum": 0, "maximum": MAX_OFFSET, "default": 0},
        }
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"].update(bounds[parameter["name"]])
        return parameters
