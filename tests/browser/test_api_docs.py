"""The API documentation in a real browser: Swagger UI renders under the portal's Content-Security-Policy (any
blocked script or style fails the test, see conftest) and calls the API with a portal token typed into it."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tenants import services
from tenants.models import User
from tests.browser.support import Portal, axe_violations, blocking, describe_violations, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_swagger_ui_renders_under_the_csp_and_calls_me_with_a_portal_token(portal: Portal):
    portal.page_as("alice")  # a sign-in confirms alice's identity, which the API asks of a token's owner
    alice = User.objects.get(oidc_subject="alice")
    _, plaintext = services.api_token_create(actor=alice, name="docs", expires_in_days=1)

    page = portal.new_page()  # no session: only the token can make the call work
    page.goto(portal.at("/api/docs/"))
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Berth API")
    operation = page.locator("#operations-v1-v1_me_retrieve")
    expect(operation).to_be_visible()

    page.locator(".swagger-ui .auth-wrapper").get_by_role("button", name=re.compile(r"Authorize")).click()
    token_form = page.locator(".dialog-ux .auth-container").filter(has_text="portalToken")
    token_form.locator("input").fill(f"Token {plaintext}")
    token_form.get_by_role("button", name="Apply credentials").click()
    token_form.get_by_role("button", name="Close").click()

    operation.locator(".opblock-summary-control").click()
    operation.get_by_role("button", name="Try it out").click()
    with page.expect_response(re.compile(r"/api/v1/me/$")) as answer:
        operation.get_by_role("button", name="Execute").click()
    assert answer.value.status == 200
    assert answer.value.json()["username"] == alice.username
    expect(operation.locator(".live-responses-table tbody .response-col_status")).to_have_text("200")


@pytest.mark.parametrize("width", [1440, 390])
def test_the_api_docs_have_no_serious_accessibility_violations(portal: Portal, axe_installed, width):
    page = portal.new_page(bypass_csp=True)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(portal.at("/api/docs/"))
    expect(page.locator("#operations-v1-v1_me_retrieve")).to_be_visible()
    page.locator("#operations-v1-v1_me_retrieve .opblock-summary-control").click()
    if width == 1440:
        screenshot(page, "api-docs")
    found = axe_violations(page)
    assert not blocking(found), describe_violations(f"API docs at {width} px", found)
