"""The `berth` commands against a live portal (gunicorn on the test database), run as a separate process.

No worker or cluster here: requests are made and decided; provisioning is tests/berth_cli/test_apply_live.py's.
"""

from __future__ import annotations

import pytest

from tenants import audit
from tenants.models import AuditEvent, Tenant, TenantRequest
from tests.fixtures import TokenFactory
from tests.plugins.kube import wait_for
from tests.plugins.portal import BerthRunner

pytestmark = pytest.mark.django_db(transaction=True)

CREATE = ("request", "create", "--team", "team-a", "--cluster", "dev", "--tier", "medium")


def test_whoami_names_alice_and_her_team(berth: BerthRunner, api_token: TokenFactory, alice) -> None:
    result = berth("whoami", "-o", "json", token=api_token(alice))
    assert result.code == 0, result.stderr
    me = result.json()
    assert me["username"] == "alice"
    assert me["teams"] == [{"team": "team-a", "role": "owner"}]


def test_alice_asks_carol_approves_by_id_prefix(berth: BerthRunner, api_token: TokenFactory, alice, carol, cluster):
    alice_token, carol_token = api_token(alice), api_token(carol)
    made = berth(*CREATE, "--name", "web", "--purpose", "shop front", "-o", "json", token=alice_token)
    assert made.code == 0, made.stderr
    request = made.json()
    assert (request["status"], request["action"], request["team"], request["tier"]) == (
        "pending",
        "create",
        "team-a",
        "medium",
    )

    queue = berth("requests", "--status", "pending", token=carol_token)
    assert queue.code == 0, queue.stderr
    header, *rows = queue.stdout.splitlines()
    assert header.split()[:3] == ["ID", "ACTION", "TEAM"]
    assert [row.split()[0] for row in rows] == [request["id"]]

    approved = berth("request", "approve", request["id"][:8], "--comment", "ok", "-o", "yaml", token=carol_token)
    assert approved.code == 0, approved.stderr
    assert approved.yaml()["status"] == "approved"
    assert TenantRequest.objects.get(pk=request["id"]).decided_by == carol
    # Approved, and handed to the worker (which, if one runs in this session, fails it: no cluster behind "dev").
    assert Tenant.objects.get(pk=request["tenant"]).status != "requested"

    listed = berth("tenants", "-o", "json", token=alice_token).json()
    assert [(t["name"], t["team"], t["tier"]) for t in listed] == [("web", "team-a", "medium")]


def test_reject_needs_a_reason_and_cancel_is_for_the_requester(
    berth: BerthRunner, api_token: TokenFactory, alice, carol, cluster
):
    alice_token, carol_token = api_token(alice), api_token(carol)
    first = berth(*CREATE, "--name", "one", "-o", "json", token=alice_token).json()
    second = berth(*CREATE, "--name", "two", "-o", "json", token=alice_token).json()

    assert berth("request", "reject", first["id"], token=carol_token).code == 2  # --reason is required
    rejected = berth("request", "reject", first["id"], "--reason", "use small", "-o", "json", token=carol_token)
    assert rejected.code == 0, rejected.stderr
    assert rejected.json()["decision_comment"] == "use small"

    cancelled = berth("request", "cancel", second["id"], "-o", "json", token=alice_token)
    assert cancelled.code == 0, cancelled.stderr
    assert cancelled.json()["status"] == "cancelled"
    statuses = dict(Tenant.objects.values_list("name", "status"))
    assert statuses == {"one": "rejected", "two": "cancelled"}


def test_the_same_idempotency_key_returns_the_first_request(
    berth: BerthRunner, api_token: TokenFactory, alice, cluster
):
    token = api_token(alice)
    args = (*CREATE, "--name", "ci-42", "--idempotency-key", "pipeline-42", "-o", "json")
    first, again = berth(*args, token=token), berth(*args, token=token)
    assert first.code == again.code == 0, first.stderr + again.stderr
    assert first.json()["id"] == again.json()["id"]
    assert TenantRequest.objects.count() == 1


def test_audit_since_shows_alices_request(berth: BerthRunner, api_token: TokenFactory, alice, cluster):
    token = api_token(alice)
    assert berth(*CREATE, "--name", "web", token=token).code == 0
    events = berth("audit", "--since", "1h", "--action", "request.", "-o", "json", token=token)
    assert events.code == 0, events.stderr
    assert [(e["action"], e["actor_name"]) for e in events.json()] == [("request.submit", "alice")]
    table = berth("audit", "--since", "2000-01-01", token=token)
    assert table.code == 0 and "request.submit" in table.stdout
    assert berth("audit", "--since", "2099-01-01T00:00", "-o", "json", token=token).json() == []


def test_audit_walks_the_trail_page_by_page_by_cursor(berth: BerthRunner, api_token: TokenFactory, alice, team_a):
    """The audit trail pages by cursor (no count): the CLI follows ``next`` past its 100-row pages, newest first,
    with no row twice, and stops at --limit."""
    for i in range(230):
        audit.record(actor=alice, action="test.walk", object_type="x", object_id=str(i), team=team_a)
    token = api_token(alice)
    walked = berth("audit", "--since", "1h", "--action", "test.walk", "--limit", "1000", "-o", "json", token=token)
    assert walked.code == 0, walked.stderr
    assert [e["object_id"] for e in walked.json()] == [str(i) for i in reversed(range(230))]
    some = berth("audit", "--since", "1h", "--action", "test.walk", "--limit", "150", "-o", "json", token=token)
    assert [e["object_id"] for e in some.json()] == [str(i) for i in reversed(range(80, 230))]


# --- Exit codes scripts can test --------------------------------------------------------------------------


def test_no_credentials_exit_3(berth: BerthRunner, db) -> None:
    result = berth("tenants")
    assert result.code == 3
    assert "BERTH_TOKEN" in result.stderr


def test_a_wrong_token_exits_3_and_is_not_echoed(berth: BerthRunner, db) -> None:
    forged = "brt_00000000_" + "x" * 43
    result = berth("tenants", token=forged)
    assert result.code == 3, result.stderr
    assert "credentials refused" in result.stderr
    assert forged not in result.stderr + result.stdout


def test_deciding_your_own_request_exits_4(berth: BerthRunner, api_token: TokenFactory, dave, team_a, cluster):
    # dave is a platform admin: he may ask for team-a and decide requests, but never his own.
    token = api_token(dave)
    made = berth(*CREATE, "--name", "mine", "-o", "json", token=token).json()
    result = berth("request", "approve", made["id"], token=token)
    assert result.code == 4, result.stderr
    assert "own request" in result.stderr
    assert TenantRequest.objects.get(pk=made["id"]).status == "pending"


def test_another_teams_request_is_not_found_exit_5(berth: BerthRunner, api_token: TokenFactory, alice, bob, cluster):
    made = berth(*CREATE, "--name", "web", "-o", "json", token=api_token(alice)).json()
    result = berth("request", "cancel", made["id"], token=api_token(bob))
    assert result.code == 5, result.stderr
    assert TenantRequest.objects.get(pk=made["id"]).status == "pending"
    assert berth("kubeconfig", "web", token=api_token(bob)).code == 5


def test_refused_fields_exit_6_with_the_field_named(berth: BerthRunner, api_token: TokenFactory, alice, cluster):
    result = berth(
        "request",
        "create",
        "--team",
        "team-a",
        "--cluster",
        "dev",
        "--tier",
        "huge",
        "--name",
        "x",
        token=api_token(alice),
    )
    assert result.code == 6, result.stderr
    assert "tier:" in result.stderr
    assert not TenantRequest.objects.exists()


def test_deciding_twice_exits_7(berth: BerthRunner, api_token: TokenFactory, alice, carol, cluster):
    made = berth(*CREATE, "--name", "web", "-o", "json", token=api_token(alice)).json()
    carol_token = api_token(carol)
    assert berth("request", "approve", made["id"], token=carol_token).code == 0
    again = berth("request", "reject", made["id"], "--reason", "too late", token=carol_token)
    assert again.code == 7, again.stderr
    assert TenantRequest.objects.get(pk=made["id"]).status == "approved"


def test_bad_arguments_exit_2(berth: BerthRunner, api_token: TokenFactory, alice) -> None:
    token = api_token(alice)
    assert berth("audit", "--since", "last tuesday", token=token).code == 2
    assert berth("request", "approve", "../../admin", token=token).code == 2
    assert berth("tenants", "-o", "xml", token=token).code == 2


# --- Hostile values -------------------------------------------------------------------------------------


def test_escape_sequences_in_a_purpose_cannot_reach_the_approvers_terminal(
    berth: BerthRunner, api_token: TokenFactory, alice, carol, cluster
):
    hostile = "ok\x1b[2J\x1b]0;pwned\x07\rroot#"
    made = berth(*CREATE, "--name", "web", "--purpose", hostile, "-o", "json", token=api_token(alice))
    assert made.code == 0, made.stderr
    audit_rows = berth("audit", "--since", "1h", token=api_token(carol))
    shown = berth("requests", token=api_token(carol)).stdout + audit_rows.stdout
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown
    as_json = berth("requests", "-o", "json", token=api_token(carol)).json()
    assert as_json[0]["purpose"] == hostile  # scripts get the value unchanged, JSON-escaped
    assert AuditEvent.objects.filter(action="request.submit").count() == 1


# --- --wait ------------------------------------------------------------------------------------------------


def test_wait_ends_with_exit_8_when_the_request_is_rejected(
    berth: BerthRunner, api_token: TokenFactory, alice, carol, cluster
):
    waiting = berth.start(*CREATE, "--name", "web", "--wait", "--timeout", "60", "-o", "json", token=api_token(alice))
    wait_for(lambda: TenantRequest.objects.filter(name="web").exists(), timeout=30, what="the request")
    request = TenantRequest.objects.get(name="web")
    rejected = berth("request", "reject", str(request.pk), "--reason", "not now", token=api_token(carol))
    assert rejected.code == 0, rejected.stderr
    stdout, stderr = waiting.communicate(timeout=60)
    assert waiting.returncode == 8, stderr
    assert "awaiting approval" in stderr
    assert f"request {request.pk} was rejected: not now" in stderr


def test_wait_ends_with_exit_9_after_the_timeout(berth: BerthRunner, api_token: TokenFactory, alice, cluster):
    result = berth(*CREATE, "--name", "web", "--wait", "--timeout", "3", token=api_token(alice))
    assert result.code == 9, result.stderr
    assert "not done after 3s (last: awaiting approval)" in result.stderr
    assert TenantRequest.objects.get(name="web").status == "pending"  # waiting gave up; the request stands
