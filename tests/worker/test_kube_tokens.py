"""worker.kube's identities on the dev control plane: a client made from a token kubeconfig can act as another token.

The isolation report runs as the tenant (``with_token``); if the portal's own token leaked into those requests,
the report would test the portal's rights instead of the tenant's.
"""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client

from worker.kube import Kube

pytestmark = pytest.mark.cluster


def _service_account_token(kube_admin, namespace: str, name: str) -> str:
    core = client.CoreV1Api(kube_admin)
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name)))
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(expiration_seconds=600))
    return str(core.create_namespaced_service_account_token(name, namespace, request).status.token)


def test_with_token_acts_as_the_other_token_even_from_a_token_kubeconfig(
    kube_admin, control_plane, make_namespace, tmp_path
):
    ns = make_namespace("tokens")
    client.RbacAuthorizationV1Api(kube_admin).create_namespaced_role_binding(
        ns,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="portal-reads"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="view"),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="portal", namespace=ns)],
        ),
    )
    portal_token = _service_account_token(kube_admin, ns, "portal")
    tenant_token = _service_account_token(kube_admin, ns, "tenant")
    path = control_plane.write_kubeconfig(tmp_path / "portal.kubeconfig", user="portal", token=portal_token)
    portal = Kube.from_kubeconfig_dict(yaml.safe_load(path.read_text()))

    assert portal.can_i(verb="list", resource="configmaps", namespace=ns)
    tenant = portal.with_token(tenant_token)
    assert not tenant.can_i(verb="list", resource="configmaps", namespace=ns)
    assert tenant.bearer() == tenant_token
    assert portal.can_i(verb="list", resource="configmaps", namespace=ns), "the portal's client is unchanged"
