"""Whole API list pages kept per process, and answered again while nothing they show has changed.

A page is kept with the PostgreSQL snapshot of a statement run just before its own. Asked for again, one statement
reads the change log (``berth_page_change``, written by triggers in each writer's own transaction: see migration
0018) for the page's scopes: the teams whose rows it lists, the caller (their memberships, the audit events they
acted in) and scope 0 (a team, tier, cluster or user name any row may show). A change logged by a transaction the
kept snapshot did not see, and that this statement does, means the page may differ: it is built again. Otherwise
every row the page's statement would read is as it was, so it would answer the same bytes (rows are rendered from
their rows alone: tenants.api.rows), and the kept answer is given.

The snapshot is older than the page's own statement, never newer: a change committed between the two is in the
page and also counts as unseen, so the next request builds the page again rather than missing a change.

Only pages that are a pure function of the database and the request URL are kept: JSON answers of a list filtered
by nothing but its team and its position, outside any transaction (a page read inside one sees that transaction's
own writes, which its snapshot does not), for a member (their teams' rows) or pinned to one team (a team token or
the team filter). The key holds the whole URL (the next link is built from it), the caller's standing and id, the
token's team and the active time zone. Kept at most ``API_LIST_PAGES_KEPT`` pages per process, each for at most
``KEPT_SECONDS``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connections

from tenants import metrics
from tenants.api.rows import prepared_cursor
from tenants.models import Membership, Team

# However quiet its scopes, a kept page is built again this often: a bound on what a database restored under a
# running portal (its transaction ids going back) could leave stale; the rows kept rendered have the same bound
# (tenants.api.rows, which drops them all this often). At 60 s, the audit trail's pages in bench/api_load.py, ten
# cursor pages deep for each of 20 people on each of 5 workers, were mostly gone again between two of its runs.
KEPT_SECONDS = 600.0
SHOWN_EVERYWHERE = 0  # the scope of the names any row may show (migration 0018)

_CHECK = f"""
SELECT pg_current_snapshot()::text,
       %s::text IS NOT NULL AND NOT EXISTS (
           SELECT 1 FROM berth_page_change c
           WHERE c.scope = ANY(
                     %s::bigint[]
                     || ARRAY(SELECT m.team_id::bigint FROM {Membership._meta.db_table} m WHERE m.user_id = %s::bigint)
                     || ARRAY(SELECT t.id::bigint FROM {Team._meta.db_table} t WHERE t.slug = %s::text))
             AND c.xid >= pg_snapshot_xmin(%s::text::pg_snapshot)
             AND NOT pg_visible_in_snapshot(c.xid, %s::text::pg_snapshot))
"""


@dataclass(frozen=True)
class Scopes:
    """What a page shows: the rows of ``teams``, of the teams ``members_of`` (a user id) belongs to, and of the
    team whose slug is ``team_slug``, as they are when checked; and ``user_id``'s own scope."""

    user_id: int
    teams: tuple[int, ...] = ()
    members_of: int | None = None
    team_slug: str | None = None


@dataclass(frozen=True)
class _Kept:
    snapshot: str
    data: Any
    at: float


class KeptPages:
    def __init__(self, db: str = "default") -> None:
        self.db = db
        self._pages: OrderedDict[tuple[Any, ...], _Kept] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def answer(self, key: tuple[Any, ...] | None, scopes: Scopes | None, build: Callable[[], Any]) -> Any:
        """The page ``key`` as kept, if nothing in ``scopes`` has changed since; else ``build()``, kept."""
        size = settings.API_LIST_PAGES_KEPT
        connection = connections[self.db]
        if key is None or scopes is None or size <= 0 or connection.in_atomic_block:
            return build()
        with self._lock:
            kept = self._pages.get(key)
            if kept is not None and time.monotonic() - kept.at > KEPT_SECONDS:
                del self._pages[key]
                kept = None
        snapshot, unchanged = self._check(connection, scopes, kept)
        if kept is not None and unchanged:
            with self._lock:
                self.hits += 1
                if key in self._pages:
                    self._pages.move_to_end(key)  # the least recently answered go first
            metrics.API_LIST_PAGES.labels(key[0], "kept").inc()
            return kept.data
        with self._lock:
            self.misses += 1
        metrics.API_LIST_PAGES.labels(key[0], "built").inc()
        data = build()
        with self._lock:
            self._pages[key] = _Kept(snapshot, data, time.monotonic())
            self._pages.move_to_end(key)
            while len(self._pages) > size:
                self._pages.popitem(last=False)
        return data

    def _check(self, connection: Any, scopes: Scopes, kept: _Kept | None) -> tuple[str, bool]:
        """This statement's snapshot, and whether nothing in ``scopes`` changed unseen by ``kept``'s."""
        fixed = [SHOWN_EVERYWHERE, -scopes.user_id, *scopes.teams]
        seen = kept.snapshot if kept is not None else None
        with prepared_cursor(connection) as cursor:
            cursor.execute(_CHECK, [seen, fixed, scopes.members_of, scopes.team_slug, seen, seen])
            snapshot, unchanged = cursor.fetchone()
        return snapshot, bool(unchanged)

    def clear(self) -> None:
        with self._lock:
            self._pages.clear()
            self.hits = self.misses = 0


PAGES = KeptPages()
