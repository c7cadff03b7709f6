"""Access mode `oidc` with Keycloak as the issuer: the dev control plane trusts Keycloak (its CA and issuer, as
the compose realm defines it), and a team member's Keycloak ID token, signed in through kubelogin's public
client `kubectl`, acts in the team's namespace and nowhere else."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml
from rest_framework.test import APIClient

from devcluster.keycloak import KUBECTL_CLIENT_ID, Keycloak
from devcluster.launcher import OIDCIssuer
from tenants import services
from tenants.models import Cluster, Membership, Team, TenantRequest, User
from tests.plugins.keycloak import redeem_at_keycloak, sign_in_at_keycloak
from tests.plugins.worker import oidc_access_cluster, provision_until_settled

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.keycloak]

KUBELOGIN_REDIRECT_URI = "http://localhost:18000"  # registered for `kubectl` in the realm file


@pytest.fixture
def keycloak_cluster(control_plane, keycloak: Keycloak, small, medium, large) -> Iterator[Cluster]:
    yield from oidc_access_cluster(
        control_plane,
        issuer=keycloak.issuer,
        ca_pem=keycloak.ca_cert_pem,
        client_id=KUBECTL_CLIENT_ID,
        name="dev-keycloak",
        namespace_prefix="kc-",
        tiers=[small, medium, large],
    )


def _id_token(keycloak: Keycloak, username: str) -> str:
    authorization = sign_in_at_keycloak(
        keycloak, username, client_id=KUBECTL_CLIENT_ID, redirect_uri=KUBELOGIN_REDIRECT_URI
    )
    return str(redeem_at_keycloak(keycloak, authorization, client_secret=None)["id_token"])


def test_kube_apiserver_takes_keycloak_id_tokens_with_prefixed_groups_for_the_kubectl_client_only(
    control_plane, keycloak: Keycloak, kubectl, make_namespace, tmp_path
):
    """The trust itself, without the worker: a RoleBinding for Keycloak's group, as the tenant's would be."""
    control_plane.set_oidc_issuers(
        [OIDCIssuer(url=keycloak.issuer, audience=KUBECTL_CLIENT_ID, ca_pem=keycloak.ca_cert_pem)]
    )
    try:
        namespace = make_namespace()
        bound = kubectl(
            "create", "rolebinding", "team-payments-owners", "-n", namespace,
            "--clusterrole=edit", "--group=oidc:team-payments:owner",
        )  # fmt: skip
        assert bound.returncode == 0, bound.stderr
        ca = tmp_path / "ca.crt"
        ca.write_text(control_plane.ca_cert_pem)
        nothing = tmp_path / "empty.kubeconfig"  # so kubectl presents no admin client certificate
        nothing.write_text("apiVersion: v1\nkind: Config\n")

        def as_user(token: str, *args: str):
            flags = ["--server", control_plane.api_url, "--certificate-authority", str(ca), "--token", token]
            return kubectl(*flags, *args, kubeconfig=nothing)

        alice = _id_token(keycloak, "alice")  # Keycloak group team-payments:owner
        assert as_user(alice, "auth", "can-i", "create", "deployments", "-n", namespace).stdout.strip() == "yes"
        assert as_user(alice, "auth", "can-i", "create", "deployments", "-n", "kube-system").stdout.strip() == "no"
        who = as_user(alice, "auth", "whoami", "-o", "json")
        assert who.returncode == 0, who.stderr
        identity = json.loads(who.stdout)["status"]["userInfo"]
        assert identity["username"] == f"oidc:{keycloak.user_id('alice')}"
        assert "oidc:team-payments:owner" in identity["groups"]
        bob = _id_token(keycloak, "bob")  # team-search: not this team
        assert as_user(bob, "auth", "can-i", "get", "configmaps", "-n", namespace).stdout.strip() == "no"
        # alice's ID token for another client (the portal) is not for the API server.
        portal_id_token = redeem_at_keycloak(keycloak, sign_in_at_keycloak(keycloak, "alice"))["id_token"]
        refused = as_user(portal_id_token, "get", "configmaps", "-n", namespace)
        assert refused.returncode != 0 and "Unauthorized" in refused.stderr
    finally:
        control_plane.set_oidc_issuers([])


def test_a_keycloak_id_token_acts_in_its_teams_namespace_and_nowhere_else(
    keycloak_cluster, keycloak, kubectl, small, dispatched, tmp_path
):
    payments = Team.objects.create(slug="team-payments", name="Payments", oidc_group="team-payments")
    owner = User.objects.create(username="alice-portal", oidc_subject="alice-portal")
    Membership.objects.create(user=owner, team=payments, role=Membership.Role.OWNER)
    req = services.request_submit(
        actor=owner,
        action=TenantRequest.Action.CREATE,
        team=payments,
        tier=small,
        cluster=keycloak_cluster,
        name="shop",
    )
    progress = provision_until_settled(str(req.tenant_id))
    assert progress.outcome == "ready", progress
    tenant = req.tenant
    tenant.refresh_from_db()

    api = APIClient()
    api.force_authenticate(owner)
    config = yaml.safe_load(api.post(f"/api/v1/tenants/{tenant.pk}/kubeconfig/", {}, format="json").content)
    user = config["users"][0]["user"]
    assert "token" not in user and f"--oidc-issuer-url={keycloak.issuer}" in user["exec"]["args"]

    ca = tmp_path / "ca.crt"
    ca.write_text(keycloak_cluster.ca_pem)
    nothing = tmp_path / "empty.kubeconfig"  # so kubectl presents no admin client certificate
    nothing.write_text("apiVersion: v1\nkind: Config\n")

    def can_i(token: str, *args: str) -> str:
        flags = ["--server", keycloak_cluster.api_url, "--certificate-authority", str(ca), "--token", token]
        return str(kubectl(*flags, "auth", "can-i", *args, kubeconfig=nothing).stdout.strip())

    alice = _id_token(keycloak, "alice")  # Keycloak group team-payments:owner
    assert can_i(alice, "create", "deployments", "-n", tenant.namespace) == "yes"
    assert can_i(alice, "create", "deployments", "-n", "kube-system") == "no"
    assert can_i(alice, "list", "namespaces") == "no"
    who = kubectl(
        "--server", keycloak_cluster.api_url, "--certificate-authority", str(ca), "--token", alice,
        "auth", "whoami", "-o", "json", kubeconfig=nothing,
    )  # fmt: skip
    assert who.returncode == 0, who.stderr
    assert f"oidc:{keycloak.user_id('alice')}" in who.stdout and "oidc:team-payments:owner" in who.stdout

    bob = _id_token(keycloak, "bob")  # team-search: not this team
    assert can_i(bob, "get", "configmaps", "-n", tenant.namespace) == "no"
    # alice's ID token from the same Keycloak for another client (the portal's) is not for the API server.
    portal_id_token = redeem_at_keycloak(keycloak, sign_in_at_keycloak(keycloak, "alice"))["id_token"]
    refused = kubectl(
        "--server", keycloak_cluster.api_url, "--certificate-authority", str(ca), "--token", portal_id_token,
        "get", "configmaps", "-n", tenant.namespace, kubeconfig=nothing,
    )  # fmt: skip
    assert refused.returncode != 0 and "Unauthorized" in refused.stderr
