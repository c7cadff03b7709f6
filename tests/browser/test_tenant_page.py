"""The tenant page in a real browser: an overview that fits one screen, and tabs for quota, security, costs and
activity; the isolation report summarised with its evidence on demand; bars whose widths tell 1 % from 6 %."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from playwright.sync_api import Locator, Page, expect

from tenants import services
from tenants.models import Tenant
from tests.browser.support import Portal, alices_ready_tenant, axe_violations, blocking, describe_violations, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Fourteen quotas, as a medium tenant reports them; pods at 1 %, services at 2 %, config maps at 6 %, secrets at 0 %.
USAGE = {
    "hard": {
        "requests.cpu": "4",
        "limits.cpu": "8",
        "requests.memory": "8Gi",
        "limits.memory": "16Gi",
        "requests.storage": "100Gi",
        "pods": "100",
        "services": "100",
        "services.loadbalancers": "2",
        "services.nodeports": "0",
        "persistentvolumeclaims": "20",
        "configmaps": "100",
        "secrets": "100",
        "count/deployments.apps": "50",
        "count/jobs.batch": "50",
    },
    "used": {
        "requests.cpu": "900m",
        "limits.cpu": "2",
        "requests.memory": "1Gi",
        "limits.memory": "2Gi",
        "requests.storage": "10Gi",
        "pods": "1",
        "services": "2",
        "services.loadbalancers": "0",
        "services.nodeports": "0",
        "persistentvolumeclaims": "1",
        "configmaps": "6",
        "secrets": "0",
        "count/deployments.apps": "3",
        "count/jobs.batch": "0",
    },
}
RAW_REFUSAL = (
    'pods "probe" is forbidden: violates PodSecurity "restricted:latest": host namespaces (hostNetwork=true), '
    "allowPrivilegeEscalation != false"
)
ISOLATION = {
    "passed": False,
    "checks": [
        {"id": f"MTB-{i}", "title": f"Check number {i}", "passed": True, "detail": RAW_REFUSAL} for i in range(20)
    ]
    + [
        {"id": "MTB-FNS-2", "title": "No extra role bindings", "passed": False, "detail": "RoleBinding x grants admin"},
        {"id": "NET-EGRESS", "title": "Egress follows the tier", "passed": False, "proven": False, "detail": "timeout"},
    ],
}


def _ready_tenant(cluster) -> Tenant:
    tenant = alices_ready_tenant(cluster)
    services.tenant_record_usage(tenant=tenant, usage=USAGE)
    services.tenant_record_isolation_report(tenant=tenant, report=ISOLATION)
    return tenant


def _fill_width(page: Page, meter_name: str) -> float:
    box = page.get_by_role("meter", name=meter_name).locator(".bar__fill").bounding_box()
    return box["width"] if box else 0.0


def test_the_overview_fits_one_screen_and_the_tabs_hold_the_rest(portal: Portal, cluster, dispatched):
    page = portal.page_as("alice")
    page.set_viewport_size({"width": 1440, "height": 900})
    tenant = _ready_tenant(cluster)
    page.goto(portal.at(f"/tenants/{tenant.pk}/"))
    content = page.locator("main#main > .stack").bounding_box()  # the cards, without the page's bottom margin
    assert content is not None and content["y"] + content["height"] <= 900, f"the overview ends at {content}"
    tabs = page.get_by_role("navigation", name="Tenant sections")
    expect(tabs.get_by_role("link", name="Overview")).to_have_attribute("aria-current", "page")

    usage = page.get_by_role("region", name="Quota usage")
    expect(usage.get_by_role("meter")).to_have_count(4)  # CPU, memory, storage and pods first
    for name in ("CPU limit", "Memory limit", "Storage", "Pods"):
        expect(usage.get_by_role("meter", name=name)).to_be_visible()
    expect(page.get_by_role("region", name="Security")).to_contain_text("20 of 22 checks passed")
    expect(page.get_by_text(RAW_REFUSAL)).to_have_count(0)

    tabs.get_by_role("link", name=re.compile(r"^Quota")).click()
    expect(page.get_by_role("meter")).to_have_count(14)
    assert _fill_width(page, "Secrets") == 0  # 0 % is an empty bar
    one, two, six = (_fill_width(page, name) for name in ("Pods", "Services", "ConfigMaps"))
    assert 0 < one < two < six, (one, two, six)

    tabs.get_by_role("link", name=re.compile(r"^Security")).click()
    report = page.get_by_role("region", name="Isolation report")
    expect(report).to_contain_text("20 of 22 checks passed")
    expect(report.get_by_role("listitem").first).to_contain_text("No extra role bindings")  # failures first
    expect(report).to_contain_text("RoleBinding x grants admin")
    raw = report.get_by_text(RAW_REFUSAL).first
    expect(raw).to_be_hidden()  # a passed check's evidence, on demand
    report.get_by_text("Evidence").first.click()
    expect(raw).to_be_visible()

    tabs.get_by_role("link", name="Activity").click()
    expect(page.get_by_role("region", name="Recent activity")).to_contain_text("Tenant ready")
    tabs.get_by_role("link", name="Costs").click()
    expect(page.get_by_role("heading", name=re.compile(r"^Costs"))).to_be_visible()


# Each tab: its key, its link's name, and something only that tab shows.
TABS: list[tuple[str, re.Pattern[str] | str, Callable[[Page], Locator]]] = [
    ("overview", "Overview", lambda page: page.get_by_role("region", name="Quota usage").get_by_role("meter").nth(3)),
    ("quota", re.compile(r"^Quota"), lambda page: page.get_by_role("meter").nth(13)),
    # The cluster here has no Prometheus: the tab says so (test_metrics.py draws real graphs).
    ("metrics", "Metrics", lambda page: page.get_by_text("This cluster has no Prometheus set up for Berth")),
    ("security", re.compile(r"^Security"), lambda page: page.get_by_role("region", name="Isolation report")),
    ("costs", "Costs", lambda page: page.get_by_role("heading", name=re.compile(r"^Costs"))),
    ("activity", "Activity", lambda page: page.get_by_role("region", name="Recent activity")),
]


@pytest.mark.parametrize("width", [1440, 390])
def test_every_tab_of_the_tenant_page_is_accessible(portal: Portal, cluster, dispatched, axe_installed, width):
    page = portal.page_as("alice", bypass_csp=True)
    tenant = _ready_tenant(cluster)
    page.set_viewport_size({"width": width, "height": 900})
    tabs = page.get_by_role("navigation", name="Tenant sections")
    for tab, label, shown in TABS:
        page.goto(portal.at(f"/tenants/{tenant.pk}/?tab={tab}"))
        # The tab itself, with what only it holds: axe-core reads each tab, not the same page five times.
        expect(tabs.get_by_role("link", name=label)).to_have_attribute("aria-current", "page")
        expect(shown(page)).to_be_visible()
        if width == 1440 and tab in ("overview", "security"):
            screenshot(page, "tenant-detail" if tab == "overview" else "tenant-security")
        if tab == "security":
            page.get_by_role("region", name="Isolation report").get_by_text("Evidence").first.click()
            expect(page.get_by_text(RAW_REFUSAL).first).to_be_visible()  # the disclosed evidence is read too
        assert page.evaluate("document.documentElement.scrollWidth") <= width, f"{tab} scrolls sideways"
        found = axe_violations(page)
        assert not blocking(found), describe_violations(f"tenant {tab} at {width} px", found)


@pytest.mark.parametrize("width", [1440, 390])
def test_the_overview_shows_firing_and_resolved_alerts_accessibly(
    portal: Portal, cluster, dispatched, axe_installed, width
):
    import datetime as dt

    from tenants.alerts import Alert

    page = portal.page_as("alice", bypass_csp=True)
    tenant = _ready_tenant(cluster)
    started = dt.datetime(2026, 11, 28, 21, 0, tzinfo=dt.UTC)
    labels = {"alertname": "BerthTenantCrashLooping", "namespace": tenant.namespace, "pod": "web-1"}
    crash = Alert("firing", "aa", started, None, labels, {"summary": "Container app of pod web-1 restarted 4 times."})
    quota = Alert("firing", "bb", started, None, {**labels, "alertname": "BerthTenantQuotaNearlyFull"}, {})
    services.alert_record(tenant=tenant, alert=crash)
    services.alert_record(tenant=tenant, alert=quota)
    services.alert_record(tenant=tenant, alert=Alert("resolved", "bb", started, started + dt.timedelta(minutes=9), {}))
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(portal.at(f"/tenants/{tenant.pk}/"))
    group = page.get_by_role("group", name="Alerts")
    firing = group.get_by_role("list", name="Firing alerts").get_by_role("listitem")
    expect(firing).to_have_count(1)
    expect(firing.first).to_contain_text("BerthTenantCrashLooping")
    # Berth's own wording from the rule and its labels, never the annotation's text (which an alert could forge).
    expect(firing.first).to_contain_text("A container of pod web-1 keeps restarting (crash loop).")
    expect(firing.first).not_to_contain_text("restarted 4 times")
    expect(group.get_by_role("list", name="Recently resolved alerts")).to_contain_text("BerthTenantQuotaNearlyFull")
    assert page.evaluate("document.documentElement.scrollWidth") <= width, "the overview scrolls sideways"
    found = axe_violations(page)
    assert not blocking(found), describe_violations(f"tenant alerts at {width} px", found)
