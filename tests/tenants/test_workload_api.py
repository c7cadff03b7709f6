"""A tenant's pods, events and pod logs in the API, with the worker's hooks faked (the reads with the team's own
token on real nodes: tests/security/test_workload_reads.py)."""

from __future__ import annotations

import datetime as dt
import logging

import pytest

from tenants.api.throttling import SharedRateThrottle
from tenants.errors import ClusterRefused
from tenants.hooks import ClusterEvent, PodLog, PodSummary, Workload
from tenants.models import Tier

pytestmark = pytest.mark.django_db

MARKER = "secret-api-log-line-9d2e"


@pytest.fixture
def shop(ready_tenant_row):
    return ready_tenant_row("shop")


def test_the_team_reads_pods_events_and_a_log(api, alice, shop, worker_hooks):
    seen = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)
    worker_hooks.workload = Workload(
        pods=(PodSummary("web-1", "Running", 1, ("app",)),),
        events=(ClusterEvent("Warning", "BackOff", "Pod/web-1", "Back-off", 3, seen),),
    )
    worker_hooks.log = PodLog(lines=("a", "b"), truncated=True, last_timestamp="2026-01-01T12:00:00.5Z")
    client = api(alice)
    assert client.get(f"/api/v1/tenants/{shop.pk}/pods/").json() == {
        "pods": [{"name": "web-1", "phase": "Running", "restarts": 1, "containers": ["app"]}]
    }
    assert client.get(f"/api/v1/tenants/{shop.pk}/events/").json() == {
        "events": [
            {
                "type": "Warning",
                "reason": "BackOff",
                "object": "Pod/web-1",
                "message": "Back-off",
                "count": 3,
                "last_seen": "2026-01-01T12:00:00Z",
            }
        ]
    }
    answer = client.get(f"/api/v1/tenants/{shop.pk}/pods/web-1/log/?container=app&tail=20&previous=true")
    assert answer.json() == {"lines": ["a", "b"], "truncated": True, "last_timestamp": "2026-01-01T12:00:00.5Z"}
    query = worker_hooks.reads[-1][2]
    assert (query.container, query.tail_lines, query.previous, query.limit_bytes) == ("app", 20, True, 256 * 1024)


def test_a_viewer_may_not_read_logs_unless_the_tier_says_so(api, vera, shop, worker_hooks):
    refused = api(vera).get(f"/api/v1/tenants/{shop.pk}/pods/web-1/log/")
    assert refused.status_code == 403 and "does not let viewers read logs" in refused.json()["detail"]
    assert api(vera).get(f"/api/v1/tenants/{shop.pk}/events/").status_code == 200
    Tier.objects.filter(pk=shop.tier_id).update(viewers_read_logs=True)
    assert api(vera).get(f"/api/v1/tenants/{shop.pk}/pods/web-1/log/").status_code == 200
    assert [role for kind, role, _ in worker_hooks.reads if kind == "log"] == ["view"]


def test_another_team_gets_404_and_bad_parameters_400(api, bob, alice, shop, worker_hooks):
    for path in ("pods/", "events/", "pods/web-1/log/"):
        assert api(bob).get(f"/api/v1/tenants/{shop.pk}/{path}").status_code == 404
    for query in ("?tail=0", "?tail=501", "?tail=x", "?previous=maybe", "?container=A", "?since_time=yesterday"):
        answer = api(alice).get(f"/api/v1/tenants/{shop.pk}/pods/web-1/log/{query}")
        assert answer.status_code == 400, query
    assert api(alice).get(f"/api/v1/tenants/{shop.pk}/pods/web-1/log/?tail=5&tail=500").status_code == 400
    assert api(alice).get(f"/api/v1/tenants/{shop.pk}/pods/../log/").status_code in (400, 404)
    assert worker_hooks.reads == []


def test_what_the_api_server_refuses_keeps_its_status(api, alice, shop, worker_hooks, monkeypatch):
    def refuse(tenant, query, *, role):
        raise ClusterRefused('log of pod nope: pods "nope" not found', status=404)

    monkeypatch.setattr(worker_hooks, "read_pod_log", refuse)
    answer = api(alice).get(f"/api/v1/tenants/{shop.pk}/pods/nope/log/")
    assert answer.status_code == 404 and "not found" in answer.json()["detail"]


def test_the_api_and_the_page_share_one_budget_per_person(api, client, alice, shop, worker_hooks, monkeypatch):
    monkeypatch.setitem(SharedRateThrottle.THROTTLE_RATES, "workload", "2/min")
    client.force_login(alice)
    assert client.get(f"/tenants/{shop.pk}/pods/web-1/log/").status_code == 200
    assert api(alice).get(f"/api/v1/tenants/{shop.pk}/events/").status_code == 200
    refused = api(alice).get(f"/api/v1/tenants/{shop.pk}/pods/web-1/log/")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0


def test_log_lines_never_reach_berths_own_logs(api, alice, shop, worker_hooks, caplog):
    caplog.set_level(logging.DEBUG)
    worker_hooks.log = PodLog(lines=(MARKER,), truncated=False, last_timestamp="")
    assert MARKER in api(alice).get(f"/api/v1/tenants/{shop.pk}/pods/web-1/log/").content.decode()
    assert caplog.records
    assert not [r for r in caplog.records if MARKER in r.getMessage() or MARKER in str(r.__dict__)]
