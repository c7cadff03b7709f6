"""Celery tasks on the ``events`` queue (CELERY_TASK_ROUTES): webhook deliveries, apart from provisioning.

Thin: the delivery logic, its ordering and its retries live in ``tenants.services.webhook_deliver``; the
receiver's deadline (BERTH_WEBHOOK_TIMEOUT_SECONDS) bounds each attempt, and Celery's time limits are the
backstop should anything else hang.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from tenants import dispatch, services

logger = logging.getLogger(__name__)
_LIMIT = settings.BERTH_WEBHOOK_TIMEOUT_SECONDS


@shared_task(
    name=dispatch.DELIVER_WEBHOOK,
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=_LIMIT + 30,
    time_limit=_LIMIT + 60,
)
def deliver_webhook(delivery_id: str) -> str:
    return services.webhook_deliver(delivery_id=delivery_id)


@shared_task(name=dispatch.SWEEP_WEBHOOKS, acks_late=True)
def sweep_webhooks() -> dict[str, int]:
    counts = services.webhooks_sweep()
    logger.info("webhook sweep: %s", counts)
    return counts
