"""``berth kubeconfig --merge-into``: put a tenant's cluster, user and context into an existing kubeconfig.

Entries with the same names are replaced (a fresh credential replaces the expired one); everything
else in the file is kept. The file is written 0600 in one step, as kubectl would want it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from berth_cli.errors import CliError
from berth_cli.files import write_private

_LISTS = ("clusters", "users", "contexts")


def parse(text: str, source: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as error:
        raise CliError(f"{source} is not valid YAML: {error}") from None
    data = data or {}
    if not isinstance(data, dict) or any(not isinstance(data.get(k) or [], list) for k in _LISTS):
        raise CliError(f"{source} is not a kubeconfig")
    return data


def merge(base: dict[str, Any], new: dict[str, Any], *, set_current: bool) -> dict[str, Any]:
    merged = {"apiVersion": "v1", "kind": "Config", **base}
    for key in _LISTS:
        incoming = list(new.get(key) or [])
        names = {entry.get("name") for entry in incoming}
        merged[key] = [entry for entry in base.get(key) or [] if entry.get("name") not in names] + incoming
    if set_current or not merged.get("current-context"):
        merged["current-context"] = new.get("current-context", "")
    return merged


def merge_into(path: Path, text: str, *, set_current: bool) -> str:
    """Merge the kubeconfig ``text`` into the file at ``path``; returns the context name it added."""
    new = parse(text, "the portal's kubeconfig")
    try:
        existing = path.read_text()
    except FileNotFoundError:
        existing = ""
    merged = merge(parse(existing, str(path)), new, set_current=set_current)
    write_private(path, yaml.safe_dump(merged, sort_keys=False))
    return str(new.get("current-context", ""))
