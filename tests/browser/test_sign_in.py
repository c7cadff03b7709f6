"""Signing in and out with a real browser at the real OpenID Connect provider; teams follow the groups claim."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from tenants.models import AuditEvent, Membership, User
from tests.browser.support import Portal, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_shipped_settings_let_a_person_signed_in_through_oidc_open_a_page(client):
    # A session made by the OIDC callback goes through SessionRefresh (force_login alone would skip it).
    alice = User.objects.create(username="alice", oidc_subject="alice")
    client.force_login(alice, backend="tenants.auth.BerthOidcBackend")
    session = client.session
    session["oidc_id_token_expiration"] = time.time() + 900  # what the OIDC callback stores
    session.save()
    assert client.get("/").status_code == 200


def test_alice_signs_in_at_the_provider_and_lands_on_her_dashboard_as_owner_of_team_payments(portal: Portal):
    page = portal.new_page()
    page.goto(portal.at("/"))
    expect(page).to_have_url(portal.at("/login/?next=/"))
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    screenshot(page, "login")

    page.get_by_role("link", name=re.compile(r"^Sign in with your organisation")).click()
    expect(page).to_have_url(re.compile("^" + re.escape(portal.issuer) + "/interaction/"))
    expect(page.get_by_text("to continue to Berth portal")).to_be_visible()
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-pass")
    page.locator("button[type=submit]").click()
    consent = page.get_by_role("button", name="Allow")
    expect(page.locator("main#main").or_(consent)).to_be_visible()
    if consent.is_visible():
        consent.click()

    expect(page).to_have_url(portal.at("/"))
    expect(page.get_by_role("heading", name="Dashboard", level=1)).to_be_visible()
    expect(page.locator("header .who")).to_contain_text("Alice Andersen")
    budget = page.get_by_role("region", name="Payments")
    expect(budget).to_contain_text("Owner")
    expect(page.get_by_role("link", name="Request a tenant")).to_be_visible()

    session = next(c for c in page.context.cookies() if c["name"] == "sessionid")
    assert session["httpOnly"] and session["sameSite"] == "Lax"
    alice = User.objects.get(oidc_subject="alice")
    assert alice.display_name == "Alice Andersen" and alice.email == "alice@example.test"
    membership = Membership.objects.get(user=alice)
    assert (membership.team.slug, membership.role) == ("team-payments", Membership.Role.OWNER)
    assert AuditEvent.objects.filter(actor=alice, action="auth.login").exists()


def test_a_group_removed_at_the_provider_takes_the_team_away_at_the_next_sign_in(portal: Portal, set_oidc_groups):
    page = portal.page_as("amir")
    expect(page.get_by_role("region", name="Payments")).to_contain_text("Member")
    portal.sign_out(page)

    set_oidc_groups("amir", [])
    portal.sign_in(page, "amir")

    expect(page.get_by_role("heading", name="No team yet")).to_be_visible()
    expect(page.get_by_role("region", name="Payments")).to_have_count(0)
    expect(page.get_by_role("link", name="New request")).to_have_count(0)
    amir = User.objects.get(oidc_subject="amir")
    assert not Membership.objects.filter(user=amir).exists()
    assert AuditEvent.objects.filter(actor=amir, action="membership.remove").exists()
    assert page.goto(portal.at("/requests/new/")).status == 403


def test_signing_out_ends_the_portal_session_and_the_providers(portal: Portal):
    page = portal.page_as("bob")
    old_session = next(c["value"] for c in page.context.cookies() if c["name"] == "sessionid")

    portal.sign_out(page)

    assert old_session not in [c["value"] for c in page.context.cookies() if c["name"] == "sessionid"]
    page.goto(portal.at("/"))
    expect(page).to_have_url(portal.at("/login/?next=/"))
    # The provider's session ended too: signing in again asks for the password.
    page.get_by_role("link", name=re.compile(r"^Sign in with your organisation")).click()
    expect(page.get_by_label("Password")).to_be_visible()
    bob = User.objects.get(oidc_subject="bob")
    assert AuditEvent.objects.filter(actor=bob, action="auth.logout").exists()
    # A stolen copy of the old cookie opens nothing either.
    thief = portal.new_page()
    thief.context.add_cookies([{"name": "sessionid", "value": old_session, "url": portal.url}])
    thief.goto(portal.at("/"))
    expect(thief).to_have_url(portal.at("/login/?next=/"))
