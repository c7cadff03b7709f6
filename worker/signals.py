"""Celery's edges: log context across the queue, task metrics, and the worker's own metrics exporter.

- Publishing (web or worker): the message carries the request id of the work that enqueued it, and the tenant.
- Running (in the prefork child): the task's log lines carry that request id (or the task's id for scheduled
  work) and the tenant; when it ends, ``berth_celery_tasks_total`` and its duration are recorded, and a
  provisioning run's duration under the tenant's cluster.
- The worker's main process serves the counters of all its children on BERTH_WORKER_METRICS_PORT
  (prometheus_client's multiprocess mode: PROMETHEUS_MULTIPROC_DIR).
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import ExitStack
from typing import Any

from celery import signals
from django.conf import settings
from django.db import DatabaseError

from tenants import dispatch, logs, metrics
from tenants.errors import database_unavailable

logger = logging.getLogger(__name__)

REQUEST_ID_HEADER = "berth_request_id"
TENANT_ID_HEADER = "berth_tenant_id"
# Tasks whose first argument is a tenant's id.
PER_TENANT_TASKS = frozenset(
    {dispatch.PROVISION, dispatch.DECOMMISSION, dispatch.ISOLATION_CHECK, dispatch.REFRESH_USAGE}
)

# task id → (log context, start time) of the tasks running in this process.
_running: dict[str, tuple[ExitStack, float]] = {}


def _tenant_of(task_name: str | None, args: Any) -> str:
    if task_name in PER_TENANT_TASKS and args:
        return str(args[0])
    return ""


def on_publish(sender: str | None = None, headers: dict[str, Any] | None = None, body: Any = None, **_: Any) -> None:
    if headers is None:
        return
    headers.setdefault(REQUEST_ID_HEADER, logs.request_id_var.get())
    args = body[0] if isinstance(body, (tuple, list)) and body else None
    headers.setdefault(TENANT_ID_HEADER, _tenant_of(sender, args) or logs.tenant_id_var.get())


def on_prerun(task_id: str = "", task: Any = None, args: Any = None, **_: Any) -> None:
    request = getattr(task, "request", None)
    request_id = (request.get(REQUEST_ID_HEADER) if request is not None else "") or task_id
    tenant_id = (request.get(TENANT_ID_HEADER) if request is not None else "") or _tenant_of(task.name, args)
    stack = ExitStack()
    stack.enter_context(logs.bound(request_id=request_id, tenant_id=tenant_id, user=""))
    _running[task_id] = (stack, time.monotonic())


def on_postrun(task_id: str = "", task: Any = None, args: Any = None, state: str | None = None, **_: Any) -> None:
    stack, started = _running.pop(task_id, (None, None))
    try:
        if started is None:
            return
        seconds = time.monotonic() - started
        metrics.celery_task_finished(task=task.name, state=state or "UNKNOWN", seconds=seconds)
        if task.name == dispatch.PROVISION and args:
            try:
                metrics.provision_run_timed(tenant_id=str(args[0]), seconds=seconds)
            except DatabaseError as exc:
                if not database_unavailable(exc):
                    raise
                # The run's cluster is in the database, which is away: that run goes untimed (its job retries).
    finally:
        if stack is not None:
            stack.close()


def start_exporter(**_: Any) -> None:
    """Serve this worker's task metrics (every prefork child's) on BERTH_WORKER_METRICS_PORT, from the main process."""
    port = settings.BERTH_WORKER_METRICS_PORT
    if not port:
        return
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        logger.error(
            "BERTH_WORKER_METRICS_PORT is set but PROMETHEUS_MULTIPROC_DIR is not: the prefork children's metrics "
            "cannot be added up, so the exporter is not started"
        )
        return
    from prometheus_client import start_http_server

    start_http_server(port, addr=settings.BERTH_WORKER_METRICS_ADDRESS, registry=metrics.events_registry())
    logger.info("worker metrics on %s:%d/metrics", settings.BERTH_WORKER_METRICS_ADDRESS, port)


def connect() -> None:
    signals.before_task_publish.connect(on_publish, dispatch_uid="berth.publish")
    signals.task_prerun.connect(on_prerun, dispatch_uid="berth.prerun")
    signals.task_postrun.connect(on_postrun, dispatch_uid="berth.postrun")
    signals.worker_ready.connect(start_exporter, dispatch_uid="berth.exporter")
