"""Tenants as code end to end: `berth apply` → the live portal (gunicorn) → Redis → a real Celery worker → the
dev control plane. Approvals and budgets apply; a second apply of the same file changes nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import stat
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tenants import services
from tenants.models import AuditEvent, Tenant, TenantRequest
from tests.fixtures import TokenFactory
from tests.plugins.kube import read_or_none, wait_for
from tests.plugins.portal import Berth
from tests.plugins.worker import wait_status

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]


def write_file(path: Path, cluster: str, tenants: list[dict], *, teams: str = "[team-a]") -> str:
    lines = ["apiVersion: berth.dev/v1", "kind: TenantList", f"teams: {teams}", "tenants:"]
    for tenant in tenants:
        lines.append("  - " + yaml.safe_dump({"cluster": cluster, "team": "team-a", **tenant}, default_flow_style=True))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def snapshot() -> tuple[int, list[str]]:
    """Requests so far, and what people did (the worker keeps recording reports): a no-op apply adds neither."""
    done_by_people = AuditEvent.objects.filter(actor__isnull=False).exclude(action__startswith="auth.")
    return TenantRequest.objects.count(), list(done_by_people.order_by("id").values_list("action", flat=True))


def test_apply_creates_through_approval_and_a_second_apply_changes_nothing(
    berth: Berth, api_token: TokenFactory, celery_worker, live_cluster, kube_admin, alice, carol, tmp_path
):
    token = api_token(alice)
    path = write_file(
        tmp_path / "tenants.yaml",
        live_cluster.name,
        [{"name": "ci", "tier": "small", "purpose": "CI runs"}, {"name": "web", "tier": "medium"}],
    )
    diff = berth("diff", "-f", path, token=token)
    assert diff.code == 10, diff.stderr
    assert diff.stdout.count("+ create") == 2 and "Plan: 2 to create, 0 to change, 0 to remove" in diff.stdout

    applying = berth.start("apply", "-f", path, "--wait", "--timeout", "180", "-o", "json", token=token)
    wait_for(lambda: TenantRequest.objects.filter(name="web", status="pending").exists(), what="web's request")
    web_request = TenantRequest.objects.get(name="web")
    approved = berth("request", "approve", str(web_request.pk), token=api_token(carol))
    assert approved.code == 0, approved.stderr
    stdout, stderr = applying.communicate(timeout=240)
    assert applying.returncode == 0, stderr
    assert f"team-a/{live_cluster.name}/web: done" in stderr  # --wait's progress
    applied = json.loads(stdout)
    results = {o["name"]: o for o in applied["outcomes"]}
    assert results["ci"]["result"] == "approved"  # the small tier approves itself
    assert results["web"]["result"] == "submitted" and results["web"]["request"]["status"] == "pending"
    assert applied["waited"] == {f"team-a/{live_cluster.name}/ci": "ready", f"team-a/{live_cluster.name}/web": "ready"}
    assert set(Tenant.objects.values_list("status", flat=True)) == {"ready"}
    core = client.CoreV1Api(kube_admin)
    labels = core.read_namespace(f"{live_cluster.namespace_prefix}web").metadata.labels or {}
    assert labels["berth.dev/tier"] == "medium"

    before = snapshot()
    again = berth("apply", "-f", path, token=token)
    assert again.code == 0, again.stderr
    assert "Plan: 0 to create, 0 to change, 0 to remove, 2 left as they are." in again.stdout
    assert snapshot() == before
    assert berth("diff", "-f", path, token=token).code == 0
    assert berth("diff", "-f", "-", input=Path(path).read_text(), token=token).code == 0  # the file on stdin
    keys = list(TenantRequest.objects.values_list("idempotency_key", flat=True))
    assert len(set(keys)) == 2 and all(key.startswith("berth-apply-") for key in keys)


def test_a_changed_file_changes_tier_extends_and_prunes(
    berth: Berth,
    api_token: TokenFactory,
    celery_worker,
    live_cluster,
    kube_admin,
    alice,
    carol,
    small,
    team_a,
    tmp_path,
):
    for name in ("api", "old"):
        made = services.request_submit(
            actor=alice, action="create", team=team_a, name=name, tier=small, cluster=live_cluster
        )
        wait_status(made.tenant, "ready")
    api = Tenant.objects.get(name="api")
    later = (api.expires_at.date() + dt.timedelta(days=10)).isoformat()
    token, carol_token = api_token(alice), api_token(carol)
    path = write_file(
        tmp_path / "tenants.yaml", live_cluster.name, [{"name": "api", "tier": "medium", "expires": later}]
    )

    kept = berth("diff", "-f", path, "-o", "json", token=token).json()
    assert [c["action"] for c in kept["changes"]] == ["change_tier", "extend"]
    assert [(n["name"], n["status"]) for n in kept["unchanged"]] == [("old", "not-in-file")]

    first = berth("apply", "-f", path, "--prune", token=token)
    assert first.code == 0, first.stderr
    assert "extend" in first.stderr and "deferred" in first.stderr  # one open request per tenant
    pending = TenantRequest.objects.filter(status="pending")
    assert sorted(pending.values_list("action", "name")) == [("change_tier", "api"), ("delete", "old")]

    before = snapshot()
    assert berth("apply", "-f", path, "--prune", token=token).code == 0  # waiting for decisions: nothing to send
    assert snapshot() == before

    for request in pending:
        assert berth("request", "approve", str(request.pk), token=carol_token).code == 0
    wait_status(Tenant.objects.get(name="old"), "deleted")
    old_namespace = f"{live_cluster.namespace_prefix}old"
    core = client.CoreV1Api(kube_admin)
    wait_for(
        lambda: read_or_none(lambda: core.read_namespace(old_namespace)) is None, timeout=60, what="old's namespace"
    )
    assert Tenant.objects.get(name="api").tier.name == "medium"

    extend = berth("apply", "-f", path, "--prune", "-o", "json", token=token).json()  # the deferred extension now
    assert [(o["action"], o["result"]) for o in extend["outcomes"]] == [("extend", "submitted")]
    assert berth("request", "approve", extend["outcomes"][0]["request"]["id"], token=carol_token).code == 0
    assert Tenant.objects.get(name="api").expires_at.date().isoformat() == later

    before = snapshot()
    final = berth("diff", "-f", path, "--prune", token=token)
    assert final.code == 0, final.stdout + final.stderr
    assert berth("apply", "-f", path, "--prune", token=token).code == 0
    assert snapshot() == before
    keys = [k for k in TenantRequest.objects.values_list("idempotency_key", flat=True) if k]
    assert len(keys) == len(set(keys)) == 3  # change_tier, delete, extend: each its own key


def test_budgets_still_apply(
    berth: Berth, api_token: TokenFactory, celery_worker, live_cluster, alice, team_a, tmp_path
):
    team_a.budget_tenants = 1
    team_a.save()
    path = write_file(
        tmp_path / "tenants.yaml",
        live_cluster.name,
        [{"name": "one", "tier": "small"}, {"name": "two", "tier": "small"}],
    )
    result = berth("apply", "-f", path, token=api_token(alice))
    assert result.code == 6, result.stderr
    assert "budget" in result.stderr
    assert list(Tenant.objects.values_list("name", flat=True)) == ["one"]
    wait_status(Tenant.objects.get(name="one"), "ready")  # the worker is done before the test's data goes


def test_request_create_waits_until_ready_and_the_kubeconfig_merges(
    berth: Berth, api_token: TokenFactory, celery_worker, live_cluster, kubectl, alice, tmp_path
):
    token = api_token(alice)
    created = berth(
        "request", "create", "--team", "team-a", "--name", "ci", "--cluster", live_cluster.name, "--tier", "small",
        "--wait", "--timeout", "120", "-o", "json", token=token,
    )  # fmt: skip
    assert created.code == 0, created.stderr
    assert "tenant ready" in created.stderr and "done" in created.stderr
    done = created.json()
    assert done["request"]["status"] == "approved" and done["tenant"]["status"] == "ready"
    namespace = done["tenant"]["namespace"]
    change = berth(
        "request", "create", "--action", "change-tier", "--tenant", "ci", "--tier", "medium", "-o", "json", token=token
    )
    assert change.code == 0, change.stderr
    assert (change.json()["action"], change.json()["status"], change.json()["tier"]) == (
        "change_tier",
        "pending",
        "medium",
    )
    busy = berth("request", "create", "--action", "extend", "--tenant", "ci", "--expires", "2099-01-01", token=token)
    assert busy.code == 7 and "pending request" in busy.stderr  # one open request per tenant

    kubeconfig = tmp_path / "kube" / "config"
    kubeconfig.parent.mkdir()
    other = {"name": "elsewhere", "context": {"cluster": "elsewhere", "user": "me"}}
    kubeconfig.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "contexts": [other], "current-context": "elsewhere"})
    )
    merged = berth(
        "kubeconfig", "ci", "--merge-into", str(kubeconfig), "--set-current", "--lifetime", "900", token=token
    )
    assert merged.code == 0, merged.stderr
    config = yaml.safe_load(kubeconfig.read_text())
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    assert [c["name"] for c in config["contexts"]] == ["elsewhere", f"{live_cluster.name}/{namespace}"]
    assert config["current-context"] == f"{live_cluster.name}/{namespace}"

    def can(*args: str) -> str:
        return kubectl("auth", "can-i", *args, kubeconfig=str(kubeconfig)).stdout.strip()

    assert can("create", "deployments", "-n", namespace) == "yes"
    assert can("list", "namespaces") == "no"
    # Merging again replaces the tenant's entries (a fresh credential) instead of adding more.
    assert berth("kubeconfig", str(done["tenant"]["id"]), "--merge-into", str(kubeconfig), token=token).code == 0
    assert len(yaml.safe_load(kubeconfig.read_text())["users"]) == 1
    printed = berth("kubeconfig", f"{live_cluster.name}/ci", token=token)
    assert printed.code == 0 and yaml.safe_load(printed.stdout)["contexts"][0]["context"]["namespace"] == namespace
    issued = AuditEvent.objects.filter(action="tenant.kubeconfig_issued", object_id=done["tenant"]["id"]).count()
    assert issued == 3
