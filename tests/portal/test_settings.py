"""The settings import nothing of the domain, name the tasks as tenants.dispatch sends them, and refuse a
BERTH_PROMETHEUS of the wrong shape."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tenants import dispatch

ROOT = Path(__file__).resolve().parents[2]


def _imported(path: Path) -> set[str]:
    """The modules ``path`` imports, at any depth of its code (a function's own imports too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_the_settings_import_nothing_of_the_domain():
    imported = _imported(ROOT / "portal" / "settings.py")
    assert not {name for name in imported if name.split(".")[0] in ("tenants", "worker")}, imported


def test_tenants_never_imports_the_project_or_the_worker():
    upward = {
        str(path.relative_to(ROOT)): sorted(
            name for name in _imported(path) if name.split(".")[0] in ("portal", "worker")
        )
        for path in (ROOT / "tenants").rglob("*.py")
    }
    assert {path: names for path, names in upward.items() if names} == {}


def test_every_task_routed_or_scheduled_is_one_dispatch_sends():
    sent = {value for name, value in vars(dispatch).items() if name.isupper() and isinstance(value, str)}
    routed = {name for name in settings.CELERY_TASK_ROUTES if not name.endswith("*")}
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert routed | scheduled <= sent
    queues = {name: settings.CELERY_TASK_ROUTES[name]["queue"] for name in routed}
    for task in (dispatch.PROVISION, dispatch.DECOMMISSION, dispatch.APPLY_SLEEP):
        assert queues[task] == "provision"
    for task in (dispatch.RECONCILE, dispatch.RECONCILE_CLUSTER, dispatch.ISOLATION_CHECK, dispatch.REFRESH_USAGE):
        assert queues[task] == "reconcile"
    assert {dispatch.SWEEP, dispatch.RECONCILE, dispatch.RECHECK_IDENTITIES, dispatch.SWEEP_WEBHOOKS} == scheduled


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ('{"main": "http://127.0.0.1:9091"}', True),  # the label proxy alone, as before
        ('{"main": {"label_proxy": "http://127.0.0.1:9091", "url": "http://prometheus:9090"}}', True),
        ('{"main": {"url": "https://prometheus:9090"}}', True),
        ('{"main": {"url": "ftp://prometheus"}}', False),
        ('{"main": {}}', False),
        ('{"main": {"uri": "http://prometheus:9090"}}', False),
        ('{"main": {"url": 9090}}', False),
        ('["http://127.0.0.1:9091"]', False),
    ],
)
def test_each_prometheus_names_its_label_proxy_its_own_address_or_both(value: str, valid: bool):
    env = {**os.environ, "BERTH_PROMETHEUS": value, "DJANGO_DEBUG": "1"}
    done = subprocess.run(
        [sys.executable, "-c", "import portal.settings"], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert (done.returncode == 0) is valid, done.stderr
    if not valid:
        assert (
            'BERTH_PROMETHEUS must map names to http(s) addresses of label proxies, or to objects with "label_proxy"'
            in (done.stderr)
        )
