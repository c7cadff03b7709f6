"""What the migrations leave in the database beside the models' tables."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db


def test_no_page_change_log_triggers_or_functions_remain():
    """Migration 0019 drops what 0018 made for the kept list pages: the log, its 20 triggers and 6 functions."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('berth_page_change')")
        assert cursor.fetchone() == (None,)
        cursor.execute("SELECT tgname FROM pg_trigger WHERE tgname LIKE 'berth\\_%%' AND NOT tgisinternal")
        assert cursor.fetchall() == []
        cursor.execute("SELECT proname FROM pg_proc WHERE proname LIKE '%%page\\_changed' OR proname LIKE 'berth\\_%%'")
        assert cursor.fetchall() == []
