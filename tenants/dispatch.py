"""Enqueueing worker jobs by task name, after the transaction commits.

``tenants`` never imports ``worker``. If the broker is down the job is not
lost: the tenant's status says what is owed and the periodic sweep re-sends it.
"""

from __future__ import annotations

import logging

from celery import current_app
from django.db import transaction

logger = logging.getLogger(__name__)

# On the ``provision`` queue (CELERY_TASK_ROUTES): an approval never waits behind a reconcile pass.
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


def enqueue(task: str, *args: object) -> None:
    transaction.on_commit(lambda: send(task, *args))
