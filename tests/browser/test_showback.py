"""Showback in a real browser: alice opens her team's page from the dashboard, steps back a month and reads
the figure her tenant cost, and the CSV behind the same page says the same."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal as D

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from tenants.costs import showback
from tenants.models import ClusterPrice, Team, Tenant, TenantStatus, Tier, User
from tests.browser.support import Portal, axe_violations, blocking, describe_violations, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# A small tier (1 core, 2 GiB, 10 GiB requested) at these prices costs 0.10 + 0.02 + 0.01 per hour:
# 10 GiB × 0.73 per GiB-month of 730 hours is 0.01 an hour.
PER_HOUR = D("0.13")


def _priced_tenant(cluster, team: Team, since: dt.date) -> Tenant:
    """A small tenant of ``team`` live since ``since`` (its ready_at: no audit row) on a priced cluster."""
    ClusterPrice.objects.create(
        cluster=cluster,
        effective_from=dt.date(2000, 1, 1),
        currency="EUR",
        cpu_core_hour=D("0.10"),
        memory_gib_hour=D("0.01"),
        storage_gib_month=D("0.73"),
    )
    return Tenant.objects.create(
        name="ledger",
        namespace="ledger",
        team=team,
        tier=Tier.objects.get(name="small"),
        cluster=cluster,
        status=TenantStatus.READY,
        created_by=User.objects.get(username="alice"),
        ready_at=showback.midnight(since),
    )


def test_alice_reads_last_months_cost_on_her_team_page(portal: Portal, cluster, tmp_path):
    page = portal.page_as("alice")
    team = Team.objects.get(memberships__user__username="alice")
    this_month = timezone.now().astimezone(dt.UTC).date().replace(day=1)
    last_month = showback.previous_month(this_month)
    _priced_tenant(cluster, team, since=last_month)  # still live
    hours = (this_month - last_month).days * 24
    expected = f"EUR {PER_HOUR * hours:.2f}"  # 87.36, 90.48, 93.60 or 96.72 by the month's length

    page.goto(portal.at("/"))
    page.get_by_role("link", name="Team page: tenants and costs").click()
    expect(page).to_have_url(portal.at(f"/teams/{team.slug}/"))
    costs = page.get_by_role("region", name=re.compile(r"^Costs · "))
    expect(page.get_by_role("heading", name=f"Costs · {showback.month_label(this_month)} so far")).to_be_visible()
    expect(costs.get_by_role("link", name="ledger")).to_be_visible()

    page.get_by_role("list", name="Recent months").get_by_role("link", name=showback.month_label(last_month)).click()
    expect(page.get_by_role("heading", name=f"Costs · {showback.month_label(last_month)}", exact=True)).to_be_visible()
    row = costs.get_by_role("row", name=re.compile(r"^ledger"))
    expect(row).to_contain_text(f"{hours}.00")
    expect(row).to_contain_text(expected)
    expect(costs.locator("tfoot")).to_contain_text(expected)

    with page.expect_download() as download:
        costs.get_by_role("link", name="Download CSV").click()
    path = tmp_path / "costs.csv"
    download.value.save_as(path)
    text = path.read_text()
    assert text.splitlines()[0].startswith("month,tenant_id,tenant,cluster,team,currency,live_hours")
    assert f",ledger,{cluster.name},{team.slug},EUR,{hours}.00,0.00," in text
    assert f",{expected.removeprefix('EUR ')}," in text


def test_the_team_page_is_accessible_and_not_found_for_another_team(portal: Portal, cluster, axe_installed):
    alice = portal.page_as("alice", bypass_csp=True)
    team = Team.objects.get(memberships__user__username="alice")
    _priced_tenant(cluster, team, since=showback.previous_month(timezone.now().astimezone(dt.UTC).date()))
    alice.goto(portal.at(f"/teams/{team.slug}/"))
    expect(alice.get_by_role("link", name="ledger").first).to_be_visible()
    screenshot(alice, "team-detail")
    found = axe_violations(alice)
    assert not blocking(found), describe_violations("team page", found)

    bob = portal.page_as("bob")
    response = bob.goto(portal.at(f"/teams/{team.slug}/"))
    assert response is not None and response.status == 404
    expect(bob.get_by_text("There is nothing here")).to_be_visible()
