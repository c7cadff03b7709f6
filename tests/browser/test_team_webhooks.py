"""A team's notifications in a real browser: alice (owner of team-payments) adds a Slack-style endpoint on her
team's page, copies its signing secret (shown once), is told by field what is wrong with a URL aimed at the
metadata service, sends a test event; amir (a plain member) sees the endpoint and no forms. The page passes
axe-core with the secret shown and with the errors shown."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tenants.models import Team, WebhookDelivery, WebhookEndpoint
from tenants.sealing import unseal
from tests.browser.support import Portal, axe_violations, blocking, describe_violations, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _add(page: Page, *, name: str, url: str, events: list[str]) -> None:
    section = page.locator("#notifications")
    form = section.locator("form[action$='/webhooks/#notifications']")
    if not form.is_visible():  # closed, unless it just came back with errors
        section.get_by_text("Add an endpoint").click()
    form.get_by_label("Name", exact=True).fill(name)
    form.get_by_label("URL", exact=True).fill(url)
    for event in events:
        form.get_by_label(re.compile(re.escape(f"({event})"))).check()
    form.get_by_role("button", name="Add endpoint").click()


def test_an_owner_adds_an_endpoint_and_a_member_only_sees_it(portal: Portal, receiver, axe_installed):
    hooks = receiver()
    page = portal.page_as("alice", bypass_csp=True)
    team = Team.objects.get(memberships__user__username="alice")
    page.goto(portal.at(f"/teams/{team.slug}/"))
    section = page.locator("#notifications")
    expect(section.get_by_text("No endpoints yet")).to_be_visible()

    # A URL aimed at the cloud metadata service: refused by field, nothing kept, the form open with the error.
    _add(page, name="metadata", url="http://169.254.169.254/latest/meta-data/", events=["tenant.failed"])
    summary = page.get_by_role("alert")
    expect(summary).to_contain_text("public addresses only")
    expect(page.get_by_label("URL", exact=True)).to_have_attribute("aria-invalid", "true")
    assert not WebhookEndpoint.objects.exists()
    found = axe_violations(page)
    assert not blocking(found), describe_violations("team page with a refused webhook", found)

    _add(page, name="#payments-alerts", url=hooks.url("/services/T0/B0/PATHSECRET"), events=["tenant.failed"])
    shown = page.get_by_role("status").filter(has_text="Signing secret")
    expect(shown).to_be_visible()
    secret = shown.locator("#webhook-secret").inner_text().strip()
    endpoint = WebhookEndpoint.objects.get()
    assert secret == unseal(endpoint.secret_sealed) and endpoint.team == team
    expect(shown.get_by_role("button", name="Copy signing secret")).to_be_visible()
    row = section.get_by_role("row", name=re.compile("#payments-alerts"))
    expect(row).to_contain_text(endpoint.url_origin)
    expect(row).to_contain_text("tenant.failed")
    assert "PATHSECRET" not in page.content()
    expect(page).to_have_url(re.compile("#notifications$"))  # the answer opens at the secret
    shown.scroll_into_view_if_needed()
    screenshot(page, "team-notifications")
    found = axe_violations(page)
    assert not blocking(found), describe_violations("team page with a new signing secret", found)

    row.get_by_role("button", name="Send a test to #payments-alerts").click()
    expect(page.get_by_role("status").filter(has_text="Queued a test event")).to_be_visible()
    assert WebhookDelivery.objects.get().event == "ping"
    # Its last delivery's status: pending, or delivered already when the run's Celery worker was quicker.
    expect(section.get_by_role("row", name=re.compile("#payments-alerts"))).to_contain_text(
        re.compile("Pending|Delivered")
    )
    assert "webhook-secret" not in page.content()  # shown once, then never again

    member = portal.page_as("amir")
    member.goto(portal.at(f"/teams/{team.slug}/"))
    notifications = member.locator("#notifications")
    expect(notifications.get_by_role("row", name=re.compile("#payments-alerts"))).to_be_visible()
    expect(notifications.get_by_role("button")).to_have_count(0)
    expect(notifications.get_by_text("Add an endpoint")).to_have_count(0)
