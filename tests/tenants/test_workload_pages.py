"""The Events and logs tab and the pod log page, with the worker's hooks faked: who may read what, with which
identity, within which bounds, and what the page says when it cannot. The reads themselves, with the team's own
token against the dev cluster's nodes: tests/security/test_workload_reads.py."""

from __future__ import annotations

import datetime as dt
import logging

import pytest
from django.test import Client

from tenants.api.throttling import SharedRateThrottle
from tenants.errors import ClusterRefused
from tenants.hooks import ClusterEvent, PodLog, PodSummary, Workload
from tenants.models import Cluster, Tier

pytestmark = pytest.mark.django_db

MARKER = "secret-log-line-4f1c2b"


@pytest.fixture
def shop(ready_tenant_row):
    return ready_tenant_row("shop")


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _log_url(tenant, pod="web-1", query="") -> str:
    return f"/tenants/{tenant.pk}/pods/{pod}/log/{query}"


def test_the_events_tab_lists_pods_and_the_newest_events_with_warnings_marked(alice, shop, worker_hooks):
    seen = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    worker_hooks.workload = Workload(
        pods=(PodSummary("web-1", "Running", 2, ("app", "sidecar")),),
        events=(
            ClusterEvent("Warning", "BackOff", "Pod/web-1", "Back-off restarting failed container", 7, seen),
            ClusterEvent("Normal", "Scheduled", "Pod/web-1", "Successfully assigned", 1, seen),
        ),
    )
    page = _client(alice).get(f"/tenants/{shop.pk}/?tab=events")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'aria-current="page">Events and logs' in html
    assert "web-1" in html and "BackOff" in html and "×7" in html
    assert 'class="row--warning"' in html and html.count('class="row--warning"') == 1
    assert f"/tenants/{shop.pk}/pods/web-1/log/?container=sidecar" in html
    assert "previous=1" in html  # restarted: the previous run is a link
    assert "at most 50" in html
    assert worker_hooks.reads == [("workload", "view", None)]


def test_other_tabs_do_not_read_the_cluster(alice, shop, worker_hooks):
    for tab in ("overview", "quota", "security", "costs", "activity"):
        assert _client(alice).get(f"/tenants/{shop.pk}/?tab={tab}").status_code == 200
    assert worker_hooks.reads == []


@pytest.mark.parametrize(("user", "role"), [("alice", "edit"), ("amir", "edit"), ("dave", "edit")])
def test_owners_members_and_admins_read_logs_with_their_kubeconfigs_identity(
    request, user, role, shop, worker_hooks, amir, dave
):
    worker_hooks.log = PodLog(lines=("hello", MARKER), truncated=False, last_timestamp="2026-01-01T00:00:01Z")
    page = _client(request.getfixturevalue(user)).get(_log_url(shop, query="?container=app&tail=50"))
    assert page.status_code == 200
    assert MARKER in page.content.decode()
    ((kind, used, query),) = worker_hooks.reads
    assert (kind, used, query.pod, query.container, query.tail_lines, query.limit_bytes) == (
        "log",
        role,
        "web-1",
        "app",
        50,
        256 * 1024,
    )


def test_a_viewer_is_told_their_tier_does_not_let_viewers_read_logs(vera, shop, worker_hooks):
    page = _client(vera).get(_log_url(shop))
    assert page.status_code == 403
    assert "does not let viewers read logs" in page.content.decode()
    assert worker_hooks.reads == []
    # The events tab is open to viewers: it is read with the viewer identity in any case.
    assert _client(vera).get(f"/tenants/{shop.pk}/?tab=events").status_code == 200


def test_a_viewer_reads_logs_as_the_viewer_where_the_tier_lets_them(vera, shop, worker_hooks):
    Tier.objects.filter(pk=shop.tier_id).update(viewers_read_logs=True)
    assert _client(vera).get(_log_url(shop)).status_code == 200
    assert [(kind, role) for kind, role, _ in worker_hooks.reads] == [("log", "view")]


def test_another_team_and_an_approver_outside_the_team_read_nothing(bob, carol, shop, worker_hooks):
    assert _client(bob).get(_log_url(shop)).status_code == 404
    assert _client(bob).get(f"/tenants/{shop.pk}/?tab=events").status_code == 404
    # An approver sees the tenant but holds no identity of its team.
    page = _client(carol).get(f"/tenants/{shop.pk}/?tab=events")
    assert page.status_code == 200 and "Only the tenant&#x27;s team" in page.content.decode()
    assert _client(carol).get(_log_url(shop)).status_code == 403
    assert worker_hooks.reads == []


@pytest.mark.parametrize(
    "path",
    [
        "..",
        "web-1..x",
        "Web-1",
        "web_1",
        "-web",
        "a" * 254,
        "%2e%2e",
    ],
)
def test_names_that_are_not_pod_names_never_reach_the_cluster(alice, shop, worker_hooks, path):
    page = _client(alice).get(_log_url(shop, pod=path))
    assert page.status_code in (400, 404)
    assert worker_hooks.reads == []


@pytest.mark.parametrize(
    "query", ["?container=../../x", "?container=A", "?tail=501", "?tail=0", "?tail=x", "?container=a%2Fb"]
)
def test_containers_and_bounds_outside_the_rules_are_refused(alice, shop, worker_hooks, query):
    page = _client(alice).get(_log_url(shop, query=query))
    assert page.status_code == 400
    assert worker_hooks.reads == []


def test_slashes_in_the_pod_name_do_not_route(alice, shop, worker_hooks):
    for pod in ("web-1/../../kube-system/pods/etcd", "web-1%2F..%2Fx"):
        assert _client(alice).get(f"/tenants/{shop.pk}/pods/{pod}/log/").status_code == 404
    assert worker_hooks.reads == []


def test_what_the_api_server_refuses_is_shown_not_raised(alice, shop, worker_hooks, monkeypatch):
    def refuse(tenant, query, *, role):
        raise ClusterRefused('log of pod nope: pods "nope" not found', status=404)

    monkeypatch.setattr(worker_hooks, "read_pod_log", refuse)
    page = _client(alice).get(_log_url(shop, pod="nope"))
    assert page.status_code == 404
    assert "The cluster refused" in page.content.decode() and "not found" in page.content.decode()


def test_oidc_clusters_and_virtual_clusters_say_why_berth_shows_nothing(alice, shop, worker_hooks):
    Cluster.objects.filter(pk=shop.cluster_id).update(access_mode="oidc")
    page = _client(alice).get(f"/tenants/{shop.pk}/?tab=events").content.decode()
    assert "signs teams in with OIDC" in page and "never reads them with its own rights" in page
    assert "signs teams in with OIDC" in _client(alice).get(_log_url(shop)).content.decode()
    Cluster.objects.filter(pk=shop.cluster_id).update(access_mode="token")
    type(shop).objects.filter(pk=shop.pk).update(kind="vcluster")
    page = _client(alice).get(f"/tenants/{shop.pk}/?tab=events").content.decode()
    assert "live inside it: use your kubeconfig" in page
    assert worker_hooks.reads == []


def test_reads_are_rate_limited_per_person_across_the_tab_and_the_log(alice, amir, shop, worker_hooks, monkeypatch):
    monkeypatch.setitem(SharedRateThrottle.THROTTLE_RATES, "workload", "3/min")
    client = _client(alice)
    assert client.get(f"/tenants/{shop.pk}/?tab=events").status_code == 200
    assert client.get(_log_url(shop)).status_code == 200
    assert client.get(_log_url(shop)).status_code == 200
    refused = client.get(_log_url(shop))
    assert refused.status_code == 429 and "Too many reads of events and logs" in refused.content.decode()
    assert "Too many reads" in client.get(f"/tenants/{shop.pk}/?tab=events").content.decode()
    assert len(worker_hooks.reads) == 3
    # Another person has a budget of their own.
    assert _client(amir).get(_log_url(shop)).status_code == 200


def test_follow_asks_for_what_came_after_the_last_line_and_stops_after_ten_minutes(alice, shop, worker_hooks):
    worker_hooks.log = PodLog(lines=("new line",), truncated=False, last_timestamp="2026-01-01T00:00:05.5Z")
    client = _client(alice)
    first = client.get(_log_url(shop, query="?follow=1")).content.decode()
    assert 'hx-trigger="load delay:3s"' in first
    since = "2026-01-01T00:00:04.25Z"
    fragment = client.get(f"/tenants/{shop.pk}/pods/web-1/log/follow/?since={since}&polls=3").content.decode()
    assert "new line" in fragment
    assert "since=2026-01-01T00%3A00%3A05.5Z&amp;polls=4" in fragment
    assert worker_hooks.reads[-1][2].since_time == since
    last = client.get(f"/tenants/{shop.pk}/pods/web-1/log/follow/?since={since}&polls=199").content.decode()
    assert "Stopped following after 10 minutes" in last and "hx-get" not in last


def test_a_cut_log_says_so(alice, shop, worker_hooks):
    worker_hooks.log = PodLog(lines=("x" * 100,), truncated=True, last_timestamp="")
    assert "Cut at 256 KiB" in _client(alice).get(_log_url(shop)).content.decode()


def test_log_lines_never_reach_berths_own_logs(alice, shop, worker_hooks, caplog):
    """Every logger, at every level, while a page shows a log line and while a read fails."""
    caplog.set_level(logging.DEBUG)
    worker_hooks.log = PodLog(lines=(MARKER,), truncated=False, last_timestamp="")
    client = _client(alice)
    assert MARKER in client.get(_log_url(shop, query=f"?container=app&x={MARKER[:3]}")).content.decode()
    assert MARKER in client.get(f"/tenants/{shop.pk}/pods/web-1/log/follow/?polls=1").content.decode()
    assert caplog.records  # the request lines were captured
    assert not [r for r in caplog.records if MARKER in r.getMessage() or MARKER in str(r.__dict__)]


def test_a_name_with_a_trailing_newline_is_not_a_pod_name(alice, shop, worker_hooks):
    assert _client(alice).get(_log_url(shop, pod="web-1%0A")).status_code in (400, 404)
    assert _client(alice).get(_log_url(shop, query="?since=2026-01-01T00:00:00Z%0A&follow=1")).status_code in (
        200,
        400,
    )
    follow = _client(alice).get(f"/tenants/{shop.pk}/pods/web-1/log/follow/?since=2026-01-01T00:00:00Z%0A")
    assert "An RFC 3339 time" in follow.content.decode()
    assert all(read[2] is None or "\n" not in read[2].since_time + read[2].pod for read in worker_hooks.reads)


@pytest.mark.parametrize("polls", ["-100000", "100000"])
def test_a_follow_count_the_page_never_sends_stops_the_follow(alice, shop, worker_hooks, polls):
    fragment = _client(alice).get(f"/tenants/{shop.pk}/pods/web-1/log/follow/?polls={polls}").content.decode()
    assert "hx-get" not in fragment


def test_one_person_has_at_most_two_reads_running_at_once(alice, amir, shop, worker_hooks, settings):
    from tenants import concurrency

    settings.BERTH_READS_AT_ONCE = 1
    with concurrency.slot("workload", alice.pk):  # a read of alice's still running elsewhere
        refused = _client(alice).get(_log_url(shop))
        assert refused.status_code == 429 and "At most 1 of these at once" in refused.content.decode()
        assert "At most 1 of these at once" in _client(alice).get(f"/tenants/{shop.pk}/?tab=events").content.decode()
        assert _client(amir).get(_log_url(shop)).status_code == 200  # another person's slots are their own
    assert _client(alice).get(_log_url(shop)).status_code == 200  # the slot is given back


def test_a_platform_admins_log_read_of_a_team_is_audited_without_its_content(alice, dave, shop, worker_hooks):
    from tenants.models import AuditEvent

    worker_hooks.log = PodLog(lines=(MARKER,), truncated=False, last_timestamp="2026-01-01T00:00:05Z")
    assert _client(alice).get(_log_url(shop)).status_code == 200  # the team's own reads are not recorded
    assert not AuditEvent.objects.filter(action="tenant.log_read_outside_team").exists()
    assert _client(dave).get(_log_url(shop, query="?container=app")).status_code == 200
    _client(dave).get(f"/tenants/{shop.pk}/pods/web-1/log/follow/?since=2026-01-01T00:00:04Z&polls=1")
    events = list(AuditEvent.objects.filter(action="tenant.log_read_outside_team"))
    assert len(events) == 1  # the read, not each follow poll
    assert events[0].actor == dave and events[0].object_id == str(shop.pk)
    assert events[0].after == {"pod": "web-1", "container": "app", "previous": False}
    assert MARKER not in str(events[0].after) + str(events[0].before)
