"""The fleet view in a real browser: a platform admin finds another team's failing tenant in two clicks from the
dashboard; filters, sorting, server-side paging and the CSV export; role-appropriate dashboards."""

from __future__ import annotations

import csv
import io
import re

import pytest
from playwright.sync_api import expect

from tenants.models import Team, Tenant, TenantStatus, Tier, User
from tests.browser.support import Portal, axe_violations, blocking, describe_violations, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FLEET_SIZE = 55  # more than a page (50)


def _fleet(cluster, creator: str = "dave") -> Tenant:
    """team-payments' and team-search's tenants, created directly (nobody of either team signs in here); one of
    team-search's failed, another one fails its isolation report. The failed one."""
    created_by = User.objects.get(username=creator)
    teams = [
        Team.objects.get_or_create(slug=slug, defaults={"name": name, "oidc_group": slug})[0]
        for slug, name in (("team-payments", "Payments"), ("team-search", "Search"))
    ]
    small = Tier.objects.get(name="small")
    Tenant.objects.bulk_create(
        Tenant(
            name=f"app-{i:02d}",
            namespace=f"app-{i:02d}",
            team=teams[i % 2],
            tier=small,
            cluster=cluster,
            status=TenantStatus.READY,
            created_by=created_by,
            isolation_report={"passed": i != 7, "checks": []},
        )
        for i in range(FLEET_SIZE)
    )
    return Tenant.objects.create(
        name="search-indexer",
        namespace="search-indexer",
        team=teams[1],
        tier=small,
        cluster=cluster,
        status=TenantStatus.FAILED,
        status_reason="Not ready after 15 minutes: the ResourceQuota was refused.",
        created_by=created_by,
    )


def test_an_admin_finds_a_failing_tenant_of_any_team_in_two_clicks(portal: Portal, cluster):
    page = portal.page_as("dave")
    failed = _fleet(cluster)
    page.goto(portal.at("/"))
    expect(page.get_by_text("No team yet")).to_have_count(0)
    expect(page.get_by_text("Request your first namespace")).to_have_count(0)
    expect(page.get_by_role("link", name="Open the Django admin")).to_be_visible()

    page.get_by_role("link", name=re.compile(r"^1 failed$")).click()  # click 1
    page.get_by_role("link", name="search-indexer").click()  # click 2
    expect(page).to_have_url(portal.at(f"/tenants/{failed.pk}/"))
    expect(page.locator("main")).to_contain_text("Failed")
    expect(page.locator("main")).to_contain_text("team-search")


def test_the_fleet_view_filters_sorts_pages_and_exports(portal: Portal, cluster, tmp_path):
    page = portal.page_as("dave")
    _fleet(cluster)
    page.get_by_role("navigation", name="Main").get_by_role("link", name="All tenants").click()
    expect(page.get_by_role("heading", name=f"{FLEET_SIZE + 1} tenants")).to_be_visible()
    table = page.get_by_role("region", name=re.compile(r"\d+ tenants?$"))
    expect(table.locator("tbody tr")).to_have_count(50)
    expect(page.get_by_text("Page 1 of 2")).to_be_visible()
    page.get_by_role("link", name="Next").click()
    expect(table.locator("tbody tr")).to_have_count(FLEET_SIZE + 1 - 50)

    page.goto(portal.at("/tenants/"))
    name_header = table.get_by_role("columnheader", name=re.compile(r"^Name"))
    expect(name_header).to_have_attribute("aria-sort", "ascending")
    name_header.get_by_role("link").click()
    expect(name_header).to_have_attribute("aria-sort", "descending")
    expect(table.locator("tbody tr").first).to_contain_text("search-indexer")

    page.get_by_label("Team").select_option("team-search")
    page.get_by_label("Failing isolation").check()
    page.get_by_role("button", name="Apply").click()
    expect(page.get_by_role("heading", name="1 tenant", exact=True)).to_be_visible()
    expect(table.locator("tbody tr")).to_contain_text("app-07")

    page.goto(portal.at("/tenants/?team=team-search"))
    with page.expect_download() as download:
        page.get_by_role("link", name="Export CSV").click()
    path = tmp_path / "tenants.csv"
    download.value.save_as(path)
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    assert len(rows) == FLEET_SIZE // 2 + 1 and {r["team"] for r in rows} == {"team-search"}
    assert {"search-indexer", "app-07"} <= {r["name"] for r in rows}


def test_each_role_gets_its_own_dashboard(portal: Portal, cluster):
    carol = portal.page_as("carol")
    _fleet(cluster, creator="carol")
    carol.goto(portal.at("/"))
    expect(carol.get_by_role("heading", name="All tenants")).to_be_visible()
    expect(carol.get_by_text("No team yet")).to_have_count(0)
    expect(carol.get_by_role("link", name="Open the Django admin")).to_have_count(0)
    expect(carol.get_by_role("navigation", name="Main").get_by_role("link", name="All tenants")).to_be_visible()

    erin = portal.page_as("erin")
    expect(erin.get_by_role("heading", name="No team yet")).to_be_visible()
    expect(erin.get_by_role("navigation", name="Main").get_by_role("link", name="All tenants")).to_have_count(0)


@pytest.mark.parametrize("width", [1440, 390])
def test_the_fleet_view_and_the_admins_dashboard_are_accessible(portal: Portal, cluster, axe_installed, width):
    page = portal.page_as("dave", bypass_csp=True)
    _fleet(cluster)
    page.set_viewport_size({"width": width, "height": 900})
    for path, screen, shown in (
        ("/tenants/", "fleet", page.get_by_role("region", name=f"{FLEET_SIZE + 1} tenants").locator("tbody tr")),
        ("/", "dashboard-admin", page.get_by_role("link", name=re.compile(r"^1 failed$"))),
    ):
        page.goto(portal.at(path))
        expect(shown.first).to_be_visible()  # the fleet's rows, the fleet's figures: not a page without them
        if width == 1440:
            screenshot(page, screen)
        assert page.evaluate("document.documentElement.scrollWidth") <= width, f"{screen} scrolls sideways"
        found = axe_violations(page)
        assert not blocking(found), describe_violations(f"{screen} at {width} px", found)
