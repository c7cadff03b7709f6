"""Paging of list endpoints, bounded and refused with a field error when malformed: ``limit``/``offset`` with an
exact ``count`` (BerthPagination), or, for a list that only grows (the audit trail), ``limit``/``cursor`` with no
count (NewestFirstPagination), so that no page's cost grows with the table."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple
from urllib.parse import urlencode

from django.db.models import Q, QuerySet
from rest_framework import pagination, serializers
from rest_framework.request import Request as ApiRequest
from rest_framework.response import Response
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


def page_link(request: ApiRequest, changes: dict[str, str | None]) -> str:
    """The request's URL with the query parameters in ``changes`` set (or, given None, removed), keys sorted as
    DRF's links have them.

    The query is made again from the parameters as decoded, not from the request's raw query string: Django
    quotes a raw non-ASCII byte of that as if it were a character of its own (Latin-1), which would change
    ``actor=✓`` into another name in the link.
    """
    params = dict(request.query_params.lists())
    for name, value in changes.items():
        if value is None:
            params.pop(name, None)
        else:
            params[name] = [value]
    query = urlencode(sorted(params.items()), doseq=True)
    return f"{request.build_absolute_uri(request.path)}{'?' if query else ''}{query}"


class BerthPagination(pagination.LimitOffsetPagination):
    """DRF's limit/offset paging, except that bad paging is a 400 instead of being silently replaced.

    A client asking for 100,000 rows or for offset -5 made a mistake it should hear about; clamping
    would hand it a page it did not ask for, and an unchecked offset reaches PostgreSQL as a DataError.
    """

    default_limit = DEFAULT_LIMIT
    max_limit = MAX_LIMIT
    # Set by ``window`` before any link is asked for.
    request: ApiRequest
    limit: int
    offset: int
    count: int

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

    def get_next_link(self) -> str | None:
        if self.offset + self.limit >= self.count:
            return None
        return page_link(
            self.request,
            {self.limit_query_param: str(self.limit), self.offset_query_param: str(self.offset + self.limit)},
        )

    def get_previous_link(self) -> str | None:
        if self.offset <= 0:
            return None
        offset = self.offset - self.limit
        return page_link(
            self.request,
            {self.limit_query_param: str(self.limit), self.offset_query_param: str(offset) if offset > 0 else None},
        )

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        bounds = {
            self.limit_query_param: {"minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
            self.offset_query_param: {"minimum": 0, "maximum": MAX_OFFSET, "default": 0},
        }
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"].update(bounds[parameter["name"]])
        return parameters


class After(NamedTuple):
    """A position in a newest-first list: the row at ``at`` with id ``pk`` and everything newer are before it."""

    at: dt.datetime
    pk: int


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MIN_AT = dt.datetime(1, 1, 1, tzinfo=dt.UTC)
_MAX_AT = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)
_MAX_PK = 2**63 - 1  # a bigint
CURSOR_PATTERN = r"(-?[0-9]{1,19})\.([0-9]{1,19})"
_CURSOR = re.compile(CURSOR_PATTERN)


def encode_cursor(after: After) -> str:
    """The text of a position: its instant in microseconds since 1970, a dot, and its id."""
    return f"{(after.at - _EPOCH) // dt.timedelta(microseconds=1)}.{after.pk}"


def decode_cursor(text: str) -> After | None:
    """The position a cursor names, or None if the text is not one. Any instant and id the pattern allows is a
    position: one beyond every row's (before year 1, after 9999, an id past a bigint) is the same place as the
    nearest one a row could have, so it is moved there rather than refused. A cursor is not checked further: it
    only says where a page starts, and what the page may hold is the caller's scope, as always."""
    match = _CURSOR.fullmatch(text)
    if match is None:
        return None
    micros, pk = int(match[1]), int(match[2])
    span = (_MIN_AT - _EPOCH) // dt.timedelta(microseconds=1), (_MAX_AT - _EPOCH) // dt.timedelta(microseconds=1)
    if micros < span[0]:
        return After(_MIN_AT, 0)  # nothing is older
    if micros > span[1]:
        return After(_MAX_AT, _MAX_PK)  # everything is older
    return After(_EPOCH + dt.timedelta(microseconds=micros), min(pk, _MAX_PK))


def older_than(after: After, *, at: str = "at", pk: str = "pk") -> Q:
    """The rows after ``after`` in newest-first order: ``(at, pk) < (after.at, after.pk)``, written so that an
    index on (…, at DESC, id DESC) starts its scan there (``at <= t``) and tests the id only on rows of instant t."""
    return Q(**{f"{at}__lte": after.at}) & (Q(**{f"{at}__lt": after.at}) | Q(**{f"{pk}__lt": after.pk}))


class NewestFirstPagination(pagination.BasePagination):
    """Keyset paging, newest first (``at`` then id, both descending): ``limit`` rows after ``cursor``.

    The answer is ``{"next": URL or null, "results": [...]}``; ``next`` is the same query with the cursor of the
    page's last row, and null exactly when no row follows it (the page is read with one row more than it shows).
    There is no ``count``: counting a team's whole trail on every page cost as much as the rest of the page and grew
    with the trail, and an OFFSET deep into it reads every row before it. Every page costs the same, however deep.
    ``offset`` is refused with a field error rather than ignored, so that a client walking by offset hears of it
    instead of reading its first page again and again.
    """

    limit_query_param = "limit"
    cursor_query_param = "cursor"
    offset_query_param = "offset"
    at_field = "at"  # the list's instant; the second key is the pk

    @classmethod
    def narrow(cls, queryset: QuerySet[Any], after: After) -> QuerySet[Any]:
        """``queryset``'s rows after ``after``."""
        return queryset.filter(older_than(after, at=cls.at_field))

    def begin(self, request: ApiRequest) -> After | None:
        """Read and check the paging of ``request``: the limit (``self.limit``) and where the page starts."""
        self.request = request
        self.next_after: After | None = None
        if self.offset_query_param in request.query_params:
            raise serializers.ValidationError(
                {self.offset_query_param: ["This list pages by cursor: follow `next`, or pass its `cursor`."]}
            )
        self.limit = _bounded_int(request, self.limit_query_param, default=DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
        text = request.query_params.get(self.cursor_query_param)
        if text is None:
            return None
        after = decode_cursor(text)
        if after is None:
            raise serializers.ValidationError(
                {self.cursor_query_param: ["Not a cursor: pass the one in `next` as it is (microseconds.id)."]}
            )
        return after

    def end(self, read: int, last_shown: Callable[[], After]) -> int:
        """Given how many rows were read (at most ``limit + 1``), how many the page shows; sets ``next``, with the
        position of the last row shown, when a row follows it."""
        if read > self.limit:
            self.next_after = last_shown()
            return self.limit
        return read

    def paginate_queryset(
        self, queryset: QuerySet[Any] | Sequence[Any], request: ApiRequest, view: Any = None
    ) -> list[Any]:
        """The page's rows, in one query: the index on (…, at DESC, id DESC) finds where the page starts, and the
        rows are read with what they show of their relations (a keyset page has no OFFSET rows to join and throw
        away). ``queryset`` reads rows as ``values``, each holding the instant and the ``id``."""
        assert isinstance(queryset, QuerySet), "keyset paging needs a queryset"
        after = self.begin(request)
        if after is not None:
            queryset = self.narrow(queryset, after)
        at = self.at_field
        rows = list(queryset.order_by(f"-{at}", "-pk")[: self.limit + 1])
        return rows[: self.end(len(rows), lambda: After(rows[self.limit - 1][at], rows[self.limit - 1]["id"]))]

    def get_next_link(self) -> str | None:
        """The request's URL with the next page's cursor."""
        if self.next_after is None:
            return None
        return page_link(self.request, {self.cursor_query_param: encode_cursor(self.next_after)})

    def get_paginated_response(self, data: Any) -> Response:
        return Response({"next": self.get_next_link(), "results": data})

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["next", "results"],
            "properties": {
                "next": {
                    "type": "string",
                    "nullable": True,
                    "format": "uri",
                    "description": "The next page (older rows), or null when there is none.",
                },
                "results": schema,
            },
        }

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": self.limit_query_param,
                "required": False,
                "in": "query",
                "description": "Number of results to return per page.",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
            },
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "Where the page starts: the `cursor` of the previous page's `next`, as it is.",
                "schema": {"type": "string", "pattern": f"^{CURSOR_PATTERN}$"},
            },
        ]
