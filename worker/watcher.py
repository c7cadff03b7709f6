"""The watcher: notices drift on a cluster as it happens, instead of waiting for the next reconcile pass.

One watcher per cluster (``manage.py berth_watch``, a process of its own) lists each kind Berth manages once, with
Berth's label selector, then watches it from the list's resourceVersion with bookmarks. A dropped connection
resumes from the last resourceVersion seen (an event's or a bookmark's); ``410 Gone`` (the server's history no
longer reaches back that far, after an etcd compaction say) lists that kind again, and every tenant whose objects
changed meanwhile is checked whole. The same relist runs every ``BERTH_RECONCILE_SECONDS`` (the pass's interval: 6
hours with the watcher) as the safety net against an event never delivered; with it the watcher stands in for the
pass of a worker that may not list cluster-wide (worker.reconcile).

A provisioning tenant waits for the quota controller to count its quota (``status.hard``); when the watcher sees
that happen, and the tenant is still provisioning ``LOOK_DELAY_SECONDS`` later, it has the tenant's next step taken
then (``worker.tasks.look_again``), rather than at the end of the step's countdown.

An event's object is compared with what Berth renders for its tenant by the comparison the reconcile pass uses
(``worker.backends.namespace.differs``: only the fields, labels and annotations Berth renders). An object that
differs, or that was deleted (or lost Berth's label, which a label-selected watch reports as a deletion), marks
its tenant for repair; the marks of one tenant within ``BERTH_WATCH_COALESCE_SECONDS`` become one
``worker.tasks.repair_tenant`` job on the reconcile queue, naming the objects marked. The job reads those objects
(and the tenant's Namespace) afresh and applies only what differs, under the tenant's advisory lock, so a second
job finds nothing left and records nothing (``worker.reconcile.repair_drift``: three requests for one edit).
Objects without a live tenant's id, and tenants not ready or with a tier change in flight, are left alone: their
own jobs, and the periodic pass (now a slow safety net), see to them.

Every ``BERTH_WATCH_RESYNC_SECONDS`` the leader checks every ready tenant against its index again, in memory (no
request to the API server), as informers resync: a tier or a setting changed since renders differently without
any event on the cluster to say so. It then records the orphan namespaces in its index, as a list-based pass does.

Every ``BERTH_USAGE_SECONDS`` the leader also records a quota reading of every ready tenant from its index (the
ResourceQuota's ``status``, which the watch brings with every change of what the tenant uses; no request to the API
server) through ``tenants.services.tenants_record_usage``, as the pass did: the usage history (right-sizing,
showback), the tenant's quota usage, and its idle clock (``Tenant.last_activity_at``: restarted by a tenant whose
``used`` changed since the previous reading, or changed and changed back in between, which the stream shows and a
reading alone would miss). Each reading carries the measured part from the cluster's Prometheus
(worker.measured_usage: two queries for the whole cluster), asked in the background and waited for by the event
loop only until ``BERTH_MEASURED_USAGE_TIMEOUT`` (plus a little) has passed: a slow Prometheus leaves the measured
part out, never holds up the watch. With the watcher recording, the pass takes no readings of its own
(``worker.reconcile``).

Leadership: a PostgreSQL session-level advisory lock per cluster (docs/architecture.md says why not a Lease).
Whoever holds it watches; the others ask again every ``BERTH_WATCH_LEADER_POLL_SECONDS``. The lock goes with the
holder's database session, so a killed leader's lock is free as soon as PostgreSQL sees its connection close
(TCP keepalives bound a silent partition); the new leader lists everything and checks every ready tenant before
it watches, so drift made while nobody watched is found.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections
from prometheus_client import CollectorRegistry, Counter, Gauge

from tenants import dispatch, services
from tenants.models import Cluster, Tenant, TenantStatus
from worker import kube, manifests, measured_usage
from worker.backends import namespace as ns_backend
from worker.kube import Kube, KubeError, KubeGone, KubeTransientError, Manifest, WatchEvent
from worker.reconcile import MANAGED_KINDS, Key, key_of, record_orphans

logger = logging.getLogger(__name__)

USER_AGENT = "berth-watcher"
REGISTRY = CollectorRegistry(auto_describe=True)
EVENTS = Counter("berth_watch_events", "Watch events seen, by kind and type.", ["kind", "type"], registry=REGISTRY)
REPAIRS = Counter("berth_watch_repairs_enqueued", "Coalesced repair jobs sent.", registry=REGISTRY)
DRIFTS = Counter("berth_watch_drift", "Objects found drifted or deleted, by kind.", ["kind"], registry=REGISTRY)
RELISTS = Counter(
    "berth_watch_relists",
    "Lists of a kind again (after 410 Gone, or the periodic relist).",
    ["kind"],
    registry=REGISTRY,
)
RESUMES = Counter(
    "berth_watch_resumes",
    "Watches started again from their resourceVersion (ended or dropped).",
    ["kind"],
    registry=REGISTRY,
)
BOOKMARK_AGE = Gauge(
    "berth_watch_last_bookmark_age_seconds",
    "Seconds since a kind's stream last brought a bookmark.",
    ["kind"],
    registry=REGISTRY,
)
LEADER = Gauge("berth_watch_leader", "Clusters this process watches as leader.", registry=REGISTRY)
LOOKS = Counter(
    "berth_watch_provisioning_looks",
    "Provisioning tenants looked at again because their quota is enforced now.",
    registry=REGISTRY,
)
READINGS = Counter("berth_watch_usage_readings", "Tenant quota readings recorded from the index.", registry=REGISTRY)
QUOTA_NAME = "berth-quota"
LOOK_DELAY_SECONDS = 0.3  # from a provisioning tenant's quota counted to a look at it (ClusterWatcher.looks)
EVENT_BATCH = 500  # events taken from the queue at once, their tenants read in one query (ClusterWatcher.handle)


def _tenant_id(obj: Manifest) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(manifests.TENANT_ID_LABEL, ""))


def _slim(obj: Manifest) -> Manifest:
    """What the index keeps of an object: what the comparison reads (no managedFields, the bulk of an object)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def usage_readings(
    tenants: Iterable[tuple[str, str]], objects: Mapping[str, Mapping[Key, Manifest]]
) -> dict[str, dict[str, Any]]:
    """Each tenant's (id, namespace) quota reading from the index, as the pass takes it: the ResourceQuota's
    ``status.hard`` and ``status.used``, for a tenant whose Namespace is there and Active and whose quota is enforced
    (has a ``hard``); the others are left out (pure)."""
    found: dict[str, dict[str, Any]] = {}
    for tid, namespace in tenants:
        ns = objects.get("Namespace", {}).get(("Namespace", "", namespace))
        quota = objects.get("ResourceQuota", {}).get(("ResourceQuota", namespace, QUOTA_NAME)) or {}
        status = quota.get("status") or {}
        if ns is None or (ns.get("status") or {}).get("phase", "Active") != "Active" or not status.get("hard"):
            continue
        found[tid] = {"hard": dict(status.get("hard") or {}), "used": dict(status.get("used") or {})}
    return found


def usage_changes(
    readings: Mapping[str, Mapping[str, Any]], stored: Mapping[str, Any], moved: Iterable[str] = ()
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """What to store of ``readings`` against each tenant's ``stored`` quota usage: the readings that changed, and
    the tenants active since the previous reading (``used`` differs from a stored one, or ``moved``: the stream saw
    it change in between). A first reading is no activity (pure)."""
    changed = {tid: dict(r) for tid, r in readings.items() if r != stored.get(tid)}
    moved = set(moved)
    active = sorted(
        tid
        for tid, reading in readings.items()
        if stored.get(tid) and (tid in moved or reading.get("used") != (stored.get(tid) or {}).get("used"))
    )
    return changed, active


@dataclass
class PendingReadings:
    """Readings taken from the index, waiting (in the event loop, never blocking it) for their measured part."""

    readings: dict[str, dict[str, Any]]
    namespaces: dict[str, str]
    stored: dict[str, Any]
    measure: measured_usage.Pending
    deadline: float


@dataclass
class Coalescer:
    """Tenants marked (for repair, or to be looked at), each sent once ``window`` seconds after its first mark,
    with the keys of the objects its marks named (a repair reads and repairs those only), if any."""

    send: Callable[..., object]  # (tenant id) or, when its marks named objects, (tenant id, their keys)
    window: float
    due: dict[str, float] = field(default_factory=dict)
    keys: dict[str, set[Key]] = field(default_factory=dict)
    counted: bool = True  # each send counts as a repair enqueued (berth_watch_repairs_enqueued)

    def mark(self, tenant_id: str, now: float, key: Key | None = None) -> None:
        self.due.setdefault(tenant_id, now + self.window)
        if key is not None:
            self.keys.setdefault(tenant_id, set()).add(key)

    def next_due(self) -> float | None:
        return min(self.due.values(), default=None)

    def flush(self, now: float) -> list[str]:
        ready = [tid for tid, at in self.due.items() if at <= now]
        for tid in ready:
            del self.due[tid]
            keys = self.keys.pop(tid, None)
            if keys:
                self.send(tid, sorted(keys))
            else:
                self.send(tid)
            if self.counted:
                REPAIRS.inc()
        return ready


def send_repair(tenant_id: str, keys: list[Key] | None = None) -> bool:
    if keys is None:
        return dispatch.send(dispatch.REPAIR_TENANT, tenant_id)
    return dispatch.send(dispatch.REPAIR_TENANT, tenant_id, [list(key) for key in keys])


def send_look(tenant_id: str) -> bool:
    return dispatch.send(dispatch.LOOK_AGAIN, tenant_id)


class ClusterWatcher:
    """The index of one cluster's Berth-labelled objects, kept current by one stream per managed kind.

    The streams only read and hand their events over; one thread (``run``) owns the index, the database
    connection and the coalescer, so nothing is shared but the event queue.
    """

    def __init__(
        self,
        cluster: Cluster,
        k: Kube,
        *,
        send: Callable[..., object] = send_repair,
        send_look: Callable[[str], object] = send_look,
    ) -> None:
        self.cluster_pk, self.cluster_name = cluster.pk, cluster.name
        self.k = k
        self.send_look = send_look
        self.objects: dict[str, dict[Key, Manifest]] = {kind: {} for kind in MANAGED_KINDS}
        self.versions: dict[str, str] = {}
        self.listed_at: dict[str, float] = {}  # kind → when it was last listed whole
        self.bookmarks: dict[str, float] = {}
        self.events: queue.Queue[tuple[str, WatchEvent | None]] = queue.Queue()
        self.coalescer = Coalescer(send=send, window=settings.BERTH_WATCH_COALESCE_SECONDS)
        # A quota just counted, looked at a moment later: the step that applied it is usually still running then,
        # and finds it counted itself; only a tenant still provisioning after that gets a look.
        self.looks = Coalescer(send=self.look_again, window=LOOK_DELAY_SECONDS, counted=False)
        self.stop = threading.Event()  # the streams end: leadership ended
        self.pending: PendingReadings | None = None  # readings waiting for their measured part
        self.moved: set[str] = set()  # tenants whose quota ``used`` changed since the last reading
        self._relisted: dict[str, threading.Event] = {}  # kind → set once ``run`` has listed it again

    # --- listing and checking ------------------------------------------------------------
    def list_kind(self, kind: str) -> dict[Key, Manifest]:
        items, version = self.k.list_versioned(kind, label_selector=ns_backend.MANAGED_BY_SELECTOR)
        self.versions[kind] = version
        self.bookmarks[kind] = self.listed_at[kind] = time.monotonic()
        found = {key_of(obj): _slim(obj) for obj in items}
        self.objects[kind] = found
        return found

    def sync(self) -> int:
        """List every kind, then check every ready tenant whole (drift made while nobody watched is found); how
        many tenants were checked."""
        for kind in MANAGED_KINDS:
            self.list_kind(kind)
        ns_backend.cluster_facts(self.k, fresh=True)
        tenants = self._ready_tenants()
        for tenant in tenants:
            self.check_tenant(tenant)
        return len(tenants)

    def relist(self, kind: str) -> None:
        """After 410 Gone, or every ``BERTH_RECONCILE_SECONDS``: list ``kind`` again; each tenant with an object of
        it changed, gone or new is checked."""
        RELISTS.labels(kind=kind).inc()
        before = self.objects[kind]
        after = self.list_kind(kind)
        changed = {
            _tenant_id(obj)
            for key in before.keys() | after.keys()
            if _resource_version(before.get(key)) != _resource_version(after.get(key))
            for obj in (before.get(key), after.get(key))
            if obj is not None
        }
        tenants = {str(t.pk): t for t in self._ready_tenants([tid for tid in changed if _is_uuid(tid)])}
        for tenant in tenants.values():
            self.check_tenant(tenant)

    def _ready_tenants(self, ids: list[str] | None = None) -> list[Tenant]:
        """The cluster's ready namespace tenants with nothing of theirs in flight (a tier change is its own job's)."""
        found = Tenant.objects.select_related("tier", "cluster", "team").filter(
            cluster_id=self.cluster_pk, status=TenantStatus.READY, kind=ns_backend.NamespaceBackend.kind
        )
        if ids is not None:
            found = found.filter(pk__in=ids)
        return [t for t in found.order_by("pk") if t.applied_generation == t.generation]

    def resync(self) -> None:
        """Check every ready tenant against the index, and record the orphan namespaces it holds (Berth's labels, a
        tenant id no live tenant has), as the pass does from its lists: a worker that may not list cluster-wide (the
        chart's RBAC) finds none itself. In memory: no request to the API server."""
        for tenant in self._ready_tenants():
            self.check_tenant(tenant)
        record_orphans(Cluster.objects.get(pk=self.cluster_pk), self.objects["Namespace"])

    def desired(self, tenant: Tenant) -> dict[Key, Manifest]:
        return {key_of(obj): obj for obj in ns_backend.NamespaceBackend().render(tenant, self.k)}

    def check_tenant(self, tenant: Tenant) -> None:
        """Mark the tenant, with each object Berth renders for it that is missing from the index or differs."""
        for key, want in self.desired(tenant).items():
            if ns_backend.differs(want, self.objects[key[0]].get(key)):
                DRIFTS.labels(kind=key[0]).inc()
                self.coalescer.mark(str(tenant.pk), time.monotonic(), key)

    def on_event(self, kind: str, event: WatchEvent, *, ready: Mapping[str, Tenant] | None = None) -> None:
        """Index one event and mark what it shows (drift, a quota counted). ``ready``: the ready tenants of the batch
        the event came in, read in one query (``handle``); without it, the event's tenant is read."""
        EVENTS.labels(kind=kind, type=event.type).inc()  # (the stream keeps its resourceVersion: ``stream``)
        if event.type == "BOOKMARK":
            self.bookmarks[kind] = time.monotonic()
            return
        obj = _slim(event.object)
        key = key_of(obj)
        enforced = status_only = False
        if event.type == "DELETED":
            self.objects[kind].pop(key, None)
        else:
            before = self.objects[kind].get(key)
            self.objects[kind][key] = obj
            # A quota counting what the tenant uses, a namespace's phase: the commonest events by far, and never
            # drift (nothing Berth renders changed since the object was last seen, and checked or applied).
            status_only = before is not None and _rendered_part(before) == _rendered_part(obj)
            if kind == "ResourceQuota" and before is not None and _used(before) != _used(obj):
                self.moved.add(_tenant_id(obj))  # activity, even if it is back where it was at the next reading
            enforced = kind == "ResourceQuota" and key[2] == QUOTA_NAME and _hard(obj) and not _hard(before or {})
        tid = _tenant_id(obj)
        if not _is_uuid(tid):
            return  # not a tenant's (no id, or a forged one): never Berth's to touch
        if enforced:
            self.looks.mark(tid, time.monotonic())
        if status_only:
            return
        tenants = self._ready_tenants([tid]) if ready is None else [ready[tid]] if tid in ready else []
        if not tenants:
            return
        want = self.desired(tenants[0]).get(key)
        if want is None:
            return  # not something Berth renders for this tenant: the pass decides about leftovers
        if event.type == "DELETED" or ns_backend.differs(want, obj):
            DRIFTS.labels(kind=kind).inc()
            self.coalescer.mark(tid, time.monotonic(), key)

    def look_again(self, tenant_id: str) -> None:
        """The quota controller counted the tenant's quota ``LOOK_DELAY_SECONDS`` ago: what a provisioning tenant
        waits for before it is ready. If it is still provisioning, its next step is taken now
        (``worker.tasks.look_again``) rather than at its countdown."""
        if Tenant.objects.filter(pk=tenant_id, cluster_id=self.cluster_pk, status=TenantStatus.PROVISIONING).exists():
            LOOKS.inc()
            self.send_look(tenant_id)

    # --- quota readings ---------------------------------------------------------------------------
    def take_readings(self) -> int:
        """Take every ready tenant's quota reading from the index and start measuring the cluster; recorded by
        ``record_readings`` once measured (or the measurement is given up). How many readings were taken."""
        tenants = self._ready_tenants()
        readings = usage_readings([(str(t.pk), t.namespace) for t in tenants], self.objects)
        if not readings:
            return 0
        cluster = Cluster.objects.get(pk=self.cluster_pk)  # its Prometheus as configured now
        self.pending = PendingReadings(
            readings=readings,
            namespaces={str(t.pk): t.namespace for t in tenants},
            stored={str(t.pk): t.quota_usage for t in tenants},
            measure=measured_usage.start(cluster),
            deadline=time.monotonic() + float(settings.BERTH_MEASURED_USAGE_TIMEOUT) + 2.0,
        )
        return len(readings)

    def record_readings(self, now: float) -> bool:
        """Record the pending readings once their measurement is in or overdue (then without it); whether they
        were recorded. Never waits."""
        pending = self.pending
        if pending is None:
            return False
        ready = pending.measure.ready()
        if not ready and now < pending.deadline:
            return False
        measurement = pending.measure.result() if ready else None
        if not ready:
            logger.warning(
                "watcher of cluster %s: Prometheus did not answer in time; readings carry requests only",
                self.cluster_name,
            )
        moved, self.moved = self.moved, set()
        changed, active = usage_changes(pending.readings, pending.stored, moved)
        history = {}
        for tid, reading in pending.readings.items():
            # None: not measured (no answer, or no series of a namespace where something ran): requests only.
            part = None if measurement is None else measurement.of(pending.namespaces[tid], reading)
            history[tid] = reading if part is None else {**reading, "measured": part}
        services.tenants_record_usage(usages=changed, readings=history, active=active)
        READINGS.inc(len(history))
        self.pending = None
        return True

    # --- streams -------------------------------------------------------------------------------
    def stream(self, kind: str) -> None:
        """Watch ``kind`` from where the index is, handing events to ``run``; resume after a dropped connection,
        ask ``run`` to list again after 410 Gone (by a ``None`` event)."""
        failures = 0
        while not self.stop.is_set():
            version = self.versions.get(kind, "")
            try:
                for event in self.k.watch(
                    kind,
                    resource_version=version,
                    label_selector=ns_backend.MANAGED_BY_SELECTOR,
                    timeout_seconds=settings.BERTH_WATCH_TIMEOUT_SECONDS,
                ):
                    failures = 0
                    # The next watch resumes here; ``run`` applies the event to the index in order.
                    if event.resource_version:
                        self.versions[kind] = event.resource_version
                    self.events.put((kind, event))
                    if self.stop.is_set():
                        return
                RESUMES.labels(kind=kind).inc()  # the server ended the watch (timeoutSeconds): on from here
                if time.monotonic() - self.listed_at.get(kind, 0.0) >= settings.BERTH_RECONCILE_SECONDS:
                    # The safety net: an event this stream never delivered is found by listing again.
                    if not self._await_relist(kind):
                        return
            except KubeGone:
                logger.info("watch %s: resourceVersion %s expired; listing again", kind, version)
                if not self._await_relist(kind):
                    return
            except KubeError as exc:
                failures += 1
                delay = min(30.0, 0.5 * 2**failures)
                logger.warning("watch %s: %s; resuming from %s in %.1fs", kind, exc, self.versions.get(kind), delay)
                RESUMES.labels(kind=kind).inc()
                self.stop.wait(delay)

    def _await_relist(self, kind: str) -> bool:
        """Ask ``run`` to list ``kind`` again (after every event this stream handed over, so none is applied over
        the fresher list) and wait until it has; False when the watcher is stopping instead."""
        relisted = self._relisted[kind] = threading.Event()
        self.events.put((kind, None))
        while not relisted.wait(1.0):
            if self.stop.is_set():
                return False
        return True

    def run(self, still_leader: Callable[[], bool], outer: threading.Event) -> None:
        """List, check, then follow the streams until leadership is lost or ``outer`` (the process's stop) is set."""
        checked = self.sync()
        logger.info("watcher of cluster %s: %d tenants checked; watching", self.cluster_name, checked)
        threads = [
            threading.Thread(target=self.stream, args=(kind,), name=f"watch-{kind}", daemon=True)
            for kind in MANAGED_KINDS
        ]
        for thread in threads:
            thread.start()
        next_leader_check = time.monotonic() + settings.BERTH_WATCH_LEADER_POLL_SECONDS
        next_resync = time.monotonic() + settings.BERTH_WATCH_RESYNC_SECONDS
        next_reading = time.monotonic()  # at once: the first covers the time since the last leader's (or pass's)
        try:
            while not outer.is_set():
                now = time.monotonic()
                tick(self.cluster_name)
                if now >= next_reading and self.pending is None:
                    self.take_readings()
                    next_reading = now + settings.BERTH_USAGE_SECONDS
                self.record_readings(now)
                if now >= next_resync:
                    # In memory, as informers resync: a tier or setting changed since renders differently, with
                    # no event on the cluster to say so. No request to the API server.
                    self.resync()
                    next_resync = now + settings.BERTH_WATCH_RESYNC_SECONDS
                if now >= next_leader_check:
                    if not still_leader():
                        logger.warning("watcher of cluster %s: leadership lost", self.cluster_name)
                        return
                    next_leader_check = now + settings.BERTH_WATCH_LEADER_POLL_SECONDS
                due = min(
                    (at for at in (self.coalescer.next_due(), self.looks.next_due()) if at is not None),
                    default=next_leader_check,
                )
                wait = min(next_leader_check, due) - now
                try:
                    batch = [self.events.get(timeout=max(0.0, min(wait, 1.0)))]
                except queue.Empty:
                    batch = []
                while batch and len(batch) < EVENT_BATCH:
                    try:
                        batch.append(self.events.get_nowait())
                    except queue.Empty:
                        break
                self.handle(batch)
                self.coalescer.flush(time.monotonic())
                self.looks.flush(time.monotonic())
                for kind in MANAGED_KINDS:
                    BOOKMARK_AGE.labels(kind=kind).set(time.monotonic() - self.bookmarks.get(kind, now))
        finally:
            self.stop.set()
            for gone in self._relisted.values():
                gone.set()

    def handle(self, batch: list[tuple[str, WatchEvent | None]]) -> None:
        """The events waiting, in the order they came (None: a kind to list again), with the ready tenants they
        name read in one query: a storm of edits costs a query a batch, not one an event (the query is most of an
        event's cost), so a provisioning tenant's quota event behind it is seen, and its look sent, sooner."""
        named = {
            tid
            for _, event in batch
            if event is not None and event.type != "BOOKMARK" and _is_uuid(tid := _tenant_id(event.object))
        }
        ready = {str(t.pk): t for t in self._ready_tenants(sorted(named))} if named else {}
        for kind, event in batch:
            if event is None:
                try:
                    self.relist(kind)
                finally:
                    self._relisted.pop(kind).set()
            else:
                self.on_event(kind, event, ready=ready)


def _rendered_part(obj: Manifest) -> Manifest:
    """The object without what the server alone writes (its status, its resourceVersion)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


def _hard(obj: Manifest) -> bool:
    return bool((obj.get("status") or {}).get("hard"))


def _used(obj: Manifest) -> object:
    return (obj.get("status") or {}).get("used")


def _resource_version(obj: Manifest | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")


class Leadership:
    """A PostgreSQL session-level advisory lock per cluster, on a connection of its own (not Django's
    per-thread one, which a request cycle may close): held while the session lives."""

    def __init__(self, cluster: Cluster) -> None:
        self.key = zlib.crc32(f"berth-watch:{cluster.pk}".encode()) - 2**31
        self.wrapper: Any = None

    def _connect(self) -> Any:
        wrapper = connections.create_connection("default")
        options = dict(wrapper.settings_dict.get("OPTIONS") or {})
        # A leader cut off without a word (a partition): the lock is the server's, so it is the server that must
        # notice the silence and end the session, freeing the lock for a standby. Its keepalives for this session
        # (the server's defaults are the OS's, hours) declare the client dead after 10 + 3 x 5 s of silence, and
        # data it sends unacknowledged for 25 s ends the session too; the client's own settings mirror them, so
        # the cut-off leader's next check fails as well and it stops.
        server = "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3"
        options["options"] = f"{options.get('options', '')} {server} -c tcp_user_timeout=25000".strip()
        options.update(
            {
                "keepalives": 1,
                "keepalives_idle": 10,
                "keepalives_interval": 5,
                "keepalives_count": 3,
                "tcp_user_timeout": 25000,
            }
        )
        wrapper.settings_dict = {**wrapper.settings_dict, "OPTIONS": options}
        wrapper.ensure_connection()
        return wrapper

    def try_acquire(self) -> bool:
        try:
            if self.wrapper is None:
                self.wrapper = self._connect()
            with self.wrapper.cursor() as cur:
                cur.execute("SELECT pg_try_advisory_lock(%s)", [self.key])
                row = cur.fetchone()
        except Exception as exc:  # the database is away: not the leader, ask again later
            logger.warning("leader election: %s", type(exc).__name__)
            self.release()
            return False
        return bool(row and row[0])

    def held(self) -> bool:
        """Whether the session, and with it the lock, is still there."""
        try:
            with self.wrapper.cursor() as cur:
                cur.execute("SELECT 1")
        except Exception:
            self.release()
            return False
        return True

    def release(self) -> None:
        if self.wrapper is not None:
            try:
                self.wrapper.close()
            except Exception:  # already gone; so is the lock
                logger.debug("closing the leader election connection failed", exc_info=True)
            self.wrapper = None


def client_for(cluster: Cluster) -> Kube:
    """The cluster's client, as this process's credential resolves it, naming itself the watcher."""
    return kube.for_cluster(cluster).with_user_agent(USER_AGENT)


# Liveness. The leader's lock is its database session's, so a leader that is alive but hung (deadlocked, its loop
# stuck) would keep it for ever, where a Lease holder would stop renewing. Each cluster's thread notes when it last
# went round its loop; the process touches BERTH_WATCHER_HEARTBEAT_FILE only while every one did so lately, and the
# chart's liveness probe restarts a container whose file has gone stale: the session, and the lock, go with it.
TICKS: dict[str, float] = {}  # cluster name → when its thread last went round its loop (time.monotonic)
STALL_SECONDS = 600.0  # longer than a first list and check of 10,000 tenants, which runs between two rounds
HEARTBEAT_EVERY_SECONDS = 10.0


def tick(cluster_name: str) -> None:
    TICKS[cluster_name] = time.monotonic()


def alive(now: float) -> bool:
    """Whether every cluster's thread went round its loop within STALL_SECONDS."""
    return all(now - at < STALL_SECONDS for at in TICKS.values())


def keep_heartbeat(path: str, stop: threading.Event) -> None:
    """Touch ``path`` every HEARTBEAT_EVERY_SECONDS while ``alive``; until ``stop``."""
    while not stop.is_set():
        if alive(time.monotonic()):
            try:
                with open(path, "a"):
                    os.utime(path)
            except OSError as exc:
                logger.warning("heartbeat file %s: %s", path, exc)
        else:
            logger.error("watcher: a cluster's loop has not gone round for %.0f s; heartbeat stopped", STALL_SECONDS)
        stop.wait(HEARTBEAT_EVERY_SECONDS)


def watch_cluster(cluster: Cluster, stop: threading.Event) -> None:
    """Be (or wait to become) the leader for ``cluster``, and watch it while leader; until ``stop``."""
    leadership = Leadership(cluster)
    while not stop.is_set():
        tick(cluster.name)
        if not leadership.try_acquire():
            stop.wait(settings.BERTH_WATCH_LEADER_POLL_SECONDS)
            continue
        logger.info("watcher of cluster %s: leader; listing", cluster.name)
        LEADER.inc()
        try:
            ClusterWatcher(cluster, client_for(cluster)).run(leadership.held, stop)
        except KubeError as exc:
            # Cluster trouble (or a permanent refusal, which an admin must fix): start over, listing again.
            logger.warning("watcher of cluster %s: %s; starting over shortly", cluster.name, exc)
            stop.wait(5.0 if isinstance(exc, KubeTransientError) else 60.0)
        except DatabaseError as exc:
            logger.warning("watcher of cluster %s: database: %s; starting over shortly", cluster.name, exc)
            stop.wait(5.0)
        finally:
            LEADER.dec()
            connections.close_all()  # this thread's connection; a fresh one next time
    leadership.release()
