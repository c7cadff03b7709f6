"""The drain that ends every test using the real Celery worker (tests.plugins.worker.drain_worker).

It must leave nothing to run during the database flush: a job waiting on its countdown is revoked, and the
worker is idle when it returns.
"""

from __future__ import annotations

import time
import uuid

import pytest

from portal.celery import app
from tenants import dispatch
from tests.plugins.kube import wait_for
from tests.plugins.worker import drain_worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def test_a_job_waiting_on_its_countdown_is_revoked_and_the_worker_left_idle(celery_worker):
    node = celery_worker.node_name
    inspect = app.control.inspect(destination=[node], timeout=5.0)
    assert dispatch.send(dispatch.PROVISION, str(uuid.uuid4()), countdown=600)

    def scheduled() -> list[str]:
        return [entry["request"]["id"] for entry in (inspect.scheduled() or {}).get(node, [])]

    wait_for(scheduled, timeout=30, interval=0.2, what="the worker to hold the job until its countdown")
    started = time.monotonic()
    drain_worker(node, timeout=30)
    assert time.monotonic() - started < 30
    assert set(scheduled()) <= set((inspect.revoked() or {}).get(node, []))
    assert not (inspect.active() or {}).get(node)
