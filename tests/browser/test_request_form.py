"""The request form in a real browser: field errors where people look, and one request however often it is sent."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import pytest
from django.core.signals import request_started
from playwright.sync_api import Locator, Page, expect

from tenants.models import AuditEvent, Tenant, TenantRequest
from tests.browser.support import Portal

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REQUEST_DETAIL = re.compile(r"/requests/[0-9a-f-]{36}/$")


class FormPosts:
    """Each POST of the request form that reaches the live server: proof a test really sent it twice.

    With ``hold_first``, the server keeps the first POST waiting (before the view) until the second
    arrives (30 s at most), so the two overlap however fast the server answers.
    """

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.hold_first = False
        self._second = threading.Event()

    def __call__(self, sender, environ, **kwargs) -> None:
        if environ["REQUEST_METHOD"] != "POST" or environ["PATH_INFO"] != "/requests/new/":
            return
        self.seen.append(environ["PATH_INFO"])
        if len(self.seen) == 1 and self.hold_first:
            self._second.wait(timeout=30)
        else:
            self._second.set()


@pytest.fixture
def form_posts() -> Iterator[FormPosts]:
    posts = FormPosts()
    request_started.connect(posts)
    yield posts
    request_started.disconnect(posts)
    posts._second.set()


def _filled_form(page: Page, portal: Portal, name: str) -> Locator:
    """The form, freshly rendered and filled in for a medium namespace (medium waits for an approver)."""
    page.goto(portal.at("/requests/new/"))
    form = page.locator("form", has=page.get_by_role("button", name="Submit request"))
    form.get_by_label("Name").fill(name)
    form.get_by_role("radio", name="Medium").check()
    form.get_by_label("Purpose").fill("Ledger reconciliation jobs.")
    return form


def test_a_bad_name_is_shown_at_the_field_and_creates_nothing(portal: Portal, cluster):
    page = portal.page_as("alice")
    form = _filled_form(page, portal, "Bad_Name!")
    form.get_by_role("button", name="Submit request").click()

    summary = page.get_by_role("alert").filter(has=page.get_by_role("heading", name="Please correct the following"))
    expect(summary).to_be_visible()
    expect(summary.get_by_role("link", name=re.compile(r"^Name: Use lower-case letters"))).to_have_attribute(
        "href", "#id_name"
    )
    name = page.get_by_label("Name", exact=True)
    expect(name).to_have_value("Bad_Name!")
    expect(name).to_have_attribute("aria-invalid", "true")
    expect(name).to_have_accessible_description(re.compile(r"Use lower-case letters, digits and '-'"))
    expect(page.get_by_role("radio", name="Medium")).to_be_checked()  # the tier chosen is kept
    assert not TenantRequest.objects.exists() and not Tenant.objects.exists()
    assert not AuditEvent.objects.filter(action="request.submit").exists()

    # Corrected, the same form goes through.
    name.fill("ledger")
    page.get_by_role("button", name="Submit request").click()
    expect(page).to_have_url(REQUEST_DETAIL)
    assert list(TenantRequest.objects.values_list("name", flat=True)) == ["ledger"]


def test_the_same_rendered_form_sent_twice_makes_one_request(portal: Portal, cluster, form_posts: FormPosts):
    page = portal.page_as("alice")
    form = _filled_form(page, portal, "ledger")
    # A first copy goes out from this very page (as a flaky network's retry would), then the person clicks.
    first = page.evaluate("""async () => {
        const form = document.querySelector('form[action$="/requests/new/"]');
        const response = await fetch(form.action, {method: 'POST', body: new FormData(form), redirect: 'manual'});
        return response.type;
    }""")
    assert first == "opaqueredirect"
    form.get_by_role("button", name="Submit request").click()

    expect(page).to_have_url(REQUEST_DETAIL)
    expect(page.locator("#request-status")).to_contain_text("Request: Pending")
    assert len(form_posts.seen) == 2
    requests = TenantRequest.objects.filter(name="ledger")
    assert requests.count() == 1
    assert page.url.endswith(f"/requests/{requests.get().pk}/")
    assert AuditEvent.objects.filter(action="request.submit").count() == 1


def test_a_second_click_while_the_first_is_on_its_way_makes_one_request(portal: Portal, cluster, form_posts: FormPosts):
    page = portal.page_as("alice")
    form = _filled_form(page, portal, "ledger")
    form_posts.hold_first = True
    # Both clicks from one script: Playwright waits for a pending navigation before it runs anything on the
    # page. 300 ms is ample for the first POST to leave; the server holds it until the second one is in.
    form.get_by_role("button", name="Submit request").evaluate(
        "button => { button.click(); setTimeout(() => button.click(), 300); }"
    )

    expect(page).to_have_url(REQUEST_DETAIL)
    expect(page.get_by_role("status")).to_contain_text("Your request for ledger was sent to the approvers.")
    assert len(form_posts.seen) == 2, "the browser sent one POST: the test proved nothing"
    assert TenantRequest.objects.filter(name="ledger").count() == 1
    assert Tenant.objects.filter(name="ledger").count() == 1
    assert AuditEvent.objects.filter(action="request.submit").count() == 1
