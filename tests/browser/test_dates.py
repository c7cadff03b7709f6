"""Dates and times in a browser whose language is American English: every date field shows and takes ISO dates
(2026-03-15) and every time field the 24-hour clock (19:00), as the rest of the portal writes them, where native
inputs would show 03/15/2026 and 07:00 PM."""

from __future__ import annotations

import datetime as dt
import re

import pgtrigger
import pytest
from django.utils import timezone
from playwright.sync_api import Locator, Page, expect

from tenants import services
from tenants.models import AuditEvent, Membership, Team, Tenant, TenantRequest, Tier, User
from tests.browser.support import Portal, axe_violations, blocking, describe_violations, shown_text

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _speaks_american_english(page: Page) -> None:
    assert page.evaluate("navigator.language") == "en-US"
    assert page.evaluate("new Intl.DateTimeFormat().format(new Date(Date.UTC(2026, 2, 15, 12)))") == "3/15/2026"


def _type(field: Locator, text: str) -> None:
    """Key by key, as a person types (``fill`` would set an ISO value even in a native date input)."""
    field.click()
    field.press("ControlOrMeta+a")
    field.press_sequentially(text)


def _event_on(day: dt.date, action: str, team: Team) -> None:
    """An event of ``team`` at noon UTC on ``day`` (the trail is append-only: its time is moved back once)."""
    event = AuditEvent.objects.create(actor_name="robot", object_type="team", action=action, team=team)
    with pgtrigger.ignore("tenants.AuditEvent:audit_append_only"):
        AuditEvent.objects.filter(pk=event.pk).update(at=dt.datetime.combine(day, dt.time(12), dt.UTC))


def _events(page: Page) -> Locator:
    return page.get_by_role("region", name=re.compile(r"\d+ events?$")).locator("tbody tr")


def test_the_audit_filter_shows_and_takes_iso_dates_in_an_american_browser(portal_en_us: Portal, cluster):
    page = portal_en_us.page_as("alice")
    _speaks_american_english(page)
    team = Membership.objects.get(user__username="alice").team
    _event_on(dt.date(2025, 1, 10), "test.before", team)
    _event_on(dt.date(2025, 1, 17), "test.within", team)
    _event_on(dt.date(2025, 1, 24), "test.after", team)

    page.goto(portal_en_us.at("/audit/?since=2025-01-15"))
    since = page.get_by_label("From")
    assert shown_text(since) == "2025-01-15"
    expect(since).to_have_accessible_description(re.compile("YYYY-MM-DD"))
    expect(page.get_by_text("YYYY-MM-DD").first).to_be_visible()

    page.goto(portal_en_us.at("/audit/"))
    _type(page.get_by_label("From"), "2025-01-15")
    _type(page.get_by_label("Until (inclusive)"), "2025-01-20")
    page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(r"since=2025-01-15&.*until=2025-01-20"))
    expect(page.get_by_role("alert")).to_have_count(0)
    expect(_events(page)).to_have_count(1)
    expect(_events(page)).to_contain_text("test.within")
    assert shown_text(page.get_by_label("From")) == "2025-01-15"
    assert shown_text(page.get_by_label("Until (inclusive)")) == "2025-01-20"

    # A date typed the American way never leaves the browser: the field asks for the format...
    _type(page.get_by_label("From"), "01/15/2025")
    page.get_by_role("button", name="Apply").click()
    assert page.get_by_label("From").evaluate("e => e.validity.patternMismatch")
    expect(page.get_by_label("From")).to_have_attribute("title", "YYYY-MM-DD")  # the bubble's second line
    expect(page).to_have_url(re.compile(r"since=2025-01-15&"))

    # ...and if it reaches the server all the same (a link, an edited address), the error is at the field.
    page.goto(portal_en_us.at("/audit/?since=01/15/2025&until=2025-01-20"))
    since = page.get_by_label("From")
    expect(since).to_have_attribute("aria-invalid", "true")
    expect(since).to_have_accessible_description(re.compile(r"Enter a date as YYYY-MM-DD"))
    assert shown_text(since) == "01/15/2025"  # what was typed, kept to be corrected
    summary = page.get_by_role("alert")
    expect(summary.get_by_role("link", name="From: Enter a date as YYYY-MM-DD.")).to_have_attribute("href", "#f-since")
    expect(page.get_by_label("Until (inclusive)")).not_to_have_attribute("aria-invalid", "true")
    expect(_events(page)).to_have_count(2)  # only the valid bound filters: test.before and test.within


@pytest.mark.parametrize("width", [1440, 390])
def test_the_audit_filter_with_a_date_error_is_accessible(portal_en_us: Portal, cluster, axe_installed, width):
    page = portal_en_us.page_as("alice", bypass_csp=True)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(portal_en_us.at("/audit/?since=01/15/2025&until=2025-01-20"))
    expect(page.get_by_label("From")).to_have_attribute("aria-invalid", "true")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    found = axe_violations(page)
    assert not blocking(found), describe_violations(f"audit with a date error at {width} px", found)


def test_the_expiry_dates_of_requests_show_and_take_iso_in_an_american_browser(
    portal_en_us: Portal, cluster, dispatched
):
    page = portal_en_us.page_as("alice")
    _speaks_american_english(page)
    today = timezone.now().date()

    page.goto(portal_en_us.at("/requests/new/"))
    form = page.locator("form", has=page.get_by_role("button", name="Submit request"))
    form.get_by_label("Name").fill("ledger")
    form.get_by_role("radio", name="Small").check()
    expiry = form.get_by_label("Expiry date")
    expect(expiry).to_have_accessible_description(re.compile("YYYY-MM-DD"))
    wanted = today + dt.timedelta(days=20)
    _type(expiry, wanted.isoformat())
    assert shown_text(expiry) == wanted.isoformat()
    form.get_by_role("button", name="Submit request").click()
    expect(page).to_have_url(re.compile(r"/requests/[0-9a-f-]{36}/$"))
    assert TenantRequest.objects.get(name="ledger").requested_expiry == wanted

    # The tenant's "Extend expiry" form, on its page once it is ready.
    tenant = Tenant.objects.get(name="ledger")
    tenant = services.tenant_mark_ready(
        tenant=services.tenant_mark_provisioning(tenant=tenant), applied_generation=tenant.generation
    )
    page.goto(portal_en_us.at(f"/tenants/{tenant.pk}/"))
    page.get_by_text("Extend expiry").click()
    later = today + dt.timedelta(days=Tier.objects.get(name="small").max_expiry_days)
    new_expiry = page.get_by_label("New expiry date")
    expect(new_expiry).to_have_accessible_description(re.compile("YYYY-MM-DD"))
    _type(new_expiry, later.isoformat())
    assert shown_text(new_expiry) == later.isoformat()
    page.get_by_role("button", name="Request more time").click()
    expect(page).to_have_url(re.compile(r"/requests/[0-9a-f-]{36}/$"))
    extend = TenantRequest.objects.get(action=TenantRequest.Action.EXTEND, tenant=tenant)
    assert extend.requested_expiry == later
    assert User.objects.get(username="alice") == extend.requested_by


def test_the_sleep_schedule_shows_and_takes_24_hour_times_in_an_american_browser(
    portal_en_us: Portal, cluster, dispatched, axe_installed
):
    page = portal_en_us.page_as("alice")
    _speaks_american_english(page)
    Tier.objects.filter(name="small").update(sleep_allowed=True)
    req = services.request_submit(
        actor=User.objects.get(username="alice"),
        action=TenantRequest.Action.CREATE,
        team=Membership.objects.get(user__username="alice").team,
        name="nightly",
        tier=Tier.objects.get(name="small"),
        cluster=cluster,
    )
    tenant = services.tenant_mark_provisioning(tenant=Tenant.objects.get(pk=req.tenant_id))
    tenant = services.tenant_mark_ready(tenant=tenant, applied_generation=tenant.generation)

    page.goto(portal_en_us.at(f"/tenants/{tenant.pk}/"))
    card = page.get_by_role("region", name="Sleep")
    card.locator("summary").filter(has_text="Schedule").click()
    start, end = card.get_by_label("Sleep from"), card.get_by_label("Wake at")
    _type(start, "19:00")
    _type(end, "07:30")
    card.get_by_role("button", name="Save schedule").click()
    expect(page.get_by_role("status").filter(has_text="Sleep schedule saved")).to_be_visible()
    saved = services.schedule_json(Tenant.objects.get(pk=tenant.pk))
    assert (saved["start"], saved["end"]) == ("19:00", "07:30")
    card = page.get_by_role("region", name="Sleep")
    assert shown_text(card.get_by_label("Sleep from")) == "19:00"  # not 07:00 PM
    assert shown_text(card.get_by_label("Wake at")) == "07:30"
    expect(card.get_by_label("Sleep from")).to_have_accessible_description(re.compile(r"HH:MM"))

    checked = portal_en_us.page_as("alice", bypass_csp=True)
    for width in (1440, 390):
        checked.set_viewport_size({"width": width, "height": 900})
        checked.goto(portal_en_us.at(f"/tenants/{tenant.pk}/"))
        expect(checked.get_by_role("region", name="Sleep").get_by_label("Wake at")).to_be_visible()
        found = axe_violations(checked)
        assert not blocking(found), describe_violations(f"sleep schedule at {width} px", found)
