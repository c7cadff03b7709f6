"""Right-sizing in a real browser: alice sees why her tenant is too large and moves it down with one click."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tenants.models import AuditEvent, Team, Tenant, TenantRequest, TenantStatus, Tier, User
from tenants.services.rightsizing import ACCEPT_ACTION
from tests.browser.support import Portal, axe_violations, blocking, describe_violations, screenshot
from tests.tenants.test_rightsizing import record_history

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_alice_accepts_the_suggested_downgrade_and_it_is_approved_by_the_tier(
    portal: Portal, cluster, dispatched, axe_installed
):
    page = portal.page_as("alice")  # her first sign-in makes her owner of team-payments
    team = Team.objects.get(slug="team-payments")
    large, medium = Tier.objects.get(name="large"), Tier.objects.get(name="medium")
    Tier.objects.filter(pk=large.pk).update(auto_approve_downgrades=True)
    tenant = Tenant.objects.create(
        name="ledger",
        namespace=cluster.namespace_prefix + "ledger",
        team=team,
        tier=large,
        cluster=cluster,
        status=TenantStatus.READY,
        created_by=User.objects.get(username="alice"),
    )
    record_history(tenant, average=0.05, peak=0.2)  # two weeks at 5% of large, peaks at 20%

    page.goto(portal.at(f"/tenants/{tenant.pk}/"))
    card = page.get_by_role("region", name="Right-sizing")
    expect(card.locator("#rightsizing-suggestion")).to_contain_text("Suggested: a smaller tier, Medium.")
    expect(card).to_contain_text("CPU requested 5% on average, peak 20%")
    expect(card.get_by_role("row", name=re.compile(r"^CPU limit"))).to_contain_text("5%")
    expect(card).to_contain_text("approved automatically")
    card.scroll_into_view_if_needed()
    screenshot(page, "tenant-rightsizing")
    # The card with its evidence table and both buttons, checked by axe-core (in a browser that lets it run).
    checker = portal.page_as("alice", bypass_csp=True)
    checker.goto(portal.at(f"/tenants/{tenant.pk}/"))
    expect(checker.locator("#dismiss-rightsizing")).to_be_visible()
    found = blocking(axe_violations(checker))
    assert not found, describe_violations("tenant detail with a right-sizing suggestion", found)

    card.get_by_role("button", name="Move to Medium").click()

    expect(page).to_have_url(re.compile(r"/requests/[0-9a-f-]{36}/$"))
    expect(page.get_by_role("status")).to_contain_text("ledger moves to tier Medium: approved automatically.")
    req = TenantRequest.objects.get(tenant=tenant)
    assert (req.action, req.tier, req.status, req.auto_approved) == ("change_tier", medium, "approved", True)
    assert Tenant.objects.get(pk=tenant.pk).tier == medium
    marker = AuditEvent.objects.get(action=ACCEPT_ACTION)
    assert marker.actor_name == "alice" and marker.after["request"] == str(req.pk)

    # Back on the tenant page: the history on medium has just begun, so there is nothing to suggest.
    page.goto(portal.at(f"/tenants/{tenant.pk}/"))
    expect(page.locator("#rightsizing-none")).to_contain_text("No usage recorded on this tier")
    expect(page.get_by_role("button", name=re.compile(r"^Move to"))).to_have_count(0)


def test_alice_sees_that_measured_usage_was_the_evidence(portal: Portal, cluster, dispatched, settings):
    from tests.tenants.test_rightsizing_pages import add_measured

    page = portal.page_as("alice")
    team = Team.objects.get(slug="team-payments")
    medium = Tier.objects.get(name="medium")
    settings.BERTH_PROMETHEUS = {"main": {"url": "http://127.0.0.1:9"}}  # measured by the worker; no tenant metrics
    cluster.prometheus = "main"
    cluster.save(update_fields=["prometheus"])
    tenant = Tenant.objects.create(
        name="ledger",
        namespace=cluster.namespace_prefix + "ledger",
        team=team,
        tier=medium,
        cluster=cluster,
        status=TenantStatus.READY,
        created_by=User.objects.get(username="alice"),
    )
    record_history(tenant, average=0.8, peak=0.8)  # its pods request 80% of medium
    add_measured(tenant, cpu=0.05, memory=0.08)  # and use 5% and 8% of it

    page.goto(portal.at(f"/tenants/{tenant.pk}/"))
    card = page.get_by_role("region", name="Right-sizing")
    expect(card.locator("#rightsizing-basis")).to_contain_text("Evidence: measured (Prometheus).")
    expect(card.locator("#rightsizing-basis")).to_contain_text("(100% of the window)")
    expect(card.locator("#rightsizing-suggestion")).to_contain_text("Suggested: a smaller tier, Small.")
    expect(card.locator("#rightsizing-suggestion")).to_contain_text("lower their requests and limits first")
    expect(card.get_by_role("row", name=re.compile(r"^CPU used \(measured\)"))).to_contain_text("5%")
