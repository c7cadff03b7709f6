"""tenants.auth: the OIDC sign-in backend, the audited callback and the provider logout URL."""

from __future__ import annotations

import pytest
from django.test import RequestFactory
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from tenants.auth import AuditedCallbackView, BerthOidcBackend, provider_logout_url
from tenants.models import AuditEvent, Membership

pytestmark = pytest.mark.django_db


@pytest.fixture
def backend(settings) -> BerthOidcBackend:
    settings.OIDC_OP_JWKS_ENDPOINT = "http://127.0.0.1:9/jwks"  # RS256 needs a key source; never contacted here
    b = BerthOidcBackend()
    b.request = RequestFactory().get("/oidc/callback/", REMOTE_ADDR="198.51.100.1", HTTP_USER_AGENT="Firefox")
    return b


CLAIMS = {"sub": "sub-nina", "preferred_username": "nina", "email": "nina@example.test", "groups": ["team-pay:owner"]}


def test_claims_without_a_subject_are_not_accepted(backend):
    assert backend.verify_claims({"sub": "x"}) is True
    assert backend.verify_claims({"email": "x@example.test"}) is False


def test_users_are_found_by_subject_not_by_email(backend, alice):
    assert list(backend.filter_users_by_claims({"sub": "sub-alice", "email": "other@example.test"})) == [alice]
    assert not backend.filter_users_by_claims({"sub": "unknown", "email": alice.email}).exists()


def test_a_deactivated_user_is_not_found(backend, alice):
    alice.is_active = False
    alice.save()
    assert not backend.filter_users_by_claims({"sub": "sub-alice"}).exists()


def test_create_user_syncs_teams_and_audits_with_the_callbacks_context(backend):
    user = backend.create_user(CLAIMS)
    assert Membership.objects.get(user=user).role == "owner"
    event = AuditEvent.objects.get(action="membership.add")
    assert (event.source_ip, event.user_agent) == ("198.51.100.1", "Firefox")


def test_update_user_resyncs_groups(backend):
    user = backend.create_user(CLAIMS)
    user = backend.update_user(user, {**CLAIMS, "groups": ["team-pay:viewer"]})
    assert Membership.objects.get(user=user).role == "viewer"


def test_claims_the_domain_refuses_yield_no_user(backend):
    assert backend.create_user({"groups": []}) is None


def test_userinfo_completes_the_id_token_claims(backend, monkeypatch):
    monkeypatch.setattr(
        OIDCAuthenticationBackend, "get_userinfo", lambda self, a, i, p: {"groups": ["team-pay"], "email": "u@x"}
    )
    claims = backend.get_userinfo("access", "id", {"sub": "s", "email": "id@x"})
    assert claims == {"sub": "s", "email": "u@x", "groups": ["team-pay"]}


def test_an_unreachable_userinfo_endpoint_falls_back_to_the_id_token(backend, monkeypatch):
    def down(self, a, i, p):
        raise ConnectionError("userinfo down")

    monkeypatch.setattr(OIDCAuthenticationBackend, "get_userinfo", down)
    assert backend.get_userinfo("access", "id", {"sub": "s"}) == {"sub": "s"}
    with pytest.raises(ConnectionError):
        backend.get_userinfo("access", "id", {})


def test_a_failed_sign_in_is_audited_with_the_providers_reason(settings):
    settings.LOGIN_REDIRECT_URL_FAILURE = "/login/"
    view = AuditedCallbackView()
    view.request = RequestFactory().get(
        "/oidc/callback/", {"error": "access_denied", "error_description": "User said no"}, REMOTE_ADDR="203.0.113.99"
    )
    response = view.login_failure()
    assert response.status_code == 302
    event = AuditEvent.objects.get(action="auth.login_failed")
    assert (event.actor, event.actor_name, event.after, event.source_ip) == (
        None,
        "anonymous",
        {"reason": "User said no", "failures_from_address_this_minute": 1},
        "203.0.113.99",
    )


def test_logout_ends_the_provider_session_and_comes_back(settings):
    settings.OIDC_OP_LOGOUT_ENDPOINT = "https://idp.example.test/logout"
    url = provider_logout_url(RequestFactory().get("/logout/"))
    assert url.startswith("https://idp.example.test/logout?post_logout_redirect_uri=http%3A%2F%2Ftestserver%2F")
    assert "client_id=berth-portal" in url


def test_logout_without_a_provider_endpoint_just_comes_back(settings):
    settings.OIDC_OP_LOGOUT_ENDPOINT = ""
    assert provider_logout_url(RequestFactory().get("/logout/")).startswith("http://testserver/")
