"""The demo runs as production does: debug off, static files from WhiteNoise, and the designed error pages
(JSON for the API), seen in a real browser on the web process `make demo` starts."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tenants.models import Team, Tenant, TenantStatus, Tier, User
from tests.browser.support import Portal, axe_violations, blocking, describe_violations, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (1440, 390)


def _alices_tenant(cluster) -> Tenant:
    return Tenant.objects.create(
        name="ledger",
        namespace="ledger",
        team=Team.objects.get(memberships__user__username="alice"),
        tier=Tier.objects.get(name="small"),
        cluster=cluster,
        status=TenantStatus.READY,
        created_by=User.objects.get(username="alice"),
    )


def _not_the_debug_page(page: Page) -> None:
    html = page.content()
    for debug_only in ("URLconf", "DEBUG = True", "Traceback"):
        assert debug_only not in html, f"{page.url} shows Django's debug page ({debug_only!r})"


def _accessible_at_both_widths(page: Page, path_url: str, screen: str) -> None:
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(path_url)
        found = axe_violations(page)
        assert not blocking(found), describe_violations(f"{screen} at {width} px", found)


def test_the_demo_serves_static_files_and_the_designed_404_and_403_with_debug_off(
    demo_portal: Portal, cluster, axe_installed
):
    alice = demo_portal.page_as("alice")
    stylesheet = alice.locator("link[rel=stylesheet]").first.get_attribute("href") or ""
    assert re.fullmatch(r"/static/css/berth\.[0-9a-f]{12}\.css", stylesheet), stylesheet  # hashed: the manifest
    css = alice.request.get(demo_portal.at(stylesheet))
    assert css.status == 200 and "immutable" in css.headers["cache-control"]  # WhiteNoise, as in production
    tenant = _alices_tenant(cluster)

    bob = demo_portal.page_as("bob")
    response = bob.goto(demo_portal.at(f"/tenants/{tenant.pk}/"))
    assert response is not None and response.status == 404
    expect(bob.get_by_role("heading", name="There is nothing here")).to_be_visible()
    expect(bob.get_by_role("link", name="Go to the dashboard")).to_be_visible()
    _not_the_debug_page(bob)
    screenshot(bob, "error-404")

    for path in (f"/api/v1/tenants/{tenant.pk}/", "/api/v1/tenants/not-an-id/", "/api/v1/tenants/not-an-id/costs/"):
        answer = bob.request.get(demo_portal.at(path))
        assert answer.status == 404, path
        assert answer.headers["content-type"].startswith("application/json"), (path, answer.headers)
        assert "detail" in answer.json(), path

    erin = demo_portal.page_as("erin")
    response = erin.goto(demo_portal.at("/requests/new/"))
    assert response is not None and response.status == 403
    expect(erin.get_by_role("heading", name="You are not allowed to do that")).to_be_visible()
    _not_the_debug_page(erin)

    _accessible_at_both_widths(
        demo_portal.page_as("bob", bypass_csp=True), demo_portal.at(f"/tenants/{tenant.pk}/"), "404 page"
    )
    _accessible_at_both_widths(demo_portal.page_as("erin", bypass_csp=True), demo_portal.at("/requests/new/"), "403")


def test_a_server_error_in_the_demo_shows_the_designed_500_page(demo_portal: Portal, axe_installed):
    page = demo_portal.new_page()
    response = page.goto(demo_portal.at("/test-failure/"))  # a view that raises (tests/browser/urls_error.py)
    assert response is not None and response.status == 500
    # The designed page, which the demo's debug page (its traceback on a yellow page) was not: the portal's
    # heading and words, its hashed stylesheet applied, and a way back.
    expect(page.get_by_role("heading", name="Something went wrong on our side")).to_be_visible()
    expect(page.get_by_text("The error has been logged.")).to_be_visible()
    expect(page.get_by_role("link", name="Go to the dashboard")).to_have_attribute("href", "/")
    stylesheet = page.locator("link[rel=stylesheet]").first.get_attribute("href") or ""
    assert re.fullmatch(r"/static/css/berth\.[0-9a-f]{12}\.css", stylesheet), stylesheet
    assert page.request.get(demo_portal.at(stylesheet)).status == 200
    _not_the_debug_page(page)
    screenshot(page, "error-500")
    _accessible_at_both_widths(demo_portal.new_page(bypass_csp=True), demo_portal.at("/test-failure/"), "500 page")
