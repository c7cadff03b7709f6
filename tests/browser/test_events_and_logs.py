"""The Events and logs tab and a pod's log page in Chromium: accessible, and the live follow appends new lines.

What the cluster answers is stood in for by the worker's hooks (tests.fixtures.FakeWorkerHooks): the reads
themselves, with the team's own token on real nodes, are proven in tests/security/test_workload_reads.py.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from tenants.hooks import ClusterEvent, PodLog, PodSummary, Workload
from tests.browser.support import Portal, alices_ready_tenant, axe_violations, blocking, describe_violations, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _workload() -> Workload:
    now = timezone.now()
    events = [
        ClusterEvent(
            "Warning",
            "BackOff",
            "Pod/ledger-7d9f-x2k4p",
            "Back-off restarting failed container app in pod ledger-7d9f-x2k4p_payments(4f3c…)",
            14,
            now - dt.timedelta(seconds=40),
        ),
        *(
            ClusterEvent("Normal", "Pulled", f"Pod/ledger-7d9f-{i:05d}", "Container image already present", 1, now)
            for i in range(8)
        ),
    ]
    pods = (
        PodSummary("ledger-7d9f-x2k4p", "Running", 14, ("app", "proxy")),
        PodSummary("ledger-7d9f-q8w2z", "Running", 0, ("app",)),
    )
    return Workload(pods=pods, events=tuple(events))


@pytest.mark.parametrize("width", [1440, 390])
def test_the_events_tab_and_a_log_page_are_accessible(
    portal: Portal, cluster, dispatched, worker_hooks, axe_installed, width
):
    worker_hooks.workload = _workload()
    worker_hooks.log = PodLog(
        lines=tuple(f"2026-03-01 12:00:{i:02d} INFO request served in {i} ms path=/api/v1/pay" for i in range(60)),
        truncated=True,
        last_timestamp="2026-03-01T12:00:59Z",
    )
    page = portal.page_as("alice", bypass_csp=True)  # signs alice in: her user and team exist from here
    tenant = alices_ready_tenant(cluster)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(portal.at(f"/tenants/{tenant.pk}/?tab=events"))
    tabs = page.get_by_role("navigation", name="Tenant sections")
    expect(tabs.get_by_role("link", name="Events and logs")).to_have_attribute("aria-current", "page")
    expect(page.get_by_role("region", name="Recent events").get_by_text("BackOff")).to_be_visible()
    if width == 1440:
        screenshot(page, "tenant-events")
    assert page.evaluate("document.documentElement.scrollWidth") <= width, "the events tab scrolls sideways"
    found = axe_violations(page)
    assert not blocking(found), describe_violations(f"tenant events at {width} px", found)

    page.get_by_role("link", name="proxy log of ledger-7d9f-x2k4p").click()
    expect(page.get_by_role("heading", name="Log of proxy")).to_be_visible()
    expect(page.get_by_text("Cut at 256 KiB")).to_be_visible()
    if width == 1440:
        screenshot(page, "tenant-pod-log")
    assert page.evaluate("document.documentElement.scrollWidth") <= width, "the log page scrolls sideways"
    found = axe_violations(page)
    assert not blocking(found), describe_violations(f"pod log at {width} px", found)


def test_following_a_log_appends_the_new_lines_in_place(portal: Portal, cluster, dispatched, worker_hooks):
    worker_hooks.log = PodLog(lines=("first line",), truncated=False, last_timestamp="2026-03-01T12:00:00Z")
    page = portal.page_as("alice")  # under the portal's CSP
    tenant = alices_ready_tenant(cluster)
    page.goto(portal.at(f"/tenants/{tenant.pk}/pods/web-1/log/?container=app"))
    log = page.get_by_role("log", name="Log of app")
    expect(log).to_contain_text("first line")
    page.get_by_label("Follow live").check()
    page.get_by_role("button", name="Show").click()
    expect(page.locator("#log-next")).to_be_attached()
    worker_hooks.log = PodLog(lines=("second line",), truncated=False, last_timestamp="2026-03-01T12:00:04Z")
    expect(log).to_contain_text("second line", timeout=10_000)
    expect(log).to_contain_text("first line")
    follow_reads = [query for kind, _, query in worker_hooks.reads if kind == "log" and query.since_time]
    assert follow_reads and follow_reads[0].since_time == "2026-03-01T12:00:00Z"
