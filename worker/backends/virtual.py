"""What every virtual-cluster backend shares.

The host side is a namespace tenant (quota, limits, network policies), so whatever
the virtual cluster runs on the host is bounded by the tier. The control plane's
admin kubeconfig is read from a host Secret and used only inside the worker: it
creates the tenant's ServiceAccounts *inside* the virtual cluster, and tenants get
short-lived TokenRequest tokens for those, against the virtual cluster's public
endpoint. The admin kubeconfig is never shown, logged or stored.
"""

from __future__ import annotations

import base64
from typing import Any

import yaml

from worker import isolation, manifests
from worker.backends.base import Access, Backend
from worker.backends.namespace import NamespaceBackend
from worker.kube import Kube, KubePermanentError

INSIDE_NAMESPACE = "berth"
INSIDE_ACCOUNTS = {"edit": ("berth-tenant", "cluster-admin"), "view": ("berth-viewer", "view")}


def inside_objects() -> list[dict]:
    """The tenant's identities inside the virtual cluster: cluster-admin, and a read-only viewer."""
    labels = {**manifests.MANAGED_BY}
    objs: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": INSIDE_NAMESPACE, "labels": labels}}
    ]
    for sa, cluster_role in INSIDE_ACCOUNTS.values():
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": sa, "namespace": INSIDE_NAMESPACE, "labels": labels},
                "automountServiceAccountToken": False,
            }
        )
        objs.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{sa}-{cluster_role}", "labels": labels},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": INSIDE_NAMESPACE}],
            }
        )
    return objs


def kubeconfig_from_secret(host: Kube, *, namespace: str, name: str, key: str) -> dict | None:
    """The admin kubeconfig an operator wrote into a Secret; None while it does not exist yet."""
    secret = host.get("Secret", name, namespace=namespace)
    data = ((secret or {}).get("data") or {}).get(key)
    if not data:
        return None
    try:
        config = yaml.safe_load(base64.b64decode(data))
    except (ValueError, yaml.YAMLError):
        raise KubePermanentError(f"Secret {namespace}/{name} key {key} is not a kubeconfig.") from None
    if not isinstance(config, dict) or not config.get("clusters"):
        raise KubePermanentError(f"Secret {namespace}/{name} key {key} is not a kubeconfig.")
    return config


def kubeconfig_server_and_ca(config: dict) -> tuple[str, str]:
    cluster = config["clusters"][0]["cluster"]
    ca = cluster.get("certificate-authority-data", "")
    return cluster["server"], base64.b64decode(ca).decode() if ca else ""


def with_server(config: dict, server: str) -> dict:
    """A copy of ``config`` whose clusters point at ``server`` (an operator may write an internal address)."""
    copy = yaml.safe_load(yaml.safe_dump(config))
    for entry in copy["clusters"]:
        entry["cluster"]["server"] = server
    return copy


class VirtualClusterBackend(Backend):
    """Subclasses say how the control plane is created, when it is ready, where its admin kubeconfig is, and how it goes away."""

    host = NamespaceBackend(team_access=False)  # tenants never get credentials for the host
    # Checks run inside the virtual cluster with the tenant's token, then against the host with the same token.
    checks: list = []

    # --- what a subclass provides -------------------------------------------------------
    def control_plane_objects(self, tenant: Any, host: Kube) -> list[dict]:
        """Objects to server-side apply on the host (custom resources, installer resources)."""
        raise NotImplementedError

    def install(self, tenant: Any, host: Kube) -> None:
        """Create or update the control plane (default: apply ``control_plane_objects``)."""
        host.apply(self.control_plane_objects(tenant, host))

    def control_plane_ready(self, tenant: Any, host: Kube) -> bool:
        raise NotImplementedError

    def admin_kubeconfig(self, tenant: Any, host: Kube) -> dict | None:
        """The control plane's admin kubeconfig (worker-only), with the server tenants should use."""
        raise NotImplementedError

    def uninstall(self, tenant: Any, host: Kube) -> bool:
        """Remove the control plane; True once it and its finalizers are gone."""
        raise NotImplementedError

    # --- the shared flow -------------------------------------------------------------------
    def preview(self, tenant: Any, tier: Any) -> list[dict]:
        return [*self.host.preview(tenant, tier), *self.control_plane_preview(tenant, tier)]

    def control_plane_preview(self, tenant: Any, tier: Any) -> list[dict]:
        return []

    def render(self, tenant: Any, host: Kube) -> list[dict]:
        return [*self.host.render(tenant, host), *self.control_plane_objects(tenant, host)]

    def apply(self, tenant: Any, host: Kube, *, detect_drift: bool) -> list[str]:
        repaired = self.host.apply(tenant, host, detect_drift=detect_drift)
        self.install(tenant, host)
        return repaired

    def virtual(self, tenant: Any, host: Kube) -> Kube:
        config = self.admin_kubeconfig(tenant, host)
        if config is None:
            raise KubePermanentError(f"The admin kubeconfig of {tenant.name}'s control plane is missing.")
        return Kube.from_kubeconfig_dict(config)

    def is_ready(self, tenant: Any, host: Kube) -> bool:
        if not self.host.is_ready(tenant, host) or not self.control_plane_ready(tenant, host):
            return False
        if self.admin_kubeconfig(tenant, host) is None:
            return False
        inside = self.virtual(tenant, host)
        if not inside.healthy():
            return False
        objs = inside_objects()
        inside.apply(objs[:1])
        inside.apply(objs[1:])
        return True

    def teardown(self, tenant: Any, host: Kube) -> bool:
        if not self.uninstall(tenant, host):
            return False
        for claim in host.list("PersistentVolumeClaim", namespace=tenant.namespace):
            host.delete("PersistentVolumeClaim", claim["metadata"]["name"], namespace=tenant.namespace)
        return self.host.teardown(tenant, host)

    def usage(self, tenant: Any, host: Kube) -> dict:
        return self.host.usage(tenant, host)

    def access(self, tenant: Any, host: Kube, *, role: str, lifetime_seconds: int) -> Access:
        config = self.admin_kubeconfig(tenant, host)
        if config is None:
            raise KubePermanentError(f"The admin kubeconfig of {tenant.name}'s control plane is missing.")
        server, ca = kubeconfig_server_and_ca(config)
        sa, _ = INSIDE_ACCOUNTS[role]
        token, expires = Kube.from_kubeconfig_dict(config).request_token(
            namespace=INSIDE_NAMESPACE,
            service_account=sa,
            lifetime_seconds=lifetime_seconds,
        )
        return Access(server, ca, {"token": token}, "default", expires)

    def isolation_client(self, tenant: Any, host: Kube) -> Kube:
        inside = self.virtual(tenant, host)
        token, _ = inside.request_token(
            namespace=INSIDE_NAMESPACE, service_account=INSIDE_ACCOUNTS["edit"][0], lifetime_seconds=600
        )
        return inside.with_token(token)

    def isolation_checks(self) -> list:
        return isolation.VIRTUAL_CHECKS
