"""What every virtual-cluster kind shares, by composition.

A virtual-cluster tenant is a ``VirtualClusterBackend`` made of three parts:

- ``host``: a namespace tenant without team access (quota, limits, network policies), so whatever the
  virtual cluster runs on the host is bounded by the tier; None for kcp, which runs no pods;
- ``control_plane``: the kind's own ``ControlPlane`` (how it is created, recognised as up, found and
  removed), with the kind's settings parsed once per call into a frozen dataclass;
- ``inside``: a ``ControlPlaneAccess``, how the worker and the tenant reach the control plane.

The control plane's admin kubeconfig is read from the host and used only inside the worker: it creates the
tenant's ServiceAccounts *inside* the virtual cluster, and tenants get short-lived TokenRequest tokens for
those, against the virtual cluster's public endpoint. The admin kubeconfig is never shown, logged or stored.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import yaml

from worker import isolation, manifests
from worker.backends.base import Access
from worker.backends.namespace import NamespaceBackend
from worker.kube import Kube, KubePermanentError, Manifest
from worker.ownership import TopLevel

INSIDE_NAMESPACE = "berth"
INSIDE_ACCOUNTS = {"edit": ("berth-tenant", "cluster-admin"), "view": ("berth-viewer", "view")}
SettingsT = TypeVar("SettingsT")


def inside_objects() -> list[Manifest]:
    """The tenant's identities inside the virtual cluster: cluster-admin, and a read-only viewer."""
    labels = {**manifests.MANAGED_BY}
    objs: list[Manifest] = [
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


def kubeconfig_from_secret(host: Kube, *, namespace: str, name: str, key: str) -> Manifest | None:
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


def kubeconfig_server_and_ca(config: Manifest) -> tuple[str, str]:
    cluster = config["clusters"][0]["cluster"]
    ca = cluster.get("certificate-authority-data", "")
    return str(cluster["server"]), base64.b64decode(ca).decode() if ca else ""


def with_server(config: Manifest, server: str) -> Manifest:
    """A copy of ``config`` whose clusters point at ``server`` (an operator may write an internal address)."""
    copy: Manifest = yaml.safe_load(yaml.safe_dump(config))
    for entry in copy["clusters"]:
        entry["cluster"]["server"] = server
    return copy


def asleep(tenant: Any) -> bool:
    """Asleep and done falling asleep: the control plane is meant to be scaled to zero."""
    return bool(getattr(tenant, "sleeping", False)) and bool(getattr(tenant, "sleep_applied", False))


@dataclass(frozen=True)
class ControlPlaneAccess:
    """How the worker and the tenant reach a virtual control plane through its admin kubeconfig.

    ``probe_health``: ask ``/readyz`` before writing inside (kcp serves no ``/readyz`` per workspace).
    """

    probe_health: bool = True

    def set_up(self, admin: Manifest) -> bool:
        """Create the tenant's identities inside (idempotent); False while the control plane does not answer yet."""
        inside = Kube.from_kubeconfig_dict(admin)
        if self.probe_health and not inside.healthy():
            return False
        objs = inside_objects()
        inside.apply(objs[:1])  # the namespace first, so the ServiceAccounts have a home
        inside.apply(objs[1:])
        return True

    def is_set_up(self, admin: Manifest) -> bool:
        """Whether the tenant's identities exist inside; reads only."""
        inside = Kube.from_kubeconfig_dict(admin)
        if self.probe_health and not inside.healthy():
            return False
        return all(
            inside.get(o["kind"], o["metadata"]["name"], namespace=o["metadata"].get("namespace")) is not None
            for o in inside_objects()
        )

    def access(self, admin: Manifest, *, role: str, lifetime_seconds: int) -> Access:
        server, ca = kubeconfig_server_and_ca(admin)
        token, expires = Kube.from_kubeconfig_dict(admin).request_token(
            namespace=INSIDE_NAMESPACE, service_account=INSIDE_ACCOUNTS[role][0], lifetime_seconds=lifetime_seconds
        )
        return Access(server, ca, {"token": token}, "default", expires)

    def tenant_client(self, admin: Manifest) -> Kube:
        """A client inside, holding the tenant's own (edit) token."""
        inside = Kube.from_kubeconfig_dict(admin)
        token, _ = inside.request_token(
            namespace=INSIDE_NAMESPACE, service_account=INSIDE_ACCOUNTS["edit"][0], lifetime_seconds=600
        )
        return inside.with_token(token)


class ControlPlane(Protocol[SettingsT]):
    """One kind's control plane on the host. ``settings`` come from ``parse_settings`` on the tenant's cluster."""

    def parse_settings(self, cluster: Any) -> SettingsT:
        """The kind's section of the cluster's settings; ClusterConfigError says what an admin must fix."""
        ...

    def objects(self, tenant: Any, tier: Any, settings: SettingsT) -> list[Manifest]:
        """What is applied on the host for it (may be empty); raises for settings that do not fit the tier."""
        ...

    def preview(self, tenant: Any, tier: Any, settings: SettingsT) -> list[Manifest]: ...

    def install(self, tenant: Any, host: Kube, settings: SettingsT) -> None:
        """Create or update the control plane."""
        ...

    def ready(self, tenant: Any, host: Kube, settings: SettingsT) -> bool:
        """Whether the operator reports it up; raises KubePermanentError when the operator gave up. Reads only."""
        ...

    def admin_kubeconfig(self, tenant: Any, host: Kube, settings: SettingsT) -> Manifest | None:
        """The admin kubeconfig (worker-only), with the server tenants should use; None while there is none."""
        ...

    def top_level(self, tenant: Any) -> list[TopLevel]:
        """Top-level objects of its own, besides the host namespace."""
        ...

    def uninstall(self, tenant: Any, host: Kube) -> bool:
        """Remove it, even when the settings are broken by now; True once it and its finalizers are gone."""
        ...


class VirtualClusterBackend(Generic[SettingsT]):
    """A virtual-cluster kind: a host namespace (or none), the kind's control plane, and access inside it."""

    # apply() sets up access inside the virtual cluster only once its control plane is up: every step applies.
    applied_in_one_step = False

    def __init__(
        self,
        *,
        kind: str,
        control_plane: ControlPlane[SettingsT],
        host: NamespaceBackend | None = None,
        inside: ControlPlaneAccess | None = None,
        checks: Sequence[isolation.ReportCheck] = isolation.VIRTUAL_CHECKS,
    ) -> None:
        self.kind = kind
        self.control_plane = control_plane
        self.host = host
        self.inside = inside or ControlPlaneAccess()
        self.checks = list(checks)

    def _settings(self, tenant: Any) -> SettingsT:
        return self.control_plane.parse_settings(tenant.cluster)

    def check_cluster(self, cluster: Any) -> None:
        self.control_plane.parse_settings(cluster)

    def preview(self, tenant: Any, tier: Any) -> list[Manifest]:
        host = self.host.preview(tenant, tier) if self.host else []
        return [*host, *self.control_plane.preview(tenant, tier, self._settings(tenant))]

    def render(self, tenant: Any, host: Kube) -> list[Manifest]:
        objs = self.control_plane.objects(tenant, tenant.tier, self._settings(tenant))
        return [*(self.host.render(tenant, host) if self.host else []), *objs]

    def apply(self, tenant: Any, host: Kube, *, detect_drift: bool) -> list[str]:
        settings = self._settings(tenant)
        # Rendering first: settings that do not fit fail the tenant before anything exists on the host.
        self.control_plane.objects(tenant, tenant.tier, settings)
        repaired = self.host.apply(tenant, host, detect_drift=detect_drift) if self.host else []
        self.control_plane.install(tenant, host, settings)
        admin = self._admin_once_up(tenant, host, settings)
        if admin is not None:
            self.inside.set_up(admin)
        return repaired

    def _admin_once_up(self, tenant: Any, host: Kube, settings: SettingsT) -> Manifest | None:
        if not self.control_plane.ready(tenant, host, settings):
            return None
        return self.control_plane.admin_kubeconfig(tenant, host, settings)

    def renew_credentials(self, tenant: Any, host: Kube) -> list[str] | None:
        """After a transfer: delete the tenant's ServiceAccounts inside the virtual cluster, so every token issued
        for them is refused (a TokenRequest token is bound to its ServiceAccount's UID); the apply that follows
        makes new ones. What was deleted; None while the control plane is not up (a later pass renews)."""
        admin = self._admin_once_up(tenant, host, self._settings(tenant))
        if admin is None:
            return None
        inside = Kube.from_kubeconfig_dict(admin)
        if self.inside.probe_health and not inside.healthy():
            return None
        deleted = []
        for account, _ in INSIDE_ACCOUNTS.values():
            if inside.get("ServiceAccount", account, namespace=INSIDE_NAMESPACE, fresh=True) is not None:
                inside.delete("ServiceAccount", account, namespace=INSIDE_NAMESPACE)
                deleted.append(f"ServiceAccount/{INSIDE_NAMESPACE}/{account}")
        return deleted

    def is_ready(self, tenant: Any, host: Kube) -> bool:
        if self.host and not self.host.is_ready(tenant, host):
            return False
        if asleep(tenant):
            # The control plane is scaled to zero on purpose, so nothing answers inside.
            return self.control_plane.ready(tenant, host, self._settings(tenant))
        admin = self._admin_once_up(tenant, host, self._settings(tenant))
        return admin is not None and self.inside.is_set_up(admin)

    def top_level(self, tenant: Any) -> list[TopLevel]:
        return [*(self.host.top_level(tenant) if self.host else []), *self.control_plane.top_level(tenant)]

    def teardown(self, tenant: Any, host: Kube) -> bool:
        if not self.control_plane.uninstall(tenant, host):
            return False
        if self.host is None:
            return True
        for claim in host.list("PersistentVolumeClaim", namespace=tenant.namespace):
            host.delete("PersistentVolumeClaim", claim["metadata"]["name"], namespace=tenant.namespace)
        return self.host.teardown(tenant, host)

    def usage(self, tenant: Any, host: Kube) -> dict[str, Any]:
        return self.host.usage(tenant, host) if self.host else {}

    def _admin(self, tenant: Any, host: Kube) -> Manifest:
        admin = self.control_plane.admin_kubeconfig(tenant, host, self._settings(tenant))
        if admin is None:
            raise KubePermanentError(f"The admin kubeconfig of {tenant.name}'s control plane is missing.")
        return admin

    def access(self, tenant: Any, host: Kube, *, role: str, lifetime_seconds: int) -> Access:
        return self.inside.access(self._admin(tenant, host), role=role, lifetime_seconds=lifetime_seconds)

    def isolation_client(self, tenant: Any, host: Kube) -> Kube:
        return self.inside.tenant_client(self._admin(tenant, host))

    def isolation_checks(self) -> Sequence[isolation.ReportCheck]:
        return self.checks
