"""The change log API list pages are checked against (tenants.api.kept_pages; migration 0018 writes it)."""

from __future__ import annotations

import datetime as dt

from django.db import connection

# A row is needed while a kept page could have been read before its transaction committed: a page is kept for at
# most ten minutes (kept_pages.KEPT_SECONDS). A day also covers a transaction that ran for hours.
KEPT = dt.timedelta(days=1)


def page_changes_prune(*, now: dt.datetime) -> int:
    """Drop the log's rows of transactions that began over a day before ``now`` and have ended; how many."""
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM berth_page_change WHERE at < %s AND xid < pg_snapshot_xmin(pg_current_snapshot())",
            [now - KEPT],
        )
        return int(cursor.rowcount)
