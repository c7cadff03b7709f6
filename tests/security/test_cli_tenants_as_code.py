"""Tenants as code, attacked with the attacker's own credentials: `berth apply` from team-a at team-b's tenants.

Bob's team-b tenant is real (provisioned by the worker on the dev cluster). Every attack goes through the
live portal (gunicorn), once with the CLI as shipped and once around the CLI's own checks, straight at
the REST API with the CLI's HTTP client, and each must be refused with nothing changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from berth_cli import plan as plans
from berth_cli.client import Api, Credential, object_path
from berth_cli.config import Config
from berth_cli.errors import CliError, Exit
from tenants.models import AuditEvent, Membership, Tenant, TenantRequest
from tests.fixtures import TokenFactory
from tests.plugins.portal import Berth, LivePortal
from tests.plugins.worker import wait_status

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]


def tenants_file(tmp_path: Path, cluster: str, *, teams: str, entries: list[str]) -> str:
    path = tmp_path / "tenants.yaml"
    body = "".join(f"  - {{{entry}, cluster: {cluster}}}\n" for entry in entries)
    path.write_text(f"apiVersion: berth.dev/v1\nkind: TenantList\nteams: {teams}\ntenants:\n{body}")
    return str(path)


def world() -> tuple[Any, ...]:
    """Everything an attack could change: requests, tenants, and what people did."""
    return (
        list(TenantRequest.objects.order_by("id").values_list("id", "status")),
        list(Tenant.objects.order_by("id").values_list("id", "status", "tier__name", "expires_at")),
        list(AuditEvent.objects.filter(actor__isnull=False, action__startswith="request.").values_list("id")),
        list(AuditEvent.objects.filter(actor__isnull=False, action__startswith="tenant.").values_list("id")),
    )


def api_as(portal: LivePortal, token: str) -> Api:
    return Api(portal.url, Credential(config=Config(path=Path("/nonexistent")), token=token))


def refused_with(code: Exit, call: Any) -> None:
    with pytest.raises(CliError) as raised:
        call()
    assert raised.value.code == code, raised.value.message


def test_team_a_token_applying_team_bs_tenants_is_refused_and_nothing_changes(
    berth: Berth, live_portal, api_token: TokenFactory, victim, alice, team_a, team_b, kube_admin, tmp_path
):
    token = api_token(alice, team=team_a)
    cluster = victim.cluster.name
    path = tenants_file(
        tmp_path,
        cluster,
        teams="[team-b]",
        entries=["name: bank, team: team-b, tier: large", "name: evil, team: team-b, tier: small"],
    )
    before = world()
    for command in (("diff", "-f", path, "--prune"), ("apply", "-f", path, "--prune")):
        result = berth(*command, token=token)
        assert result.code == 4, result.stdout + result.stderr
        assert "nothing was changed" in result.stderr
        assert "tenants.yaml:3: team 'team-b': these credentials cannot request tenants for it" in result.stderr

    # Around the CLI's own check, the portal refuses each request the plan would have sent.
    api = api_as(live_portal, token)
    create = {"action": "create", "team": "team-b", "name": "evil", "cluster": cluster, "tier": "small"}
    refused_with(Exit.INVALID, lambda: api.post("/api/v1/requests/", create, idempotency_key="k1"))
    for action in ({"action": "change_tier", "tier": "large"}, {"action": "delete"}):
        body = {**action, "tenant": str(victim.pk)}
        refused_with(Exit.INVALID, lambda body=body: api.post("/api/v1/requests/", body))
    refused_with(Exit.NOT_FOUND, lambda: api.post(object_path("tenants", str(victim.pk), "decommission")))
    refused_with(Exit.NOT_FOUND, lambda: api.get(object_path("tenants", str(victim.pk))))
    assert [t["team"] for t in api.all("/api/v1/tenants/")] == []

    assert world() == before
    victim.refresh_from_db()
    assert (victim.status, victim.tier.name) == ("ready", "medium")
    labels = client.CoreV1Api(kube_admin).read_namespace(victim.namespace).metadata.labels or {}
    assert labels["berth.dev/tier"] == "medium"


def test_a_viewer_of_team_b_cannot_apply_for_it(
    berth: Berth, live_portal, api_token: TokenFactory, victim, alice, team_b, tmp_path
):
    Membership.objects.create(user=alice, team=team_b, role=Membership.Role.VIEWER)
    token = api_token(alice)
    path = tenants_file(
        tmp_path, victim.cluster.name, teams="[team-b]", entries=["name: bank, team: team-b, tier: large"]
    )
    before = world()
    result = berth("apply", "-f", path, "--prune", token=token)
    assert result.code == 4, result.stderr
    api = api_as(live_portal, token)
    refused_with(Exit.FORBIDDEN, lambda: api.post("/api/v1/requests/", {"action": "delete", "tenant": str(victim.pk)}))
    body = {"action": "create", "team": "team-b", "name": "evil", "cluster": victim.cluster.name, "tier": "small"}
    refused_with(Exit.FORBIDDEN, lambda: api.post("/api/v1/requests/", body))
    assert world() == before


def test_a_file_mixing_a_foreign_team_is_refused_whole(
    berth: Berth, api_token: TokenFactory, victim, alice, team_a, tmp_path
):
    path = tenants_file(
        tmp_path,
        victim.cluster.name,
        teams="[team-a, team-b]",
        entries=["name: mine, team: team-a, tier: small", "name: bank, team: team-b, tier: large"],
    )
    before = world()
    result = berth("apply", "-f", path, token=api_token(alice, team=team_a))
    assert result.code == 4, result.stderr
    assert world() == before
    assert not Tenant.objects.filter(name="mine").exists()  # not even the team-a half


def test_an_admins_prune_stays_inside_the_files_teams(
    berth: Berth, api_token: TokenFactory, victim, dave, team_a, tmp_path
):
    path = tenants_file(tmp_path, victim.cluster.name, teams="[team-a]", entries=[])
    before = world()
    plan = berth("diff", "-f", path, "--prune", "-o", "json", token=api_token(dave))
    assert plan.code == 0, plan.stderr
    assert plan.json()["changes"] == [] and plan.json()["unchanged"] == []
    assert berth("apply", "-f", path, "--prune", token=api_token(dave)).code == 0
    assert world() == before


def test_a_precomputed_idempotency_key_cannot_hijack_another_teams_apply(
    berth: Berth, live_portal, api_token: TokenFactory, victim, alice, bob, team_a, tmp_path
):
    # The keys are derived from the file, so anyone can compute the key bob's pipeline will send.
    cluster = victim.cluster.name
    bobs_body = {
        "action": "create",
        "team": "team-b",
        "name": "ledger",
        "cluster": cluster,
        "tier": "small",
        "kind": "namespace",
        "purpose": "",
    }
    stolen_key = plans.idempotency_key(bobs_body, [])
    alices = {**bobs_body, "team": "team-a", "name": "decoy"}
    api_as(live_portal, api_token(alice)).post("/api/v1/requests/", alices, idempotency_key=stolen_key)

    path = tenants_file(tmp_path, cluster, teams="[team-b]", entries=["name: ledger, team: team-b, tier: small"])
    applied = berth("apply", "-f", path, "-o", "json", token=api_token(bob))
    assert applied.code == 0, applied.stderr
    (outcome,) = applied.json()["outcomes"]
    assert outcome["idempotency_key"] == stolen_key
    assert (outcome["request"]["team"], outcome["request"]["name"]) == ("team-b", "ledger")
    assert outcome["request"]["requested_by"] == "bob"
    assert Tenant.objects.get(name="decoy").team == team_a
    for name in ("decoy", "ledger"):  # small: approved by the tier; let the worker finish before the test ends
        wait_status(Tenant.objects.get(name=name), "ready")
