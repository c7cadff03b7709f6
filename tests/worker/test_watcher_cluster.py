"""The watcher against the dev control plane, with the run's real Celery worker doing the repairs.

Hand edits of every managed kind are repaired within seconds, without a reconcile pass; someone else's objects
are never touched. Then a stream of hand edits runs through an API server restart, an etcd compaction that expires
the watches (410 Gone), and a SIGKILL of the leading watcher with a second replica taking over: every edit is
repaired, none twice (one ``tenant.drift_repaired`` audit entry per edit), nothing foreign touched.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from django.conf import settings
from kubernetes import client

from devcluster import process
from tenants import services
from tenants.models import AuditEvent, Tenant, TenantRequest, TenantUsageDay
from tests.plugins.kube import wait_for
from tests.plugins.worker import OUTPUT, ROOT, django_process_env, free_port, wait_status
from worker import reconcile

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]

QUOTA, DENY, BINDING = "ResourceQuota/berth-quota", "NetworkPolicy/berth-default-deny", "RoleBinding/berth-tenant"
NAMESPACE = "Namespace"


class Watcher:
    """One watcher replica (``manage.py berth_watch``) as a process, with its log and metrics."""

    def __init__(self, cluster: str, name: str, extra: dict[str, str] | None = None) -> None:
        self.log = OUTPUT / f"watcher-{name}.log"
        self.port = free_port()
        env = {
            **django_process_env(),
            "BERTH_WATCHER_METRICS_PORT": str(self.port),
            "BERTH_WATCHER_METRICS_ADDRESS": "127.0.0.1",
            "BERTH_WATCH_LEADER_POLL_SECONDS": "0.5",
            "BERTH_WATCH_COALESCE_SECONDS": "0.5",
            # The server ends each watch after 5 s: the streams resume from their resourceVersion all along.
            "BERTH_WATCH_TIMEOUT_SECONDS": "5",
            **(extra or {}),
        }
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        self.process = process.berth_watcher(self.log, cwd=ROOT, env=env, clusters=[cluster], name=f"watcher {name}")

    def start(self) -> Watcher:
        OUTPUT.mkdir(exist_ok=True)
        self.process.start()
        return self

    def watching(self) -> bool:
        return self.log.exists() and "; watching" in self.log.read_text(errors="replace")

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


@pytest.fixture
def start_watcher(live_cluster) -> Iterator[Callable[..., Watcher]]:
    started: list[Watcher] = []

    def start(name: str, **extra: str) -> Watcher:
        watcher = Watcher(live_cluster.name, name, extra).start()
        started.append(watcher)
        return watcher

    yield start
    for watcher in started:
        watcher.process.stop(grace_seconds=5)


def _ready_tenants(alice, carol, team_a, tier, cluster, count: int) -> list[Tenant]:
    team_a.budget_cpu_millis, team_a.budget_memory_mib = 1_000_000, 2_000_000
    team_a.save()
    tenants = []
    for i in range(count):
        req = services.request_submit(
            actor=alice, action=TenantRequest.Action.CREATE, team=team_a, tier=tier, cluster=cluster, name=f"w{i}"
        )
        if req.tenant.status == "requested":
            services.request_approve(tenant_request=req, actor=carol, comment="ok")
        tenants.append(req.tenant)
    # Provisioned by the real worker, which the approval enqueued to.
    return [wait_status(tenant, "ready", timeout=120) for tenant in tenants]


class Editor:
    """Hand edits as an admin would make them with kubectl, and what each must come back as."""

    def __init__(self, kube_admin) -> None:
        self.core = client.CoreV1Api(kube_admin)
        self.net = client.NetworkingV1Api(kube_admin)
        self.rbac = client.RbacAuthorizationV1Api(kube_admin)
        self.made: dict[tuple[str, str], int] = {}  # (tenant id, object) → edits made

    def edit(self, tenant: Tenant, what: str) -> None:
        ns = tenant.namespace
        if what == QUOTA:
            self.core.patch_namespaced_resource_quota(
                "berth-quota", ns, {"spec": {"hard": {"pods": str(1000 + secrets.randbelow(9000))}}}
            )
        elif what == DENY:
            self.net.delete_namespaced_network_policy("berth-default-deny", ns)
        elif what == BINDING:
            intruder = {
                "kind": "User",
                "apiGroup": "rbac.authorization.k8s.io",
                "name": f"mallory-{secrets.token_hex(2)}",
            }
            self.rbac.patch_namespaced_role_binding(
                "berth-tenant", ns, [{"op": "add", "path": "/subjects/-", "value": intruder}]
            )
        elif what == NAMESPACE:
            self.core.patch_namespace(ns, {"metadata": {"labels": {"berth.dev/tier": "hand-edited"}}})
        else:
            raise AssertionError(what)
        key = (str(tenant.pk), what)
        self.made[key] = self.made.get(key, 0) + 1


def _repairs(tenant: Tenant, what: str) -> int:
    """The audit entries that say ``what`` of ``tenant`` was repaired."""
    entries = AuditEvent.objects.filter(action="tenant.drift_repaired", object_id=str(tenant.pk))
    return sum(1 for event in entries for line in event.after.get("repaired", []) if line.startswith(what))


def _all_repaired(editor: Editor, tenants: dict[str, Tenant], timeout: float = 60.0) -> float:
    """Wait until every edit made has its repair audited; the seconds that took."""
    started = time.monotonic()
    wait_for(
        lambda: all(_repairs(tenants[tid], what) >= n for (tid, what), n in editor.made.items()),
        timeout=timeout,
        what="every hand edit to be repaired: "
        + ", ".join(
            f"{tenants[tid].name} {what} {_repairs(tenants[tid], what)}/{n}" for (tid, what), n in editor.made.items()
        ),
    )
    return time.monotonic() - started


def _foreign_objects(kube_admin, tenant: Tenant) -> Callable[[], dict[str, str]]:
    """Someone else's NetworkPolicies in a tenant's namespace: no Berth labels, and Berth's labels with a forged
    tenant id; what reads their resourceVersions (unchanged = untouched)."""
    net = client.NetworkingV1Api(kube_admin)
    labels = {
        "teams-own": {"team": "theirs"},
        "looks-like-berth": {"app.kubernetes.io/managed-by": "berth", "berth.dev/tenant-id": "not-a-tenant"},
    }
    for name, labelled in labels.items():
        net.create_namespaced_network_policy(
            tenant.namespace,
            client.V1NetworkPolicy(
                metadata=client.V1ObjectMeta(name=name, labels=labelled),
                spec=client.V1NetworkPolicySpec(pod_selector=client.V1LabelSelector(), policy_types=["Ingress"]),
            ),
        )

    def versions() -> dict[str, str]:
        return {
            name: str(net.read_namespaced_network_policy(name, tenant.namespace).metadata.resource_version)
            for name in labels
        }

    return versions


def _settle(editor: Editor, tenants: dict[str, Tenant], seconds: float = 3.0) -> None:
    """After the last repair: a while for any second, unwanted repair to show up."""
    time.sleep(seconds)
    for (tid, what), n in editor.made.items():
        assert _repairs(tenants[tid], what) == n, (
            f"{tenants[tid].name} {what}: {_repairs(tenants[tid], what)} repairs, {n} edits"
        )


def test_hand_edits_of_every_kind_are_repaired_by_the_watcher_without_a_pass(
    live_cluster, kube_admin, alice, carol, team_a, medium, celery_worker, start_watcher
):
    tenants = _ready_tenants(alice, carol, team_a, medium, live_cluster, 2)
    by_id = {str(t.pk): t for t in tenants}
    foreign = _foreign_objects(kube_admin, tenants[0])
    before = foreign()
    watcher = start_watcher("a")
    wait_for(watcher.watching, timeout=60, what="the watcher to list and watch")
    assert AuditEvent.objects.filter(action="tenant.drift_repaired").count() == 0  # in sync: nothing enqueued
    assert watcher.metric("berth_watch_repairs_enqueued_total") == 0

    editor = Editor(kube_admin)
    started = time.monotonic()
    for tenant in tenants:
        for what in (QUOTA, DENY, BINDING, NAMESPACE):
            editor.edit(tenant, what)
    took = _all_repaired(editor, by_id, timeout=30)
    assert time.monotonic() - started < 30
    _settle(editor, by_id)
    # A burst of four edits on a tenant became one repair (coalesced), not four.
    for tenant in tenants:
        assert AuditEvent.objects.filter(action="tenant.drift_repaired", object_id=str(tenant.pk)).count() == 1
    assert foreign() == before
    # Every watch ended and resumed from its resourceVersion several times meanwhile, never needing a new list.
    wait_for(
        lambda: watcher.metric("berth_watch_resumes_total") >= 2 * len(reconcile.MANAGED_KINDS),
        timeout=30,
        what="every watch to end and resume twice",
    )
    assert watcher.metric("berth_watch_relists_total") == 0
    assert AuditEvent.objects.filter(action="tenant.drift_repaired").count() == len(tenants)  # nothing more
    print(f"8 hand edits on 2 tenants repaired in {took:.1f}s")


def test_every_edit_is_repaired_once_through_restart_compaction_and_a_killed_leader(
    live_cluster, control_plane, kube_admin, alice, carol, team_a, small, celery_worker, start_watcher
):
    tenants = _ready_tenants(alice, carol, team_a, small, live_cluster, 4)
    by_id = {str(t.pk): t for t in tenants}
    foreign = _foreign_objects(kube_admin, tenants[1])
    before = foreign()
    first = start_watcher("first")
    wait_for(first.watching, timeout=60, what="the first watcher to lead")
    second = start_watcher("second")  # a standby: the lock is taken
    editor = Editor(kube_admin)
    kinds = (QUOTA, DENY, BINDING, NAMESPACE)

    def burst(offset: int) -> None:
        for i, tenant in enumerate(tenants):
            editor.edit(tenant, kinds[(i + offset) % len(kinds)])

    # 1. The API server restarts in the middle of a stream of edits: the watches resume (or list again).
    burst(0)
    control_plane.restart_apiserver()
    burst(1)
    _all_repaired(editor, by_id)
    _settle(editor, by_id)

    # 2. etcd's history is compacted while the watches are down: they resume from a resourceVersion that is gone,
    # get 410 Gone and list again; what changed meanwhile is found by comparing the lists.
    relists = first.metric("berth_watch_relists_total")
    burst(2)
    control_plane.restart_apiserver(meanwhile=control_plane.compact_etcd)
    burst(3)
    _all_repaired(editor, by_id)
    _settle(editor, by_id)
    assert first.metric("berth_watch_relists_total") > relists

    # 3. The leader is killed (SIGKILL) in the middle of a stream of edits; the standby takes over, lists, and
    # repairs what was edited while nobody watched.
    assert not second.watching()
    burst(0)
    assert first.process.pid is not None
    os.kill(first.process.pid, signal.SIGKILL)
    burst(2)
    wait_for(second.watching, timeout=30, what="the standby to take over")
    burst(1)
    _all_repaired(editor, by_id)
    _settle(editor, by_id)
    assert foreign() == before


def test_the_leader_records_quota_usage_from_its_watch_without_a_pass(
    live_cluster, kube_admin, alice, carol, team_a, small, celery_worker, start_watcher
):
    (tenant,) = _ready_tenants(alice, carol, team_a, small, live_cluster, 1)
    watcher = start_watcher("usage", BERTH_USAGE_SECONDS="2")
    wait_for(watcher.watching, timeout=60, what="the watcher to list and watch")
    core = client.CoreV1Api(kube_admin)

    def counted() -> int:
        quota = core.read_namespaced_resource_quota("berth-quota", tenant.namespace)
        return int((quota.status.used or {}).get("configmaps", "0"))

    def recorded() -> tuple[int, float]:
        fresh = Tenant.objects.get(pk=tenant.pk)
        day = TenantUsageDay.objects.filter(tenant=tenant).order_by("-day").first()
        peak = float(((day.usage if day else {}).get("configmaps") or {}).get("max", 0))
        return int((fresh.quota_usage or {}).get("used", {}).get("configmaps", "0")), peak

    wait_for(lambda: recorded()[0] == counted(), timeout=20, what="the watcher's first reading")

    def samples() -> int:
        return sum(TenantUsageDay.objects.filter(tenant=tenant).values_list("samples", flat=True))

    first = samples()
    before = counted()
    started = time.monotonic()
    for i in range(2):
        core.create_namespaced_config_map(
            tenant.namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"counted-{i}"), data={"k": "v"})
        )
    wait_for(lambda: counted() == before + 2, timeout=30, what="the quota controller to count the ConfigMaps")
    # Within the interval (2 s) of the quota's status changing, a reading holds it: history and quota usage.
    wait_for(lambda: recorded() == (before + 2, float(before + 2)), timeout=15, what=f"a reading of {before + 2}")
    took = time.monotonic() - started
    assert samples() > first
    assert Tenant.objects.get(pk=tenant.pk).last_activity_at is not None
    assert watcher.metric("berth_watch_usage_readings_total") >= 2
    assert AuditEvent.objects.filter(action="tenant.drift_repaired").count() == 0  # status changes are not drift
    print(f"2 ConfigMaps counted by the quota and recorded from the watch {took:.1f}s after creating them")


def test_a_provisioning_tenant_is_made_ready_by_the_watchers_event_not_its_countdown(
    control_plane, live_cluster, alice, carol, team_a, small, celery_worker, start_watcher
):
    """The quota controller is held (SIGSTOP of kube-controller-manager) while a tenant is approved: its first step
    applies everything and finds the quota not counted, so its job comes back after a countdown that grows while it
    waits. Once the controller runs again and counts the quota, the watcher sees the quota's status filled and has
    the tenant's next step taken at once (``worker.tasks.look_again``): that look is what makes the tenant ready."""
    _ready_tenants(alice, carol, team_a, small, live_cluster, 1)  # this worker has seen the guards in force
    watcher = start_watcher("looks")
    wait_for(watcher.watching, timeout=60, what="the watcher to list and watch")
    log = OUTPUT / "celery-worker.log"
    looks_ready = re.compile(r"Task worker\.tasks\.look_again\[[^]]+\] succeeded in [\d.e-]+s: 'ready'")
    ready_looks_before = len(looks_ready.findall(log.read_text(errors="replace")))
    controller_manager = control_plane.pids()["kube-controller-manager"]
    os.kill(controller_manager, signal.SIGSTOP)
    try:
        req = services.request_submit(
            actor=alice, action=TenantRequest.Action.CREATE, team=team_a, tier=small, cluster=live_cluster, name="look"
        )
        if req.tenant.status == "requested":
            services.request_approve(tenant_request=req, actor=carol, comment="ok")
        tenant = req.tenant
        wait_for(
            lambda: "waiting for the cluster" in Tenant.objects.get(pk=tenant.pk).status_reason,
            timeout=60,
            what="the first step to apply and find the quota not counted",
        )
        # Long enough that the countdown's next look is seconds away (a quarter of the time waited).
        time.sleep(12)
        assert Tenant.objects.get(pk=tenant.pk).status == "provisioning"
    finally:
        os.kill(controller_manager, signal.SIGCONT)
    resumed = time.monotonic()
    wait_status(tenant, "ready", timeout=60)
    took = time.monotonic() - resumed
    assert watcher.metric("berth_watch_provisioning_looks_total") >= 1
    assert len(looks_ready.findall(log.read_text(errors="replace"))) == ready_looks_before + 1
    print(f"ready {took:.2f}s after the quota controller ran again")


def _connections(pid: int, port: int) -> list[tuple[str, str]]:
    """The (local, remote) addresses of process ``pid``'s established TCP connections to ``port`` on 127.0.0.1."""
    out = subprocess.run(
        ["ss", "-Htnp", "state", "established", f"( dport = :{port} )"], capture_output=True, text=True, check=True
    ).stdout
    return [(line.split()[2], line.split()[3]) for line in out.splitlines() if f"pid={pid}," in line]


@contextlib.contextmanager
def _cut(pairs: list[tuple[str, str]]) -> Iterator[None]:
    """Drop every packet of these connections, both ways, without a word to either end (no RST, no FIN): a network
    partition as the kernel sees it. iptables rules on the loopback interface, matching each port pair exactly."""
    rules = []
    for local, remote in pairs:
        lport, rport = local.rsplit(":", 1)[1], remote.rsplit(":", 1)[1]
        rules += [
            ["INPUT", "-i", "lo", "-p", "tcp", "--sport", lport, "--dport", rport, "-j", "DROP"],
            ["INPUT", "-i", "lo", "-p", "tcp", "--sport", rport, "--dport", lport, "-j", "DROP"],
        ]
    try:
        for rule in rules:
            subprocess.run(["iptables", "-I", *rule], check=True)
        yield
    finally:
        for rule in rules:
            subprocess.run(["iptables", "-D", *rule], check=False)


@pytest.mark.skipif(shutil.which("iptables") is None or os.geteuid() != 0, reason="needs iptables as root")
def test_a_leader_cut_off_from_the_database_is_replaced_and_no_edit_made_meanwhile_is_missed(
    live_cluster, kube_admin, alice, carol, team_a, small, celery_worker, start_watcher
):
    """Every database connection of the leading watcher goes silent (packets dropped, as in a partition). The lock
    is PostgreSQL's, so the server must notice: the leadership session's server-side keepalives end it, the lock is
    free, and the standby takes over within about 25 s, lists, and repairs what was edited while nobody watched."""
    tenants = _ready_tenants(alice, carol, team_a, small, live_cluster, 3)
    by_id = {str(t.pk): t for t in tenants}
    first = start_watcher("cut-first")
    wait_for(first.watching, timeout=60, what="the first watcher to lead")
    second = start_watcher("cut-second")
    time.sleep(2)
    assert not second.watching()
    assert first.process.pid is not None
    pairs = _connections(first.process.pid, int(settings.DATABASES["default"]["PORT"]))
    assert pairs, "the leader holds no database connection"
    editor = Editor(kube_admin)
    kinds = (QUOTA, DENY, BINDING)
    with _cut(pairs):
        cut_at = time.monotonic()
        for i, tenant in enumerate(tenants):
            editor.edit(tenant, kinds[i % len(kinds)])
        wait_for(second.watching, timeout=120, what="the standby to take over from the cut-off leader")
        replaced = time.monotonic() - cut_at
        for i, tenant in enumerate(tenants):
            editor.edit(tenant, kinds[(i + 1) % len(kinds)])
        _all_repaired(editor, by_id)
    _settle(editor, by_id)
    assert replaced < 60, f"the standby took over {replaced:.0f}s after the cut"
    print(f"cut-off leader replaced after {replaced:.1f}s")
