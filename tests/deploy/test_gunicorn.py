"""deploy/gunicorn.conf.py preloads the portal: gunicorn's parent loads it once and forks every worker from it.

A worker inherits whatever the parent holds. A database or cache connection opened while loading would be one
socket shared by every worker (their queries' bytes interleaved on it), and a thread started then would not exist
in any worker. So the parent, having loaded the portal as gunicorn does, must hold no socket and no thread, and
must have imported the views (what preloading is for). The live portal of the tests runs preloaded as well
(tests/plugins/portal.py), and tests/deploy/test_compose_native.py runs the web service with this file.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.plugins.worker import ROOT, django_process_env

# What gunicorn's parent does with preload_app: read the configuration, import the application it names.
_PARENT = r"""
import json, os, runpy, sys, threading
from gunicorn.util import import_app

conf = runpy.run_path("deploy/gunicorn.conf.py")
import_app(conf["wsgi_app"])

from django.core.cache import caches
from django.db import connections

sockets = []
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        continue
    if target.startswith("socket:"):
        sockets.append(target)
print(json.dumps({
    "preload_app": conf["preload_app"],
    "views": sorted(m for m in ("tenants.api.tenants", "tenants.views", "portal.urls") if m in sys.modules),
    "databases": [c.alias for c in connections.all() if c.connection is not None],
    "caches": [repr(c) for c in caches.all(initialized_only=True)],
    "threads": [t.name for t in threading.enumerate()],
    "sockets": sockets,
}))
"""


def python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by this Python in the checkout, with a portal process's environment and ``env``."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**django_process_env(), **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def parent_state(**env: str) -> dict:
    result = python(_PARENT, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_the_parent_loads_the_portal_and_its_views_and_holds_no_connection_or_thread_for_its_workers():
    state = parent_state()
    assert state["preload_app"] is True
    assert state["views"] == ["portal.urls", "tenants.api.tenants", "tenants.views"]
    assert state["databases"] == []
    assert state["caches"] == []
    assert state["threads"] == ["MainThread"]
    assert state["sockets"] == []


def test_preloading_can_be_turned_off_and_refuses_a_value_it_cannot_read():
    assert parent_state(GUNICORN_PRELOAD="false")["preload_app"] is False
    result = python("import runpy; runpy.run_path('deploy/gunicorn.conf.py')", GUNICORN_PRELOAD="sometimes")
    assert result.returncode != 0
    assert "GUNICORN_PRELOAD must be true or false, not 'sometimes'" in result.stderr
