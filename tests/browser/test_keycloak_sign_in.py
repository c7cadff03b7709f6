"""Signing in and out in Chromium at a real Keycloak with the realm docker-compose.yml imports.

Every demo persona signs in through Keycloak's own login page; their team and platform roles come from their
Keycloak groups. Signing out ends Keycloak's session too (RP-initiated logout with Keycloak's confirmation).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tenants.models import AuditEvent, Membership, User
from tests.browser.support import Portal

pytestmark = [pytest.mark.browser, pytest.mark.keycloak, pytest.mark.django_db(transaction=True)]

# username: (display name, {team: role}, platform roles, what the header says under the name)
PERSONAS = {
    "alice": ("Alice Owner", {"team-payments": "owner"}, [], "1 team"),
    "amir": ("Amir Member", {"team-payments": "member"}, [], "1 team"),
    "bob": ("Bob Owner", {"team-search": "owner"}, [], "1 team"),
    "vera": ("Vera Viewer", {"team-search": "viewer"}, [], "1 team"),
    "carol": ("Carol Approver", {}, ["approver"], "Approver"),
    "dave": ("Dave Admin", {}, ["admin"], "Platform admin"),
    "erin": ("Erin Nogroup", {}, [], "No team"),
}


def sign_in_at_keycloak(portal: Portal, page: Page, username: str, *, next_path: str = "/") -> None:
    """Portal → sign-in page → Keycloak's login form → back at ``next_path``."""
    page.goto(portal.at(next_path))
    expect(page).to_have_url(re.compile(r"/login/"))
    page.get_by_role("link", name=re.compile(r"^Sign in with your organisation")).click()
    expect(page).to_have_url(re.compile("^" + re.escape(portal.issuer) + "/protocol/openid-connect/auth"))
    page.locator("#username").fill(username)
    page.locator("#password").fill(f"{username}-pass")
    page.locator("#kc-login").click()
    expect(page).to_have_url(portal.at(next_path))


@pytest.mark.parametrize("username", PERSONAS)
def test_each_persona_signs_in_at_keycloak_with_the_roles_of_their_groups(keycloak_portal: Portal, username: str):
    name, teams, roles, header = PERSONAS[username]
    page = keycloak_portal.new_page()
    sign_in_at_keycloak(keycloak_portal, page, username)

    expect(page.get_by_role("heading", name="Dashboard", level=1)).to_be_visible()
    expect(page.locator("header .who")).to_contain_text(name)
    expect(page.locator("header .who")).to_contain_text(header)
    approvals = page.get_by_role("navigation", name="Main").get_by_role("link", name=re.compile("^Approvals"))
    expect(approvals).to_have_count(1 if roles else 0)
    user = User.objects.get(username=username)
    assert dict(Membership.objects.filter(user=user).values_list("team__slug", "role")) == teams
    assert user.platform_roles == roles and user.is_staff == ("admin" in roles)
    assert user.email == f"{username}@example.test" and user.display_name == name
    assert AuditEvent.objects.filter(actor=user, action="auth.login").exists()
    # The sign-in kept Keycloak's refresh token (sealed) for the periodic re-check.
    assert user.idp_refresh_token


def test_signing_out_ends_the_portal_session_and_keycloaks(keycloak_portal: Portal):
    portal = keycloak_portal
    page = portal.new_page()
    sign_in_at_keycloak(portal, page, "bob")
    old_session = next(c["value"] for c in page.context.cookies() if c["name"] == "sessionid")

    with page.expect_request(re.compile("^" + re.escape(portal.issuer) + "/protocol/openid-connect/logout")):
        page.locator("header").get_by_role("button", name="Sign out").click()
    # Keycloak may ask for a confirmation first (the portal keeps no id_token_hint to send).
    confirm = page.get_by_role("button", name="Logout")
    back = page.get_by_role("heading", name="Sign in", level=1)
    expect(confirm.or_(back)).to_be_visible()
    if confirm.is_visible():
        confirm.click()
    expect(page).to_have_url(re.compile("^" + re.escape(portal.at("/login/"))))

    assert old_session not in [c["value"] for c in page.context.cookies() if c["name"] == "sessionid"]
    page.goto(portal.at("/"))
    expect(page).to_have_url(portal.at("/login/?next=/"))
    # Keycloak's session ended too: signing in again asks for the password.
    page.get_by_role("link", name=re.compile(r"^Sign in with your organisation")).click()
    expect(page.locator("#password")).to_be_visible()
    assert AuditEvent.objects.filter(actor=User.objects.get(username="bob"), action="auth.logout").exists()
