"""``--wait``: poll a request and its tenant until done, showing progress on stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from berth_cli.client import Api, object_path
from berth_cli.errors import CliError, Exit

POLL_SECONDS = 2.0
_STILL_EVERY_SECONDS = 15.0


class Progress:
    """One line per change of state (with the time taken so far), and a reminder while nothing changes."""

    def __init__(self, label: str, write: Callable[[str], None] | None = None) -> None:
        self.label = label
        self.started = time.monotonic()
        self.last = ""
        self.last_at = self.started
        self.write = write or (lambda line: print(line, file=sys.stderr, flush=True))

    def __call__(self, state: str) -> None:
        now = time.monotonic()
        if state != self.last or now - self.last_at >= _STILL_EVERY_SECONDS:
            prefix = "" if state != self.last else "still "
            self.write(f"{self.label}: {prefix}{state} ({now - self.started:.0f}s)")
            self.last, self.last_at = state, now


def _done(api: Api, request: dict[str, Any], progress: Progress) -> dict[str, Any] | None:
    """The finished tenant (or request), None while not finished; FAILED when it never will be."""
    status = request["status"]
    if status in ("rejected", "cancelled"):
        comment = request.get("decision_comment") or ""
        raise CliError(f"request {request['id']} was {status}" + (f": {comment}" if comment else ""), Exit.FAILED)
    if status == "pending":
        progress("awaiting approval")
        return None
    if request["action"] == "extend":
        return request
    tenant: dict[str, Any] = api.get(object_path("tenants", request["tenant"]))
    if tenant["status"] == "failed":
        reason = tenant.get("status_reason") or "no reason given"
        raise CliError(f"tenant {tenant['name']} failed: {reason}", Exit.FAILED)
    progress(f"tenant {tenant['status']}")
    if request["action"] == "delete":
        return tenant if tenant["status"] == "deleted" else None
    if tenant["status"] == "ready" and tenant["tier"] == request["tier"]:
        return tenant
    if tenant["status"] in ("deleted", "rejected", "cancelled"):
        raise CliError(f"tenant {tenant['name']} is {tenant['status']}", Exit.FAILED)
    return None


def until_done(api: Api, request_id: str, *, timeout: float, label: str = "") -> dict[str, Any]:
    """Wait for ``request_id`` to be decided and carried out: the tenant ready (or deleted), or the extension."""
    progress = Progress(label or f"request {request_id[:8]}")
    deadline = time.monotonic() + timeout
    while True:
        found = _done(api, api.get(object_path("requests", request_id)), progress)
        if found is not None:
            progress("done")
            return found
        if time.monotonic() >= deadline:
            raise CliError(f"{progress.label}: not done after {timeout:.0f}s (last: {progress.last})", Exit.TIMEOUT)
        time.sleep(POLL_SECONDS)
