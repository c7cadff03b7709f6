"""Portal API tokens: the services, the ``Authorization: Token`` scheme, the endpoints, and team scoping."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone
from rest_framework.test import APIClient

from tenants import services
from tenants.errors import Forbidden, InvalidTransition
from tenants.models import ApiToken, AuditEvent, Membership
from tenants.services.api_tokens import TOUCH_EVERY

pytestmark = pytest.mark.django_db

API = "/api/v1"


def with_token(plaintext: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {plaintext}")
    return client


# --- services -------------------------------------------------------------------------


def test_a_new_token_is_shown_once_and_only_its_digest_is_stored(alice):
    token, plaintext = services.api_token_create(actor=alice, name="  ci  ", expires_in_days=30)
    assert plaintext.startswith(f"brt_{token.prefix}_") and len(plaintext) > 40
    assert token.digest == services.api_token_digest(plaintext) and plaintext not in token.digest
    assert token.name == "ci"
    assert abs(token.expires_at - (timezone.now() + dt.timedelta(days=30))) < dt.timedelta(minutes=1)


@pytest.mark.parametrize(
    ("name", "days", "field"),
    [
        ("", 30, "name"),
        ("   ", 30, "name"),
        ("ci", 0, "expires_in_days"),
        ("ci", 366, "expires_in_days"),
        ("ci", -5, "expires_in_days"),
    ],
)
def test_a_token_needs_a_name_and_a_lifetime_of_1_to_365_days(alice, name, days, field):
    with pytest.raises(ValidationError) as refused:
        services.api_token_create(actor=alice, name=name, expires_in_days=days)
    assert field in refused.value.message_dict


def test_only_team_owners_and_admins_make_team_automation_tokens(alice, amir, dave, team_a):
    assert services.api_token_create(actor=alice, name="a", expires_in_days=1, team=team_a)[0].team == team_a
    assert services.api_token_create(actor=dave, name="d", expires_in_days=1, team=team_a)[0].team == team_a
    with pytest.raises(Forbidden):
        services.api_token_create(actor=amir, name="m", expires_in_days=1, team=team_a)


def test_a_token_is_revoked_once_by_its_owner_or_an_admin(alice, bob, dave):
    token, _ = services.api_token_create(actor=alice, name="ci", expires_in_days=1)
    with pytest.raises(Forbidden):
        services.api_token_revoke(token=token, actor=bob)
    assert services.api_token_revoke(token=token, actor=dave).revoked_at is not None
    with pytest.raises(InvalidTransition):
        services.api_token_revoke(token=token, actor=alice)


# --- authenticating with a token ------------------------------------------------------


def test_a_valid_token_authenticates_and_is_marked_used(alice):
    token, plaintext = services.api_token_create(actor=alice, name="ci", expires_in_days=1)
    response = with_token(plaintext).get(f"{API}/me/")
    assert response.status_code == 200 and response.json()["username"] == "alice"
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_a_token_in_use_is_marked_used_at_most_once_a_minute(alice, django_assert_num_queries):
    token, plaintext = services.api_token_create(actor=alice, name="ci", expires_in_days=1)
    client = with_token(plaintext)
    assert client.get(f"{API}/me/").status_code == 200
    token.refresh_from_db()
    first = token.last_used_at
    assert first is not None
    with django_assert_num_queries(2):  # the token, the person's teams: no UPDATE
        assert client.get(f"{API}/me/").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at == first
    # A minute later the next call marks it again.
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=first - TOUCH_EVERY)
    assert client.get(f"{API}/me/").status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None and token.last_used_at > first


def test_an_expired_token_is_401(alice):
    token, plaintext = services.api_token_create(actor=alice, name="ci", expires_in_days=1)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    response = with_token(plaintext).get(f"{API}/me/")
    assert response.status_code == 401 and "expired or revoked" in response.json()["detail"]


def test_a_revoked_token_is_401(alice):
    token, plaintext = services.api_token_create(actor=alice, name="ci", expires_in_days=1)
    services.api_token_revoke(token=token, actor=alice)
    assert with_token(plaintext).get(f"{API}/me/").status_code == 401


def test_a_deactivated_users_token_is_401(alice):
    _, plaintext = services.api_token_create(actor=alice, name="ci", expires_in_days=1)
    alice.is_active = False
    alice.save()
    assert with_token(plaintext).get(f"{API}/me/").status_code == 401


def test_the_right_prefix_with_the_wrong_secret_is_401(alice):
    token, plaintext = services.api_token_create(actor=alice, name="ci", expires_in_days=1)
    forged = plaintext[:-4] + ("AAAA" if not plaintext.endswith("AAAA") else "BBBB")
    assert with_token(forged).get(f"{API}/me/").status_code == 401


@pytest.mark.parametrize(
    "header",
    [
        "Token",
        "Token a b",
        "Token garbage",
        "Token brt_",
        "Token brt_zzzzzzzz_" + "x" * 40,
        "Token brt_0123abcd_short",
        "Token brt_0123abcd_" + "x" * 5000,
        "Token brt_\x00\x00\x00\x00_" + "x" * 40,
        "Token " + "é" * 30,
    ],
)
def test_garbage_tokens_are_401_and_audited(header):
    response = APIClient().get(f"{API}/tenants/", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert AuditEvent.objects.filter(action="auth.token_failed").count() == 1


def test_an_unknown_scheme_is_not_authentication(alice):
    assert APIClient().get(f"{API}/me/", HTTP_AUTHORIZATION="Basic YWxpY2U6cHc=").status_code == 401


def test_a_bearer_token_without_oidc_configured_is_401(settings):
    settings.OIDC_OP_JWKS_ENDPOINT = ""
    response = APIClient().get(f"{API}/me/", HTTP_AUTHORIZATION="Bearer eyJhbGciOiJSUzI1NiJ9.e30.sig")
    assert response.status_code == 401


# --- the token endpoints --------------------------------------------------------------


def test_tokens_list_shows_only_my_tokens_and_never_secrets(api, alice, bob):
    services.api_token_create(actor=alice, name="mine", expires_in_days=1)
    services.api_token_create(actor=bob, name="bobs", expires_in_days=1)
    (token,) = api(alice).get(f"{API}/tokens/").json()["results"]
    assert token["name"] == "mine"
    assert set(token) == {"id", "name", "prefix", "team", "created_at", "expires_at", "revoked_at", "last_used_at"}


def test_creating_a_token_returns_the_plaintext_once(api, alice):
    response = api(alice).post(f"{API}/tokens/", {"name": "ci", "expires_in_days": 7}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert body["token"].startswith(f"brt_{body['prefix']}_") and body["team"] is None
    assert with_token(body["token"]).get(f"{API}/me/").json()["username"] == "alice"
    assert "token" not in api(alice).get(f"{API}/tokens/").json()["results"][0]


def test_alice_creates_a_team_automation_token(api, alice):
    response = api(alice).post(f"{API}/tokens/", {"name": "deploy", "team": "team-a"}, format="json")
    assert response.status_code == 201 and response.json()["team"] == "team-a"


def test_a_member_cannot_create_a_team_token(api, amir):
    assert api(amir).post(f"{API}/tokens/", {"name": "deploy", "team": "team-a"}, format="json").status_code == 403


def test_a_token_for_another_team_is_a_field_error(api, bob, team_a):
    response = api(bob).post(f"{API}/tokens/", {"name": "x", "team": "team-a"}, format="json")
    assert response.status_code == 400 and response.json() == {"team": ["Object with slug=team-a does not exist."]}


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": ""},
        {"name": "x", "expires_in_days": 0},
        {"name": "x", "expires_in_days": 366},
        {"name": "x", "expires_in_days": "soon"},
        {"name": "x" * 101},
        {"name": ["x"]},
        {"name": "x", "team": "nope"},
        {"name": "x", "team": "\x00"},
        {"name": "a\x00b"},
        [],
        "x",
    ],
)
def test_bad_token_requests_are_400(api, alice, body):
    assert api(alice).post(f"{API}/tokens/", body, format="json").status_code == 400


def test_revoking_over_the_api(api, alice, bob):
    token, plaintext = services.api_token_create(actor=alice, name="ci", expires_in_days=1)
    assert api(bob).post(f"{API}/tokens/{token.pk}/revoke/").status_code == 404
    response = api(alice).post(f"{API}/tokens/{token.pk}/revoke/")
    assert response.status_code == 200 and response.json()["revoked_at"]
    assert api(alice).post(f"{API}/tokens/{token.pk}/revoke/").status_code == 409
    assert with_token(plaintext).get(f"{API}/me/").status_code == 401


def test_a_token_can_revoke_itself(alice):
    token, plaintext = services.api_token_create(actor=alice, name="ci", expires_in_days=1)
    assert with_token(plaintext).post(f"{API}/tokens/{token.pk}/revoke/").status_code == 200


# --- every endpoint works with a real token -------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "me/",
        "teams/",
        "tiers/",
        "clusters/",
        "requests/",
        "tenants/",
        "audit-events/",
        "audit-events/export/",
        "tokens/",
    ],
)
def test_every_read_endpoint_answers_a_real_token(token_client, alice, cluster, path):
    assert token_client(alice).get(f"{API}/{path}").status_code == 200


def test_the_whole_request_flow_with_real_tokens(token_client, alice, carol, bob, cluster, dispatched):
    created = token_client(alice).post(
        f"{API}/requests/", {"team": "team-a", "name": "web", "tier": "medium", "cluster": "dev"}, format="json"
    )
    assert created.status_code == 201
    req_id = created.json()["id"]
    assert token_client(bob).get(f"{API}/requests/{req_id}/").status_code == 404
    assert token_client(alice).post(f"{API}/requests/{req_id}/approve/").status_code == 403
    approved = token_client(carol).post(f"{API}/requests/{req_id}/approve/")
    assert approved.status_code == 200 and approved.json()["decided_by"] == "carol"
    tenant_id = approved.json()["tenant"]
    assert token_client(alice).get(f"{API}/tenants/{tenant_id}/").json()["status"] == "approved"


# --- a team automation token acts for its one team only -------------------------------


@pytest.fixture
def alice_in_two_teams(alice, team_b):
    Membership.objects.create(user=alice, team=team_b, role=Membership.Role.OWNER)
    return alice


def test_a_team_token_sees_only_its_teams_things(token_client, alice_in_two_teams, make_tenant, team_a, team_b):
    alice = alice_in_two_teams
    a = make_tenant(team=team_a, created_by=alice, name="in-a")
    b = make_tenant(team=team_b, created_by=alice, name="in-b")
    scoped = token_client(alice, team=team_b)
    assert [t["name"] for t in scoped.get(f"{API}/tenants/").json()["results"]] == ["in-b"]
    assert scoped.get(f"{API}/tenants/{a.pk}/").status_code == 404
    assert scoped.get(f"{API}/tenants/{b.pk}/").status_code == 200
    assert [t["slug"] for t in scoped.get(f"{API}/teams/").json()["results"]] == ["team-b"]
    assert all(e["team"] == "team-b" for e in scoped.get(f"{API}/audit-events/").json()["results"])
    assert token_client(alice).get(f"{API}/tenants/").json()["count"] == 2  # her personal token sees both


def test_a_team_token_cannot_act_for_another_team(token_client, alice_in_two_teams, team_b, cluster):
    scoped = token_client(alice_in_two_teams, team=team_b)
    body = {"team": "team-a", "name": "web", "tier": "medium", "cluster": "dev"}
    response = scoped.post(f"{API}/requests/", body, format="json")
    assert response.status_code == 400 and "team" in response.json()
    assert scoped.post(f"{API}/requests/", {**body, "team": "team-b"}, format="json").status_code == 201


def test_a_team_token_cannot_mint_tokens_at_all(token_client, alice_in_two_teams, team_b):
    scoped = token_client(alice_in_two_teams, team=team_b)
    assert scoped.post(f"{API}/tokens/", {"name": "escalate"}, format="json").status_code == 403
    assert scoped.post(f"{API}/tokens/", {"name": "other", "team": "team-a"}, format="json").status_code == 403
    assert scoped.post(f"{API}/tokens/", {"name": "same", "team": "team-b"}, format="json").status_code == 403
    assert ApiToken.objects.filter(name__in=["escalate", "other", "same"]).count() == 0
    assert AuditEvent.objects.filter(action="authz.denied").count() == 3


def test_a_team_token_lists_and_revokes_only_its_teams_tokens(token_client, alice_in_two_teams, team_a, team_b):
    personal, _ = services.api_token_create(actor=alice_in_two_teams, name="personal", expires_in_days=1)
    scoped = token_client(alice_in_two_teams, team=team_b)
    assert {t["team"] for t in scoped.get(f"{API}/tokens/").json()["results"]} == {"team-b"}
    assert scoped.post(f"{API}/tokens/{personal.pk}/revoke/").status_code == 404
