"""Metrics and logs of a real journey: the live portal (gunicorn, two workers), the real Celery worker (prefork) and
the dev control plane. A tenant is requested, approved, provisioned, given a kubeconfig and decommissioned through
the REST API; then /metrics and the worker's exporter are scraped over HTTP, and both processes' logs are read."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tenants.models import Tenant
from tests.fixtures import TokenFactory
from tests.plugins.kube import wait_for
from tests.plugins.portal import LivePortal
from tests.plugins.worker import OUTPUT, assert_passes_but_packets_unproven, wait_status

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str, token: str | None = None) -> Samples:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    answer = requests.get(url, headers=headers, timeout=10)
    assert answer.status_code == 200, answer.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for (n, lab), v in samples.items() if n == name and set(labels.items()) <= set(lab))


@dataclass
class Journey:
    tenant: Tenant
    submit_id: str
    approve_id: str
    secrets: list[str]


class Api:
    def __init__(self, portal: LivePortal, token: str) -> None:
        self.portal, self.token = portal, token

    def post(self, path: str, body: dict | None = None, *, request_id: str = "") -> requests.Response:
        headers = {"Authorization": f"Token {self.token}"}
        if request_id:
            headers["X-Request-ID"] = request_id
        answer = requests.post(f"{self.portal.url}/api/v1/{path}", json=body or {}, headers=headers, timeout=60)
        assert answer.status_code < 300, answer.text
        assert answer.headers["X-Request-ID"] == (request_id or answer.headers["X-Request-ID"])
        return answer


def journey(portal, cluster, api_token, alice, carol, team_a, *, name: str, decommission: bool) -> Journey:
    alice_token, carol_token = api_token(alice, team=team_a), api_token(carol)
    alice_api, carol_api = Api(portal, alice_token), Api(portal, carol_token)
    submit_id, approve_id = f"submit-{secrets.token_hex(4)}", f"approve-{secrets.token_hex(4)}"
    body = {"action": "create", "team": team_a.slug, "name": name, "tier": "medium", "cluster": cluster.name}
    request = alice_api.post("requests/", body, request_id=submit_id).json()
    carol_api.post(f"requests/{request['id']}/approve/", {"comment": "ok"}, request_id=approve_id)
    tenant = Tenant.objects.get(pk=request["tenant"])

    def settled() -> bool:
        tenant.refresh_from_db()
        return tenant.status in ("ready", "failed")

    wait_for(settled, timeout=90, what=f"tenant {name} to be ready or failed")
    assert tenant.status == "ready", tenant.status_reason
    kubeconfig = yaml.safe_load(alice_api.post(f"tenants/{tenant.pk}/kubeconfig/", {"lifetime_seconds": 900}).text)
    credential = kubeconfig["users"][0]["user"]["token"]
    # A refused credential must not be written down either.
    forged = "brt_deadbeef_" + secrets.token_urlsafe(32)
    assert requests.get(f"{portal.url}/api/v1/me/", headers={"Authorization": f"Token {forged}"}).status_code == 401
    if decommission:
        alice_api.post(f"tenants/{tenant.pk}/decommission/", {"reason": "done"})
        wait_status(tenant, "deleted")
    return Journey(tenant, submit_id, approve_id, [alice_token, carol_token, credential, forged, portal.metrics_token])


def test_metrics_after_real_actions_have_the_names_and_labels_the_alerts_read(
    live_portal, live_cluster, celery_worker, api_token: TokenFactory, alice, carol, team_a
):
    web_before = scrape(f"{live_portal.url}/metrics", live_portal.metrics_token)
    worker_before = scrape(celery_worker.metrics_url)

    done = journey(live_portal, live_cluster, api_token, alice, carol, team_a, name="metered", decommission=False)
    tenant, cluster = done.tenant, live_cluster.name

    web = scrape(f"{live_portal.url}/metrics", live_portal.metrics_token)
    labels = {"status": "ready", "tier": "medium", "team": "team-a", "cluster": cluster}
    assert total(web, "berth_tenants", **labels) == 1
    assert total(web, "berth_tenant_requests", status="approved") >= 1
    assert ("berth_tenant_oldest_seconds", (("status", "approved"),)) in web
    assert {"celery", "events"} <= {dict(lab)["queue"] for n, lab in web if n == "berth_celery_queue_length"}
    issued = {"cluster": cluster, "role": "edit"}
    assert total(web, "berth_kubeconfigs_issued_total", **issued) == 1 + total(
        web_before, "berth_kubeconfigs_issued_total", **issued
    )
    assert total(web, "berth_api_errors_total", status="401") >= 1 + total(
        web_before, "berth_api_errors_total", status="401"
    )
    assert total(web, "berth_http_requests_total", status="201") >= 1 + total(
        web_before, "berth_http_requests_total", status="201"
    )

    # Provisioning happened in the worker's prefork children: its exporter adds them up.
    worker = scrape(celery_worker.metrics_url)
    ran = {"cluster": cluster, "kind": "namespace", "result": "ready"}
    assert total(worker, "berth_provision_runs_total", **ran) == 1 + total(
        worker_before, "berth_provision_runs_total", **ran
    )
    assert total(worker, "berth_approve_to_ready_seconds_count", cluster=cluster) == 1
    assert total(worker, "berth_provision_duration_seconds_count", cluster=cluster) >= 1
    task = {"task": "worker.tasks.provision_tenant", "state": "SUCCESS"}
    assert total(worker, "berth_celery_tasks_total", **task) > total(worker_before, "berth_celery_tasks_total", **task)
    assert total(worker, "berth_celery_task_duration_seconds_count", task="worker.tasks.provision_tenant") >= 1

    # The isolation check and the usage read come shortly after ready (the worker queues them). This control plane
    # has no nodes, so the report's packet checks are not proven and the report, and with it the gauge, is 0.
    def per_tenant() -> Samples:
        return scrape(f"{live_portal.url}/metrics", live_portal.metrics_token)

    def exported() -> Samples | None:
        samples = per_tenant()
        wanted = ("tenant_id", str(tenant.pk))
        return samples if any(n == "berth_tenant_isolation_passed" and wanted in lab for n, lab in samples) else None

    report = wait_for(lambda: Tenant.objects.get(pk=tenant.pk).isolation_report, timeout=90, what="the report")
    assert_passes_but_packets_unproven(report)
    web = wait_for(exported, timeout=30, what="the report's gauge in /metrics")
    assert total(web, "berth_tenant_isolation_passed", tenant_id=str(tenant.pk)) == 0
    hard = {"namespace": tenant.namespace, "cluster": cluster, "resource": "pods"}
    assert total(web, "berth_tenant_quota_hard", **hard) > 0
    assert ("berth_tenant_quota_used", tuple(sorted(hard.items()))) in web


def log_lines_since(path: Path, offset: int) -> list[str]:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace").splitlines()


def test_a_full_journey_logs_json_with_request_ids_and_no_secret(
    live_portal, live_cluster, celery_worker, api_token: TokenFactory, alice, carol, team_a
):
    web_log, worker_log = live_portal.log, OUTPUT / "celery-worker.log"
    web_start, worker_start = web_log.stat().st_size, worker_log.stat().st_size

    done = journey(live_portal, live_cluster, api_token, alice, carol, team_a, name="logged", decommission=True)
    tenant_id = str(done.tenant.pk)

    web_lines, worker_lines = log_lines_since(web_log, web_start), log_lines_since(worker_log, worker_start)
    for line in web_lines + worker_lines:
        for secret in done.secrets:
            assert secret not in line, f"a credential in a log line: {line[:200]}"

    # Gunicorn's own access lines aside, every line is a JSON object with the request context.
    def entries(lines: list[str]) -> list[dict]:
        found = [json.loads(line) for line in lines if line.startswith("{")]
        assert all({"request_id", "user", "tenant_id", "message", "level"} <= set(e) for e in found)
        return found

    web, worker = entries(web_lines), entries(worker_lines)
    # The portal writes nothing outside a request's context.
    assert all(e["request_id"] for e in web if not e["logger"].startswith("gunicorn")), web
    requests_logged = {e["request_id"]: e for e in web if e["logger"] == "berth.request"}
    assert requests_logged[done.submit_id]["user"] == "alice"
    assert requests_logged[done.approve_id]["user"] == "carol"
    assert any(e["tenant_id"] == tenant_id and e["message"].endswith("/kubeconfig/ 200") for e in web)
    # The worker's lines for this tenant carry the request id of the approval that enqueued its provisioning.
    mine = [e for e in worker if e["tenant_id"] == tenant_id]
    assert mine, "no worker log line names the tenant"
    assert done.approve_id in {e["request_id"] for e in mine}
    assert all(e["request_id"] for e in mine)
    # Nothing the worker printed escaped the JSON format (Celery logs through Django's configuration).
    stray = [line for line in worker_lines if line.strip() and not line.startswith("{")]
    assert not stray, stray[:5]
