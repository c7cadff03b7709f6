"""Metrics: the scrape-time state collector (values, labels, a fixed number of queries), the event counters the
services record, and the /metrics endpoint's token."""

from __future__ import annotations

import datetime as dt
import secrets
import time

import pytest
from django.utils import timezone
from kombu import Connection, Queue
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tenants import metrics, services
from tenants.models import OrphanNamespace, Tenant, TenantRequest

pytestmark = pytest.mark.django_db


def samples(registry_text: bytes | str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = registry_text.decode() if isinstance(registry_text, bytes) else registry_text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def state() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics.StateCollector())
    return samples(generate_latest(registry))


def make_tenant(name, *, team, tier, cluster, user, status="ready", **fields) -> Tenant:
    return Tenant.objects.create(
        name=name, namespace=name, team=team, tier=tier, cluster=cluster, status=status, created_by=user, **fields
    )


def test_state_gauges_count_tenants_requests_waiting_isolation_and_quota(alice, team_a, small, medium, cluster):
    usage = {"hard": {"requests.cpu": "2", "requests.memory": "1Gi"}, "used": {"requests.cpu": "500m"}}
    checkout = make_tenant(
        "checkout", team=team_a, tier=medium, cluster=cluster, user=alice, quota_usage=usage,
        isolation_report={"passed": True, "checks": []},
    )  # fmt: skip
    make_tenant("broken", team=team_a, tier=medium, cluster=cluster, user=alice, isolation_report={"passed": False})
    waiting = make_tenant("waiting", team=team_a, tier=small, cluster=cluster, user=alice, status="approved")
    Tenant.objects.filter(pk=waiting.pk).update(status_changed_at=timezone.now() - dt.timedelta(minutes=20))
    TenantRequest.objects.create(
        action="create", name="waiting", team=team_a, tier=small, cluster=cluster, tenant=waiting, requested_by=alice
    )

    got = state()
    assert (
        got[("berth_tenants", (("cluster", "dev"), ("status", "ready"), ("team", "team-a"), ("tier", "medium")))] == 2
    )
    assert (
        got[("berth_tenants", (("cluster", "dev"), ("status", "approved"), ("team", "team-a"), ("tier", "small")))] == 1
    )
    assert got[("berth_tenant_requests", (("status", "pending"),))] == 1
    assert got[("berth_tenant_requests", (("status", "approved"),))] == 0
    assert 1190 < got[("berth_tenant_oldest_seconds", (("status", "approved"),))] < 1300
    assert got[("berth_tenant_oldest_seconds", (("status", "provisioning"),))] == 0
    isolation = "berth_tenant_isolation_passed"
    labels = (("cluster", "dev"), ("namespace", "checkout"), ("team", "team-a"), ("tenant_id", str(checkout.pk)))
    assert got[(isolation, labels)] == 1
    assert [v for (name, lab), v in got.items() if name == isolation and ("namespace", "broken") in lab] == [0]
    cpu = (("cluster", "dev"), ("namespace", "checkout"), ("resource", "requests.cpu"))
    assert got[("berth_tenant_quota_used", cpu)] == 0.5
    assert got[("berth_tenant_quota_hard", cpu)] == 2
    memory = (("cluster", "dev"), ("namespace", "checkout"), ("resource", "requests.memory"))
    assert got[("berth_tenant_quota_hard", memory)] == 2**30


def test_the_collector_runs_the_same_few_queries_whatever_the_number_of_tenants(
    alice, team_a, medium, cluster, django_assert_max_num_queries
):
    usage = {"hard": {"pods": "10"}, "used": {"pods": "1"}}
    Tenant.objects.bulk_create(
        Tenant(
            name=f"t{i}", namespace=f"t{i}", team=team_a, tier=medium, cluster=cluster, status="ready",
            created_by=alice, quota_usage=usage, isolation_report={"passed": True},
        )
        for i in range(300)
    )  # fmt: skip
    started = time.monotonic()
    with django_assert_max_num_queries(5):
        got = state()
    elapsed = time.monotonic() - started
    assert sum(1 for name, _ in got if name == "berth_tenant_quota_used") == 300
    assert elapsed < 2.0, f"a scrape with 300 tenants took {elapsed:.2f}s"


def test_queue_length_is_read_from_the_broker(settings):
    """Messages put straight into a queue of this test's own (kombu, not the shared Celery app)."""
    queue = f"metrics-{secrets.token_hex(3)}"
    settings.CELERY_TASK_QUEUES = [Queue(queue, routing_key=queue)]
    with Connection(settings.CELERY_BROKER_URL) as connection:
        messages = connection.SimpleQueue(queue)
        try:
            for _ in range(3):
                messages.put({"task": "waiting"})
            messages.put({"task": "urgent"}, priority=6)  # kombu keeps priorities in lists of their own
            assert state()[("berth_celery_queue_length", (("queue", queue),))] == 4
        finally:
            messages.clear()
            messages.close()


def test_a_broker_outage_leaves_the_databases_metrics(settings, alice, team_a, medium, cluster):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    got = state()
    assert not [name for name, _ in got if name == "berth_celery_queue_length"]
    assert ("berth_tenant_requests", (("status", "pending"),)) in got


# --- events recorded by the services -----------------------------------------------------------------------------
def value(metric, *labels: str) -> float:
    return metric.labels(*labels)._value.get()


def histogram_count(metric, *labels: str) -> float:
    return next(s.value for s in metric.labels(*labels).collect()[0].samples if s.name.endswith("_count"))


def test_ready_failed_and_reapplied_runs_are_counted_after_commit(
    alice, carol, team_a, medium, cluster, dispatched, django_capture_on_commit_callbacks
):
    req = services.request_submit(
        actor=alice, action="create", team=team_a, name="ledger", tier=medium, cluster=cluster
    )
    services.request_approve(tenant_request=req, actor=carol)
    tenant = Tenant.objects.get(pk=req.tenant_id)
    ready, approve = (
        value(metrics.PROVISION_RUNS, "dev", "namespace", "ready"),
        histogram_count(metrics.APPROVE_TO_READY, "dev"),
    )
    repaired, repairs = (
        value(metrics.PROVISION_RUNS, "dev", "namespace", "repaired"),
        value(metrics.RECONCILE_REPAIRS, "dev"),
    )
    with django_capture_on_commit_callbacks(execute=True):
        tenant = services.tenant_mark_provisioning(tenant=tenant)
        tenant = services.tenant_mark_ready(tenant=tenant, applied_generation=1)
    assert value(metrics.PROVISION_RUNS, "dev", "namespace", "ready") == ready + 1
    assert histogram_count(metrics.APPROVE_TO_READY, "dev") == approve + 1
    with django_capture_on_commit_callbacks(execute=True):
        services.tenant_record_applied(tenant=tenant, generation=1, repaired=["ResourceQuota/x", "Role/y"])
    assert value(metrics.PROVISION_RUNS, "dev", "namespace", "repaired") == repaired + 1
    assert value(metrics.RECONCILE_REPAIRS, "dev") == repairs + 2


def test_a_rolled_back_change_is_not_counted(alice, team_a, medium, cluster):
    tenant = make_tenant("gone", team=team_a, tier=medium, cluster=cluster, user=alice, status="provisioning")
    before = value(metrics.PROVISION_RUNS, "dev", "namespace", "failed")
    services.tenant_mark_failed(tenant=tenant, reason="no")  # the test's transaction never commits
    assert value(metrics.PROVISION_RUNS, "dev", "namespace", "failed") == before


def test_kubeconfig_issues_are_counted_by_cluster_and_role(
    alice, ready_tenant_row, worker_hooks, django_capture_on_commit_callbacks
):
    tenant = ready_tenant_row("issued")
    before = value(metrics.KUBECONFIGS_ISSUED, "dev", "edit")
    with django_capture_on_commit_callbacks(execute=True):
        services.tenant_issue_kubeconfig(tenant=tenant, actor=alice)
    assert value(metrics.KUBECONFIGS_ISSUED, "dev", "edit") == before + 1


# --- /metrics ------------------------------------------------------------------------------------------------------
def test_metrics_needs_the_token(client, settings):
    settings.BERTH_METRICS_TOKEN = "metrics-" + "m" * 24
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Token {settings.BERTH_METRICS_TOKEN}").status_code == 401
    answer = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {settings.BERTH_METRICS_TOKEN}", HTTP_HOST="10.1.2.3")
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/plain")
    assert b"berth_tenant_requests" in answer.content and b"berth_api_errors_total" in answer.content


def test_metrics_is_not_there_without_a_token(client, settings):
    settings.BERTH_METRICS_TOKEN = ""
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 404


def test_a_scrape_exports_exactly_the_declared_series(
    alice, team_a, medium, cluster, django_capture_on_commit_callbacks
):
    """exported_series (what tests/deploy checks the chart's rules and dashboard against) is what a scrape gives."""
    make_tenant(
        "declared", team=team_a, tier=medium, cluster=cluster, user=alice,
        quota_usage={"hard": {"pods": "4"}, "used": {"pods": "1"}}, isolation_report={"passed": True},
    )  # fmt: skip
    metrics.request_answered(path="/api/v1/me/", status=418)
    metrics.celery_task_finished(task="worker.tasks.sweep", state="SUCCESS", seconds=0.1)
    metrics.alerts_received(outcome="repeated", count=1)
    tenant = Tenant.objects.get(name="declared")
    with django_capture_on_commit_callbacks(execute=True):
        metrics.provision_finished(tenant=tenant, result="in_sync")
        metrics.drift_repaired(tenant=tenant, objects=1)
        metrics.kubeconfig_issued(tenant=tenant, role="view")
    metrics.PROVISION_DURATION.labels("dev").observe(1.0)
    metrics.APPROVE_TO_READY.labels("dev").observe(3.0)
    scraped: dict[str, set[str]] = {}
    for (name, labels), _ in samples(generate_latest(metrics.scrape_registry())).items():
        if name.startswith("berth_") and not name.endswith("_created"):
            scraped.setdefault(name, set()).update(label for label, _ in labels)
    assert scraped == metrics.exported_series()


def test_orphan_namespaces_are_counted_per_cluster(cluster):
    assert state()[("berth_orphan_namespaces", (("cluster", "dev"),))] == 0
    labels = {"app.kubernetes.io/managed-by": "berth", "berth.dev/tenant-id": "0b1c2d3e-0000-4000-8000-000000000001"}
    for name in ("newer", "newest"):
        OrphanNamespace.objects.create(
            cluster=cluster, name=name, uid=name, tenant_id=labels["berth.dev/tenant-id"], labels=labels,
            last_seen_at=timezone.now(),
        )  # fmt: skip
    assert state()[("berth_orphan_namespaces", (("cluster", "dev"),))] == 2
