"""Every row lock Berth takes is FOR NO KEY UPDATE (why: tenants.services.lifecycle.lock_tenant).

tests/tenants/test_services_concurrency.py plays the deadlock FOR UPDATE caused; this finds a new lock site that
would bring it back before two transactions ever meet.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def plain_locks(source: str) -> list[int]:
    """The lines of ``source`` calling ``select_for_update`` without ``no_key=True``."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", "") == "select_for_update"
        and not any(
            kw.arg == "no_key" and isinstance(kw.value, ast.Constant) and kw.value.value is True for kw in node.keywords
        )
    ]


def test_every_select_for_update_in_the_portal_and_worker_takes_no_key_locks():
    sources = [p for package in ("portal", "tenants", "worker") for p in sorted((ROOT / package).rglob("*.py"))]
    assert len(sources) > 50
    found = [f"{p.relative_to(ROOT)}:{line}" for p in sources for line in plain_locks(p.read_text())]
    assert found == []


def test_a_plain_or_key_lock_is_found_and_a_no_key_lock_is_not():
    source = (
        "Team.objects.select_for_update().get(pk=1)\n"
        "Team.objects.select_for_update(no_key=False).get(pk=1)\n"
        "Team.objects.select_for_update(of=('self',), no_key=True).get(pk=1)\n"
        "Team.objects.select_for_update(skip_locked=True).get(pk=1)\n"
    )
    assert plain_locks(source) == [1, 2, 4]
