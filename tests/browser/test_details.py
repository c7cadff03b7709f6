"""The small things people notice, in a real browser: the focus ring's contrast, focus on the error summary after a
failed submit, "just now", one unit per resource, names on one line, a short header on a phone, the team's
members, and no transfer form for a tenant on its way out."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tenants.models import Team, Tenant, TenantStatus, Tier, User
from tests.browser.support import Portal

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _luminance(rgb: tuple[int, int, int]) -> float:
    def channel(c: int) -> float:
        s = c / 255
        return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def _rgb(css: str) -> tuple[int, int, int]:
    r, g, b = (int(x) for x in re.findall(r"\d+", css)[:3])
    return r, g, b


def _lines(page: Page, selector: str) -> int:
    """How many lines the text of the first element matching ``selector`` takes."""
    return page.evaluate(
        """(sel) => { const r = document.createRange(); r.selectNodeContents(document.querySelector(sel));
                     return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; }""",
        selector,
    )


def test_focus_is_visible_and_goes_to_the_errors_after_a_failed_submit(portal: Portal, cluster):
    page = portal.page_as("alice")
    page.goto(portal.at("/requests/new/"))
    page.keyboard.press("Tab")  # the skip link
    page.keyboard.press("Tab")  # the brand link, on the white header
    ring = page.evaluate("getComputedStyle(document.activeElement).outlineColor")
    assert _contrast(_rgb(ring), (255, 255, 255)) >= 3, f"the focus ring {ring} is too faint on white"

    page.get_by_label("Name", exact=True).fill("Bad_Name!")
    page.get_by_role("button", name="Submit request").click()
    expect(page.locator(".error-summary")).to_be_focused()


def test_times_units_names_and_the_header_read_well(portal: Portal, cluster):
    page = portal.page_as("alice")
    page.goto(portal.at("/requests/new/"))
    budget = page.get_by_role("region", name=re.compile(r"^Budget"))
    expect(budget).to_contain_text("0 CPU of 16 CPU")
    expect(budget).not_to_contain_text("0m CPU")
    expect(budget).not_to_contain_text("0 B")

    page.goto(portal.at("/tokens/"))
    page.get_by_label("Name", exact=True).fill("CI for payments and search")
    page.get_by_role("button", name="Create token").click()
    token = page.locator("#new-token").inner_text().strip()
    assert page.request.get(portal.at("/api/v1/me/"), headers={"Authorization": f"Token {token}"}).status == 200
    page.goto(portal.at("/tokens/"))
    row = page.get_by_role("row", name=re.compile(r"^CI for payments and search"))
    expect(row).to_contain_text("just now")
    expect(row).not_to_contain_text("0 minutes ago")
    assert _lines(page, "tbody th[scope=row]") == 1, "the token's name wraps at 1440 px"

    page.set_viewport_size({"width": 390, "height": 800})
    page.goto(portal.at("/"))
    header = page.locator("header.site-header").bounding_box()
    assert header is not None and header["height"] <= 100, f"the header takes {header} on a phone"


def test_the_team_page_lists_its_members(portal: Portal, cluster):
    page = portal.page_as("alice")
    page.goto(portal.at("/teams/team-payments/"))
    members = page.get_by_role("region", name="Members")
    expect(members).to_contain_text("Alice Andersen (you)")
    expect(members).to_contain_text("Owner")


def test_a_tenant_on_its_way_out_offers_no_transfer(portal: Portal, cluster):
    page = portal.page_as("alice")
    tenant = Tenant.objects.create(
        name="ledger",
        namespace="ledger",
        team=Team.objects.get(slug="team-payments"),
        tier=Tier.objects.get(name="small"),
        cluster=cluster,
        status=TenantStatus.DECOMMISSIONING,
        created_by=User.objects.get(username="alice"),
    )
    page.goto(portal.at(f"/tenants/{tenant.pk}/transfer/"))
    expect(page).to_have_url(portal.at(f"/tenants/{tenant.pk}/"))
    expect(page.get_by_role("status")).to_contain_text("cannot be moved while it is decommissioning")
    expect(page.get_by_role("button", name=re.compile("Offer|Transfer"))).to_have_count(0)
