"""Celery app for `bench/provision.py --hub-tick S`: portal's own app, plus a no-op timer every S seconds
in the worker's event loop.

An experiment, not product code: with the threads pool, a finished task's late ack (and with it the
freed prefetch slot) is only processed when the worker's event loop wakes up, which with
--without-heartbeat can take seconds (celery/celery#6941). A short repeating timer wakes it.
"""

import os

from celery import signals

from portal.celery import app  # noqa: F401  (celery -A bench.tick_app finds it here)

TICK = float(os.environ.get("BERTH_BENCH_HUB_TICK", "0.1"))


@signals.worker_ready.connect
def _tick(sender=None, **kwargs):  # sender: the worker's Consumer
    sender.timer.call_repeatedly(TICK, lambda: None)
