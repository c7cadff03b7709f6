"""The change log API list pages are checked against (tenants.api.kept_pages; migration 0018 writes it)."""

from __future__ import annotations

import datetime as dt

from django.db import connection

# Scope of the log's horizon rows (no page checks it: team ids are positive, users' scopes minus their ids):
# (HORIZON, x, at) says every transaction with an id below x had ended at ``at``.
HORIZON = -(2**63)
# A row may go once its transaction ended this long ago: a kept page is at most ten minutes old
# (kept_pages.KEPT_SECONDS), so its snapshot already saw that transaction as ended.
AFTER = dt.timedelta(hours=1)


def page_changes_prune(*, now: dt.datetime) -> int:
    """Record where the log's horizon is now, and drop its rows of transactions that had ended by a horizon
    recorded over an hour before ``now``; how many rows of changes went.

    Not by the rows' ``at``: that is when their transaction began, and a transaction that began long ago may have
    committed a moment ago, under a page kept before it did.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO berth_page_change (scope, xid, at)"
            " VALUES (%s, pg_snapshot_xmin(pg_current_snapshot()), %s) ON CONFLICT DO NOTHING",
            [HORIZON, now],
        )
        cursor.execute("SELECT max(xid) FROM berth_page_change WHERE scope = %s AND at < %s", [HORIZON, now - AFTER])
        (ended,) = cursor.fetchone()
        if ended is None:
            return 0
        cursor.execute("DELETE FROM berth_page_change WHERE scope <> %s AND xid < %s", [HORIZON, ended])
        pruned = int(cursor.rowcount)
        cursor.execute("DELETE FROM berth_page_change WHERE scope = %s AND xid < %s", [HORIZON, ended])
        return pruned
