"""The transfer API: POST /tenants/{id}/transfer/, POST /requests/{id}/accept/ and /decline/, as the schema says."""

from __future__ import annotations

import pytest
import yaml

from tenants.models import AuditEvent, Membership, Team, TenantRequest, User

pytestmark = pytest.mark.django_db

API = "/api/v1"


@pytest.fixture
def team_c(db) -> Team:
    return Team.objects.create(slug="team-c", name="Team C", oidc_group="team-c")


@pytest.fixture
def tom(team_c) -> User:
    """Owner of team-c: neither giving nor receiving."""
    user = User.objects.create(username="tom", oidc_subject="sub-tom")
    Membership.objects.create(user=user, team=team_c, role=Membership.Role.OWNER)
    return user


@pytest.fixture
def shop(ready_tenant, small):
    return ready_tenant(name="shop", tier=small)


def _ask(api, user, tenant, body=None):
    body = {"target_team": "team-b"} if body is None else body
    return api(user).post(f"{API}/tenants/{tenant.pk}/transfer/", body, format="json")


def test_an_owner_asks_and_the_receiving_owner_accepts(api, alice, bob, shop, team_b):
    asked = _ask(api, alice, shop, {"target_team": "team-b", "purpose": "reorg"})
    assert asked.status_code == 201, asked.content
    body = asked.json()
    assert (body["action"], body["status"], body["team"], body["target_team"]) == (
        "transfer",
        "pending",
        "team-a",
        "team-b",
    )
    assert body["accepted_by"] is None and body["accepted_at"] is None and body["tenant"] == str(shop.pk)
    incoming = api(bob).get(f"{API}/requests/{body['id']}/")
    assert incoming.status_code == 200
    accepted = api(bob).post(f"{API}/requests/{body['id']}/accept/")
    assert accepted.status_code == 200, accepted.content
    assert accepted.json()["status"] == "approved" and accepted.json()["accepted_by"] == "bob"
    assert api(bob).get(f"{API}/tenants/{shop.pk}/").json()["team"] == "team-b"


def test_after_the_transfer_the_old_team_gets_404_for_the_tenant(api, alice, amir, bob, shop, team_b):
    req = _ask(api, alice, shop).json()
    api(bob).post(f"{API}/requests/{req['id']}/accept/")
    for old in (alice, amir):
        assert api(old).get(f"{API}/tenants/{shop.pk}/").status_code == 404
        assert api(old).post(f"{API}/tenants/{shop.pk}/kubeconfig/", {}, format="json").status_code == 404
        assert str(shop.pk) not in str(api(old).get(f"{API}/tenants/").json())


def test_a_team_unrelated_to_the_tenant_gets_404(api, bob, tom, erin, shop):
    for outsider in (bob, tom, erin):
        assert _ask(api, outsider, shop).status_code == 404


def test_a_plain_member_gets_403(api, amir, shop, team_b):
    response = _ask(api, amir, shop)
    assert response.status_code == 403 and "owners" in response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"target_team": "no-such-team"}, "target_team"),
        ({"target_team": "team-a"}, "target_team"),
        ({}, "target_team"),
        ({"target_team": "team-b", "purpose": 5}, "purpose"),
        ({"target_team": "team-b", "colour": "red"}, "colour"),
        ({"target_team": "team\x00b"}, "target_team"),
    ],
)
def test_bad_input_is_a_field_error(api, alice, shop, team_b, body, field):
    response = _ask(api, alice, shop, body)
    assert response.status_code == 400 and field in response.json(), response.content


def test_a_second_ask_while_one_is_pending_is_409(api, alice, shop, team_b, team_c):
    assert _ask(api, alice, shop).status_code == 201
    assert _ask(api, alice, shop, {"target_team": "team-c"}).status_code == 409


def test_an_owner_of_a_third_team_gets_404_for_the_offer(api, alice, tom, shop, team_b):
    req = _ask(api, alice, shop).json()
    assert api(tom).post(f"{API}/requests/{req['id']}/accept/").status_code == 404
    assert api(tom).post(f"{API}/requests/{req['id']}/decline/", {}, format="json").status_code == 404


def test_the_giving_owner_cannot_accept_403_and_a_second_accept_is_409(api, alice, bob, ready_tenant, medium, team_b):
    tenant = ready_tenant(name="big", tier=medium)  # medium: waits for an approver after acceptance
    req = _ask(api, alice, tenant).json()
    assert api(alice).post(f"{API}/requests/{req['id']}/accept/").status_code == 403
    first = api(bob).post(f"{API}/requests/{req['id']}/accept/")
    assert first.status_code == 200 and first.json()["status"] == "pending"
    assert "not approved automatically" in first.json()["approval_reason"]
    assert api(bob).post(f"{API}/requests/{req['id']}/accept/").status_code == 409


def test_the_receiving_owner_declines(api, alice, bob, shop, team_b):
    req = _ask(api, alice, shop).json()
    declined = api(bob).post(f"{API}/requests/{req['id']}/decline/", {"reason": "no room"}, format="json")
    assert declined.status_code == 200 and declined.json()["status"] == "rejected"
    assert declined.json()["decision_comment"] == "no room"
    assert api(alice).get(f"{API}/tenants/{shop.pk}/").json()["team"] == "team-a"


def test_approvers_see_it_only_once_accepted_and_approve_it(api, alice, bob, carol, ready_tenant, medium, team_b):
    tenant = ready_tenant(name="big", tier=medium)
    req = _ask(api, alice, tenant).json()
    assert api(carol).post(f"{API}/requests/{req['id']}/approve/", {}, format="json").status_code == 409
    api(bob).post(f"{API}/requests/{req['id']}/accept/")
    approved = api(carol).post(f"{API}/requests/{req['id']}/approve/", {}, format="json")
    assert approved.status_code == 200 and approved.json()["status"] == "approved"
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"transfer.ask", "transfer.accept", "request.approve", "transfer.complete"} <= actions


def test_a_transfer_is_not_asked_for_through_the_requests_endpoint(api, alice, shop):
    response = api(alice).post(
        f"{API}/requests/", {"action": "transfer", "tenant": str(shop.pk), "team": "team-a"}, format="json"
    )
    assert response.status_code == 400 and "action" in response.json()
    assert not TenantRequest.objects.filter(action="transfer").exists()


def test_the_schema_documents_the_transfer_operations_exactly(api, erin):
    schema = yaml.safe_load(api(erin).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi").content)
    transfer = schema["paths"]["/api/v1/tenants/{id}/transfer/"]["post"]
    assert set(transfer["responses"]) == {"201", "400", "401", "403", "404", "409", "415", "429", "503"}
    assert transfer["responses"]["201"]["content"]["application/json"]["schema"]["$ref"].endswith("/Request")
    body = schema["components"]["schemas"]["TransferRequest"]
    assert body["required"] == ["target_team"] and body["additionalProperties"] is False
    for verb in ("accept", "decline"):
        operation = schema["paths"][f"/api/v1/requests/{{id}}/{verb}/"]["post"]
        assert {"200", "403", "404", "409"} <= set(operation["responses"])
    request = schema["components"]["schemas"]["Request"]["properties"]
    assert request["target_team"]["nullable"] and request["accepted_by"]["nullable"]
    assert request["accepted_at"]["nullable"]
    enums = schema["components"]["schemas"]
    assert "transfer" in enums["ActionEnum"]["enum"]  # requests may be transfers
    assert "transfer" not in enums["RequestCreateActionEnum"]["enum"]  # but are not asked for on POST /requests/
