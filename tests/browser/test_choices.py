"""Choices that show their effect, in a real browser: the tier is picked from cards next to what it would take
from the team's budget, and an approver reads a short summary before deciding, with the YAML folded away."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tenants.models import Team, Tier
from tests.browser.support import Portal, axe_violations, blocking, describe_violations, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _ask_for_medium(page: Page, portal: Portal, name: str = "checkout") -> None:
    page.goto(portal.at("/requests/new/"))
    form = page.locator("form", has=page.get_by_role("button", name="Submit request"))
    form.get_by_label("Name", exact=True).fill(name)
    form.get_by_role("radio", name="Medium").check()
    form.get_by_role("button", name="Submit request").click()
    expect(page.locator("#request-status")).to_contain_text("Request: Pending")


def test_the_tier_cards_show_what_the_choice_takes_from_the_budget(portal: Portal, cluster):
    page = portal.page_as("alice")
    page.goto(portal.at("/requests/new/"))
    tiers = page.get_by_role("group", name="Tier")
    for label in ("Small", "Medium", "Large"):
        expect(tiers.get_by_role("radio", name=label)).to_be_visible()
    medium = Tier.objects.get(name="medium")
    expect(page.locator(f"#tier-{medium.pk}-facts")).to_contain_text("Pod Security")

    budget = page.get_by_role("region", name=re.compile(r"^Budget"))
    tiers.get_by_role("radio", name="Large").check()
    expect(budget).to_contain_text(re.compile(r"After this request \(Large.*Over the budget"))
    tiers.get_by_role("radio", name="Medium").check()
    expect(budget).to_contain_text("After this request (Medium)")
    team = Team.objects.get(slug="team-payments")
    after_cpu = f"{(medium.cpu_limit_millis) // 1000} CPU of {team.budget_cpu_millis // 1000} CPU"
    expect(budget).to_contain_text(after_cpu)
    expect(budget).to_contain_text("Fits the budget")


def test_an_approver_reads_a_summary_before_deciding_with_the_yaml_folded(portal: Portal, cluster):
    alice = portal.page_as("alice")
    _ask_for_medium(alice, portal)

    carol = portal.page_as("carol")
    carol.goto(portal.at("/approvals/"))
    row = carol.get_by_role("row", name=re.compile(r"Create checkout"))
    expect(row).to_contain_text("Fits the budget")
    row.get_by_role("link", name="Create checkout").click()

    summary = carol.get_by_role("region", name="Summary")
    expect(summary).to_contain_text("Medium")
    expect(summary).to_contain_text("fits the budget of team-payments")
    expect(summary).to_contain_text(re.compile(r"\d+ objects"))
    expect(summary).to_contain_text("Pod Security")
    decision = carol.get_by_role("region", name="Your decision")
    facts = carol.get_by_role("region", name="Request", exact=True)
    summary_box, facts_box, decision_box = summary.bounding_box(), facts.bounding_box(), decision.bounding_box()
    assert summary_box and facts_box and decision_box
    assert summary_box["y"] < decision_box["y"] and facts_box["y"] < decision_box["y"], "the facts come first"

    preview = carol.get_by_role("region", name="Manifests that will be created")
    yaml = preview.locator("pre")
    expect(yaml).to_be_hidden()
    preview.get_by_text(re.compile(r"^Show the YAML")).click()
    expect(yaml).to_be_visible()
    expect(yaml).to_contain_text("kind: ResourceQuota")


@pytest.mark.parametrize("width", [1440, 390])
def test_the_request_form_and_the_approvers_page_are_accessible(portal: Portal, cluster, axe_installed, width):
    alice = portal.page_as("alice", bypass_csp=True)
    alice.set_viewport_size({"width": width, "height": 900})
    alice.goto(portal.at("/requests/new/"))
    alice.get_by_role("radio", name="Medium").check()
    expect(alice.get_by_role("region", name=re.compile(r"^Budget"))).to_contain_text("After this request")
    if width == 1440:
        screenshot(alice, "request-form")
    assert alice.evaluate("document.documentElement.scrollWidth") <= width
    found = axe_violations(alice)
    assert not blocking(found), describe_violations(f"request form at {width} px", found)
    _ask_for_medium(alice, portal)

    carol = portal.page_as("carol", bypass_csp=True)
    carol.set_viewport_size({"width": width, "height": 900})
    carol.goto(portal.at("/approvals/"))
    carol.get_by_role("link", name="Create checkout").click()
    expect(carol.get_by_role("region", name="Summary")).to_be_visible()
    if width == 1440:
        screenshot(carol, "request-detail")
    found = axe_violations(carol)
    assert not blocking(found), describe_violations(f"request detail (approver) at {width} px", found)
