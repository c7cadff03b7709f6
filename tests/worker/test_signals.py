"""worker.signals without a broker: what a published message carries, and what a task run binds and counts.
(tests/tenants/test_observability_live.py plays the same with the real worker.)"""

from __future__ import annotations

import logging
from types import SimpleNamespace

from tenants import dispatch, logs, metrics
from worker import signals


def test_a_published_task_carries_the_request_id_and_its_tenant():
    headers: dict = {}
    with logs.bound(request_id="req-7", tenant_id="ignored-for-per-tenant-tasks"):
        signals.on_publish(sender=dispatch.PROVISION, headers=headers, body=(["tenant-1"], {}, {}))
    assert headers == {"berth_request_id": "req-7", "berth_tenant_id": "tenant-1"}

    headers = {}
    with logs.bound(request_id="req-8", tenant_id="tenant-2"):
        signals.on_publish(sender=dispatch.DELIVER_WEBHOOK, headers=headers, body=(["delivery-9"], {}, {}))
    assert headers == {"berth_request_id": "req-8", "berth_tenant_id": "tenant-2"}


class FakeRequest(dict):
    """Celery's task.request: message headers readable with get()."""


def fake_task(name: str, **headers: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, request=FakeRequest(headers))


def test_a_task_run_logs_with_the_enqueuers_request_id_and_is_counted():
    task = fake_task(dispatch.ISOLATION_CHECK, berth_request_id="approve-1")
    before = metrics.CELERY_TASKS.labels(dispatch.ISOLATION_CHECK, "SUCCESS")._value.get()
    signals.on_prerun(task_id="t-1", task=task, args=["tenant-3"])
    try:
        assert (logs.request_id_var.get(), logs.tenant_id_var.get()) == ("approve-1", "tenant-3")
    finally:
        signals.on_postrun(task_id="t-1", task=task, args=["tenant-3"], state="SUCCESS")
    assert (logs.request_id_var.get(), logs.tenant_id_var.get()) == ("", "")
    assert metrics.CELERY_TASKS.labels(dispatch.ISOLATION_CHECK, "SUCCESS")._value.get() == before + 1


def test_scheduled_work_logs_with_its_task_id():
    task = fake_task("worker.tasks.sweep")
    signals.on_prerun(task_id="sweep-42", task=task, args=[])
    try:
        assert logs.request_id_var.get() == "sweep-42" and logs.tenant_id_var.get() == ""
    finally:
        signals.on_postrun(task_id="sweep-42", task=task, args=[], state="SUCCESS")


def test_the_exporter_refuses_to_start_without_a_multiprocess_directory(settings, monkeypatch, caplog):
    settings.BERTH_WORKER_METRICS_PORT = 1  # would fail to bind if it tried
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    with caplog.at_level(logging.ERROR, logger="worker.signals"):
        signals.start_exporter()
    assert "PROMETHEUS_MULTIPROC_DIR is not" in caplog.text
