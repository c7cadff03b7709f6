"""Access mode `oidc`, proven for real: the dev control plane trusts the dev OIDC provider, and a team member's
ID token (signed in as kubectl would, through kubelogin's public client) acts in the team's namespace only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client
from rest_framework.test import APIClient

from devcluster.oidc import KUBECTL_CLIENT_ID
from tenants import services
from tenants.models import Cluster, Membership, Team, TenantRequest, User
from tests.plugins.oidc import redeem, sign_in
from tests.plugins.worker import assert_passes_but_packets_unproven, oidc_access_cluster, provision_until_settled
from worker import provisioning

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster]


@pytest.fixture
def oidc_cluster(control_plane, oidc_provider, small, medium, large) -> Iterator[Cluster]:
    yield from oidc_access_cluster(
        control_plane,
        issuer=oidc_provider.issuer,
        ca_pem=oidc_provider.ca_cert_pem,
        client_id=KUBECTL_CLIENT_ID,
        name="dev-oidc",
        namespace_prefix="oidc-",
        tiers=[small, medium, large],
    )


def _id_token(provider, username: str) -> str:
    authorization = sign_in(
        provider,
        username,
        client_id=KUBECTL_CLIENT_ID,
        redirect_uri="http://localhost:18000",
        scope="openid profile email groups",
    )
    return redeem(provider, authorization, client_secret=None)["id_token"]


def test_a_team_members_id_token_acts_in_its_namespace_and_nowhere_else(
    oidc_cluster, oidc_provider, kubectl, carol, small, dispatched, tmp_path
):
    payments = Team.objects.create(slug="team-payments", name="Payments", oidc_group="team-payments")
    owner = User.objects.create(username="alice-portal", oidc_subject="alice-portal")
    Membership.objects.create(user=owner, team=payments, role=Membership.Role.OWNER)
    req = services.request_submit(
        actor=owner, action=TenantRequest.Action.CREATE, team=payments, tier=small, cluster=oidc_cluster, name="shop"
    )
    assert provision_until_settled(str(req.tenant_id)).outcome == "ready"
    tenant = req.tenant
    tenant.refresh_from_db()

    api = APIClient()
    api.force_authenticate(owner)
    config = yaml.safe_load(api.post(f"/api/v1/tenants/{tenant.pk}/kubeconfig/", {}, format="json").content)
    user = config["users"][0]["user"]
    assert "token" not in user and user["exec"]["args"][:2] == ["oidc-login", "get-token"]
    assert f"--oidc-issuer-url={oidc_provider.issuer}" in user["exec"]["args"]

    ca = tmp_path / "ca.crt"
    ca.write_text(oidc_cluster.ca_pem)
    nothing = tmp_path / "empty.kubeconfig"  # so kubectl presents no admin client certificate
    nothing.write_text("apiVersion: v1\nkind: Config\n")
    alice_token = _id_token(oidc_provider, "alice")  # groups: team-payments:owner
    as_alice = ["--server", oidc_cluster.api_url, "--certificate-authority", str(ca), "--token", alice_token]
    assert (
        kubectl(
            *as_alice, "auth", "can-i", "create", "deployments", "-n", tenant.namespace, kubeconfig=nothing
        ).stdout.strip()
        == "yes"
    )
    assert (
        kubectl(
            *as_alice, "auth", "can-i", "create", "deployments", "-n", "kube-system", kubeconfig=nothing
        ).stdout.strip()
        == "no"
    )
    assert kubectl(*as_alice, "auth", "can-i", "list", "namespaces", kubeconfig=nothing).stdout.strip() == "no"
    made = kubectl(*as_alice, "create", "configmap", "hello", "-n", tenant.namespace, kubeconfig=nothing)
    assert made.returncode == 0, made.stderr

    bob_token = _id_token(oidc_provider, "bob")  # team-search: not this team
    as_bob = ["--server", oidc_cluster.api_url, "--certificate-authority", str(ca), "--token", bob_token]
    assert (
        kubectl(
            *as_bob, "auth", "can-i", "get", "configmaps", "-n", tenant.namespace, kubeconfig=nothing
        ).stdout.strip()
        == "no"
    )

    assert_passes_but_packets_unproven(provisioning.isolation_report(str(tenant.pk)))


def test_after_a_transfer_the_bindings_name_the_new_teams_groups_and_the_old_team_is_refused(
    oidc_cluster, oidc_provider, kubectl, kube_admin, carol, small, dispatched, tmp_path
):
    payments = Team.objects.create(slug="team-payments", name="Payments", oidc_group="team-payments")
    search = Team.objects.create(slug="team-search", name="Search", oidc_group="team-search")
    giver = User.objects.create(username="alice-portal", oidc_subject="alice-portal")
    Membership.objects.create(user=giver, team=payments, role=Membership.Role.OWNER)
    receiver = User.objects.create(username="bob-portal", oidc_subject="bob-portal")
    Membership.objects.create(user=receiver, team=search, role=Membership.Role.OWNER)
    req = services.request_submit(
        actor=giver, action=TenantRequest.Action.CREATE, team=payments, tier=small, cluster=oidc_cluster, name="moved"
    )
    assert provision_until_settled(str(req.tenant_id)).outcome == "ready"
    tenant = req.tenant
    tenant.refresh_from_db()
    ns = tenant.namespace

    ca = tmp_path / "ca.crt"
    ca.write_text(oidc_cluster.ca_pem)
    nothing = tmp_path / "empty.kubeconfig"
    nothing.write_text("apiVersion: v1\nkind: Config\n")

    def can(username: str) -> str:
        token = _id_token(oidc_provider, username)
        flags = ["--server", oidc_cluster.api_url, "--certificate-authority", str(ca), "--token", token]
        return kubectl(*flags, "auth", "can-i", "create", "configmaps", "-n", ns, kubeconfig=nothing).stdout.strip()

    assert (can("alice"), can("bob")) == ("yes", "no")  # alice: team-payments:owner, bob: team-search

    transfer = services.transfer_ask(tenant=tenant, target_team=search, actor=giver)
    services.transfer_accept(tenant_request=transfer, actor=receiver)  # small: within budget and automatic
    assert provision_until_settled(str(tenant.pk)).outcome in ("repaired", "in sync")

    rbac, core = client.RbacAuthorizationV1Api(kube_admin), client.CoreV1Api(kube_admin)
    writers = {s.name for s in rbac.read_namespaced_role_binding("berth-tenant", ns).subjects or []}
    viewers = {s.name for s in rbac.read_namespaced_role_binding("berth-viewer", ns).subjects or []}
    assert writers == {"oidc:team-search", "oidc:team-search:owner"}
    assert viewers == {"oidc:team-search:viewer"}
    assert (core.read_namespace(ns).metadata.labels or {})["berth.dev/team"] == "team-search"
    for kind, read in (
        ("ResourceQuota", lambda: core.read_namespaced_resource_quota("berth-quota", ns)),
        ("RoleBinding", lambda: rbac.read_namespaced_role_binding("berth-tenant", ns)),
    ):
        assert (read().metadata.labels or {})["berth.dev/team"] == "team-search", kind
    schema = client.FlowcontrolApiserverV1Api(kube_admin).read_flow_schema(f"berth-{ns}")
    assert {s.group.name for s in (schema.spec.rules or [])[0].subjects} == {
        "oidc:team-search",
        "oidc:team-search:owner",
        "oidc:team-search:viewer",
    }
    # The old team's sign-in no longer reaches the namespace; the new team's does.
    assert (can("alice"), can("bob")) == ("no", "yes")
