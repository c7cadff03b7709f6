"""Celery tasks: thin, idempotent, acks_late; retries only for transient cluster trouble, with backoff and jitter.

No task waits for a cluster. Provisioning and decommissioning do what can be done now; when the tenant is
not ready (or not gone) yet, the task publishes itself again with a countdown and the worker moves on.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from collections.abc import Callable
from typing import Literal, TypedDict

from celery import Task, shared_task
from django.conf import settings
from django.db import DatabaseError
from django.db.models import F, QuerySet
from django.utils import timezone

from tenants import dispatch, selectors, services
from tenants.errors import database_unavailable
from tenants.models import Cluster, Tenant, TenantStatus
from worker import provisioning
from worker import reconcile as reconcile_pass
from worker.kube import KubeTransientError
from worker.provisioning import Outcome, Progress

logger = logging.getLogger(__name__)
S = TenantStatus


class _TenantTaskOptions(TypedDict):
    bind: Literal[True]
    acks_late: bool
    reject_on_worker_lost: bool
    max_retries: int


# Transient cluster errors are retried this often; "not ready yet" is not an error and does not count.
TENANT_TASK: _TenantTaskOptions = {"bind": True, "acks_late": True, "reject_on_worker_lost": True, "max_retries": 8}


LOOK_RETRIES = 4  # a look that finds the tenant held tries again this often, 0.25 s apart


def backoff(retries: int) -> float:
    """Exponential backoff with full jitter, capped at a minute."""
    return random.uniform(0, min(60.0, 2.0 * 2**retries))


def _retry(task: Task[..., object], exc: KubeTransientError) -> Exception:
    logger.info("%s: transient cluster error, retry %d: %s", task.name, task.request.retries + 1, exc)
    return task.retry(exc=exc, countdown=backoff(task.request.retries))


def _retry_without_database(task: Task[..., object], exc: DatabaseError) -> Exception:
    """The database went away under the job (restart, failover): come back with backoff rather than drop the job
    and leave it to the sweep."""
    logger.warning("%s: the database is not reachable, retry %d: %s", task.name, task.request.retries + 1, exc)
    return task.retry(exc=exc, countdown=backoff(task.request.retries))


def _run_tenant_job(task: Task[..., object], work: Callable[[], Progress], tenant_id: str) -> str:
    """Run a per-tenant job and come back when it says so.

    If another worker holds the tenant, come back shortly instead of dropping the job (the holder may be
    applying an older generation, or provisioning what we are asked to remove). When the tenant is not
    ready (or not gone) yet, the job is published again to run in ``requeue_after`` seconds; if the broker
    cannot take it, the sweep re-sends the tenant's job later.
    """
    try:
        progress = work()
    except KubeTransientError as exc:
        raise _retry(task, exc) from None
    except DatabaseError as exc:
        if not database_unavailable(exc):
            raise  # a query's own error, as it is
        raise _retry_without_database(task, exc) from None
    if progress.outcome == Outcome.LOCKED:
        raise task.retry(countdown=1 + backoff(task.request.retries))
    if progress.requeue_after is not None:
        applied = () if progress.applied_generation is None else (progress.applied_generation,)
        dispatch.send(str(task.name), tenant_id, *applied, countdown=progress.requeue_after)
    return str(progress)


@shared_task(name=dispatch.PROVISION, **TENANT_TASK)
def provision_tenant(self: Task[[str, int | None], str], tenant_id: str, applied_generation: int | None = None) -> str:
    """Apply the tenant and report it ready, or come back later; never waits for the cluster.

    While the tenant is provisioning and not ready yet, the task re-queues itself, after 2 s at first and
    then after a quarter of the time it has waited so far (at most 30 s). A tenant not ready
    BERTH_PROVISION_TIMEOUT_SECONDS (default 15 minutes) after it started provisioning is marked failed with
    the reason "Not ready after N minutes: ..."; an admin can retry it. Transient cluster errors are retried
    with backoff and jitter, at most ``max_retries`` times in a row (the sweep re-sends the job later).

    A job that finds its tenant ready with nothing owed (its generation and credentials applied) does nothing: it
    is a duplicate (the sweep re-sent a job that was only waiting in a long queue, say) or a provisioning run's next
    step come back to a tenant an earlier look made ready; drift is the watcher's and the pass's to repair, not a
    full reconcile's per stray job.
    """
    if _nothing_owed(tenant_id):
        return "skipped: ready, nothing to apply"
    return _run_tenant_job(self, lambda: provisioning.provision(tenant_id, applied_generation), tenant_id)


def _nothing_owed(tenant_id: str) -> bool:
    return Tenant.objects.filter(
        pk=tenant_id,
        status=S.READY,
        generation=F("applied_generation"),
        credential_epoch=F("applied_credential_epoch"),
    ).exists()


@shared_task(name=dispatch.LOOK_AGAIN, bind=True, acks_late=True)
def look_again(self: Task[[str], str], tenant_id: str) -> str:
    """The watcher saw what a provisioning tenant waits for happen on the cluster (its quota is enforced now): take
    the tenant's next step at once instead of at the end of its countdown. Only a hint: the step's own job is still
    queued and comes back as before, so nothing is re-queued here. A hint that finds the tenant held by another job
    looks again a moment later, a few times (the holder may have looked just before the quota was counted); one that
    finds it no longer provisioning, or the cluster unreachable, is dropped."""
    if not Tenant.objects.filter(pk=tenant_id, status=S.PROVISIONING).exists():
        return "skipped: not provisioning"
    try:
        progress = provisioning.provision(tenant_id)
    except KubeTransientError as exc:
        return f"dropped: {exc}"
    if progress.outcome == Outcome.LOCKED and self.request.retries < LOOK_RETRIES:
        raise self.retry(countdown=0.25, max_retries=LOOK_RETRIES)
    return str(progress)


@shared_task(name=dispatch.DECOMMISSION, **TENANT_TASK)
def decommission_tenant(self: Task[[str], str], tenant_id: str) -> str:
    """Delete what Berth created for the tenant; re-queues itself like ``provision_tenant`` until all is gone,
    and marks the tenant failed ("Not deleted after N minutes: ...") after BERTH_PROVISION_TIMEOUT_SECONDS."""
    return _run_tenant_job(self, lambda: provisioning.decommission(tenant_id), tenant_id)


@shared_task(name=dispatch.APPLY_SLEEP, **TENANT_TASK)
def apply_sleep(self: Task[[str], str], tenant_id: str) -> str:
    """Scale the tenant's workloads to zero, or restore them, as ``Tenant.sleeping`` says (worker.sleep); comes
    back shortly when an object changed under it."""
    return _run_tenant_job(self, lambda: provisioning.apply_sleep(tenant_id), tenant_id)


@shared_task(name=dispatch.ISOLATION_CHECK, **TENANT_TASK)
def check_isolation(self: Task[[str], bool | None], tenant_id: str) -> bool | None:
    try:
        report = provisioning.isolation_report(tenant_id)
    except KubeTransientError as exc:
        raise _retry(self, exc) from None
    if report is None:
        return None
    services.tenant_record_isolation_report(tenant=Tenant.objects.get(pk=tenant_id), report=report)
    return bool(report["passed"])


@shared_task(name=dispatch.REFRESH_USAGE, **TENANT_TASK)
def refresh_usage(self: Task[[str], None], tenant_id: str) -> None:
    try:
        provisioning.refresh_usage(tenant_id)
    except KubeTransientError as exc:
        raise _retry(self, exc) from None


@shared_task(name=dispatch.SWEEP, acks_late=True)  # scheduled by beat (CELERY_BEAT_SCHEDULE)
def sweep() -> dict[str, int]:
    """Re-send work that was lost, remind and expire. Safe to run anywhere, any time.

    A tenant owed a job (approved, provisioning or decommissioning; ready with a tier change or a sleep the worker
    has not applied) is re-sent when what it is owed and the sweep's last re-send of it (``Tenant.resent_at``, or
    ``sleep_resent_at`` for a sleep job) are both older than a window: at most once per window, however long it
    waits. The window is BERTH_STUCK_AFTER_SECONDS (90 s) while the ``provision`` queue (which holds every one of
    those jobs) is empty, or when its depth cannot be read (Redis away: towards re-sending, nothing is lost). While
    it holds messages the workers are behind and the tenants wait in it, not lost: the window is then
    BERTH_STUCK_BACKLOG_SECONDS (1 hour), and those due under the short one are held back (``held_back``) instead
    of each getting a duplicate per sweep.

    The bound: a job lost (a worker died, the broker lost its queue) is re-sent by the first sweep, every
    BERTH_SWEEP_SECONDS (60 s), after BERTH_STUCK_AFTER_SECONDS at which the queue is empty, and at the latest
    BERTH_STUCK_BACKLOG_SECONDS + BERTH_SWEEP_SECONDS after it was lost however long the queue stays.
    """
    now = timezone.now()
    # A tenant untouched this long in a working status has lost its job (worker died, broker was down).
    stuck_before = now - dt.timedelta(seconds=settings.BERTH_STUCK_AFTER_SECONDS)
    depth = dispatch.queue_depth(dispatch.PROVISION_QUEUE)
    due_before = stuck_before
    if depth:  # None (unreadable) and 0 keep the short window
        backlog = max(settings.BERTH_STUCK_BACKLOG_SECONDS, settings.BERTH_STUCK_AFTER_SECONDS)
        due_before = now - dt.timedelta(seconds=backlog)
    counts = {"provision": 0, "decommission": 0, "reminded": 0, "expired": 0, "sleep": 0, "alerts_expired": 0}
    counts["queue"] = -1 if depth is None else depth  # the provision queue's depth; -1: it could not be read
    held = 0

    def resend(task: str, owed: Callable[[dt.datetime], QuerySet[Tenant]]) -> list[str]:
        """Send ``task`` to the tenants owed it since before the window; those it was sent to."""
        nonlocal held
        due = [str(pk) for pk in owed(due_before).values_list("pk", flat=True)]
        if due_before < stuck_before:
            held += max(0, owed(stuck_before).count() - len(due))
        return [pk for pk in due if dispatch.send(task, pk)]  # one the broker refused is tried at the next sweep

    provision = resend(
        dispatch.PROVISION,
        lambda before: selectors.tenants_stuck(statuses=[S.APPROVED, S.PROVISIONING], older_than=before),
    )
    # A ready tenant's change (a tier change) whose job was lost stays ready at the old settings until it is sent.
    provision += resend(dispatch.PROVISION, lambda before: selectors.tenants_change_unapplied(older_than=before))
    decommission = resend(
        dispatch.DECOMMISSION, lambda before: selectors.tenants_stuck(statuses=[S.DECOMMISSIONING], older_than=before)
    )
    # One UPDATE for every tenant re-sent (a tenant owes one of these jobs at a time).
    services.tenants_record_resent(tenant_ids=provision + decommission, at=now)
    counts["provision"], counts["decommission"] = len(provision), len(decommission)
    remind_before = now + dt.timedelta(days=settings.BERTH_EXPIRY_REMINDER_DAYS)
    for tenant in selectors.tenants_expiring(before=remind_before):
        counts["reminded"] += services.tenant_remind_expiry(tenant=tenant)
    for tenant in selectors.tenants_expired(now=now):
        try:
            services.tenant_expire(tenant=tenant)
            counts["expired"] += 1
        except services.InvalidTransition:
            pass  # someone acted first
    # Schedules (in each team's time zone) and idle periods: put to sleep or wake (services.sleep).
    sleep_counts = services.tenants_sleep_sweep(now=now)
    counts["sleep"] = sleep_counts["slept"] + sleep_counts["woke"]
    # A sleep or wake whose job was lost (broker down) is sent again.
    slept = resend(dispatch.APPLY_SLEEP, lambda before: selectors.tenants_sleep_unapplied(older_than=before))
    services.tenants_record_resent(tenant_ids=slept, at=now, sleep=True)  # its own column: it may owe both
    counts["held_back"] = held
    if held:
        logger.info(
            "sweep: the provision queue holds %d messages; %d tenants waiting in it are held back (re-sent after %d s)",
            depth,
            held,
            (now - due_before).total_seconds(),
        )
    # Firing alerts Alertmanager stopped posting are resolved as expired; old resolved ones are deleted.
    counts["alerts_expired"] = services.alerts_sweep(now=now)["expired"]
    logger.info("sweep: %s", counts)
    return counts


@shared_task(name=dispatch.RECONCILE, acks_late=True)  # scheduled by beat, on the reconcile queue
def reconcile() -> int:
    """Start one reconcile pass per cluster that has ready tenants (on the reconcile queue, so provisioning
    never waits behind it); how many passes were sent."""
    clusters = selectors.tenants_ready_for_reconcile().order_by().values_list("cluster_id", flat=True).distinct()
    return sum(dispatch.send(dispatch.RECONCILE_CLUSTER, str(pk)) for pk in clusters)


@shared_task(name=dispatch.RECONCILE_CLUSTER, bind=True, acks_late=True, max_retries=8)
def reconcile_cluster(self: Task[[str], dict[str, object]], cluster_id: str) -> dict[str, object]:
    """One pass over a cluster's ready tenants: lists each managed kind once and repairs only what differs
    (worker.reconcile); retried with backoff when the cluster is unreachable."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return {}
    try:
        return reconcile_pass.reconcile_cluster(cluster).summary()
    except KubeTransientError as exc:
        raise _retry(self, exc) from None


@shared_task(name=dispatch.REPAIR_TENANT, **TENANT_TASK)
def repair_tenant(self: Task[[str, object], str], tenant_id: str, keys: object = None) -> str:
    """Repair a ready tenant the watcher saw drift in (worker.watcher): the objects it names (``keys``, as
    [kind, namespace, name]; without them, all of the tenant's) are read afresh and only what differs is applied,
    under the tenant's lock, so a second job for the same edit finds nothing and records nothing. A tenant no
    longer ready is left to its own job."""
    if not Tenant.objects.filter(pk=tenant_id, status=S.READY).exists():
        return "skipped: not ready"
    wanted = _keys(keys)
    if wanted:
        return _run_tenant_job(self, lambda: reconcile_pass.repair_drift(tenant_id, wanted), tenant_id)
    return _run_tenant_job(self, lambda: provisioning.provision(tenant_id), tenant_id)


def _keys(keys: object) -> list[reconcile_pass.Key]:
    """The [kind, namespace, name] triples of a repair job; anything else in the message is dropped (no keys: a
    repair of the whole tenant)."""
    if not isinstance(keys, list):
        return []
    return [
        (key[0], key[1], key[2])
        for key in keys
        if isinstance(key, list | tuple) and len(key) == 3 and all(isinstance(part, str) for part in key)
    ]


@shared_task(name=dispatch.DELETE_ORPHAN, bind=True, acks_late=True, max_retries=8)
def delete_orphan_namespace(self: Task[[int], str], orphan_id: int) -> str:
    """Delete an orphan namespace an admin decommissioned, UID-checked (provisioning.delete_orphan); the next
    reconcile pass drops its row once it is gone."""
    try:
        return provisioning.delete_orphan(orphan_id)
    except KubeTransientError as exc:
        raise _retry(self, exc) from None


@shared_task(name=dispatch.RECHECK_IDENTITIES, acks_late=True)
def recheck_identities() -> dict[str, int]:
    """Ask the identity provider again about users not confirmed lately (see services.user_recheck)."""
    counts = services.users_recheck_due()
    logger.info("identity re-check: %s", counts)
    return counts
