"""Prometheus metrics: events counted where they happen, and the database's state read when Prometheus scrapes.

Two kinds, on purpose:

- **Events** (provisioning runs, durations, repairs, kubeconfigs issued, HTTP answers and API errors, Celery
  tasks) are counters and histograms recorded by the process where they happen: a gunicorn worker or a Celery
  prefork child. With ``PROMETHEUS_MULTIPROC_DIR`` set (the chart and compose set it), prometheus_client keeps
  them in files that the web's ``/metrics`` and the worker's exporter (worker.signals) add up across their
  processes. Each is recorded when the transaction that made the change commits, so a rolled-back change never
  counts.
- **State** (tenants by status, requests, oldest waiting, isolation reports, quota, queue lengths) is computed by
  ``StateCollector`` at scrape time, with a few aggregate queries (no query per tenant) and one Redis round trip,
  so every web process answers the same and nothing has to be kept in step.

The metric names and labels are what the chart's alert rules and the Grafana dashboard read
(deploy/helm/berth/templates/_alerts.tpl, files/grafana-dashboard.json); docs/deployment.md lists them.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Iterable, Iterator
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import REGISTRY, Collector

from tenants.models import Cluster, Tenant, TenantRequest, TenantStatus
from tenants.quantities import parse_quantity

logger = logging.getLogger(__name__)
S = TenantStatus

# Seconds: a namespace is ready in about one, a virtual cluster in minutes; a stuck one is counted in the last bucket.
_DURATION_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)
# Approval to ready includes waiting for the queue and the cluster, and re-queued "not ready yet" runs.
_APPROVE_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600)
_TASK_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)

PROVISION_RUNS = Counter(
    "berth_provision_runs",
    "Provisioning runs that ended: ready, failed, repaired (a reconcile that repaired drift) or in_sync.",
    ["cluster", "kind", "result"],
)
PROVISION_DURATION = Histogram(
    "berth_provision_duration_seconds",
    "Duration of one provisioning task run (apply, check readiness), by the tenant's cluster.",
    ["cluster"],
    buckets=_DURATION_BUCKETS,
)
APPROVE_TO_READY = Histogram(
    "berth_approve_to_ready_seconds",
    "From a request's approval to its tenant being ready.",
    ["cluster"],
    buckets=_APPROVE_BUCKETS,
)
RECONCILE_REPAIRS = Counter(
    "berth_reconcile_repairs", "Objects reconcile found edited or deleted and repaired.", ["cluster"]
)
KUBECONFIGS_ISSUED = Counter(
    "berth_kubeconfigs_issued", "Kubeconfigs handed out (one per tenant of a merged one).", ["cluster", "role"]
)
API_ERRORS = Counter("berth_api_errors", "API answers with a 4xx or 5xx status.", ["status"])
HTTP_REQUESTS = Counter("berth_http_requests", "Requests the portal answered (pages and API), by status.", ["status"])
ALERTS_RECEIVED = Counter(
    "berth_alerts_received",
    "Alerts Alertmanager posted to Berth, by outcome: fired, resolved, suppressed (the tenant slept or was not "
    "ready), repeated, unknown_rule (not one of Berth's tenant rules), unknown_namespace (no tenant's), refused (a "
    "post that was not a valid webhook).",
    ["outcome"],
)
CELERY_TASKS = Counter("berth_celery_tasks", "Celery task runs by how they ended.", ["task", "state"])
CELERY_TASK_DURATION = Histogram(
    "berth_celery_task_duration_seconds", "Duration of Celery task runs.", ["task", "state"], buckets=_TASK_BUCKETS
)


# --- Recording events ---------------------------------------------------------------------------------------------
def _on_commit(record: Any) -> None:
    """Record once the change commits (at once outside a transaction): a rolled-back change never counts."""
    transaction.on_commit(record)


def provision_finished(*, tenant: Tenant, result: str) -> None:
    """A provisioning run ended: ``ready``, ``failed``, ``repaired`` or ``in_sync``."""
    labels = (tenant.cluster.name, tenant.kind, result)
    _on_commit(lambda: PROVISION_RUNS.labels(*labels).inc())


def tenant_became_ready(*, tenant: Tenant, previously_ready_at: dt.datetime | None) -> None:
    """Observe approval → ready for the approval this readiness answers (not for a tenant ready before it)."""
    approved_at = (
        TenantRequest.objects.filter(tenant=tenant, status=TenantRequest.Status.APPROVED, decided_at__isnull=False)
        .order_by("-decided_at")
        .values_list("decided_at", flat=True)
        .first()
    )
    if approved_at is None or tenant.ready_at is None:
        return
    if previously_ready_at is not None and approved_at <= previously_ready_at:
        return
    seconds = max(0.0, (tenant.ready_at - approved_at).total_seconds())
    cluster = tenant.cluster.name
    _on_commit(lambda: APPROVE_TO_READY.labels(cluster).observe(seconds))


def drift_repaired(*, tenant: Tenant, objects: int) -> None:
    if objects:
        cluster = tenant.cluster.name
        _on_commit(lambda: RECONCILE_REPAIRS.labels(cluster).inc(objects))


def kubeconfig_issued(*, tenant: Tenant, role: str) -> None:
    cluster = tenant.cluster.name
    _on_commit(lambda: KUBECONFIGS_ISSUED.labels(cluster, role).inc())


def request_answered(*, path: str, status: int) -> None:
    HTTP_REQUESTS.labels(str(status)).inc()
    if path.startswith("/api/") and status >= 400:
        API_ERRORS.labels(str(status)).inc()


def alerts_received(*, outcome: str, count: int) -> None:
    ALERTS_RECEIVED.labels(outcome).inc(count)


def celery_task_finished(*, task: str, state: str, seconds: float) -> None:
    CELERY_TASKS.labels(task, state).inc()
    CELERY_TASK_DURATION.labels(task, state).observe(seconds)


def provision_run_timed(*, tenant_id: str, seconds: float) -> None:
    """One provisioning task run took ``seconds`` (recorded by worker.signals around the task)."""
    cluster = Tenant.objects.filter(pk=tenant_id).values_list("cluster__name", flat=True).first()
    if cluster is not None:
        PROVISION_DURATION.labels(cluster).observe(seconds)


# --- State at scrape time -----------------------------------------------------------------------------------------
# Statuses whose oldest tenant says something is waiting: the alert and the dashboard read these.
WAITING_STATUSES = (S.REQUESTED, S.APPROVED, S.PROVISIONING, S.DECOMMISSIONING)
LABELS_QUOTA = ["namespace", "resource", "cluster"]


def _queue_lengths() -> dict[str, int]:
    """Messages waiting in each Celery queue of the settings (kombu's Redis lists, one per priority step)."""
    import redis
    from kombu.transport.redis import Channel

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        names = [queue.name for queue in settings.CELERY_TASK_QUEUES]
        keys = {
            name: [name if step == 0 else f"{name}{Channel.sep}{step}" for step in Channel.priority_steps]
            for name in names
        }
        pipe = client.pipeline(transaction=False)
        for name in names:
            for key in keys[name]:
                pipe.llen(key)
        lengths = iter(pipe.execute())
        return {name: sum(next(lengths) for _ in keys[name]) for name in names}
    finally:
        client.close()


# The state gauges: name → (help, labels).
STATE_GAUGES: dict[str, tuple[str, list[str]]] = {
    "berth_tenants": ("Tenants by status, tier, team and cluster.", ["status", "tier", "team", "cluster"]),
    "berth_tenant_requests": ("Requests by status.", ["status"]),
    "berth_tenant_oldest_seconds": (
        "Age in its status of the oldest tenant in each waiting status (0: none waiting).",
        ["status"],
    ),
    "berth_tenant_isolation_passed": (
        "1 when a ready tenant's last isolation report passed, 0 when it failed.",
        ["tenant_id", "namespace", "team", "cluster"],
    ),
    "berth_tenant_quota_used": ("Quota used by a ready tenant, as read back from the cluster.", LABELS_QUOTA),
    "berth_tenant_quota_hard": ("Quota hard limit of a ready tenant.", LABELS_QUOTA),
    "berth_celery_queue_length": ("Messages waiting in a Celery queue (absent when the broker is down).", ["queue"]),
    "berth_orphan_namespaces": (
        "Namespaces with Berth's labels and a tenant id no live tenant has (after a restore), by cluster.",
        ["cluster"],
    ),
}


def _gauge(name: str) -> GaugeMetricFamily:
    documentation, labels = STATE_GAUGES[name]
    return GaugeMetricFamily(name, documentation, labels=labels)


class StateCollector(Collector):
    """Gauges of the database's state and the broker's queues, computed when scraped (a handful of queries)."""

    def describe(self) -> Iterator[Metric]:
        return (_gauge(name) for name in STATE_GAUGES)

    def collect(self) -> Iterator[Metric]:
        yield from self._tenants()
        yield from self._requests()
        yield from self._oldest()
        yield from self._per_tenant()
        yield from self._orphans()
        yield from self._queues()

    def _tenants(self) -> Iterable[Metric]:
        family = _gauge("berth_tenants")
        rows = Tenant.objects.values_list("status", "tier__name", "team__slug", "cluster__name").annotate(n=Count("id"))
        for status, tier, team, cluster, n in rows.order_by():
            family.add_metric([status, tier, team, cluster], n)
        yield family

    def _requests(self) -> Iterable[Metric]:
        family = _gauge("berth_tenant_requests")
        counts = dict(TenantRequest.objects.values_list("status").annotate(n=Count("id")).order_by())
        for status in TenantRequest.Status.values:
            family.add_metric([status], counts.get(status, 0))
        yield family

    def _oldest(self) -> Iterable[Metric]:
        family = _gauge("berth_tenant_oldest_seconds")
        oldest = dict(
            Tenant.objects.filter(status__in=WAITING_STATUSES)
            .values_list("status")
            .annotate(since=Min("status_changed_at"))
            .order_by()
        )
        now = timezone.now()
        for status in WAITING_STATUSES:
            since = oldest.get(status)
            family.add_metric([status], max(0.0, (now - since).total_seconds()) if since else 0.0)
        yield family

    def _orphans(self) -> Iterable[Metric]:
        family = _gauge("berth_orphan_namespaces")
        counts = Cluster.objects.values_list("name").annotate(n=Count("orphan_namespaces")).order_by()
        for cluster, n in counts:
            family.add_metric([cluster], n)
        yield family

    def _per_tenant(self) -> Iterable[Metric]:
        """Isolation reports and quota of ready tenants, in one query."""
        isolation = _gauge("berth_tenant_isolation_passed")
        used, hard = _gauge("berth_tenant_quota_used"), _gauge("berth_tenant_quota_hard")
        rows = Tenant.objects.filter(status=S.READY).values_list(
            "pk", "namespace", "team__slug", "cluster__name", "isolation_report__passed", "quota_usage"
        )
        for pk, namespace, team, cluster, passed, usage in rows.order_by():
            if passed is not None:
                isolation.add_metric([str(pk), namespace, team, cluster], 1.0 if passed else 0.0)
            for family, key in ((used, "used"), (hard, "hard")):
                for resource, quantity in ((usage or {}).get(key) or {}).items():
                    value = parse_quantity(quantity)
                    if value is not None:
                        family.add_metric([namespace, resource, cluster], float(value))
        yield from (isolation, used, hard)

    def _queues(self) -> Iterable[Metric]:
        family = _gauge("berth_celery_queue_length")
        try:
            lengths = _queue_lengths()
        except Exception as exc:  # the broker is down: say so in the log, and keep the database's metrics
            logger.warning("metrics: cannot read queue lengths from the broker: %s", type(exc).__name__)
            return
        for queue, length in lengths.items():
            family.add_metric([queue], length)
        yield family


EVENT_METRICS = (
    PROVISION_RUNS,
    PROVISION_DURATION,
    APPROVE_TO_READY,
    RECONCILE_REPAIRS,
    KUBECONFIGS_ISSUED,
    API_ERRORS,
    HTTP_REQUESTS,
    ALERTS_RECEIVED,
    CELERY_TASKS,
    CELERY_TASK_DURATION,
)


def exported_series() -> dict[str, set[str]]:
    """Every series name Berth exports (counters' ``_total``, histograms' ``_bucket``/``_count``/``_sum``) with its
    label names: what the chart's rules and dashboard may read (tests/deploy checks them against it)."""
    series: dict[str, set[str]] = {name: set(labels) for name, (_, labels) in STATE_GAUGES.items()}
    for metric in EVENT_METRICS:
        labels = set(metric._labelnames)
        if isinstance(metric, Histogram):
            series[f"{metric._name}_bucket"] = labels | {"le"}
            series[f"{metric._name}_count"] = series[f"{metric._name}_sum"] = labels
        else:
            series[f"{metric._name}_total"] = labels
    return series


class _ThisProcess(Collector):
    """The default registry (one process: runserver, tests) when there is no multiprocess directory."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


def events_registry() -> CollectorRegistry:
    """The event counters and histograms of every process of this web or worker deployment unit."""
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)
    else:
        registry.register(_ThisProcess())
    return registry


def scrape_registry() -> CollectorRegistry:
    """What the web's /metrics serves: this deployment's events and the state gauges."""
    registry = events_registry()
    registry.register(StateCollector())
    return registry
