"""Enqueueing worker jobs by task name, after the transaction commits.

``tenants`` never imports ``worker``. If the broker is down the job is not
lost: the tenant's status says what is owed and the periodic sweep re-sends it.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app
from django.db import transaction
from kombu.exceptions import ChannelError

logger = logging.getLogger(__name__)

# On the ``provision`` queue (CELERY_TASK_ROUTES): an approval never waits behind a reconcile pass.
PROVISION_QUEUE = "provision"
PROVISION = "worker.tasks.provision_tenant"
DECOMMISSION = "worker.tasks.decommission_tenant"
APPLY_SLEEP = "worker.tasks.apply_sleep"  # scale a tenant's workloads to zero, or restore them
LOOK_AGAIN = "worker.tasks.look_again"  # the watcher saw a provisioning tenant's cluster move on: its next step now
# On the ``reconcile`` queue: background work that may take long and must never hold up provisioning.
RECONCILE = "worker.tasks.reconcile"  # beat: one pass per cluster
RECONCILE_CLUSTER = "worker.tasks.reconcile_cluster"
REPAIR_TENANT = "worker.tasks.repair_tenant"  # the watcher's coalesced repair of one tenant's drift
ISOLATION_CHECK = "worker.tasks.check_isolation"
REFRESH_USAGE = "worker.tasks.refresh_usage"
# On the default ``celery`` queue: short periodic chores.
SWEEP = "worker.tasks.sweep"
RECHECK_IDENTITIES = "worker.tasks.recheck_identities"
DELETE_ORPHAN = "worker.tasks.delete_orphan_namespace"  # an admin's decision on a namespace no tenant has
# On the ``events`` queue (CELERY_TASK_ROUTES): a slow webhook receiver never waits in line with provisioning.
DELIVER_WEBHOOK = "worker.events.deliver_webhook"
SWEEP_WEBHOOKS = "worker.events.sweep_webhooks"


def send(task: str, *args: object, countdown: float = 0.0) -> bool:
    """Publish now (to run in ``countdown`` seconds); False (and a log line) when the broker cannot be reached."""
    try:
        # The project's Celery app (portal.celery), made current when the settings are loaded: reached through
        # Celery, so that the domain does not import the project.
        current_app.send_task(task, args=list(args), countdown=countdown or None, retry=False)
    except Exception as exc:  # any broker failure: the sweep will re-send
        logger.warning("could not enqueue %s%r: %s; the sweep will retry", task, args, type(exc).__name__)
        return False
    return True


def queue_depth(queue: str) -> int | None:
    """How many messages wait in ``queue`` for a worker (on Redis, each priority's list counted); None when the
    broker cannot be reached. A job with a countdown waits there only until a worker fetches it (and holds it until
    its time): a message counted here waits for a free worker."""
    try:
        with current_app.connection_for_read() as conn:
            channel: Any = conn.default_channel  # kombu's virtual channel (Redis) answers a passive declare
            try:
                # Passive: nothing is declared. kombu's Redis transport sums the queue's lists (one per priority).
                return int(channel.queue_declare(queue=queue, passive=True).message_count)
            except ChannelError:
                return 0  # no list under that name: Redis drops a list with its last message
    except Exception as exc:  # any broker failure: the caller decides what an unknown depth means
        logger.warning("could not read the depth of queue %s: %s", queue, type(exc).__name__)
        return None


def enqueue(task: str, *args: object) -> None:
    transaction.on_commit(lambda: send(task, *args))
