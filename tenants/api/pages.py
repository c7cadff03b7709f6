"""A list page's ids and count by SQL the ORM compiled once per shape of request, not once per request.

Building a list's queryset (the caller's scope, the token's team, each filter, the page's ids, its COUNT) and
compiling it took about 2 ms of a page's 7 in Django's ORM, while PostgreSQL answered both queries in half a
millisecond. Only the values change from one request to the next, never the SQL: the shape of a request is the
caller's kind (:class:`tenants.selectors.Scope`), whether a team token narrows it, and which filters it gives
(and how many values of a multiple choice). For each shape, :class:`PageQueries` has the ORM build the very
queryset the view would build, from the same selector and the same filters, but with stand-in values, compiles it
once and remembers where each stand-in landed among the parameters. A request then only validates its filters,
puts its values where the stand-ins were, and runs prepared statements (the ids with the rows' versions, see
tenants.api.rows.PlainRows.listed_after, and the count when the page does not tell it).

What is not compiled is refused, never guessed: a stand-in that reaches the SQL changed in a way this module does
not know (only "as is" and a LIKE prefix are known), a stand-in that is lost, or a query whose text or constants
differ when compiled a second time with other stand-ins (so that its structure does not depend on the values)
leaves that shape to the ORM on every request (``None``). So do a filter field without a known stand-in, a value
the filters treat specially (text with a NUL character, which they answer with an empty page; a choice filter's
null value), and a view that builds or filters its list otherwise (PlainListMixin checks). The caller's values
are their id, and for a selector that tests them as values (the audit trail, unless a page is pinned to one team)
their teams, read only when the shape uses them. tests/tenants/test_api_pages.py compares both ways for every kind
of caller and combination of filters.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from django import forms
from django.db import connections
from django.db.models import QuerySet
from django_filters import Filter, FilterSet
from django_filters.constants import EMPTY_VALUES

from tenants.api.pagination import After
from tenants.api.rows import prepared_cursor
from tenants.selectors import Scope, team_ids_query

logger = logging.getLogger(__name__)

# Stand-ins for the caller's, the caller's teams' and the token team's ids: no row has a negative id.
_USER = -1_987_654_321
_TEAM = -1_987_654_322
_TEAMS = -1_987_654_323
# The sources of values other than the filters (whose names are identifiers).
CALLER = "@caller"
CALLER_TEAMS = "@caller-teams"  # one value: the list of a member's teams (Scope.team_ids)
TOKEN_TEAM = "@token-team"
# Where a keyset page starts (tenants.api.pagination.After): a source of two values, given in a shape as a filter.
AFTER = "@after"
_AFTER_PK = -1_987_654_400
# Text stand-ins carry LIKE's special characters, so that a value escaped on its way is told from one used as is.
_MARK = "berth-stand-in"


def _text(n: int, round_: int) -> str:
    # The second round's are longer and not ASCII: a filter that branched on either would show it.
    return f"{_MARK}-{round_}-{n}-%_\\" + "ü" * (7 * round_)


def _moment(n: int, round_: int) -> dt.datetime:
    return dt.datetime(1901 + round_, 2, 3, 4, 5, 6, n, tzinfo=dt.UTC)


@dataclass(frozen=True)
class _Slot:
    """Where a request's value goes: ``source`` is CALLER, CALLER_TEAMS, TOKEN_TEAM or a filter's name (``index``
    in its list)."""

    source: str
    index: int = 0
    like_prefix: bool = False


class _Round(NamedTuple):
    """One compilation with stand-ins: the SQL, its parameters, and the stand-ins of each source."""

    db: str
    ids_sql: str
    count_sql: str
    params: list[Any]
    stand_ins: dict[str, list[Any]]


@dataclass(frozen=True)
class _Compiled:
    db: str
    ids_sql: str
    count_sql: str
    params: tuple[Any, ...]
    slots: tuple[tuple[int, _Slot], ...]


@dataclass(frozen=True)
class Window:
    """A request's compiled page: ``ids_sql`` (without LIMIT and OFFSET) and ``count_sql`` take ``params``. The
    list's rows (tenants.api.rows) read the page's ids and its rows' versions in one statement built around the
    ids query (``page``)."""

    db: str
    ids_sql: str
    count_sql: str
    params: tuple[Any, ...]
    # Whether the page reads one team's rows, filtered by nothing else but its position (PageQueries.one_team_only)
    one_team_only: bool = False

    def page(self, offset: int, limit: int) -> tuple[str, list[Any]]:
        """The ids query of the page at ``offset`` of ``limit`` rows, and its parameters.

        A first page has its LIMIT in the text: PostgreSQL plans a parameter LIMIT (and OFFSET) as a tenth of the
        rows, so that a generic plan looked dearer than planning each call afresh, which it then did on every call
        (0.4 ms of a requests page's 0.8). Limits are at most MAX_LIMIT, so their texts are few.
        """
        limit = int(limit)  # never text into SQL
        if offset == 0:
            return f"{self.ids_sql} LIMIT {limit}", list(self.params)
        return f"{self.ids_sql} LIMIT %s OFFSET %s", [*self.params, limit, offset]

    def count(self) -> int:
        with prepared_cursor(connections[self.db]) as cursor:
            cursor.execute(self.count_sql, self.params)
            return int(cursor.fetchone()[0])


# (caller's kind, narrowed to a token's team, ((filter, number of values or 0 for one value), ...))
Shape = tuple[str, bool, tuple[tuple[str, int], ...]]


def shape_of(
    scope: Scope,
    token_team_id: int | None,
    cleaned: Mapping[str, Any],
    filters: Mapping[str, Filter],
    *,
    after: bool = False,
) -> Shape | None:
    """The request's shape, or None when a value is one the filters treat specially: text with a NUL (an empty
    page), a choice filter's ``null_value`` (IS NULL). A keyset page that starts ``after`` a row has it last."""
    given: list[tuple[str, int]] = []
    for name, value in cleaned.items():
        if value in EMPTY_VALUES:
            continue
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and "\x00" in v for v in values):
            return None
        null = getattr(filters[name], "null_value", None)
        if null is not None and null in values:
            return None
        given.append((name, len(set(value)) if isinstance(value, list) else 0))
    if after:
        given.append((AFTER, 0))
    return (scope.kind, token_team_id is not None, tuple(given))


class PageQueries:
    """The compiled ids and count queries of one list, by shape.

    ``scoped`` builds the list's queryset for a scope (a selector such as ``selectors.tenants_in``), ``narrow``
    narrows it to a token's team, and ``filterset_class`` is the view's; ``after``, for a list paged by keyset,
    narrows it to the rows after a position, as its paginator does. Shapes are few (three kinds of caller, two
    ways of token, the subsets of a handful of filters, with or without a position), and each is compiled once per
    process.

    ``team_values`` names a selector that can test a member's teams as values (Scope.team_ids): it gets them,
    read by a query of their own, except on a page pinned to one team (a team token, or one of ``one_team``
    filters), where its subquery costs no round trip and that team's index finds the rows anyway.
    """

    def __init__(
        self,
        scoped: Callable[[Scope], QuerySet[Any]],
        narrow: Callable[[QuerySet[Any], int], QuerySet[Any]],
        filterset_class: type[FilterSet],
        after: Callable[[QuerySet[Any], After], QuerySet[Any]] | None = None,
        *,
        team_values: bool = False,
        one_team: frozenset[str] = frozenset(),
    ):
        self.scoped = scoped
        self.narrow = narrow
        self.filterset_class = filterset_class
        self.after = after
        self.team_values = team_values
        self.one_team = one_team
        self._compiled: dict[Shape, _Compiled | None] = {}
        self._lock = threading.Lock()

    def _pinned(self, shape: Shape) -> bool:
        """Whether a page of ``shape`` is pinned to one team: by a team token, or one of ``one_team`` filters."""
        _, narrowed, given = shape
        return narrowed or any(name in self.one_team for name, _ in given)

    def one_team_only(self, shape: Shape) -> bool:
        """Whether a page of ``shape`` is pinned to one team and filtered by nothing else but its position: that
        team's index then finds its rows, in order, whatever the values, so that one plan serves every such page."""
        return self._pinned(shape) and all(name in self.one_team or name == AFTER for name, _ in shape[2])

    def _queryset(self, shape: Shape, round_: int) -> tuple[QuerySet[Any], dict[str, list[Any]]]:
        """The view's queryset for ``shape`` with stand-in values, and the stand-ins of each source."""
        kind, narrowed, given = shape
        user, team, teams = _USER - 3 * round_, _TEAM - 3 * round_, [_TEAMS - 3 * round_]
        team_ids = tuple(teams) if kind == "member" and self.team_values and not self._pinned(shape) else None
        qs = self.scoped(Scope(kind=kind, user_id=user, team_ids=team_ids))  # type: ignore[arg-type]
        stand_ins: dict[str, list[Any]] = {CALLER: [user], CALLER_TEAMS: [teams]}
        if narrowed:
            qs = self.narrow(qs, team)
            stand_ins[TOKEN_TEAM] = [team]
        filters = self.filterset_class(data={}, queryset=qs).filters
        counter = itertools.count()
        for name, count in given:
            if name == AFTER:
                if self.after is None:
                    raise _NotCompiled("a position in a list not paged by keyset")
                position = After(_moment(999_999, round_), _AFTER_PK - round_)
                stand_ins[AFTER] = list(position)
                qs = self.after(qs, position)
                continue
            make = _stand_in_maker(filters[name].field_class)
            values = [make(next(counter), round_) for _ in range(max(count, 1))]
            stand_ins[name] = values
            # As FilterSet.filter_queryset does, in the form's order.
            qs = filters[name].filter(qs, values if count else values[0])
        return qs, stand_ins

    def _compile_once(self, shape: Shape, round_: int) -> _Round:
        qs, stand_ins = self._queryset(shape, round_)
        ids = qs.values_list("pk", flat=True)
        ids_sql, ids_params = ids.query.get_compiler(using=ids.db).as_sql()
        count = qs.order_by().values("pk")
        count_sql, count_params = count.query.get_compiler(using=count.db).as_sql()
        # One parameter list for both: the count's query is the ids' WHERE without its ORDER BY, so it must use
        # the same values in the same places (checked below).
        if list(count_params) != list(ids_params):
            raise _NotCompiled("the count's parameters differ from the page's")
        return _Round(ids.db, ids_sql, count_sql, list(ids_params), stand_ins)

    def compiled(self, shape: Shape) -> _Compiled | None:
        try:
            return self._compiled[shape]
        except KeyError:
            pass
        with self._lock:
            if shape not in self._compiled:
                try:
                    self._compiled[shape] = self._compile(shape)
                except _NotCompiled as refused:
                    logger.info("list shape %s left to the ORM: %s", shape, refused)
                    self._compiled[shape] = None
                except Exception:
                    # Any other failure to compile: the ORM answers this shape, as always.
                    logger.exception("list shape %s could not be compiled; left to the ORM", shape)
                    self._compiled[shape] = None
        return self._compiled[shape]

    def _compile(self, shape: Shape) -> _Compiled:
        first = self._compile_once(shape, 0)
        second = self._compile_once(shape, 1)
        if (first.ids_sql, first.count_sql) != (second.ids_sql, second.count_sql):
            raise _NotCompiled("the SQL depends on the values")
        params: list[Any] = []
        slots: list[tuple[int, _Slot]] = []
        found: set[tuple[str, int]] = set()
        like = connections[first.db].ops.prep_for_like_query
        for position, (one, other) in enumerate(zip(first.params, second.params, strict=True)):
            slot, again = _slot(one, first.stand_ins, like), _slot(other, second.stand_ins, like)
            if slot is None or again is None:
                if slot is not again or one != other or _carries_stand_in(one):
                    raise _NotCompiled(f"parameter {position} depends on a value in a way not known here")
                params.append(one)
                continue
            # A multiple choice's values reach the SQL in the order of a set (django-filter ORs them), so the second
            # time another value of the same list may sit in this place; any other stand-in must be the same one.
            one_of_a_list = len(first.stand_ins[slot.source]) > 1
            if (slot.source, slot.like_prefix) != (again.source, again.like_prefix) or (
                slot.index != again.index and not one_of_a_list
            ):
                raise _NotCompiled(f"parameter {position} is not the same stand-in in both")
            params.append(None)
            slots.append((position, slot))
            found.add((slot.source, slot.index))
        # The caller's id and teams are parameters only where the scope uses them (not for an admin's every row,
        # and the teams only where a selector tests them as values); a member's rows are the caller's, always.
        caller = {(CALLER, 0), (CALLER_TEAMS, 0)}
        expected = {(source, i) for source, values in first.stand_ins.items() for i in range(len(values))}
        if not expected - found <= caller:
            raise _NotCompiled(f"stand-ins lost: {sorted(expected - found)}")
        if shape[0] == "member" and not found & caller:
            raise _NotCompiled("a member's page does not depend on the member")
        return _Compiled(
            db=first.db,
            ids_sql=first.ids_sql,
            count_sql=f"SELECT COUNT(*) FROM ({first.count_sql}) AS page_count",
            params=tuple(params),
            slots=tuple(slots),
        )

    def window(self, shape: Shape, values: Mapping[str, Sequence[Any] | Callable[[], Sequence[Any]]]) -> Window | None:
        """The page's queries for a request of ``shape`` with these values (a callable is asked only if its source
        is used); None when this shape is left to the ORM."""
        compiled = self.compiled(shape)
        if compiled is None:
            return None
        like = connections[compiled.db].ops.prep_for_like_query
        params = list(compiled.params)
        resolved: dict[str, Sequence[Any]] = {}
        for position, slot in compiled.slots:
            if slot.source not in resolved:
                given = values[slot.source]
                resolved[slot.source] = given() if callable(given) else given
            value = resolved[slot.source][slot.index]
            params[position] = like(value) + "%" if slot.like_prefix else value
        return Window(compiled.db, compiled.ids_sql, compiled.count_sql, tuple(params), self.one_team_only(shape))


class _NotCompiled(Exception):
    pass


@functools.cache
def _team_ids_sql() -> tuple[str, str, tuple[Any, ...], int]:
    """selectors.team_ids_query's SQL, compiled once, its parameters, and where the user's id goes."""
    qs = team_ids_query(user_id=_USER)
    sql, params = qs.query.get_compiler(using=qs.db).as_sql()
    at = [i for i, param in enumerate(params) if type(param) is int and param == _USER]
    if len(at) != 1 or any(_carries_stand_in(p) for i, p in enumerate(params) if i != at[0]):
        raise RuntimeError(f"the user's id is not one parameter of {sql!r}")
    return qs.db, sql, tuple(params), at[0]


def team_ids_of(user_id: int) -> list[int]:
    """``selectors.team_ids_of``, by its SQL compiled once and prepared: 0.1 ms where the ORM took 0.3."""
    db, sql, compiled, at = _team_ids_sql()
    params = list(compiled)
    params[at] = user_id
    with prepared_cursor(connections[db]) as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def _slot(param: Any, stand_ins: Mapping[str, list[Any]], like: Callable[[str], str]) -> _Slot | None:
    for source, values in stand_ins.items():
        for index, value in enumerate(values):
            if type(param) is not type(value):
                continue
            if param == value:
                return _Slot(source, index)
            if isinstance(value, str) and param == like(value) + "%":
                return _Slot(source, index, like_prefix=True)
    return None


def _carries_stand_in(param: Any) -> bool:
    if isinstance(param, str):
        return _MARK in param
    if isinstance(param, int):
        return param <= _USER
    if isinstance(param, dt.datetime):
        return param.year < 1910
    if isinstance(param, list | tuple):
        return any(_carries_stand_in(p) for p in param)
    return False


def _stand_in_maker(field: type[forms.Field]) -> Callable[[int, int], Any]:
    """Stand-ins for a filter's form field: a date-time, or text (a choice is text, a multiple choice a list of
    it). Any other field (a number, a model choice, a typed choice) is refused, so its shapes go to the ORM."""
    if issubclass(field, forms.DateTimeField):
        return _moment
    if issubclass(field, forms.ModelChoiceField | forms.ModelMultipleChoiceField):
        raise _NotCompiled(f"{field.__name__}: a model choice")
    if issubclass(field, forms.TypedChoiceField | forms.TypedMultipleChoiceField):
        raise _NotCompiled(f"{field.__name__}: a typed choice")
    if issubclass(field, forms.CharField | forms.ChoiceField | forms.MultipleChoiceField):
        return _text
    raise _NotCompiled(f"{field.__name__}: no stand-in for it")
