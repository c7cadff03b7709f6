"""Namespace tenants: a namespace with quota, limits, network policies, RBAC and API fairness."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

from django.conf import settings

from worker import guards, isolation, kube, manifests, ownership
from worker.backends.base import Access, NotReadyYet
from worker.kube import Kube, KubeForbidden, KubePermanentError, Manifest

Tenant = Any


# Storage and priority classes change rarely: read at most once a minute per process, and afresh by each
# reconcile pass (which re-applies quotas that a new class changes).
_facts: kube.PerServer[manifests.ClusterFacts] = kube.PerServer(max_age=60.0)


def cluster_facts(k: Kube, *, fresh: bool = False) -> manifests.ClusterFacts:
    def read() -> manifests.ClusterFacts:
        return manifests.ClusterFacts(
            storage_classes=tuple(sorted(o["metadata"]["name"] for o in k.list("StorageClass"))),
            priority_classes=tuple(sorted(o["metadata"]["name"] for o in k.list("PriorityClass"))),
        )

    return _facts.get(k, read, fresh=fresh)


# The cluster-wide guards, checked (listed and compared) at most once a minute per process before a namespace
# is created, and by every reconcile pass; applied only where missing or changed.
_guards_in_place: kube.PerServer[bool] = kube.PerServer(max_age=60.0)


def ensure_guards(k: Kube, *, fresh: bool = False) -> list[str]:
    """Apply the guards that are missing or differ from what Berth renders; what had to be applied."""
    applied: list[str] = []

    def check() -> bool:
        wanted = guards.cluster_guards()
        live = _live_guards(k, wanted)
        stale = [obj for obj in wanted if differs(obj, live.get((obj["kind"], obj["metadata"]["name"])))]
        k.apply(stale)  # each policy before its binding, as rendered
        applied.extend(f"{o['kind']}/{o['metadata']['name']}" for o in stale)
        return True

    _guards_in_place.get(k, check, key=_GUARDS_DIGEST, fresh=fresh)
    return applied


def _live_guards(k: Kube, wanted: list[Manifest]) -> dict[tuple[str, str], Manifest]:
    """The guards as they are: two lists, or (a least-privilege worker may read its guards only by name) a
    get each."""
    try:
        return {
            (o["kind"], o["metadata"]["name"]): o
            for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
            for o in k.list(kind, label_selector=MANAGED_BY_SELECTOR)
        }
    except KubeForbidden:
        found = ((o["kind"], o["metadata"]["name"], k.get(o["kind"], o["metadata"]["name"])) for o in wanted)
        return {(kind, name): live for kind, name, live in found if live is not None}


MANAGED_BY_SELECTOR = ",".join(f"{key}={value}" for key, value in manifests.MANAGED_BY.items())


def _is_subset(want: Any, have: Any) -> bool:
    """True when every field we set is present with the same value on the server."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_is_subset(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(want) == len(have)
            and all(_is_subset(w, h) for w, h in zip(want, have, strict=True))
        )
    return kube.same_value(want, have)


def differs(want: Manifest, live: Manifest | None) -> bool:
    """Whether ``live`` lacks something Berth renders into ``want``: a field, a label, an annotation.

    Only what Berth sets is compared, so defaults the server fills in are never drift.
    """
    if live is None:
        return True
    meta, live_meta = want["metadata"], live.get("metadata") or {}
    wanted = {key: value for key, value in want.items() if key not in ("apiVersion", "kind", "metadata")}
    return not (
        _is_subset(wanted, live)
        and _is_subset(meta.get("labels", {}), live_meta.get("labels") or {})
        and _is_subset(meta.get("annotations", {}), live_meta.get("annotations") or {})
    )


def drift(want: Manifest, live: Manifest | None) -> str:
    """'Kind/name was missing', 'Kind/name was changed', or '' when ``live`` is as Berth wants it."""
    name = f"{want['kind']}/{want['metadata']['name']}"
    if live is None:
        return f"{name} was missing"
    return f"{name} was changed" if differs(want, live) else ""


def _repair(k: Kube, objs: list[Manifest]) -> list[str]:
    """Apply (in order, the Namespace first) each object that is missing or was edited by hand, over the very
    version read: one changed again since is refused (409) and left to the next repair, which the change itself
    brings (the watcher sees it), so every repair recorded is one that was made. What was repaired."""
    repaired = []
    for obj in objs:
        live = k.get(obj["kind"], obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"))
        what = drift(obj, live)
        if not what:
            continue
        version = ((live or {}).get("metadata") or {}).get("resourceVersion")
        want = {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}} if version else obj
        try:
            k.apply([want])
        except KubePermanentError as exc:
            if exc.status != 409:
                raise
            continue
        repaired.append(what)
    return repaired


GRANT_LOOK_SECONDS = 0.25  # first look again after writing Berth's grants in a namespace (then longer)


def namespace_grants() -> tuple[manifests.NamespaceGrant, ...]:
    """Berth's own rights inside tenant namespaces (settings.BERTH_NAMESPACE_GRANTS; empty with an admin
    credential)."""
    try:
        return manifests.parse_grants(settings.BERTH_NAMESPACE_GRANTS)
    except ValueError as exc:
        raise KubePermanentError(f"Portal setting: {exc}") from None


def grant_berth_access(k: Kube, namespace: dict[str, Any], bindings: list[dict[str, Any]]) -> list[str]:
    """Create the namespace and Berth's own RoleBindings in it where missing; what had to be created.

    With a least-privilege credential the worker's rights inside a namespace come from these RoleBindings, so they
    are created (POST: creating needs no rights inside the namespace) before anything is applied there, and again
    if someone deleted them. ``ownership.claim`` has made sure an existing namespace is this tenant's. What is
    done there next is done ``while_granting``.
    """
    meta = namespace["metadata"]
    created: list[str] = []
    if k.get("Namespace", meta["name"]) is None:
        # Only the labels that make it Berth's and this tenant's: server-side apply owns everything else, so a
        # tier change can still remove a label.
        labels = {key: meta["labels"][key] for key in (*manifests.MANAGED_BY, manifests.TENANT_ID_LABEL)}
        bare = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": meta["name"], "labels": labels}}
        _create_if_missing(k, bare, created)
    for binding in bindings:
        _create_if_missing(k, binding, created)
    return [f"{what} was missing" for what in created]


@contextlib.contextmanager
def while_granting(created: list[str], namespace: str) -> Iterator[None]:
    """What follows the grants ``grant_berth_access`` just ``created`` in ``namespace``: a grant reaches the API
    server's authorizer a moment later (its informers see a RoleBinding in milliseconds), and nothing but a request
    shows when it has. Refused meanwhile (403), the step is NotReadyYet and comes back soon, not at the usual
    countdown; nothing waits here. With no grant just written, a refusal is what it is."""
    try:
        yield
    except KubeForbidden:
        if not created:
            raise
        raise NotReadyYet(
            f"Berth's grants in namespace {namespace} do not take effect yet.", after=GRANT_LOOK_SECONDS
        ) from None


def _create_if_missing(k: Kube, obj: dict[str, Any], created: list[str]) -> None:
    try:
        k.create(obj)
    except KubePermanentError as exc:
        if exc.status != 409:  # 409: it exists already
            raise
        return
    created.append(f"{obj['kind']}/{obj['metadata']['name']}")


# Guards this worker process has seen refuse their violation, per API server and version of the guards.
_GUARDS_DIGEST = hashlib.sha256(json.dumps(guards.cluster_guards(), sort_keys=True).encode()).hexdigest()
_guards_seen: dict[tuple[str, str], set[str]] = {}
# What the API server's ServiceAccount admission plugin says of a Pod in a namespace whose ServiceAccount is not
# there yet.
_NO_SERVICE_ACCOUNT_YET = "error looking up service account"


def guards_not_in_force(k: Kube, namespace: dict[str, Any], *, berth_service_accounts: bool) -> list[str]:
    """The guards bound to ``namespace`` that do not refuse their violation yet (dry runs; nothing persists).

    A new or changed admission policy is enforced a moment after it is applied; until every guard is,
    the tenant is not ready and gets no credentials. Once seen in force, a guard is not probed again by
    this process.
    """
    name = namespace["metadata"]["name"]
    seen = _guards_seen.setdefault((k.server, _GUARDS_DIGEST), set())
    probes = guards.violations(name)
    waiting: list[str] = []
    for guard in guards.applicable(namespace["metadata"].get("labels") or {}):
        if guard.name in seen or (guard.name == "berth-no-berth-service-accounts" and not berth_service_accounts):
            # Without Berth's ServiceAccounts in the namespace (the host side of a virtual cluster, access mode
            # oidc), the ServiceAccount admission plugin refuses the probe before any policy sees it.
            continue
        try:
            k.create(probes[guard.name], dry_run=True)
        except KubePermanentError as exc:
            if f"'{guard.name}'" in str(exc):
                seen.add(guard.name)
                continue
            if _NO_SERVICE_ACCOUNT_YET in str(exc):
                # The namespace's default ServiceAccount is not made yet (its controller lags, as after an API
                # server restart): the ServiceAccount admission plugin refuses every Pod before a policy sees it.
                # Not proven in force yet: look again, rather than fail the tenant.
                waiting.append(guard.name)
                continue
            raise
        waiting.append(guard.name)
    return waiting


class NamespaceBackend:
    """A namespace with quota, limits, network policies, RBAC and fairness."""

    kind = "namespace"
    applied_in_one_step = True

    def __init__(self, *, team_access: bool = True) -> None:
        # False for the host side of a virtual cluster: no team Roles, ServiceAccounts or bindings on the host.
        self.team_access = team_access

    def check_cluster(self, cluster: Any) -> None:
        """Namespace tenants have no per-kind settings."""

    def preview(self, tenant: Any, tier: Any) -> list[Manifest]:
        return manifests.namespace_tenant(
            tenant, tier, tenant.cluster, team_access=self.team_access, grants=namespace_grants()
        )

    def render(self, tenant: Tenant, k: Kube) -> list[Manifest]:
        objs = manifests.namespace_tenant(
            tenant,
            tenant.tier,
            tenant.cluster,
            cluster_facts(k),
            team_access=self.team_access,
            grants=namespace_grants(),
        )
        # With the UIDs Berth recorded, an apply onto a top-level object someone replaced since fails instead of
        # adopting it.
        owned = tenant.owned_uids or {}
        for obj in objs:
            meta = obj["metadata"]
            uid = owned.get(ownership.TopLevel(obj["kind"], meta["name"], meta.get("namespace")).key)
            if uid and obj["kind"] in ("Namespace", "FlowSchema"):
                meta["uid"] = uid
        return objs

    def apply(self, tenant: Tenant, k: Kube, *, detect_drift: bool) -> list[str]:
        objs = self.render(tenant, k)
        ensure_guards(k)  # before the namespace exists, so it is never unguarded
        grants = manifests.namespace_grants(tenant, tenant.tier, namespace_grants())
        created = grant_berth_access(k, objs[0], grants) if grants else []
        with while_granting(created, tenant.namespace):
            if detect_drift:  # a ready tenant, as it was applied: only what someone changed is applied again
                return created + _repair(k, objs)
            k.apply(objs[:1])  # the Namespace first, so namespaced objects have a home
            k.apply(objs[1:])
        if tenant.applied_generation and tenant.applied_generation != tenant.generation:
            self.prune(tenant, k, objs)
        return []

    def prune(self, tenant: Tenant, k: Kube, objs: list[Manifest]) -> None:
        """Remove berth objects a tier change no longer wants (e.g. an ingress policy)."""
        wanted = {(o["kind"], o["metadata"]["name"]) for o in objs}
        selector = f"{manifests.TENANT_ID_LABEL}={tenant.pk}"
        for kind in ("NetworkPolicy", "ResourceQuota"):
            for live in k.list(kind, namespace=tenant.namespace, label_selector=selector):
                if (kind, live["metadata"]["name"]) not in wanted:
                    k.delete(kind, live["metadata"]["name"], namespace=tenant.namespace)
        flow_schema = ownership.TopLevel("FlowSchema", manifests.flow_schema_name(tenant))
        if ("FlowSchema", flow_schema.name) not in wanted and flow_schema.key in (tenant.owned_uids or {}):
            ownership.delete(k, tenant, flow_schema)

    def is_ready(self, tenant: Tenant, k: Kube) -> bool:
        ns = k.get("Namespace", tenant.namespace)
        if not ns or (ns.get("status") or {}).get("phase") != "Active":
            return False
        quota = k.get("ResourceQuota", "berth-quota", namespace=tenant.namespace, fresh=True)
        # The quota controller has observed the quota: it is enforced from here on.
        if not (quota and (quota.get("status") or {}).get("hard")):
            return False
        berth_service_accounts = self.team_access and tenant.cluster.access_mode != "oidc"
        return not guards_not_in_force(k, ns, berth_service_accounts=berth_service_accounts)

    def top_level(self, tenant: Tenant) -> list[ownership.TopLevel]:
        tops = [ownership.TopLevel("Namespace", tenant.namespace)]
        # Cluster-scoped and named after the namespace: just as easily someone else's. Only when the tier wants
        # one: a name Berth does not need is not claimed.
        if self.team_access and manifests.flow_schema(tenant, tenant.tier, tenant.cluster) is not None:
            tops.append(ownership.TopLevel("FlowSchema", manifests.flow_schema_name(tenant)))
        return tops

    def service_accounts(self, tenant: Tenant) -> list[ownership.TopLevel]:
        """The team's ServiceAccounts (access mode token): their tokens are the team's kubeconfigs. Recorded as
        Berth's once made, so renewing them after a transfer deletes only the ones Berth made."""
        if not self.team_access or tenant.cluster.access_mode == "oidc":
            return []
        return [ownership.TopLevel("ServiceAccount", sa, tenant.namespace) for sa in SERVICE_ACCOUNT.values()]

    def teardown(self, tenant: Tenant, k: Kube) -> bool:
        """Start deleting what Berth created (by UID); True once all of it is really gone."""
        tops = self.top_level(tenant)
        flow_schema = ownership.TopLevel("FlowSchema", manifests.flow_schema_name(tenant))
        if flow_schema not in tops and flow_schema.key in (tenant.owned_uids or {}):
            tops.append(flow_schema)  # recorded under an earlier tier
        gone = [ownership.delete(k, tenant, top) for top in reversed(tops)]
        return all(gone)

    def usage(self, tenant: Tenant, k: Kube) -> dict[str, Any]:
        quota = k.get("ResourceQuota", "berth-quota", namespace=tenant.namespace) or {}
        status = quota.get("status") or {}
        return {"hard": status.get("hard", {}), "used": status.get("used", {})}

    def access(self, tenant: Tenant, host: Kube, *, role: str, lifetime_seconds: int) -> Access:
        cluster = tenant.cluster
        ca = cluster.ca_pem or host.ca_pem()
        if cluster.access_mode == "oidc":
            return Access(cluster.public_endpoint, ca, oidc_exec_user(cluster), tenant.namespace, "oidc")
        token, expires = host.request_token(
            namespace=tenant.namespace,
            service_account=SERVICE_ACCOUNT[role],
            lifetime_seconds=lifetime_seconds,
        )
        return Access(cluster.public_endpoint, ca, {"token": token}, tenant.namespace, expires)

    def isolation_client(self, tenant: Tenant, host: Kube) -> Kube:
        if tenant.cluster.access_mode == "oidc":
            # The team's OIDC group, as the API server would see it after sign-in.
            group = manifests.oidc_groups(tenant, tenant.cluster)[0][0]
            return host.impersonating(user=f"berth-isolation-check@{tenant.namespace}", group=group)
        token, _ = host.request_token(
            namespace=tenant.namespace, service_account=manifests.TENANT_SA, lifetime_seconds=600
        )
        return host.with_token(token)

    def isolation_checks(self) -> Sequence[isolation.ReportCheck]:
        return isolation.CHECKS


SERVICE_ACCOUNT = {"edit": manifests.TENANT_SA, "view": manifests.VIEWER_SA}


def oidc_exec_user(cluster: Any) -> dict[str, Any]:
    """A kubeconfig user that signs in through kubelogin: no secret in the file."""
    scopes = [s.strip() for s in (cluster.oidc_extra_scopes or "").split(",") if s.strip()]
    args = [
        "oidc-login",
        "get-token",
        f"--oidc-issuer-url={cluster.oidc_issuer_url}",
        f"--oidc-client-id={cluster.oidc_client_id}",
    ]
    args += [f"--oidc-extra-scope={s}" for s in scopes]
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "kubectl",
            "args": args,
            "interactiveMode": "IfAvailable",
            "provideClusterInfo": False,
            "installHint": "Install kubelogin (kubectl oidc-login): https://github.com/int128/kubelogin",
        }
    }
