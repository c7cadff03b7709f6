"""Every action the services record reads as words in the audit trail and a tenant's history."""

from __future__ import annotations

import re
from pathlib import Path

from tenants.audit import ACTION_LABELS, action_label

ROOT = Path(__file__).resolve().parents[2]
_RECORDED = re.compile(r'action="([a-z_]+\.[a-z_]+)"')


def _recorded_actions() -> set[str]:
    found: set[str] = set()
    for package in ("tenants", "worker"):
        for path in (ROOT / package).rglob("*.py"):
            found |= set(_RECORDED.findall(path.read_text()))
    return found


def test_every_recorded_action_has_a_label():
    actions = _recorded_actions()
    assert "request.submit" in actions  # the scan finds what services record
    assert not actions - ACTION_LABELS.keys(), sorted(actions - ACTION_LABELS.keys())


def test_labels_read_as_words():
    assert action_label("request.submit") == "Request submitted"
    assert action_label("tenant.ready") == "Tenant ready"
    assert action_label("gadget.made_anew") == "Gadget: made anew"
