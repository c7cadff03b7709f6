"""Output: aligned tables for people, ``-o json`` and ``-o yaml`` for scripts.

Table cells come from the server and from other teams' requests (names, purposes, reasons): control
characters are shown escaped, so nothing in a cell can move the cursor or recolour the terminal.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import click
import yaml

FORMATS = ("table", "json", "yaml")
_MAX_CELL = 60

Column = tuple[str, Callable[[dict[str, Any]], Any]]


def output_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "-o",
        "--output",
        "fmt",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="table for people; json or yaml for scripts.",
    )(function)


def printable(value: Any) -> str:
    """One line of text with every control character escaped (``\\x1b``, ``\\n``), nothing else changed."""
    text = "" if value is None else str(value)
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _cell(value: Any) -> str:
    text = printable(value)
    return text if len(text) <= _MAX_CELL else text[: _MAX_CELL - 1] + "…"


def table(rows: Sequence[dict[str, Any]], columns: Sequence[Column], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    cells = [[header for header, _ in columns]] + [[_cell(get(row)) for _, get in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n")


def dump(data: Any, fmt: str, out: TextIO | None = None) -> None:
    """``data`` as JSON or YAML (for scripts: the API's values unchanged)."""
    out = out or sys.stdout
    if fmt == "json":
        out.write(json.dumps(data, indent=2, default=str) + "\n")
    else:
        out.write(yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False, allow_unicode=True))


def show(
    rows: Sequence[dict[str, Any]], fmt: str, columns: Sequence[Column], *, empty: str = "Nothing to show."
) -> None:
    if fmt != "table":
        dump(list(rows), fmt)
    elif not rows:
        click.echo(empty, err=True)
    else:
        table(rows, columns)


def field(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda row: row.get(name)


def date_of(name: str) -> Callable[[dict[str, Any]], Any]:
    """An ISO timestamp shortened to its date, for tables."""
    return lambda row: (row.get(name) or "")[:10]


def moment_of(name: str) -> Callable[[dict[str, Any]], Any]:
    """An ISO timestamp shortened to minutes (UTC as the API gives it), for tables."""
    return lambda row: (row.get(name) or "")[:16].replace("T", " ")
