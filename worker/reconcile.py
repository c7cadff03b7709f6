"""The periodic reconcile pass: one per cluster, listing each managed kind once instead of reading per tenant.

A pass reads the cluster's facts (storage and priority classes) and checks the cluster-wide guards once, lists
every kind Berth creates for namespace tenants once (label ``app.kubernetes.io/managed-by=berth``, in pages),
and compares in memory what each ready namespace tenant should have with what is there: only the fields,
labels and annotations Berth renders, so defaults the server fills in are never drift. It applies only what is
missing or differs, removes what a tenant's tier no longer wants, and records the repairs per tenant through
``tenants.services`` (audited, as before). An in-sync pass over any number of tenants therefore costs a few
requests per kind; each repair costs one more.

A ready tenant whose recorded Namespace is gone or is another object (another UID) is marked diverged
(``tenants.services.divergence``) and left alone: the database and the cluster disagree, typically after a
restore from an older dump, and an admin decides. Namespaces with Berth's labels and a tenant id no live tenant
has are recorded as orphans for admins to see, never deleted.

Berth never adopts: a top-level object (the Namespace, a FlowSchema) that is not the one recorded for the
tenant is left alone and the tenant gets a note; objects are deleted only when they carry the tenant's id, and
top-level ones with the recorded UID as a precondition. A tenant another worker is provisioning (its advisory
lock is taken) is left to that worker. Virtual-cluster tenants keep their per-tenant reconcile
(``provisioning.provision``), run from the same pass.

The quota readings of the pass go into the usage history with each tenant's measured usage when the cluster has a
Prometheus (worker.measured_usage): two queries for the whole cluster, asked in the background while the pass
lists, whose failure only leaves the measured part out. With the watcher deployed (BERTH_WATCHER), its leader takes
the readings every BERTH_USAGE_SECONDS (worker.watcher) and the pass takes none of a tenant the watcher read within
BERTH_USAGE_MAX_GAP_SECONDS: its list is older than the watcher's reading, and storing it would put older usage over
newer and restart idle clocks for nothing. A tenant the watcher has not read for that long (no watcher running) is
read by the pass, as before.

A worker that may not list cluster-wide (the Helm chart's RBAC) cannot do any of this in one go: its pass leaves to the
watcher every namespace tenant the watcher has read lately (it checks them against its index, and lists everything
again every BERTH_RECONCILE_SECONDS), and reconciles the others tenant by tenant.

A repair is applied over the resourceVersion the pass listed: an object changed since (by the watcher's repair job,
say) is refused (409) and left alone, so one edit is repaired, and audited, once.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from tenants import services
from tenants.errors import InvalidTransition
from tenants.models import LIVE_STATUSES, Cluster, Tenant, TenantStatus
from tenants.services.sleep import SLEEP_KINDS
from worker import kube, manifests, measured_usage, ownership, provisioning
from worker.backends import namespace as ns_backend
from worker.backends.base import NotReadyYet
from worker.kube import Kube, KubeForbidden, KubePermanentError, Manifest

logger = logging.getLogger(__name__)

# Every kind a namespace tenant is made of (worker.manifests.namespace_tenant).
MANAGED_KINDS = (
    "Namespace",
    "ServiceAccount",
    "ResourceQuota",
    "LimitRange",
    "NetworkPolicy",
    "Role",
    "RoleBinding",
    "FlowSchema",
)
# Kinds whose objects a tier change can drop (prune), and the top-level ones (never adopted, deleted by UID).
PRUNED_KINDS = ("NetworkPolicy", "ResourceQuota", "FlowSchema")
TOP_LEVEL_KINDS = ("Namespace", "FlowSchema", "ServiceAccount")

Key = tuple[str, str, str]  # kind, namespace ('' for cluster-scoped), name


def key_of(obj: Manifest) -> Key:
    meta = obj["metadata"]
    return (str(obj["kind"]), str(meta.get("namespace") or ""), str(meta["name"]))


def _tenant_id(obj: Manifest) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(manifests.TENANT_ID_LABEL, ""))


@dataclass
class PassResult:
    """What one pass over a cluster found and did."""

    cluster: str
    tenants: int = 0
    in_sync: int = 0
    repaired: dict[str, list[str]] = field(default_factory=dict)  # tenant id → what was repaired
    foreign: dict[str, list[str]] = field(default_factory=dict)  # tenant id → someone else's objects left alone
    failed: dict[str, str] = field(default_factory=dict)  # tenant id → reason
    diverged: dict[str, str] = field(default_factory=dict)  # tenant id → why its namespace is not Berth's record
    orphans: list[str] = field(default_factory=list)  # Berth's namespaces no live tenant has (never deleted)
    usage: dict[str, dict[str, object]] = field(default_factory=dict)  # tenant id → quota usage that changed
    readings: dict[str, dict[str, object]] = field(default_factory=dict)  # tenant id → every usage read
    previous_used: dict[str, object] = field(default_factory=dict)  # tenant id → what it used at the last reading
    namespaces: dict[str, str] = field(default_factory=dict)  # tenant id → its namespace, of those read
    measured: bool = False  # readings of this pass carry measured usage (the cluster's Prometheus answered)
    waiting: dict[str, float] = field(default_factory=dict)  # tenant id → look again in (s): not ready yet
    busy: int = 0  # held by another worker, or changed since the pass began: left to its own job
    virtual: int = 0  # reconciled one by one (provisioning.provision)
    asleep: dict[str, str] = field(default_factory=dict)  # tenant id → what keeping it asleep (or waking) did
    per_tenant: bool = False  # the credential may not list cluster-wide: every tenant reconciled on its own
    watched: int = 0  # left to the watcher, which checks them against its index (per-tenant passes only)
    requests: int = 0
    seconds: float = 0.0

    def summary(self) -> dict[str, object]:
        return {
            "cluster": self.cluster,
            "tenants": self.tenants,
            "in_sync": self.in_sync,
            "repaired": sum(len(r) for r in self.repaired.values()),
            "repaired_tenants": len(self.repaired),
            "foreign": sum(len(f) for f in self.foreign.values()),
            "failed": len(self.failed),
            "diverged": len(self.diverged),
            "orphans": len(self.orphans),
            "busy": self.busy,
            "virtual": self.virtual,
            "asleep": len(self.asleep),
            "per_tenant": self.per_tenant,
            "watched": self.watched,
            "measured": self.measured,
            "requests": self.requests,
            "seconds": round(self.seconds, 3),
        }


def live_objects(k: Kube) -> dict[Key, Manifest]:
    """Every object Berth manages on the cluster, by (kind, namespace, name): one paged list per kind."""
    selector = ns_backend.MANAGED_BY_SELECTOR
    return {key_of(obj): obj for kind in MANAGED_KINDS for obj in k.list(kind, label_selector=selector)}


def reconcile_cluster(cluster: Cluster) -> PassResult:
    """One pass over ``cluster``'s ready tenants (see the module's docstring)."""
    started = time.monotonic()
    k = kube.for_cluster(cluster)
    before = k.requests
    result = PassResult(cluster=cluster.name)
    measured = measured_usage.start(cluster)  # asked in the background while the cluster is listed
    ns_backend.cluster_facts(k, fresh=True)  # the renders below use these
    ns_backend.ensure_guards(k, fresh=True)
    try:
        live: dict[Key, Manifest] | None = live_objects(k)
    except KubeForbidden as exc:
        # A least-privilege worker holds its rights inside Berth's namespaces only (deploy/helm/berth): no
        # cluster-wide lists, so each tenant is reconciled on its own (docs/deployment.md: how to allow lists).
        logger.warning("reconcile pass on %s: %s; reconciling tenant by tenant", cluster.name, exc)
        live, result.per_tenant = None, True
    prunable = prunable_by_tenant(live or {})
    tenants = Tenant.objects.select_related("tier", "cluster", "team").filter(
        cluster=cluster, status=TenantStatus.READY
    )
    for tenant in tenants.order_by("pk"):
        result.tenants += 1
        if live is not None and _diverged(tenant, k, live, result):
            continue
        if live is None and tenant.kind == ns_backend.NamespaceBackend.kind and _watcher_reads(tenant):
            # This worker may not list cluster-wide (the chart's RBAC), and the watcher, which may, is checking the
            # tenant against its index (a reading of it is recent): drift is its to find, and its relist every
            # pass interval is the safety net (worker.watcher). Nothing to read here, tenant by tenant.
            result.watched += 1
            continue
        if live is None or tenant.kind != ns_backend.NamespaceBackend.kind:
            result.virtual += tenant.kind != ns_backend.NamespaceBackend.kind
            provisioning.provision(str(tenant.pk), measure=measured.of_tenant)
            continue
        if _accounts_to_renew(tenant, live):
            # ServiceAccounts to delete and make anew (a transfer) or to record anew: the tenant's own job does it.
            provisioning.provision(str(tenant.pk), measure=measured.of_tenant)
            continue
        _reconcile_tenant(tenant, k, live, prunable, result)
    if live is not None:
        result.orphans = record_orphans(cluster, live)
    for tenant in tenants.filter(Q(sleeping=True) | Q(sleep_applied=False), kind__in=list(SLEEP_KINDS)):
        _keep_asleep(tenant, k, result)
    if result.readings:
        _add_measured(result, measured.result())
        active = [
            tid
            for tid, reading in result.usage.items()
            if tid in result.previous_used and reading.get("used") != result.previous_used[tid]
        ]
        services.tenants_record_usage(usages=result.usage, readings=result.readings, active=active)
    result.measured = measured.measured  # also when only tenants reconciled one by one were measured
    result.requests = k.requests - before
    result.seconds = time.monotonic() - started
    logger.info("reconcile pass: %s", result.summary())
    return result


def _add_measured(result: PassResult, measurement: measured_usage.Measurement | None) -> None:
    """Each reading for the history gets its tenant's measured part (none without a measurement); what is stored
    as the tenant's quota usage stays the quota's alone."""
    if measurement is None:
        return
    for tid, reading in result.readings.items():
        measured = measurement.of(result.namespaces[tid], reading)
        if measured is not None:  # else its node was not scraped: a gap, not "used nothing"
            result.readings[tid] = {**reading, "measured": measured}


def _diverged(tenant: Tenant, k: Kube, live: dict[Key, Manifest], result: PassResult) -> bool:
    """Mark the tenant diverged when the Namespace Berth recorded for it is gone or is another object.

    The list may be older than the tenant (it became ready while the pass listed): what the list suggests is read
    again before the tenant is marked, one request in the rare case."""
    top = ownership.TopLevel("Namespace", tenant.namespace)
    if not ownership.divergence(tenant, top, live.get(("Namespace", "", tenant.namespace))):
        return False
    reason = ownership.divergence(tenant, top, k.get("Namespace", tenant.namespace, fresh=True))
    if not reason:
        return False
    try:
        services.tenant_mark_diverged(tenant=tenant, reason=reason)
    except InvalidTransition:  # it moved on since the pass read it: its own job looks again
        result.busy += 1
        return True
    result.diverged[str(tenant.pk)] = reason
    return True


def record_orphans(cluster: Cluster, live: dict[Key, Manifest]) -> list[str]:
    """Record the cluster's namespaces that carry Berth's labels and a tenant id no live tenant has there (made
    after the database's dump was taken, say); their names. Only under the cluster's namespace prefix: other
    records of the same API server have their own. Namespaces being deleted are not listed."""
    prefix = cluster.namespace_prefix or ""
    labelled = {
        name: obj
        for (kind, _, name), obj in live.items()
        if kind == "Namespace"
        and name.startswith(prefix)
        and _tenant_id(obj)
        and not obj["metadata"].get("deletionTimestamp")
    }
    ids = {_tenant_id(obj) for obj in labelled.values()}
    valid = [tid for tid in ids if _is_uuid(tid)]
    held = set(Tenant.objects.filter(pk__in=valid, status__in=LIVE_STATUSES).values_list("namespace", "pk").order_by())
    found = [
        {
            "name": name,
            "uid": str(obj["metadata"].get("uid", "")),
            "tenant_id": _tenant_id(obj),
            "labels": obj["metadata"].get("labels") or {},
            "created_at": parse_datetime(str(obj["metadata"].get("creationTimestamp") or "")),
        }
        for name, obj in sorted(labelled.items())
        if not _is_uuid(_tenant_id(obj)) or (name, uuid.UUID(_tenant_id(obj))) not in held
    ]
    services.orphan_namespaces_record(cluster=cluster, found=found, at=timezone.now())
    return [str(row["name"]) for row in found]


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def repair_drift(tenant_id: str, keys: Collection[Key]) -> provisioning.Progress:
    """The watcher's repair of the objects it saw drift: ``keys`` (kind, namespace, name), read afresh and
    repaired as the pass repairs them, one request each and one more for each that differs; the tenant's other
    objects are not read (the watcher holds them, as it saw them, in its index).

    Only what Berth renders for the tenant is ever looked at, whatever the keys name. A tenant owed more than a
    repair (a tier change or a credential renewal in flight), a virtual cluster, a ServiceAccount gone (made anew
    and recorded by the tenant's own path) or an object Berth may not read (its own grant in the namespace was
    deleted, and is put back first) take the per-tenant path, ``provisioning.provision``, as before.
    """
    tenant = (
        Tenant.objects.select_related("tier", "cluster", "team").filter(pk=tenant_id, status=TenantStatus.READY).first()
    )
    if tenant is None:
        return provisioning.Progress(provisioning.Outcome.SKIPPED, reason="not ready")
    owed = tenant.generation != tenant.applied_generation or tenant.credential_epoch != tenant.applied_credential_epoch
    if owed or tenant.kind != ns_backend.NamespaceBackend.kind:
        return provisioning.provision(tenant_id)
    k = kube.for_cluster(tenant.cluster)
    rendered = ns_backend.NamespaceBackend().render(tenant, k)
    # The Namespace is always read: one replaced by someone else's under the same name and labels is no drift to
    # the watcher's comparison (the UID is not rendered), and nothing is applied into it (it diverged).
    wanted = (set(keys) & {key_of(obj) for obj in rendered}) | {("Namespace", "", tenant.namespace)}
    try:
        found = {key: k.get(key[0], key[2], namespace=key[1] or None, fresh=True) for key in sorted(wanted)}
    except KubeForbidden:
        return provisioning.provision(tenant_id)
    live = {key: obj for key, obj in found.items() if obj is not None}
    if any(kind == "ServiceAccount" and obj is None for (kind, _, _), obj in found.items()):
        return provisioning.provision(tenant_id)
    result = PassResult(cluster=tenant.cluster.name)
    if _diverged(tenant, k, live, result):
        reason = result.diverged.get(tenant_id, "")
        return provisioning.Progress(provisioning.Outcome.DIVERGED if reason else provisioning.Outcome.RACED, reason)
    _reconcile_tenant(tenant, k, live, {}, result, only=wanted, rendered=rendered)
    if result.busy and not result.repaired:
        return provisioning.Progress(provisioning.Outcome.LOCKED)
    if tenant_id in result.waiting:  # the job comes back then, for the whole tenant
        note = result.failed[tenant_id]
        return provisioning.Progress(provisioning.Outcome.NOT_YET, note, requeue_after=result.waiting[tenant_id])
    if tenant_id in result.failed:  # noted on the tenant; the next edit's repair, or the relist, tries again
        return provisioning.Progress(provisioning.Outcome.FAILED, result.failed[tenant_id])
    repaired = result.repaired.get(tenant_id, [])
    outcome = provisioning.Outcome.REPAIRED if repaired else provisioning.Outcome.IN_SYNC
    return provisioning.Progress(outcome, reason="; ".join(repaired))


def _reconcile_tenant(
    tenant: Tenant,
    k: Kube,
    live: dict[Key, Manifest],
    prunable: dict[str, list[Manifest]],
    result: PassResult,
    *,
    only: Collection[Key] | None = None,
    rendered: list[Manifest] | None = None,
) -> None:
    """Compare the tenant's rendered objects (those of ``only``, when given: the rest were not read) with ``live``
    and repair what differs, under the tenant's lock."""
    if rendered is None:
        rendered = ns_backend.NamespaceBackend().render(tenant, k)
    desired = rendered if only is None else [obj for obj in rendered if key_of(obj) in only]
    foreign = _foreign(tenant, desired, live)
    stale = [obj for obj in desired if key_of(obj) not in foreign and ns_backend.differs(obj, live.get(key_of(obj)))]
    extra = _unwanted(tenant, desired, prunable.get(str(tenant.pk), []))
    tid = str(tenant.pk)
    if foreign:
        result.foreign[tid] = [f"{kind}/{name}" for kind, _, name in foreign]
        services.tenant_note_progress(
            tenant=tenant,
            note="Left alone, not Berth's: " + ", ".join(result.foreign[tid]) + ". A platform admin must act.",
        )
    if not stale and not extra:
        result.in_sync += 1
        if tenant.applied_generation != tenant.generation:
            services.tenant_record_applied(tenant=tenant, generation=tenant.generation, repaired=[])
        if not foreign and only is None:
            _note_readiness(tenant, live, result)
        return
    with provisioning.tenant_lock(tid) as got:
        # Held by another worker, or changed since this pass read it (a tier change being provisioned): the
        # tenant's own job applies what it should have now.
        unchanged = Tenant.objects.filter(pk=tenant.pk, status=TenantStatus.READY, generation=tenant.generation)
        if not got or not unchanged.exists():
            result.busy += 1
            return
        try:
            repaired = _repair(tenant, k, rendered[0], desired, stale, extra, live)
        except NotReadyYet as exc:
            services.tenant_note_progress(tenant=tenant, note=str(exc))
            result.failed[tid] = str(exc)
            result.waiting[tid] = provisioning.POLL_MIN_SECONDS if exc.after is None else exc.after
            return
        except KubePermanentError as exc:
            services.tenant_note_progress(tenant=tenant, note=f"Last reconcile failed: {exc}")
            result.failed[tid] = str(exc)
            return
    if not repaired:  # every repair refused: changed since the pass listed it, by whoever repairs it (the watcher)
        result.busy += 1
        return
    services.tenant_record_applied(tenant=tenant, generation=tenant.generation, repaired=repaired)
    result.repaired[tid] = repaired


def _keep_asleep(tenant: Tenant, k: Kube, result: PassResult) -> None:
    """A sleeping tenant stays asleep: what was created or scaled up since is scaled down again (worker.sleep);
    the reconcile pass never wakes a tenant. A wake that has not been applied yet is finished here too."""
    tid = str(tenant.pk)
    with provisioning.tenant_lock(tid) as got:
        if not got:
            result.busy += 1
            return
        fresh = Tenant.objects.select_related("tier").filter(pk=tenant.pk, status=TenantStatus.READY).first()
        if fresh is None:
            return
        try:
            result.asleep[tid] = str(provisioning.enforce_sleep(fresh, k))
        except KubePermanentError as exc:
            services.tenant_note_progress(tenant=fresh, note=f"Keeping it asleep failed: {exc}")
            result.failed[tid] = str(exc)


def _accounts_to_renew(tenant: Tenant, live: dict[Key, Manifest]) -> bool:
    """Whether the tenant's credentials must be renewed (a transfer), or a ServiceAccount Berth recorded is gone."""
    if tenant.credential_epoch != tenant.applied_credential_epoch:
        return True
    for key in tenant.owned_uids or {}:
        kind, namespace, name = key.split("/", 2)
        if kind == "ServiceAccount" and (kind, namespace, name) not in live:
            return True
    return False


def _foreign(tenant: Tenant, desired: list[Manifest], live: dict[Key, Manifest]) -> set[Key]:
    """The tenant's top-level names that hold an object Berth did not create for it (never adopted)."""
    owned = tenant.owned_uids or {}
    found: set[Key] = set()
    for obj in desired:
        key = key_of(obj)
        there = live.get(key)
        if key[0] not in TOP_LEVEL_KINDS or there is None:
            continue
        recorded = owned.get(ownership.TopLevel(key[0], key[2], key[1] or None).key)
        if recorded:
            mine = recorded == there["metadata"].get("uid")
        else:  # made for this tenant by an attempt that stopped before recording it
            mine = _tenant_id(there) == str(tenant.pk)
        if not mine:
            found.add(key)
    return found


def prunable_by_tenant(live: dict[Key, Manifest]) -> dict[str, list[Manifest]]:
    """The live objects of the kinds a tier change can drop, by the tenant id they carry (indexed once a pass)."""
    found: dict[str, list[Manifest]] = defaultdict(list)
    for (kind, _, _), obj in live.items():
        if kind in PRUNED_KINDS:
            found[_tenant_id(obj)].append(obj)
    return found


def _unwanted(tenant: Tenant, desired: list[Manifest], candidates: list[Manifest]) -> list[Manifest]:
    """This tenant's objects its tier no longer wants (e.g. an ingress policy, a FlowSchema); ``candidates``
    are the live objects of the pruned kinds that carry the tenant's id."""
    wanted = {key_of(obj) for obj in desired}
    owned = tenant.owned_uids or {}
    unwanted = []
    for obj in candidates:
        key = key_of(obj)
        kind, namespace, name = key
        if key in wanted:
            continue
        if kind == "FlowSchema":
            # Top-level: only the very object Berth recorded for the tenant.
            if owned.get(ownership.TopLevel(kind, name).key) != obj["metadata"].get("uid"):
                continue
        elif namespace != tenant.namespace:
            continue
        unwanted.append(obj)
    return unwanted


def _repair(
    tenant: Tenant,
    k: Kube,
    home: Manifest,
    desired: list[Manifest],
    stale: list[Manifest],
    extra: list[Manifest],
    live: dict[Key, Manifest],
) -> list[str]:
    """Apply what is missing or differs (the Namespace first), delete what is unwanted; what was repaired.
    ``home`` is the tenant's Namespace as rendered; ``desired`` what was compared (all of the tenant's
    objects, or those a repair job was given)."""
    repaired: list[str] = []
    grants = manifests.namespace_grants(tenant, tenant.tier, ns_backend.namespace_grants())
    compared = {key_of(obj) for obj in desired}
    missing_grants = [g for g in grants if key_of(g) in compared and key_of(g) not in live]
    created = []
    if missing_grants:
        # Berth's own rights inside the namespace: created (POST) before anything is applied there.
        created = ns_backend.grant_berth_access(k, home, missing_grants)
        repaired += created
        stale = [obj for obj in stale if key_of(obj) not in {key_of(g) for g in missing_grants}]
    with ns_backend.while_granting(created, tenant.namespace):
        repaired += _apply_stale(k, stale, live)
    for obj in extra:
        kind, namespace, name = key_of(obj)
        k.delete(kind, name, namespace=namespace or None, uid=str(obj["metadata"].get("uid", "")))
        repaired.append(f"{kind}/{name} was no longer wanted")
    return repaired


def _apply_stale(k: Kube, stale: list[Manifest], live: dict[Key, Manifest]) -> list[str]:
    repaired = []
    for obj in stale:
        kind, namespace, name = key_of(obj)
        there = live.get((kind, namespace, name))
        if there is None:
            # Missing from the list: read again (under the tenant's lock, like the watcher's repair job), for that
            # job may have made it since; then it is applied over that version, or not at all if it is right.
            there = k.get(kind, name, namespace=namespace or None, fresh=True)
            if there is not None and not ns_backend.differs(obj, there):
                continue
        version = ((there or {}).get("metadata") or {}).get("resourceVersion")
        try:
            # Over the version listed: one changed since (a watcher's repair, another edit) is refused, not
            # repaired and audited a second time; the change that moved it is the next repair's to see.
            k.apply([{**obj, "metadata": {**obj["metadata"], "resourceVersion": version}} if version else obj])
        except KubePermanentError as exc:
            if exc.status != 409:
                raise
            continue
        repaired.append(ns_backend.drift(obj, there))
    return repaired


def _note_readiness(tenant: Tenant, live: dict[Key, Manifest], result: PassResult) -> None:
    """An in-sync tenant whose namespace is going away or whose quota is not enforced gets a visible note; the
    quota usage of the others is collected, to be recorded in one go."""
    namespace = live.get(("Namespace", "", tenant.namespace)) or {}
    quota = live.get(("ResourceQuota", tenant.namespace, "berth-quota")) or {}
    usage = quota.get("status") or {}
    if (namespace.get("status") or {}).get("phase", "Active") != "Active" or not usage.get("hard"):
        services.tenant_note_progress(tenant=tenant, note="In sync; the cluster does not report it ready.")
        return
    if _watcher_reads(tenant):
        return  # the watcher records its readings (worker.watcher)
    reading = {"hard": usage.get("hard", {}), "used": usage.get("used", {})}
    result.readings[str(tenant.pk)] = reading
    result.namespaces[str(tenant.pk)] = tenant.namespace
    if reading != tenant.quota_usage:
        result.usage[str(tenant.pk)] = reading
        if tenant.quota_usage:  # a first reading is no activity; a change in what it uses is (services.sleep)
            result.previous_used[str(tenant.pk)] = tenant.quota_usage.get("used")


def _watcher_reads(tenant: Tenant) -> bool:
    """Whether the watcher records this tenant's quota readings: it is deployed and read it lately."""
    if not settings.BERTH_WATCHER or tenant.usage_sampled_at is None:
        return False
    return (timezone.now() - tenant.usage_sampled_at).total_seconds() < float(settings.BERTH_USAGE_MAX_GAP_SECONDS)
