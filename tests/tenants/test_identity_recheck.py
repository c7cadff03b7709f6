"""Groups re-checked with the real dev OIDC provider between sign-ins: what the provider takes away, Berth does.

Alice signs in through the provider (offline_access gives the portal a refresh token, kept sealed); then the
provider changes her groups, or forgets her, and a re-check (the beat task's, or the one an API token
triggers when her identity is stale) carries that into Berth.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from devcluster.oidc import API_RESOURCE, SCOPES, OidcProvider
from tenants import audit, identity, services
from tenants.models import ApiToken, AuditEvent, Membership, Team, User
from tenants.sealing import unseal
from tests.fixtures import point_portal_at
from tests.plugins.oidc import SignInRefused, redeem, sign_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed_in_alice(dev_provider, oidc_tokens) -> User:
    """Alice after a browser sign-in: synced from her verified ID token, her refresh token kept sealed."""
    tokens = oidc_tokens("alice", scope=SCOPES + " offline_access")
    user = services.user_sync_from_claims(claims=identity.verify_id_token(tokens["id_token"]))
    services.user_record_idp_session(user=user, refresh_token=tokens["refresh_token"])
    user.refresh_from_db()
    return user


@pytest.fixture
def forget_alice(dev_provider) -> Iterator[None]:
    entry = dev_provider.remove_user("alice")
    yield
    dev_provider.add_user("alice", entry)


def teams(user: User) -> dict[str, str]:
    return dict(Membership.objects.filter(user=user).values_list("team__slug", "role"))


def test_the_refresh_token_is_kept_sealed(signed_in_alice):
    stored = User.objects.get(pk=signed_in_alice.pk).idp_refresh_token
    plain = unseal(stored)
    assert stored and plain and plain not in stored


def test_a_group_removed_at_the_provider_takes_the_team_and_its_tokens_away(signed_in_alice, set_oidc_groups):
    alice = signed_in_alice
    assert teams(alice) == {"team-payments": "owner"}
    team_token, _ = services.api_token_create(
        actor=alice, name="ci", expires_in_days=1, team=alice.memberships.get().team
    )
    personal, _ = services.api_token_create(actor=alice, name="me", expires_in_days=1)
    set_oidc_groups("alice", ["team-search"])
    assert services.user_recheck(user=alice) == "confirmed"
    assert teams(alice) == {"team-search": "member"}
    assert ApiToken.objects.get(pk=team_token.pk).revoked_at is not None
    assert ApiToken.objects.get(pk=personal.pk).revoked_at is None
    assert AuditEvent.objects.filter(action="membership.remove", actor=alice).exists()


def test_a_user_who_lost_every_group_is_deactivated_and_their_tokens_revoked(signed_in_alice, set_oidc_groups):
    token, plaintext = services.api_token_create(actor=signed_in_alice, name="ci", expires_in_days=1)
    set_oidc_groups("alice", [])
    assert services.user_recheck(user=signed_in_alice) == "deactivated"
    assert not User.objects.get(pk=signed_in_alice.pk).is_active
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    assert APIClient().get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {plaintext}").status_code == 401
    event = AuditEvent.objects.get(action="user.deactivated")
    assert "no longer puts this user in any Berth group" in event.after["reason"]
    assert event.after["tokens_revoked"] == 1  # a count, not a secret


def test_a_user_the_provider_no_longer_knows_is_served_nothing_until_a_sign_in_it_refuses(
    signed_in_alice, forget_alice, dev_provider
):
    # The dev provider answers a refresh token of a deleted account as it answers one it forgot in a restart
    # ("grant request is invalid"): no evidence about the person, so the session ends and nothing is served.
    _, plaintext = services.api_token_create(actor=signed_in_alice, name="ci", expires_in_days=1)
    assert services.user_recheck(user=signed_in_alice) == "session ended"
    user = User.objects.get(pk=signed_in_alice.pk)
    assert user.idp_refresh_token == ""
    assert APIClient().get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {plaintext}").status_code == 401
    with pytest.raises(SignInRefused):
        sign_in(dev_provider, "alice")


def sign_in_again(provider: OidcProvider, user: User) -> None:
    """What the portal's callback does with a fresh sign-in: sync from the ID token, keep the refresh token."""
    tokens = redeem(provider, sign_in(provider, user.username, scope=SCOPES + " offline_access"))
    services.user_sync_from_claims(claims=identity.verify_id_token(tokens["id_token"]))
    services.user_record_idp_session(user=user, refresh_token=tokens["refresh_token"])


def test_a_provider_restart_ends_the_session_not_the_person(signed_in_alice, dev_provider, client):
    alice = signed_in_alice
    _, plaintext = services.api_token_create(actor=alice, name="ci", expires_in_days=1)
    bearer = redeem(dev_provider, sign_in(dev_provider, "alice"), resource=API_RESOURCE)["access_token"]
    client.force_login(alice)  # her portal session
    assert client.get("/").status_code == 200
    dev_provider.restart()  # `make demo` restarted: the dev provider kept its sessions and grants in memory
    assert services.user_recheck(user=alice) == "session ended"

    user = User.objects.get(pk=alice.pk)
    assert user.is_active and user.idp_refresh_token == "" and teams(user) == {"team-payments": "owner"}
    ended = AuditEvent.objects.get(action="user.session_ended")
    assert "grant request is invalid" in ended.after["reason"] and ended.after["api_tokens_paused"] == 1
    assert not AuditEvent.objects.filter(action="user.deactivated").exists()
    # Nothing that came from the ended session is honoured until she signs in again: not her API token, not an
    # access token issued before, not her portal session.
    api = APIClient()
    refused = api.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {plaintext}")
    assert refused.status_code == 401 and "sign in to the portal again" in refused.json()["detail"]
    refused = api.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {bearer}")
    assert refused.status_code == 401 and "sign in again" in refused.json()["detail"]
    page = client.get("/")
    assert page.status_code == 302 and page["Location"].startswith("/login")

    time.sleep(1.1)  # `iat` counts whole seconds: a token of the second the session ended counts as before it
    sign_in_again(dev_provider, user)  # re-reads her groups
    assert api.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Token {plaintext}").status_code == 200
    fresh = redeem(dev_provider, sign_in(dev_provider, "alice"), resource=API_RESOURCE)["access_token"]
    assert api.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {fresh}").status_code == 200
    assert services.user_recheck(user=User.objects.get(pk=alice.pk)) == "confirmed"


@pytest.fixture
def expiring_provider(settings, tmp_path) -> Iterator[OidcProvider]:
    """A second dev provider whose refresh tokens (the portal's session there) expire after two seconds."""
    with OidcProvider(data_dir=tmp_path / "expiring", ttl={"RefreshToken": 2}) as expiring:
        point_portal_at(settings, expiring.portal_env())
        yield expiring
    identity.jwks_client.cache_clear()


def test_an_expired_session_ends_the_session_not_the_person(expiring_provider):
    tokens = redeem(expiring_provider, sign_in(expiring_provider, "alice", scope=SCOPES + " offline_access"))
    alice = services.user_sync_from_claims(claims=identity.verify_id_token(tokens["id_token"]))
    services.user_record_idp_session(user=alice, refresh_token=tokens["refresh_token"])
    alice.refresh_from_db()
    time.sleep(3)
    assert services.user_recheck(user=alice) == "session ended"
    user = User.objects.get(pk=alice.pk)
    assert user.is_active and teams(user) == {"team-payments": "owner"} and not services.identity_is_fresh(user=user)


def test_an_unreachable_provider_changes_nothing(signed_in_alice, settings):
    settings.OIDC_OP_TOKEN_ENDPOINT = "https://127.0.0.1:9/token"
    assert services.user_recheck(user=signed_in_alice) == "unreachable"
    assert User.objects.get(pk=signed_in_alice.pk).is_active and teams(signed_in_alice)


def test_an_api_token_of_a_stale_identity_is_rechecked_before_it_is_trusted(signed_in_alice, set_oidc_groups, settings):
    _, plaintext = services.api_token_create(actor=signed_in_alice, name="ci", expires_in_days=1)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {plaintext}")
    assert client.get("/api/v1/me/").status_code == 200
    User.objects.filter(pk=signed_in_alice.pk).update(identity_checked_at=timezone.now() - dt.timedelta(hours=2))
    set_oidc_groups("alice", ["team-search:viewer"])
    body = client.get("/api/v1/me/").json()  # the token's use triggers the re-check first
    assert body["teams"] == [{"team": "team-search", "role": "viewer"}]
    # With the provider out of reach, a stale identity's tokens stop working until a re-check succeeds.
    User.objects.filter(pk=signed_in_alice.pk).update(identity_checked_at=timezone.now() - dt.timedelta(hours=2))
    settings.OIDC_OP_TOKEN_ENDPOINT = "https://127.0.0.1:9/token"
    refused = client.get("/api/v1/me/")
    assert refused.status_code == 401 and "sign in to the portal again" in refused.json()["detail"]


def test_a_token_rechecked_out_of_a_team_no_longer_lists_its_trail(signed_in_alice, set_oidc_groups):
    """The token's statement reads alice's teams too; the re-check her stale identity triggers changes them, and the
    audit list of that same request is scoped by her teams after it."""
    payments = Team.objects.get(slug="team-payments")
    audit.record(actor=None, action="test.payments", object_type="thing", object_id="1", team=payments)
    _, plaintext = services.api_token_create(actor=signed_in_alice, name="ci", expires_in_days=1)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {plaintext}")

    def trail() -> set[str]:
        return {event["action"] for event in client.get("/api/v1/audit-events/").json()["results"]}

    assert "test.payments" in trail()
    User.objects.filter(pk=signed_in_alice.pk).update(identity_checked_at=timezone.now() - dt.timedelta(hours=2))
    set_oidc_groups("alice", ["team-search"])
    assert "test.payments" not in trail()
    assert teams(signed_in_alice) == {"team-search": "member"}


def test_the_periodic_recheck_takes_only_users_due(signed_in_alice, bob, set_oidc_groups, settings):
    assert services.users_recheck_due() == {}  # alice was confirmed at sign-in; bob has no provider session
    User.objects.filter(pk=signed_in_alice.pk).update(
        identity_checked_at=timezone.now() - dt.timedelta(minutes=settings.BERTH_IDENTITY_RECHECK_MINUTES + 1)
    )
    set_oidc_groups("alice", ["team-payments:owner", "berth-approvers"])
    assert services.users_recheck_due() == {"confirmed": 1}
    assert User.objects.get(pk=signed_in_alice.pk).is_approver
