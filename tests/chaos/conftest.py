"""The chaos suite: every test here is marked ``chaos`` (and ``worker``); the table of scenarios is printed at the
end of the run (tests/chaos/results.py)."""

from __future__ import annotations

import pytest

from tests.chaos.results import RESULTS, RESULTS_FILE, table
from tests.plugins.worker import OUTPUT


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith("tests/chaos/"):
            item.add_marker(pytest.mark.chaos)
            item.add_marker(pytest.mark.worker)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not RESULTS:
        return
    terminalreporter.section("chaos scenarios")
    for line in table():
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"(also in {RESULTS_FILE.relative_to(OUTPUT.parent)})")
