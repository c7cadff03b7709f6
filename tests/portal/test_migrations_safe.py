"""Zero-downtime migrations: while a release rolls out, web pods of the previous release still read and write the
schema the new release's migrations just changed. django-migration-linter reads each migration's SQL (on the real
PostgreSQL) and names what would break them: a NOT NULL column without a database default, a dropped or renamed
column or table, an index built under a lock.

Every migration up to the first release checked here is listed below with why it was accepted; every new one
must pass, or be listed here with the reason it is safe anyway, which a reviewer reads. A change that needs an
unsafe step ships in two releases (add, then use; stop using, then drop), as docs/deployment.md says.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest

pytestmark = pytest.mark.django_db(transaction=True)  # some migrations build indexes concurrently (no transaction)

# Released before this check existed, each reviewed: what the linter names, and why it did not break a rollout.
ACCEPTED = {
    "0003_virtual_cluster_kinds": "widened two choice columns and made a new column NOT NULL; installs were empty",
    "0004_rename_request_to_tenantrequest": "a table rename before the first deployment",
    "0005_isolation": "new NOT NULL columns and constraints before the first deployment",
    "0006_identity_recheck": "a NOT NULL column before the first deployment",
    "0010_rightsize": "NOT NULL columns with Python defaults; the chart's rollout ran migrations before new pods",
    "0011_sleep": "NOT NULL columns with Python defaults, as 0010",
    "0013_transfer": "NOT NULL columns and an index built under a lock on a small table",
    "0018_page_changes": "a change-log table of its own (no old code wrote it) and NOT NULL columns",
    "0020_tier_egress_allow": "a NOT NULL JSON column with a Python default, as 0010",
    "0021_drop_page_changes": "drops 0018's table, which the previous release's code no longer read (issue 34)",
    # Reviewed after the check existed:
    "0024_restore_divergence": "a new table; the tenants table's status check and its two partial unique indexes "
    "are re-made to admit 'diverged', which the previous release never writes: a write lock for the index builds, "
    "milliseconds on a table of at most tens of thousands of rows",
}


def _lint(**options):
    from django_migration_linter import MigrationLinter

    linter = MigrationLinter(path=".", database="default", no_cache=True, **options)
    out = io.StringIO()
    with redirect_stdout(out):
        linter.lint_all_migrations(app_label="tenants")
        linter.print_summary()
    return linter, out.getvalue()


def test_every_new_migration_is_safe_while_the_previous_release_runs():
    linter, report = _lint(ignore_name=tuple(ACCEPTED))
    assert linter.nb_erroneous == 0, report
    assert linter.nb_ignored == len(ACCEPTED), report


def test_the_accepted_list_holds_only_migrations_the_linter_refuses():
    """A migration listed here but safe would hide a later edit of it: the list stays exactly what it must be."""
    linter, report = _lint()
    refused = {line.split(", ")[1].split(")")[0] for line in report.splitlines() if line.endswith("... ERR")}
    assert refused == set(ACCEPTED), report
