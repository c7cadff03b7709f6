"""The tenants file (``berth apply -f tenants.yaml``): format ``berth.dev/v1``, validated with line numbers.

    apiVersion: berth.dev/v1
    kind: TenantList
    teams: [team-payments]          # the teams this file manages: --prune looks at these and no others
    tenants:
      - name: checkout              # DNS-1123 label; with the cluster, what identifies the tenant
        team: team-payments         # one of `teams`
        cluster: dev
        tier: medium
        kind: namespace             # optional, default namespace
        expires: 2026-03-31         # optional: a later date than the tenant's expiry asks for an extension
        purpose: Checkout service   # optional, used when the tenant is created

The YAML is read strictly: at most MAX_BYTES of UTF-8, one document, no anchors or aliases (no "billion
laughs"), no explicit tags, no deeper nesting and no more values than 1,000 tenants need (each refused as soon as
the reader meets it), no duplicate keys, no unknown fields. Every scalar is read as the text it is written as,
so ``name: no`` is the name "no", never the boolean false. Every problem is reported, each with its line (the
first MAX_REPORTED are listed).
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from berth_cli.errors import CliError, Exit

API_VERSION = "berth.dev/v1"
KIND = "TenantList"
MAX_BYTES = 1024 * 1024
MAX_TENANTS = 1000
_MAX_DEPTH = 8
# A tenant is at most 15 YAML nodes (its mapping, 7 keys, 7 values); the rest is room for the header and teams.
# Composing stops there, so a file of a million tiny nodes costs what 17,000 do, not seconds and 100s of MB.
_MAX_NODES = 17 * MAX_TENANTS
# Problems listed on the terminal; the count says how many there were in all.
MAX_REPORTED = 100
_NULL = "tag:yaml.org,2002:null"

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SLUG = re.compile(r"[-a-zA-Z0-9_]+")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
TOP_FIELDS = ("apiVersion", "kind", "teams", "tenants")
TENANT_FIELDS = ("name", "team", "cluster", "tier", "kind", "expires", "purpose")
_REQUIRED = ("name", "team", "cluster", "tier")
_SLUG_LIMITS = {"team": 50, "cluster": 40, "tier": 30, "kind": 20}


@dataclass(frozen=True)
class Entry:
    """One tenant as the file declares it."""

    name: str
    team: str
    cluster: str
    tier: str
    kind: str = "namespace"
    expires: dt.date | None = None
    purpose: str = ""
    line: int = 0
    lines: dict[str, int] = field(default_factory=dict, compare=False, hash=False)

    @property
    def identity(self) -> tuple[str, str]:
        """(cluster, name): a namespace name is unique per cluster, whichever team holds it."""
        return self.cluster, self.name

    def line_of(self, name: str) -> int:
        return self.lines.get(name, self.line)


@dataclass(frozen=True)
class TenantsFile:
    path: str
    teams: tuple[str, ...]
    tenants: tuple[Entry, ...]
    team_lines: dict[str, int] = field(default_factory=dict, compare=False, hash=False)


class InvalidFile(CliError):
    def __init__(self, path: str, problems: list[tuple[int, str]]) -> None:
        lines = [f"{path}:{line}: {message}" for line, message in sorted(problems)[:MAX_REPORTED]]
        if len(problems) > MAX_REPORTED:
            lines.append(f"... and {len(problems) - MAX_REPORTED} more")
        super().__init__(f"{path} is not a valid tenants file ({len(problems)} problem(s)):", Exit.INVALID, lines)
        self.problems = problems


def _line(node: Node | Any) -> int:
    return int(node.start_mark.line) + 1


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader's composer, refusing what a tenants file never needs and an attacker would use."""

    depth = 0
    nodes = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        # types-PyYAML leaves peek_event untyped.
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise yaml.MarkedYAMLError(
                problem="anchors and aliases (& and *) are not allowed", problem_mark=event.start_mark
            )
        if getattr(event, "tag", None) not in (None, "!"):
            raise yaml.MarkedYAMLError(
                problem=f"explicit tags ({event.tag}) are not allowed", problem_mark=event.start_mark
            )
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise yaml.MarkedYAMLError(problem="nested too deeply", problem_mark=event.start_mark)
        self.nodes += 1
        if self.nodes > _MAX_NODES:
            raise yaml.MarkedYAMLError(
                problem=f"more than {_MAX_NODES} values, more than {MAX_TENANTS} tenants need",
                problem_mark=event.start_mark,
            )
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def compose(text: str, path: str) -> Node:
    try:
        loader = _StrictLoader(text)
    except yaml.reader.ReaderError as error:  # a character YAML never allows (NUL, most C0 controls)
        line = text[: error.position].count("\n") + 1
        raise InvalidFile(path, [(line, f"not valid YAML: character {error.character:#x} is not allowed")]) from None
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = int(mark.line) + 1 if mark is not None else 1
        reason = ", ".join(str(part) for part in (error.context, error.problem) if part)
        raise InvalidFile(path, [(line, f"not valid YAML: {reason}")]) from None
    except yaml.YAMLError as error:
        raise InvalidFile(path, [(1, f"not valid YAML: {error}")]) from None
    finally:
        loader.dispose()
    if node is None:
        raise InvalidFile(path, [(1, "the file is empty")])
    return node


class _Reader:
    """Walks the node tree, collecting every problem with its line instead of stopping at the first."""

    def __init__(self) -> None:
        self.problems: list[tuple[int, str]] = []

    def problem(self, node: Node | Any, message: str) -> None:
        self.problems.append((_line(node), message))

    def mapping(self, node: Node, where: str, allowed: tuple[str, ...]) -> dict[str, tuple[Node, Node]]:
        if not isinstance(node, MappingNode):
            self.problem(node, f"{where}: must be a mapping (key: value)")
            return {}
        found: dict[str, tuple[Node, Node]] = {}
        for key, value in node.value:
            if not isinstance(key, ScalarNode):
                self.problem(key, f"{where}: keys must be plain words")
                continue
            name = key.value
            if name in found:
                self.problem(key, f"{where}: duplicate key {name!r} (first on line {_line(found[name][0])})")
            elif name not in allowed:
                close = difflib.get_close_matches(name, allowed, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(allowed)})"
                self.problem(key, f"{where}: unknown field {_printable(name)!r}{hint}")
            else:
                found[name] = (key, value)
        return found

    def text(self, node: Node, where: str, *, multiline: bool = False, limit: int = 2000) -> str | None:
        if not isinstance(node, ScalarNode):
            self.problem(node, f"{where}: must be a single value, not a list or mapping")
            return None
        if node.tag == _NULL and node.style is None:
            self.problem(node, f"{where}: must not be empty")
            return None
        value = str(node.value)
        allowed_controls = "\n\t" if multiline else ""
        if any(not c.isprintable() and c not in allowed_controls for c in value):
            self.problem(node, f"{where}: control characters are not allowed")
            return None
        if len(value) > limit:
            self.problem(node, f"{where}: at most {limit} characters")
            return None
        return value

    def pattern(self, node: Node, where: str, pattern: re.Pattern[str], limit: int, what: str) -> str | None:
        value = self.text(node, where, limit=1000)
        if value is None:
            return None
        if len(value) > limit or not pattern.fullmatch(value):
            self.problem(node, f"{where}: {_printable(value)!r} is not {what} (at most {limit} characters)")
            return None
        return value

    def date(self, node: Node, where: str) -> dt.date | None:
        value = self.text(node, where, limit=100)
        if value is None:
            return None
        try:
            if not _DATE.fullmatch(value):
                raise ValueError
            return dt.date.fromisoformat(value)
        except ValueError:
            self.problem(node, f"{where}: {_printable(value)!r} is not a date (YYYY-MM-DD)")
            return None


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)[:80]


def parse(data: bytes, path: str) -> TenantsFile:
    """The tenants file in ``data``, or InvalidFile listing every problem with its line."""
    if len(data) > MAX_BYTES:
        raise InvalidFile(path, [(1, f"larger than {MAX_BYTES} bytes")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise InvalidFile(path, [(line, "not UTF-8 text")]) from None
    reader = _Reader()
    root = compose(text, path)
    if not isinstance(root, MappingNode):
        raise InvalidFile(path, [(_line(root), f"must be a mapping with {', '.join(TOP_FIELDS)}")])
    top = reader.mapping(root, "top level", TOP_FIELDS)
    _header(reader, top, path)
    teams, team_lines = _teams(reader, top)
    tenants = _tenants(reader, top, set(teams))
    if reader.problems:
        raise InvalidFile(path, reader.problems)
    return TenantsFile(path=path, teams=tuple(teams), tenants=tuple(tenants), team_lines=team_lines)


def _header(reader: _Reader, top: dict[str, tuple[Node, Node]], path: str) -> None:
    for name, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
        if name not in top:
            reader.problems.append((1, f"{name}: required ({name}: {expected})"))
            continue
        value = reader.text(top[name][1], name, limit=100)
        if value is not None and value != expected:
            supported = "this berth reads " + API_VERSION if name == "apiVersion" else f"must be {expected}"
            reader.problem(top[name][1], f"{name}: {_printable(value)!r} is not supported; {supported}")


def _teams(reader: _Reader, top: dict[str, tuple[Node, Node]]) -> tuple[list[str], dict[str, int]]:
    if "teams" not in top:
        reader.problems.append((1, "teams: required: the list of teams this file manages"))
        return [], {}
    node = top["teams"][1]
    if not isinstance(node, SequenceNode) or not node.value:
        reader.problem(node, "teams: must be a non-empty list of team slugs")
        return [], {}
    teams: list[str] = []
    lines: dict[str, int] = {}
    for index, item in enumerate(node.value):
        slug = reader.pattern(item, f"teams[{index}]", _SLUG, _SLUG_LIMITS["team"], "a team slug")
        if slug is None:
            continue
        if slug in lines:
            reader.problem(item, f"teams[{index}]: {slug!r} is listed twice (first on line {lines[slug]})")
            continue
        teams.append(slug)
        lines[slug] = _line(item)
    return teams, lines


def _tenants(reader: _Reader, top: dict[str, tuple[Node, Node]], teams: set[str]) -> list[Entry]:
    if "tenants" not in top:
        return []
    node = top["tenants"][1]
    if isinstance(node, ScalarNode) and node.tag == _NULL and node.style is None:
        return []  # `tenants:` with nothing after it: the teams should have no tenants
    if not isinstance(node, SequenceNode):
        reader.problem(node, "tenants: must be a list of tenants")
        return []
    if len(node.value) > MAX_TENANTS:
        reader.problem(node, f"tenants: at most {MAX_TENANTS} tenants per file")
        return []
    entries: list[Entry] = []
    seen: dict[tuple[str, str], int] = {}
    for index, item in enumerate(node.value):
        entry, identity = _entry(reader, item, f"tenants[{index}]", teams)
        if identity is not None and identity in seen:
            where = "/".join(identity)
            reader.problem(item, f"tenants[{index}]: {where} is declared twice (first on line {seen[identity]})")
            continue
        if identity is not None:
            seen[identity] = _line(item)
        if entry is not None:
            entries.append(entry)
    return entries


def _entry(reader: _Reader, node: Node, where: str, teams: set[str]) -> tuple[Entry | None, tuple[str, str] | None]:
    """The entry (None when it has problems) and its (cluster, name) when both are readable."""
    before = len(reader.problems)
    fields = reader.mapping(node, where, TENANT_FIELDS)
    if not isinstance(node, MappingNode):
        return None, None
    for name in _REQUIRED:
        if name not in fields:
            reader.problem(node, f"{where}: {name} is required")
    values: dict[str, Any] = {}
    for name, (_key, value) in fields.items():
        at = f"{where}.{name}"
        if name == "name":
            values[name] = reader.pattern(value, at, _DNS_LABEL, 63, "a DNS label (lowercase letters, digits, '-')")
        elif name in _SLUG_LIMITS:
            values[name] = reader.pattern(value, at, _SLUG, _SLUG_LIMITS[name], "a slug (letters, digits, '-', '_')")
        elif name == "expires":
            values[name] = reader.date(value, at)
        else:
            values[name] = reader.text(value, at, multiline=True)
    team = values.get("team")
    if team is not None and teams and team not in teams:
        reader.problem(
            fields["team"][1], f"{where}.team: {team!r} is not in this file's teams ({', '.join(sorted(teams))})"
        )
    identity = (values["cluster"], values["name"]) if values.get("cluster") and values.get("name") else None
    if len(reader.problems) != before:
        return None, identity
    entry = Entry(
        **{k: v for k, v in values.items() if v is not None},
        line=_line(node),
        lines={name: _line(value) for name, (_key, value) in fields.items()},
    )
    return entry, identity
