"""The audit trail in a real browser: the filter takes what people leave empty, speaks in labels, shows names and
readable events, offers quick filters, and stays whole at 390 px."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.support import Portal, alices_ready_tenant, axe_violations, blocking, describe_violations, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _events(page: Page):
    return page.get_by_role("region", name=re.compile(r"\d+ events?$")).locator("tbody tr")


def test_the_audit_filter_takes_empty_dates_and_shows_names_and_readable_events(portal: Portal, cluster, dispatched):
    page = portal.page_as("alice")
    tenant = alices_ready_tenant(cluster)

    page.goto(portal.at("/audit/"))
    page.get_by_role("button", name="Apply").click()  # every field left empty
    expect(page.get_by_role("alert")).to_have_count(0)
    rows = _events(page)
    expect(rows.first).to_be_visible()

    submitted = rows.filter(has_text="Request submitted")
    expect(submitted).to_have_count(1)
    ready = rows.filter(has_text="Tenant ready")
    expect(ready).to_have_count(1)
    expect(ready.get_by_role("link", name="ledger")).to_have_attribute("href", f"/tenants/{tenant.pk}/")
    expect(page.locator("main")).not_to_contain_text(str(tenant.pk)[:12] + "…")

    page.goto(portal.at("/audit/?since=yesterday&until=2026-13-45"))
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("From:")
    expect(alert).to_contain_text("Until (inclusive):")
    expect(alert).not_to_contain_text("since")
    expect(alert).not_to_contain_text("until:")
    expect(page.get_by_label("From")).to_have_attribute("aria-invalid", "true")

    # The tenant's own history (its page's Activity tab) speaks the same words.
    page.goto(portal.at(f"/tenants/{tenant.pk}/?tab=activity"))
    expect(page.get_by_text("Tenant ready").first).to_be_visible()
    expect(page.locator("main")).not_to_contain_text("tenant.ready")


def test_quick_filters_narrow_the_trail(portal: Portal, cluster, dispatched):
    page = portal.page_as("alice")
    alices_ready_tenant(cluster)
    page.goto(portal.at("/audit/"))
    quick = page.get_by_role("navigation", name="Quick filters")

    quick.get_by_role("link", name="Tenant events").click()
    expect(page).to_have_url(re.compile(r"object_type=tenant"))
    rows = _events(page)
    expect(rows.first).to_be_visible()
    for text in rows.all_inner_texts():
        assert "Request submitted" not in text and "Signed in" not in text

    quick.get_by_role("link", name="Last 24 hours").click()
    expect(page).to_have_url(re.compile(r"within=24h"))
    expect(page.get_by_label("Period")).to_have_value("24h")
    expect(rows.filter(has_text="Signed in")).to_have_count(1)

    quick.get_by_role("link", name=re.compile(r"^My team")).click()
    expect(page).to_have_url(re.compile(r"team=team-payments"))
    expect(page.get_by_label("Team", exact=True)).to_have_value("team-payments")
    expect(rows.filter(has_text="Tenant ready")).to_have_count(1)


@pytest.mark.parametrize("width", [1440, 390])
def test_the_audit_trail_is_whole_and_accessible(portal: Portal, cluster, dispatched, axe_installed, width):
    page = portal.page_as("alice", bypass_csp=True)
    alices_ready_tenant(cluster)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(portal.at("/audit/"))
    row = _events(page).filter(has_text="Tenant ready")
    for text in ("Tenant ready", "ledger", "system", "team-payments"):
        expect(row).to_contain_text(text)
    # Every part of the row is on screen: nothing scrolled away sideways.
    for cell in row.locator("td").all():
        box = cell.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width + 1, cell.inner_text()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    screenshot(page, f"audit-{width}")
    found = axe_violations(page)
    assert not blocking(found), describe_violations(f"audit at {width} px", found)
