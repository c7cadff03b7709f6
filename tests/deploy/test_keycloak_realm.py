"""deploy/keycloak/berth-realm.json: the realm docker-compose imports into Keycloak.

Group convention: one top-level Keycloak group per groups-claim value. Keycloak allows ':' in
group names, and the Group Membership mapper with full.path=false puts the plain name in the
claim, so a member of the group "team-payments:owner" gets groups=["team-payments:owner"].
"""

from __future__ import annotations

import json
import uuid

import pytest

from tests.deploy.helpers import REALM_FILE, SECRETS_DIR

EXPECTED_MEMBERSHIP = {
    "alice": ["team-payments:owner"],
    "amir": ["team-payments"],
    "bob": ["team-search:owner"],
    "vera": ["team-search:viewer"],
    "carol": ["berth-approvers"],
    "dave": ["berth-admins"],
    "erin": [],
}
REQUIRED_GROUPS = {
    "team-payments",
    "team-payments:owner",
    "team-search:owner",
    "team-search:viewer",
    "berth-admins",
    "berth-approvers",
}
# Client scopes Keycloak itself creates during the import although the file defines clientScopes.
CREATED_BY_IMPORT = {"offline_access"}


@pytest.fixture(scope="module")
def realm() -> dict:
    return json.loads(REALM_FILE.read_text())


def client(realm: dict, client_id: str) -> dict:
    return next(c for c in realm["clients"] if c["clientId"] == client_id)


def scope(realm: dict, name: str) -> dict:
    return next(s for s in realm["clientScopes"] if s["name"] == name)


def mappers(realm: dict, client_id: str) -> list[dict]:
    """Every protocol mapper that applies to a client's tokens: its own and its default scopes'."""
    found = list(client(realm, client_id).get("protocolMappers") or [])
    for name in client(realm, client_id).get("defaultClientScopes") or []:
        found += scope(realm, name).get("protocolMappers") or []
    return found


def test_realm(realm):
    assert realm["realm"] == "berth" and realm["enabled"] is True
    assert realm.get("registrationAllowed") is False


def test_portal_client_is_confidential_with_pkce(realm):
    portal = client(realm, "berth-portal")
    assert portal["enabled"] is True and portal["protocol"] == "openid-connect"
    assert portal["publicClient"] is False and portal.get("bearerOnly", False) is False
    assert portal["clientAuthenticatorType"] == "client-secret"
    assert portal["standardFlowEnabled"] is True
    assert portal["implicitFlowEnabled"] is False and portal["directAccessGrantsEnabled"] is False
    assert portal["attributes"]["pkce.code.challenge.method"] == "S256"
    assert "http://localhost:8000/oidc/callback/" in portal["redirectUris"]
    assert not any("*" in uri for uri in portal["redirectUris"]), "no wildcard redirect URIs"
    post_logout = portal["attributes"]["post.logout.redirect.uris"].split("##")
    assert "http://localhost:8000/login/" in post_logout


def test_portal_client_secret_matches_the_shipped_secret(realm):
    example = (SECRETS_DIR / "oidc_rp_client_secret.example").read_text().strip()
    assert client(realm, "berth-portal")["secret"] == example


def test_kubectl_client_is_public_for_kubelogin(realm):
    kubectl = client(realm, "kubectl")
    assert kubectl["publicClient"] is True
    assert kubectl["standardFlowEnabled"] is True and kubectl["directAccessGrantsEnabled"] is False
    assert kubectl["attributes"]["pkce.code.challenge.method"] == "S256"
    assert {"http://localhost:8000", "http://localhost:18000"} <= set(kubectl["redirectUris"])


def test_cli_client_is_public_with_pkce_on_any_loopback_port(realm):
    cli = client(realm, "berth-cli")
    assert cli["publicClient"] is True
    assert cli["standardFlowEnabled"] is True and cli["directAccessGrantsEnabled"] is False
    assert cli["implicitFlowEnabled"] is False and cli["serviceAccountsEnabled"] is False
    assert cli["attributes"]["pkce.code.challenge.method"] == "S256"
    # Keycloak matches a loopback IP literal registered without a port on any port (RFC 8252, 7.3).
    assert cli["redirectUris"] == ["http://127.0.0.1/callback"]


def test_groups_scope_has_the_group_membership_mapper(realm):
    groups = scope(realm, "groups")
    assert groups["protocol"] == "openid-connect"
    mapper = next(m for m in groups["protocolMappers"] if m["protocolMapper"] == "oidc-group-membership-mapper")
    config = mapper["config"]
    assert config["claim.name"] == "groups"
    assert config["full.path"] == "false"
    for token in ("id.token.claim", "access.token.claim", "userinfo.token.claim"):
        assert config[token] == "true", token


@pytest.mark.parametrize("client_id", ["berth-portal", "kubectl", "berth-cli"])
def test_tokens_carry_groups_and_the_api_audience(realm, client_id):
    types = {m["protocolMapper"]: m for m in mappers(realm, client_id)}
    assert "groups" in client(realm, client_id)["defaultClientScopes"]
    audience = [m for m in mappers(realm, client_id) if m["protocolMapper"] == "oidc-audience-mapper"]
    assert audience, f"{client_id}: no audience mapper"
    # The API's own audience, in access tokens only: an ID token (aud = its client) must never pass.
    assert any(
        m["config"].get("included.custom.audience") == "berth-api"
        and m["config"].get("access.token.claim") == "true"
        and m["config"].get("id.token.claim") == "false"
        for m in audience
    )
    assert not any(m["config"].get("included.client.audience") for m in audience)
    # The realm defines its client scopes, so Keycloak adds none of the built-in ones: sub, name and
    # email must come from scopes in this file.
    assert "oidc-sub-mapper" in types
    claims = {m["config"].get("claim.name") for m in mappers(realm, client_id)}
    assert {"preferred_username", "email", "groups"} <= claims
    assert "oidc-full-name-mapper" in types


def test_every_scope_a_client_names_exists(realm):
    defined = {s["name"] for s in realm["clientScopes"]}
    for c in realm["clients"]:
        assert set(c.get("defaultClientScopes") or []) <= defined, c["clientId"]
        assert set(c.get("optionalClientScopes") or []) <= defined | CREATED_BY_IMPORT, c["clientId"]
    assert set(realm.get("defaultDefaultClientScopes") or []) <= defined


def test_groups(realm):
    names = [g["name"] for g in realm["groups"]]
    assert len(names) == len(set(names))
    assert REQUIRED_GROUPS <= set(names)
    for group in realm["groups"]:
        assert group["path"] == "/" + group["name"], "groups are top-level: name == claim value"
        assert not group.get("subGroups")
        team, _, role = group["name"].partition(":")
        assert team.startswith("team-") or (team.startswith("berth-") and not role)
        assert role in ("", "owner", "viewer")


def test_demo_users(realm):
    users = {u["username"]: u for u in realm["users"]}
    assert set(EXPECTED_MEMBERSHIP) <= set(users)
    paths = {g["path"] for g in realm["groups"]}
    for username, groups in EXPECTED_MEMBERSHIP.items():
        user = users[username]
        assert user["enabled"] is True
        assert sorted(user.get("groups") or []) == sorted("/" + g for g in groups), username
        assert set(user.get("groups") or []) <= paths
        password = [c for c in user["credentials"] if c["type"] == "password"]
        assert password == [{"type": "password", "value": f"{username}-pass", "temporary": False}]
        assert not user.get("requiredActions")
        # Keycloak's user profile wants these, or the first sign-in stops at "update your account".
        assert user["email"] == f"{username}@example.test" and user["emailVerified"] is True
        assert user["firstName"] and user["lastName"]
        # A fixed id keeps `sub` stable when Keycloak re-imports the realm on restart.
        uuid.UUID(user["id"])
    ids = [u["id"] for u in realm["users"]]
    assert len(ids) == len(set(ids))
