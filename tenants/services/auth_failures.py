"""Failed sign-ins and refused credentials from people nobody knows yet: counted, limited, audited in bulk.

An unauthenticated client can fail as often as it likes; an audit row per failure would let it grow the
append-only audit table without bound. So failures are counted per source address and minute in the
shared cache: the first failure of an address in a minute is audited, then the 10th, 100th, ... with the
count so far, and past a global number of rows per minute only one "suppressed" row is written. An
address over BERTH_AUTH_FAILURES_PER_MINUTE is refused (429) until its minute is over.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.cache import cache

from tenants import audit
from tenants.audit import AuditContext

WINDOW_SECONDS = 60


def _window() -> tuple[int, int]:
    """(this minute's number, seconds left in it)."""
    now = time.time()
    return int(now // WINDOW_SECONDS), WINDOW_SECONDS - int(now % WINDOW_SECONDS)


def _count(key: str) -> int:
    cache.add(key, 0, timeout=2 * WINDOW_SECONDS)
    return int(cache.incr(key))


def auth_failure_record(*, action: str, ctx: AuditContext, detail: dict[str, Any]) -> None:
    """Count one failure from ``ctx.source_ip``; audit it when it is the first (or a power of ten) this minute."""
    window, _ = _window()
    address = ctx.source_ip or "unknown"
    seen = _count(f"authfail:{address}:{window}")
    if seen not in (1, 10, 100, 1000, 10000, 100000):
        return
    rows = _count(f"authfail-rows:{window}")
    cap = settings.BERTH_AUTH_FAILURE_ROWS_PER_MINUTE
    if rows > cap + 1:
        return
    if rows == cap + 1:
        action, detail = "auth.failures_suppressed", {"reason": f"more than {cap} failure rows this minute"}
    audit.record(
        actor=None,
        action=action,
        object_type="session",
        after={**detail, "failures_from_address_this_minute": seen},
        ctx=ctx,
        actor_name="anonymous",
    )


def auth_failure_wait(*, source_ip: str | None) -> int | None:
    """Seconds until ``source_ip`` may try again, when it failed too often this minute; else None."""
    window, left = _window()
    failures = cache.get(f"authfail:{source_ip or 'unknown'}:{window}") or 0
    return left if failures >= settings.BERTH_AUTH_FAILURES_PER_MINUTE else None
