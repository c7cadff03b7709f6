"""Namespace tenants: a namespace with quota, limits, network policies, RBAC and API fairness."""
from __future__ import annotations

from typing import Any

from worker import isolation, kube, manifests
from worker.backends.base import Access, Backend
from worker.kube import Kube, KubePermanentError

Tenant = Any


def cluster_facts(k: Kube) -> manifests.ClusterFacts:
    return manifests.ClusterFacts(
        storage_classes=tuple(sorted(o["metadata"]["name"] for o in k.list("StorageClass"))),
        priority_classes=tuple(sorted(o["metadata"]["name"] for o in k.list("PriorityClass"))),
    )


def _is_subset(want: Any, have: Any) -> bool:
    """True when every field we set is present with the same value on the server."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_is_subset(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(_is_subset(w, h) for w, h in zip(want, have))
    return kube.same_value(want, have)


def _drift(k: Kube, objs: list[dict]) -> list[str]:
    """What is missing or was edited by hand, before we apply over it."""
    repaired = []
    for obj in objs:
        meta = obj["metadata"]
        live = k.get(obj["kind"], meta["name"], namespace=meta.get("namespace"))
        name = f"{obj['kind']}/{meta['name']}"
        if live is None:
            repaired.append(f"{name} was missing")
            continue
        wanted = {key: value for key, value in obj.items() if key not in ("apiVersion", "kind", "metadata")}
        if not _is_subset(wanted, live) or not _is_subset(meta.get("labels", {}), live["metadata"].get("labels", {})):
            repaired.append(f"{name} was changed")
    return repaired


class NamespaceBackend(Backend):
    """A namespace with quota, limits, network policies, RBAC and fairness."""

    kind = "namespace"

    def __init__(self, *, team_access: bool = True):
        # False for the host side of a virtual cluster: no team Roles, ServiceAccounts or bindings on the host.
        self.team_access = team_access

    def preview(self, tenant: Any, tier: Any) -> list[dict]:
        return manifests.namespace_tenant(tenant, tier, tenant.cluster, team_access=self.team_access)

    def render(self, tenant: Tenant, k: Kube) -> list[dict]:
        return manifests.namespace_tenant(tenant, tenant.tier, tenant.cluster, cluster_facts(k), team_access=self.team_access)

    def apply(self, tenant: Tenant, k: Kube, *, detect_drift: bool) -> list[str]:
        objs = self.render(tenant, k)
        repaired = _drift(k, objs) if detect_drift else []
        k.apply(manifests.cluster_guards())  # before the namespace exists, so it is never unguarded
        k.apply(objs[:1])  # the Namespace first, so namespaced objects have a home
        k.apply(objs[1:])
        self._prune(tenant, k, objs)
        return repaired

    def _prune(self, tenant: Tenant, k: Kube, objs: list[dict]) -> None:
        """Remove berth objects a tier change no longer wants (e.g. an ingress policy)."""
        wanted = {(o["kind"], o["metadata"]["name"]) for o in objs}
        selector = f"berth.dev/tenant-id={tenant.pk}"
        for kind in ("NetworkPolicy", "ResourceQuota"):
            for live in k.list(kind, namespace=tenant.namespace, label_selector=selector):
                if (kind, live["metadata"]["name"]) not in wanted:
                    k.delete(kind, live["metadata"]["name"], namespace=tenant.namespace)
        if not self.team_access or manifests.flow_schema(tenant, tenant.tier, tenant.cluster) is None:
            k.delete("FlowSchema", manifests.flow_schema_name(tenant))

    def is_ready(self, tenant: Tenant, k: Kube) -> bool:
        ns = k.get("Namespace", tenant.namespace)
        if not ns or (ns.get("status") or {}).get("phase") != "Active":
            return False
        quota = k.get("ResourceQuota", "berth-quota", namespace=tenant.namespace)
        # The quota controller has observed the quota: it is enforced from here on.
        return bool(quota and (quota.get("status") or {}).get("hard"))

    def teardown(self, tenant: Tenant, k: Kube) -> bool:
        """Start deleting; True once everything is really gone."""
        k.delete("FlowSchema", manifests.flow_schema_name(tenant))
        ns = k.get("Namespace", tenant.namespace)
        if ns is None:
            return True
        if str(tenant.pk) != ns["metadata"].get("labels", {}).get("berth.dev/tenant-id"):
            raise KubePermanentError(f"Namespace {tenant.namespace} is not this tenant's (labels differ); refusing to delete it.")
        if not ns["metadata"].get("deletionTimestamp"):
            k.delete("Namespace", tenant.namespace)
        return False

    def usage(self, tenant: Tenant, k: Kube) -> dict:
        quota = k.get("ResourceQuota", "berth-quota", namespace=tenant.namespace) or {}
        status = quota.get("status") or {}
        return {"hard": status.get("hard", {}), "used": status.get("used", {})}

    def access(self, tenant: Tenant, host: Kube, *, role: str, lifetime_seconds: int) -> Access:
        cluster = tenant.cluster
        ca = cluster.ca_pem or host.ca_pem()
        if cluster.access_mode == "oidc":
            return Access(cluster.public_endpoint, ca, oidc_exec_user(cluster), tenant.namespace, "oidc")
        token, expires = host.request_token(
            namespace=tenant.namespace, service_account=SERVICE_ACCOUNT[role], lifetime_seconds=lifetime_seconds,
        )
        return Access(cluster.public_endpoint, ca, {"token": token}, tenant.namespace, expires)

    def isolation_client(self, tenant: Tenant, host: Kube) -> Kube:
        if tenant.cluster.access_mode == "oidc":
            # The team's OIDC group, as the API server would see it after sign-in.
            group = manifests.oidc_groups(tenant, tenant.cluster)[0][0]
            return host.impersonating(user=f"berth-isolation-check@{tenant.namespace}", group=group)
        token, _ = host.request_token(namespace=tenant.namespace, service_account=manifests.TENANT_SA, lifetime_seconds=600)
        return host.with_token(token)

    def isolation_checks(self) -> list:
        return isolation.CHECKS


SERVICE_ACCOUNT = {"edit": manifests.TENANT_SA, "view": manifests.VIEWER_SA}


def oidc_exec_user(cluster: Any) -> dict:
    """A kubeconfig user that signs in through kubelogin: no secret in the file."""
    scopes = [s.strip() for s in (cluster.oidc_extra_scopes or "").split(",") if s.strip()]
    args = ["oidc-login", "get-token", f"--oidc-issuer-url={cluster.oidc_issuer_url}", f"--oidc-client-id={cluster.oidc_client_id}"]
    args += [f"--oidc-extra-scope={s}" for s in scopes]
    return {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": "kubectl", "args": args,
        "interactiveMode": "IfAvailable", "provideClusterInfo": False,
        "installHint": "Install kubelogin (kubectl oidc-login): https://github.com/int128/kubelogin",
    }}
