"""A member removed at the identity provider replays an access token issued before the removal (still unexpired).

The token is genuine: the provider signed it, for this API, and it has not expired. But its groups are older
than what the provider said since (a re-check with the refresh token), so they must never put back what that
check took away. Played with the attacker's own tokens from the real dev provider against the API.
"""

from __future__ import annotations

import time

import pytest
from rest_framework.test import APIClient

from devcluster.oidc import API_RESOURCE, SCOPES
from tenants import services
from tenants.models import Membership, User
from tests.plugins.oidc import redeem, sign_in

pytestmark = pytest.mark.django_db


def me(token: str) -> dict:
    response = APIClient().get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    return response.json()


def teams(username: str) -> dict[str, str]:
    return dict(Membership.objects.filter(user__username=username).values_list("team__slug", "role"))


def test_an_access_token_from_before_a_removal_does_not_bring_the_team_back(dev_provider, set_oidc_groups):
    old_token = redeem(dev_provider, sign_in(dev_provider, "alice"), resource=API_RESOURCE)["access_token"]
    assert me(old_token)["teams"] == [{"team": "team-payments", "role": "owner"}]
    # The portal keeps a refresh token from her browser sign-in, and re-checks her with it.
    tokens = redeem(dev_provider, sign_in(dev_provider, "alice", scope=SCOPES + " offline_access"))
    alice = User.objects.get(username="alice")
    services.user_record_idp_session(user=alice, refresh_token=tokens["refresh_token"])
    alice.refresh_from_db()
    set_oidc_groups("alice", ["team-search"])  # an admin takes team-payments away at the provider
    assert services.user_recheck(user=alice) == "confirmed"
    assert teams("alice") == {"team-search": "member"}

    # She replays the access token issued before the removal.
    assert me(old_token)["teams"] == [{"team": "team-search", "role": "member"}]
    assert teams("alice") == {"team-search": "member"}
    listed = APIClient().get("/api/v1/teams/", HTTP_AUTHORIZATION=f"Bearer {old_token}")
    assert "team-payments" not in listed.content.decode()


def test_a_token_issued_after_the_last_check_carries_its_groups(dev_provider, set_oidc_groups):
    first = redeem(dev_provider, sign_in(dev_provider, "alice"), resource=API_RESOURCE)["access_token"]
    assert me(first)["teams"] == [{"team": "team-payments", "role": "owner"}]
    set_oidc_groups("alice", ["team-payments:owner", "team-search:viewer"])
    time.sleep(1.1)  # `iat` counts whole seconds: two tokens of one second cannot be told apart
    newer = redeem(dev_provider, sign_in(dev_provider, "alice"), resource=API_RESOURCE)["access_token"]
    assert {t["team"] for t in me(newer)["teams"]} == {"team-payments", "team-search"}
    # The older token neither takes away what the newer one added nor puts back anything.
    assert {t["team"] for t in me(first)["teams"]} == {"team-payments", "team-search"}
