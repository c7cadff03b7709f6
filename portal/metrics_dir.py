"""prometheus_client's multiprocess directory (PROMETHEUS_MULTIPROC_DIR): one per web or worker container."""

from __future__ import annotations

import os
from pathlib import Path


def clear() -> None:
    """Forget what an earlier run of this container left: called once by the parent before it forks workers
    (gunicorn's on_starting, Celery's celeryd_init), so counters start at zero with the process that serves them."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        for path in Path(directory).glob("*.db"):
            path.unlink(missing_ok=True)


def process_exited(pid: int) -> None:
    """A gunicorn worker or prefork child is gone (its live gauges, if any, no longer count)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
