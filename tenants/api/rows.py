"""List pages as plain dicts: what a ModelSerializer outputs, built from one ``.values()`` query.

A page of 50 tenants through ``TenantSerializer(many=True)`` loads every column of the tenant and of its team,
tier, cluster and creator into 250 model instances, then runs 18 DRF fields on each row: about four fifths of the
list's time. :class:`PlainRows` reads only the columns the serializer shows (its relations' slugs joined in) and
turns each value into what the DRF field would have made of it, key for key, in the serializer's order.

It is compiled from the serializer's own fields, so it cannot drift from the detail views and the schema: a field
of a kind it does not know how to read (a nested serializer, a many-relation, ``source="*"``) is refused when the
rows are first built, never guessed. Fields without a fast path below fall back to the DRF field's own
``to_representation``. tests/tenants/test_api_rows.py compares the JSON of both for varied data, nulls included.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
import zoneinfo
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache, cached_property
from typing import Any, cast

from django.conf import settings
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from django.db.models import CharField, Func, Model, QuerySet
from django.utils import timezone
from rest_framework import ISO_8601, relations, serializers
from rest_framework import fields as drf
from rest_framework.renderers import JSONRenderer
from rest_framework.settings import api_settings

Converter = Callable[[Any], Any]
# Row functions kept per PlainRows: one per time zone pages are rendered in (the portal's, unless a request activates
# another), beyond which they are made per page.
_ZONES_KEPT = 16
# The column of a row's version (see _Versions), first in the row query.
_VERSION = "berth_row_version"
# Rendered rows are dropped this often, whatever their versions say (see PlainRows.fragments).
_KEPT_SECONDS = 600.0


@dataclass(frozen=True)
class Computed:
    """A SerializerMethodField's value, from the row's ``paths`` instead of a model instance."""

    paths: tuple[str, ...]
    build: Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True)
class _Column:
    key: str
    path: str
    # Made per page: a date-time's rendering depends on the time zone active for the request.
    converter: Callable[[dt.tzinfo | None], Converter | None]
    computed: Computed | None = None
    # Read as UTC text (see _UtcText) and given to the converter as a str.
    utc_text: bool = False


@dataclass(frozen=True)
class _Compiled:
    db: str
    sql: str
    params: tuple[Any, ...]
    pks_at: int
    names: list[str]
    converters: list[tuple[int, tuple[list[Callable[..., Any]], Any]]]
    # The same rows' pks and versions (see _Versions) for the ids in a parameter (``sql``'s); and how the versions of
    # the rows a page's ids query answers are read (PlainRows.listed_after).
    versions_sql: str
    versions: _Versions
    table: str
    pk_ref: str

    def params_for(self, pks: Sequence[Any]) -> list[Any]:
        """The parameters of ``sql`` and ``versions_sql`` for the rows with these primary keys."""
        params = list(self.params)
        params[self.pks_at] = list(pks)
        return params


class _UtcText(Func):
    """A timestamptz as UTC text, ``YYYY-MM-DDTHH:MM:SS.ffffff``, whatever the session's DateStyle and TimeZone.

    Django reads a timestamptz through psycopg's pure-Python loader (it subclasses it to set the time zone):
    about 4 µs a value, a third of a list page's time in Python. ``datetime.fromisoformat`` reads this text in
    a tenth of that, to the same instant.
    """

    template = "to_char(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US')"
    output_field = CharField()


@cache
def _preparing_cursor_class() -> type[Any]:
    from django.db.backends.postgresql import base

    server_binding: Any = base.ServerBindingCursor

    class PreparingCursor(server_binding):
        """Binds on the server and prepares every query it runs (psycopg keeps the statement per connection)."""

        def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: Any = None) -> Any:
            return super().execute(query, params, prepare=True, binary=binary)

    return PreparingCursor


def prepared_cursor(connection: BaseDatabaseWrapper) -> CursorWrapper:
    """A cursor of ``connection`` whose queries PostgreSQL plans once per connection, not once per page.

    A page's query joins every relation the serializer shows by name: the requests list joins nine tables, and
    PostgreSQL spent 2.4 ms planning it against 0.3 ms running it. Django's cursors bind parameters on the client
    and never prepare (Django turns psycopg's preparing off, for transaction-mode poolers); this one binds on the
    server and prepares. It is wrapped as Django wraps its own, so the query is still logged, counted by tests and
    mapped to Django's errors. Off with ``DATABASE_PREPARED_STATEMENTS=false`` (behind a pooler that cannot keep
    prepared statements: PgBouncer in transaction mode before 1.21).
    """
    if not settings.DATABASE_PREPARED_STATEMENTS:
        return connection.cursor()
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None:
        # Django's "never prepare"; with a threshold no query reaches, only those asked to (these) are prepared.
        raw.prepare_threshold = 2**31
    connection.validate_thread_sharing()
    cursor = _preparing_cursor_class()(raw)
    # As Django's own cursor() wraps one (BaseDatabaseWrapper._prepare_cursor).
    return _LoggedCursor(cursor, connection) if connection.queries_logged else connection.make_cursor(cursor)


class _LoggedCursor(CursorDebugWrapper):
    """Logs a prepared query as Django logs its own (DEBUG, tests counting queries), with its values in place:
    Django's logging reads the text back from the client-side binding cursor, which a server-bound one lacks."""

    def execute(self, sql: Any, params: Any = None) -> Any:
        with self.debug_sql(self.db.ops.compose_sql(sql, params)):
            return CursorWrapper.execute(self, sql, params)


def _is_utc(tz: dt.tzinfo) -> bool:
    return tz is dt.UTC or (isinstance(tz, zoneinfo.ZoneInfo) and tz.key in ("UTC", "Etc/UTC"))


def _utc_iso(value: str) -> str:
    """What DRF makes of the UTC text of a timestamp in UTC: ISO 8601, microseconds only when there are any, "Z"."""
    return value[:-7] + "Z" if value.endswith(".000000") else value + "Z"


def _same(field: drf.Field, base: type[drf.Field]) -> bool:
    """Whether ``field`` (an instance of ``base``) renders a value exactly as ``base`` does: a subclass may not."""
    return type(field).to_representation is base.to_representation


def _fallback(field: drf.Field) -> Callable[[dt.tzinfo | None], Converter]:
    return lambda tz: field.to_representation


def _as_str(value: Any) -> str:
    return value if type(value) is str else str(value)


def _converter(field: drf.Field) -> Callable[[dt.tzinfo | None], Converter | None]:
    """What DRF's ``field.to_representation`` does to a value that is not None, for the fields lists use."""
    if isinstance(field, drf.DateTimeField) and _same(field, drf.DateTimeField):
        if getattr(field, "format", api_settings.DATETIME_FORMAT) != ISO_8601 or hasattr(field, "timezone"):
            return _fallback(field)

        def datetimes(tz: dt.tzinfo | None) -> Converter:
            if tz is None:  # USE_TZ off: DRF makes the value naive; rare enough to leave to DRF
                return field.to_representation
            if _is_utc(tz):
                return _utc_iso

            def iso(value: Any) -> Any:
                # What DRF does (enforce_timezone, then ISO 8601 with "Z" for UTC) to the instant Django would load.
                moment = dt.datetime.fromisoformat(value).replace(tzinfo=dt.UTC)
                try:
                    text = moment.astimezone(tz).isoformat()
                except OverflowError:
                    return field.to_representation(moment)  # DRF's own error
                return text[:-6] + "Z" if text.endswith("+00:00") else text

            return iso

        return datetimes
    if isinstance(field, drf.ChoiceField) and _same(field, drf.ChoiceField):
        choices = field.choice_strings_to_values

        def choice(value: Any) -> Any:
            if type(value) is not str:
                return field.to_representation(value)
            return value if value == "" else choices.get(value, value)

        return lambda tz: choice
    if isinstance(field, drf.CharField) and _same(field, drf.CharField):
        return lambda tz: _as_str
    if isinstance(field, drf.UUIDField) and _same(field, drf.UUIDField) and field.uuid_format == "hex_verbose":
        return lambda tz: str
    if isinstance(field, drf.BooleanField) and _same(field, drf.BooleanField):
        return lambda tz: lambda value: value if type(value) is bool else field.to_representation(value)
    if isinstance(field, drf.JSONField) and _same(field, drf.JSONField) and not field.binary:
        return lambda tz: None  # the value as loaded
    if isinstance(field, drf.IntegerField) and _same(field, drf.IntegerField):
        return lambda tz: lambda value: value if type(value) is int else field.to_representation(value)
    return _fallback(field)


def _tables_read(compiler: Any) -> tuple[str, ...]:
    """The aliases of the tables in the FROM clause of the SQL ``compiler`` has just made."""
    query = compiler.query
    return tuple(alias for alias in query.alias_map if query.alias_refcount[alias])


def _row_version(alias_sql: str) -> str:
    """SQL for the version of one table's row: the transaction that wrote it and its place; '' when there is none."""
    return f"coalesce({alias_sql}.xmin::text || ':' || {alias_sql}.ctid::text, '')"


@dataclass(frozen=True)
class _Versions:
    """How a row's version is read: the row query's column, and what the page's statement reads to make it.

    A row's version is the version of its own table row and of each row it shows through a foreign key (its team,
    tier, cluster, users), space-separated in the order of the row query's joins. Every UPDATE writes a new row
    version, with the writing transaction's id as its ``xmin``, at a new ``ctid`` while the old one still exists
    (so two versions written by one transaction differ in place); so renaming a team changes the version of every
    tenant row that shows its slug. The row query reads the joined rows' versions from its joins (``column``). The
    page's statement reads its rows' own versions and foreign keys, and the joined rows' versions once for all of
    them (``keys``, ``targets``, ``joined``): looked up per row, the nine tables of a requests row cost 0.6 ms.
    """

    column: str  # SQL of the row query's version column
    base: str  # SQL of the list table's own row version
    keys: tuple[str, ...]  # SQL of each foreign key, in the joins' order
    targets: tuple[int, ...]  # for each key, its table (the index of its part in ``joined``)
    joined: tuple[tuple[str, str], ...]  # (table, column) each key matches, one per table and column

    @classmethod
    def of(cls, compiler: Any, aliases: Sequence[str], model_name: str) -> _Versions:
        """The versions of the row query ``compiler`` has just compiled, whose FROM clause holds ``aliases``."""
        query = compiler.query
        quote = compiler.quote_name_unless_alias
        qn = compiler.connection.ops.quote_name
        base = quote(query.base_table)
        parts, keys, targets = [_row_version(base)], [], []
        joined: list[tuple[str, str]] = []
        for alias in aliases:
            if alias == query.base_table:
                continue
            join = query.alias_map[alias]
            direct = join.parent_alias == query.base_table and len(join.join_cols) == 1
            if not direct or getattr(join, "filtered_relation", None) is not None:
                raise TypeError(f"{model_name}: a row reads {join.table_name} through another table; only direct joins")
            ((lhs, rhs),) = join.join_cols
            parts.append(_row_version(quote(alias)))
            keys.append(f"{base}.{qn(lhs)}")
            target = (qn(join.table_name), qn(rhs))
            if target not in joined:
                joined.append(target)
            targets.append(joined.index(target))
        column = "concat(" + ", ' ', ".join(parts) + ")"
        return cls(column, parts[0], tuple(keys), tuple(targets), tuple(joined))

    def page_sql(
        self, ids_sql: str, table: str, pk: str, count_sql: str | None, at: tuple[str, int] | None = None
    ) -> str:
        """The page's statement: the pk, own version and foreign keys of each row of ``ids_sql``'s page, in its
        order; on the first row the joined rows' versions (``"<table>/<key>=<version>"``) and, when the page is
        full (as many rows as the parameter after the ids query's own: the limit), ``count_sql``'s answer (NULL
        without a ``count_sql``, and no such parameter); and, with ``at`` (a column of ``table`` and a row number
        from 1), that row's value of the column (a date-time read for every row cost 0.3 ms a page in psycopg).
        PostgreSQL runs the count only then: a subquery that does not depend on the row runs when first needed."""
        keys = "".join(f", {key} AS berth_k{i}" for i, key in enumerate(self.keys))
        lookups = [
            f"SELECT concat('{n}/', berth_v.{column}, '=', {_row_version('berth_v')}) FROM {joined} berth_v"
            f" WHERE berth_v.{column} IN ("
            + " UNION ".join(f"SELECT berth_k{i} FROM berth_rows" for i, t in enumerate(self.targets) if t == n)
            + ")"
            for n, (joined, column) in enumerate(self.joined)
        ]
        versions = f"CASE WHEN n = 1 THEN ARRAY({' UNION ALL '.join(lookups)}) END" if lookups else "NULL"
        count = (
            "NULL"
            if count_sql is None
            else f"CASE WHEN n = 1 AND (SELECT count(*) FROM berth_rows) = %s THEN ({count_sql}) END"
        )
        return (
            f"WITH berth_rows AS MATERIALIZED (SELECT berth_page.n, {pk} AS berth_pk, {self.base} AS berth_v{keys}"
            f"{'' if at is None else f', CASE WHEN berth_page.n = {int(at[1])} THEN {at[0]} END AS berth_at'}"
            f" FROM unnest(ARRAY(SELECT berth_ids.id FROM ({ids_sql}) AS berth_ids(id))) WITH ORDINALITY"
            f" AS berth_page(id, n) INNER JOIN {table} ON ({pk} = berth_page.id))"
            f" SELECT berth_pk, berth_v{''.join(f', berth_k{i}' for i in range(len(self.keys)))}, {versions},"
            f" {count}{'' if at is None else ', berth_at'} FROM berth_rows ORDER BY n"
        )

    def listed(self, raw: Sequence[Sequence[Any]]) -> list[tuple[Any, str]]:
        """(pk, version) of each row the page's statement read: the version as the row query's column has it."""
        if not raw:
            return []
        end = 2 + len(self.keys)  # then the joined rows' versions, the count and the row's ``at``, if any
        joined = dict(entry.split("=", 1) for entry in raw[0][end] or ())
        targets = self.targets
        shown: dict[Any, str] = {}  # the joined rows' part, by keys: a page's rows share most of them
        listed = []
        for row in raw:
            keys = row[2:end]
            part = shown.get(keys)
            if part is None:
                part = shown[keys] = "".join(
                    " " + ("" if key is None else joined.get(f"{target}/{key}", ""))
                    for target, key in zip(targets, keys, strict=True)
                )
            listed.append((row[0], row[1] + part))
        return listed

    def count(self, raw: Sequence[Sequence[Any]]) -> int | None:
        """The count the page's statement read (on its first row), if it did."""
        return raw[0][3 + len(self.keys)] if raw else None


class RenderedRows:
    """A page's rows, each already rendered by PageJSONRenderer: the ``results`` of a list page's answer.

    PageJSONRenderer puts them in the answer as they are. Anything else that reads them (the browsable API's
    renderer, a test's ``response.data``) gets each row as the JSON it is.
    """

    __slots__ = ("fragments",)

    def __init__(self, fragments: list[bytes]):
        self.fragments = fragments

    def __iter__(self) -> Any:
        return (json.loads(fragment) for fragment in self.fragments)


class PageJSONRenderer(JSONRenderer):
    """DRF's JSONRenderer, which also renders a list page whose ``results`` are RenderedRows, byte for byte as it
    would have rendered the rows themselves: compact JSON is the concatenation of its parts."""

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        results = data.get("results") if type(data) is dict else None
        if not isinstance(results, RenderedRows):
            return super().render(data, accepted_media_type, renderer_context)
        last = next(reversed(data))
        if last != "results" or self.get_indent(accepted_media_type or "", renderer_context or {}) is not None:
            return super().render({**data, "results": list(results)}, accepted_media_type, renderer_context)
        item, key = (",", ":") if self.compact else (", ", ": ")
        head = super().render({k: v for k, v in data.items() if k != "results"}, accepted_media_type, renderer_context)
        return b"".join(
            (
                head[:-1],
                item.encode() if len(data) > 1 else b"",
                f'"results"{key}['.encode(),
                item.encode().join(results.fragments),
                b"]}",
            )
        )


_ROW_RENDERER = PageJSONRenderer()


class PlainRows:
    """The list representation of ``serializer_class``, read with ``.values()``; see the module's docstring.

    ``computed`` gives each SerializerMethodField of the serializer the columns it needs and how to build its
    value from them.
    """

    def __init__(self, serializer_class: type[serializers.ModelSerializer], computed: Mapping[str, Computed]):
        self.serializer_class = serializer_class
        self.computed = dict(computed)
        # By time zone (a date-time's rendering depends on it); at most _ZONES_KEPT of them.
        self._row_functions: dict[dt.tzinfo | None, Callable[..., tuple[Any, dict]]] = {}
        # Rendered rows by zone, then pk: (version, JSON). See fragments().
        self._kept: dict[dt.tzinfo | None, dict[Any, tuple[str, bytes]]] = {}
        self._kept_since = time.monotonic()
        self._kept_lock = threading.Lock()
        # The statement of listed_after() by the page's ids and count queries and the column it reads.
        self._after: dict[tuple[str, str | None, tuple[str, int] | None], str] = {}

    @cached_property
    def _plan(self) -> tuple[type[Model], list[_Column], list[str], dict[str, _UtcText]]:
        serializer = self.serializer_class()
        model: type[Model] = serializer.Meta.model
        columns: list[_Column] = []
        for name, field in serializer.fields.items():
            if field.write_only:
                continue
            if isinstance(field, serializers.SerializerMethodField):
                if name not in self.computed:
                    raise TypeError(f"{self.serializer_class.__name__}.{name}: a method field needs a Computed")
                columns.append(_Column(name, "", lambda tz: None, self.computed[name]))
                continue
            if field.source == "*" or isinstance(field, serializers.BaseSerializer | relations.ManyRelatedField):
                raise TypeError(f"{self.serializer_class.__name__}.{name}: not a column")
            path = "__".join(field.source_attrs)
            if isinstance(field, relations.SlugRelatedField):
                # DRF renders the related object's slug as it is, None when there is no related object.
                columns.append(_Column(name, f"{path}__{field.slug_field}", lambda tz: None))
            elif isinstance(field, relations.RelatedField):
                raise TypeError(f"{self.serializer_class.__name__}.{name}: only slug relations are read as columns")
            else:
                utc_text = (
                    settings.USE_TZ
                    and isinstance(field, drf.DateTimeField)
                    and _same(field, drf.DateTimeField)
                    and getattr(field, "format", api_settings.DATETIME_FORMAT) == ISO_8601
                    and not hasattr(field, "timezone")
                )
                columns.append(_Column(name, path, _converter(field), utc_text=utc_text))
        unused = set(self.computed) - {c.key for c in columns if c.computed}
        if unused:
            raise TypeError(f"{self.serializer_class.__name__}: no method fields {sorted(unused)}")
        paths = {c.path for c in columns if not c.computed and not c.utc_text}
        paths |= {p for c in columns if c.computed for p in c.computed.paths}
        texts = {f"utc_text_{c.key}": _UtcText(c.path) for c in columns if c.utc_text}
        columns = [replace(c, path=f"utc_text_{c.key}") if c.utc_text else c for c in columns]
        return model, columns, sorted(paths), texts

    @property
    def model(self) -> type[Model]:
        return self._plan[0]

    @cached_property
    def _query(self) -> _Compiled:
        """The page's query, compiled by the ORM once per process: only its list of ids changes from page to page.

        ``pk = ANY(%s)`` with the ids as one array parameter, where ``pk__in`` would make a new query text (and a new
        compilation, the larger part of a page's time in the ORM) for every number of ids. Its first column is the
        row's version (_Versions), over every table the query reads.
        """
        model, _, paths, texts = self._plan
        pks: list[Any] = []  # the placeholder's parameter, found again by identity below
        meta = model._meta
        base = model._default_manager.order_by().values("pk", *paths, **texts)
        qn = connections[base.db].ops.quote_name
        pk_column = meta.pk.column if meta.pk is not None else None
        assert pk_column is not None
        pk_ref = f"{qn(meta.db_table)}.{qn(pk_column)}"

        def by_ids(qs: QuerySet[Any]) -> QuerySet[Any]:
            return qs.extra(where=[f"{pk_ref} = ANY(%s)"], params=[pks])

        probe = by_ids(base).query.get_compiler(using=base.db)
        probe.as_sql()
        tables = _tables_read(probe)
        versions = _Versions.of(probe, tables, model.__name__)
        # An extra select is a column of values() only when named there.
        versioned = (
            model._default_manager.order_by()
            .extra(select={_VERSION: versions.column})
            .values(_VERSION, "pk", *paths, **texts)
        )
        qs = by_ids(versioned)
        compiler = qs.query.get_compiler(using=qs.db)
        sql, params = compiler.as_sql()
        if _tables_read(compiler) != tables:
            raise RuntimeError(f"{model.__name__}: the row's version changed the tables its query reads")
        at = [i for i, param in enumerate(params) if param is pks]
        if len(at) != 1:
            raise RuntimeError(f"{model.__name__}: the list of ids is not one parameter of {sql!r}")
        converters = compiler.get_converters([expression for expression, _, _ in compiler.select[: compiler.col_count]])
        names = [*qs.query.extra_select, *qs.query.values_select, *qs.query.annotation_select]
        if names[:2] != [_VERSION, "pk"]:
            raise RuntimeError(f"{model.__name__}: the row query's first columns are {names[:2]}, not version and pk")
        row_columns = f"berth_row({_VERSION}, berth_pk)"
        return _Compiled(
            db=qs.db,
            sql=sql,
            params=tuple(params),
            pks_at=at[0],
            names=names,
            converters=list(converters.items()),
            versions_sql=f"SELECT berth_row.berth_pk, berth_row.{_VERSION} FROM ({sql}) AS {row_columns}",
            versions=versions,
            table=qn(meta.db_table),
            pk_ref=pk_ref,
        )

    def _row_function(self, tz: dt.tzinfo | None) -> Callable[[Sequence[Any], BaseDatabaseWrapper], tuple[Any, dict]]:
        """A function from one row of the page's query to its pk and its item, written for this serializer and zone.

        It does what the loop it replaces did per value (Django's converters for the column, then the field's own
        conversion or the method field's build), in straight-line code: the loop's bookkeeping (a dict per row for
        the columns, a lookup and a test per field) was about a third of a page's time in Python. Only names made
        here and the serializer's keys and paths, quoted with repr, go into the source.
        """
        known = self._row_functions.get(tz)
        if known is not None:
            return known
        q = self._query
        columns = self._plan[1]
        at = {name: position for position, name in enumerate(q.names)}
        namespace: dict[str, Any] = {}
        lines = ["def convert_row(row, connection):", f"    {', '.join(f'v{i}' for i in range(len(q.names)))}, = row"]
        for position, (converters, expression) in q.converters:
            namespace[f"e{position}"] = expression
            for n, convert in enumerate(converters):
                namespace[f"k{position}_{n}"] = convert
                lines.append(f"    v{position} = k{position}_{n}(v{position}, e{position}, connection)")
        items = []
        for n, column in enumerate(columns):
            if column.computed is not None:
                # A SerializerMethodField is never None-checked by DRF: its value is what the method returns.
                namespace[f"b{n}"] = column.computed.build
                paths = ", ".join(f"{path!r}: v{at[path]}" for path in column.computed.paths)
                items.append(f"{column.key!r}: b{n}({{{paths}}})")
                continue
            value = f"v{at[column.path]}"
            field_conversion = column.converter(tz)
            if field_conversion is None:
                items.append(f"{column.key!r}: {value}")
            else:
                namespace[f"f{n}"] = field_conversion
                items.append(f"{column.key!r}: None if {value} is None else f{n}({value})")
        lines.append(f"    return v{at['pk']}, {{{', '.join(items)}}}")
        exec(compile("\n".join(lines), f"<{self.serializer_class.__name__} rows>", "exec"), namespace)
        function = namespace["convert_row"]
        if len(self._row_functions) < _ZONES_KEPT:
            self._row_functions[tz] = function
        return function

    def rows(self, pks: Sequence[Any]) -> list[dict[str, Any]]:
        """The serializer's output for the rows with these primary keys, in this order (those gone are left out).

        What ``.filter(pk__in=pks).values(...)`` and the serializer's fields would make of them: the same query,
        Django's converters, then each field's conversion (see _row_function).
        """
        if not pks:
            return []
        found = {pk: item for pk, _, item in self._load(pks, self._zone())}
        return [found[pk] for pk in pks if pk in found]

    def listed(self, pks: Sequence[Any]) -> list[tuple[Any, str]]:
        """The pk and version of each row with these primary keys, in this order (those gone are left out)."""
        if not pks:
            return []
        q = self._query
        with prepared_cursor(connections[q.db]) as cursor:
            cursor.execute(q.versions_sql, q.params_for(pks))
            found = dict(cursor.fetchall())
        return [(pk, found[pk]) for pk in pks if pk in found]

    def listed_after(
        self,
        db: str,
        ids_sql: str,
        params: Sequence[Any],
        limit: int,
        count_sql: str | None,
        count_params: Sequence[Any],
        *,
        at: tuple[str, int] | None = None,
        prepared: bool = True,
    ) -> tuple[list[tuple[Any, str]], int | None, Any]:
        """The pk and version of each row a page's ids query answers (with ``params``), in its order; when the page
        is full (``limit`` rows) and there is a ``count_sql``, its count (with ``count_params``); and with ``at``
        (a field of the list's model and a row number from 1), that row's value of the field (None without that
        row): one statement, prepared unless ``prepared`` is false (then PostgreSQL plans it with its values, every
        time).

        The ids query sorts and cuts the page (its first column is the pk; a DISTINCT one also selects what it sorts
        by); its ids, in that order (an array's, numbered WITH ORDINALITY), are joined to the list's table, so that
        PostgreSQL looks each page row up by its pk, as the row query does with ANY; see _Versions.page_sql.
        """
        q = self._query
        if db != q.db:
            raise RuntimeError(f"{self.serializer_class.__name__}: a page of database {db!r} for rows of {q.db!r}")
        key = (ids_sql, count_sql, at)
        sql = self._after.get(key)
        if sql is None:
            at_sql = None
            if at is not None:
                column = self.model._meta.get_field(at[0]).column  # type: ignore[union-attr]
                at_sql = (f"{q.table}.{connections[q.db].ops.quote_name(str(column))}", at[1])
            sql = q.versions.page_sql(ids_sql, q.table, q.pk_ref, count_sql, at_sql)
            self._after[key] = sql
        connection = connections[q.db]
        with prepared_cursor(connection) if prepared else connection.cursor() as cursor:
            cursor.execute(sql, [*params] if count_sql is None else [*params, limit, *count_params])
            raw = cursor.fetchall()
        value = raw[at[1] - 1][-1] if at is not None and len(raw) >= at[1] else None
        return q.versions.listed(raw), q.versions.count(raw), value

    def fragments(self, listed: Sequence[tuple[Any, str]]) -> list[bytes]:
        """Each listed row (pk, version) rendered as JSON by PageJSONRenderer, in this order (those gone left out).

        A row rendered earlier at the same version, in the same time zone, is not read nor rendered again: its
        version changes with every write to any table row it shows (_Versions), so what was rendered is what the row
        query would read now. The others are read in one query and kept (API_LIST_ROWS_KEPT rows per zone, the
        oldest written first dropped; 0 keeps none). Everything kept is dropped every _KEPT_SECONDS, so that no
        version outlives the transaction ids it was written with.
        """
        if not listed:
            return []
        tz = self._zone()
        kept = self._kept_in(tz)
        earlier = kept if kept is not None else {}
        fragments: list[bytes | None] = []
        missing = []
        for pk, version in listed:
            known = earlier.get(pk)
            if known is not None and known[0] == version:
                fragments.append(known[1])
            else:
                fragments.append(None)
                missing.append(pk)
        if not missing:
            return cast(list[bytes], fragments)  # every row kept
        render = _ROW_RENDERER.render
        loaded = [(pk, version, render(item)) for pk, version, item in self._load(missing, tz)]
        if kept is not None:
            self._keep(kept, loaded)
        found = {pk: fragment for pk, _, fragment in loaded}
        return [
            fragment if fragment is not None else found[pk]
            for (pk, _), fragment in zip(listed, fragments, strict=True)
            if fragment is not None or pk in found
        ]

    @staticmethod
    def _zone() -> dt.tzinfo | None:
        return timezone.get_current_timezone() if settings.USE_TZ else None

    def _load(self, pks: Sequence[Any], tz: dt.tzinfo | None) -> list[tuple[Any, str, dict[str, Any]]]:
        """(pk, version, item) of the rows with these primary keys, in the query's order."""
        convert_row = self._row_function(tz)
        q = self._query
        connection = connections[q.db]
        with prepared_cursor(connection) as cursor:
            cursor.execute(q.sql, q.params_for(pks))
            raw = cursor.fetchall()
        loaded = []
        for row in raw:
            pk, item = convert_row(row, connection)
            loaded.append((pk, row[0], item))
        return loaded

    def _kept_in(self, tz: dt.tzinfo | None) -> dict[Any, tuple[str, bytes]] | None:
        if settings.API_LIST_ROWS_KEPT <= 0:
            return None
        now = time.monotonic()
        if now - self._kept_since > _KEPT_SECONDS:
            with self._kept_lock:
                self._kept, self._kept_since = {}, now
        kept = self._kept.get(tz)
        if kept is None:
            with self._kept_lock:
                if tz not in self._kept and len(self._kept) >= _ZONES_KEPT:
                    return None
                kept = self._kept.setdefault(tz, {})
        return kept

    def _keep(self, kept: dict[Any, tuple[str, bytes]], loaded: list[tuple[Any, str, bytes]]) -> None:
        size = settings.API_LIST_ROWS_KEPT
        with self._kept_lock:
            for pk, version, fragment in loaded:
                kept.pop(pk, None)  # written again: last to be dropped
                kept[pk] = (version, fragment)
            while len(kept) > size:
                del kept[next(iter(kept))]
