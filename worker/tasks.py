"""Celery tasks: thin, idempotent, acks_late; retries only for transient cluster trouble, with backoff and jitter."""

from __future__ import annotations

import datetime as dt
import logging
import random

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from tenants import dispatch, selectors, services
from tenants.models import Tenant, TenantStatus
from worker import provisioning
from worker.kube import KubeTransientError

logger = logging.getLogger(__name__)
S = TenantStatus
TASK_OPTIONS = {"bind": True, "acks_late": True, "reject_on_worker_lost": True, "max_retries": 8}


def backoff(retries: int) -> float:
    """Exponential backoff with full jitter, capped at a minute."""
    return random.uniform(0, min(60.0, 2.0 * 2**retries))


def _retry(task, exc: KubeTransientError):
    logger.info("%s: transient cluster error, retry %d: %s", task.name, task.request.retries + 1, exc)
    return task.retry(exc=exc, countdown=backoff(task.request.retries))


def _run_locked(task, work, tenant_id: str) -> str:
    """Run a per-tenant job; if another worker holds the tenant, come back shortly instead of dropping it
    (the holder may be applying an older generation, or provisioning what we are asked to remove)."""
    try:
        result = work(tenant_id)
    except KubeTransientError as exc:
        raise _retry(task, exc) from None
    if result == "locked":
        raise task.retry(countdown=1 + backoff(task.request.retries))
    return result


@shared_task(name="worker.tasks.provision_tenant", **TASK_OPTIONS)
def provision_tenant(self, tenant_id: str) -> str:
    return _run_locked(self, provisioning.provision, tenant_id)


@shared_task(name="worker.tasks.decommission_tenant", **TASK_OPTIONS)
def decommission_tenant(self, tenant_id: str) -> str:
    return _run_locked(self, provisioning.decommission, tenant_id)


@shared_task(name="worker.tasks.check_isolation", **TASK_OPTIONS)
def check_isolation(self, tenant_id: str) -> bool | None:
    try:
        report = provisioning.isolation_report(tenant_id)
    except KubeTransientError as exc:
        raise _retry(self, exc) from None
    if report is None:
        return None
    services.tenant_record_isolation_report(tenant=Tenant.objects.get(pk=tenant_id), report=report)
    return report["passed"]


@shared_task(name="worker.tasks.refresh_usage", **TASK_OPTIONS)
def refresh_usage(self, tenant_id: str) -> None:
    try:
        provisioning.refresh_usage(tenant_id)
    except KubeTransientError as exc:
        raise _retry(self, exc) from None


@shared_task(name="worker.tasks.sweep", acks_late=True)
def sweep() -> dict:
    """Re-send work that was lost, remind and expire. Safe to run anywhere, any time."""
    now = timezone.now()
    # A tenant untouched this long in a working status has lost its job (worker died, broker was down).
    stuck_before = now - dt.timedelta(seconds=settings.BERTH_STUCK_AFTER_SECONDS)
    counts = {"provision": 0, "decommission": 0, "reminded": 0, "expired": 0}
    for tenant in selectors.tenants_stuck(statuses=[S.APPROVED, S.PROVISIONING], older_than=stuck_before):
        counts["provision"] += dispatch.send(dispatch.PROVISION, str(tenant.pk))
    for tenant in selectors.tenants_stuck(statuses=[S.DECOMMISSIONING], older_than=stuck_before):
        counts["decommission"] += dispatch.send(dispatch.DECOMMISSION, str(tenant.pk))
    remind_before = now + dt.timedelta(days=settings.BERTH_EXPIRY_REMINDER_DAYS)
    for tenant in selectors.tenants_expiring(before=remind_before):
        counts["reminded"] += services.tenant_remind_expiry(tenant=tenant)
    for tenant in selectors.tenants_expired(now=now):
        try:
            services.tenant_expire(tenant=tenant)
            counts["expired"] += 1
        except services.InvalidTransition:
            pass  # someone acted first
    logger.info("sweep: %s", counts)
    return counts


@shared_task(name="worker.tasks.reconcile", acks_late=True)
def reconcile() -> int:
    """Re-apply every ready tenant: repairs hand edits and deletions (audited) and refreshes quota usage."""
    return sum(
        dispatch.send(dispatch.PROVISION, str(pk))
        for pk in selectors.tenants_ready_for_reconcile().values_list("pk", flat=True)
    )


@shared_task(name=dispatch.RECHECK_IDENTITIES, acks_late=True)
def recheck_identities() -> dict[str, int]:
    """Ask the identity provider again about users not confirmed lately (see services.user_recheck)."""
    counts = services.users_recheck_due()
    logger.info("identity re-check: %s", counts)
    return counts
