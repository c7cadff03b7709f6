"""The reconcile pass (worker.reconcile) against an in-memory API server: what it costs and what it touches.

An in-sync pass costs requests per managed kind, whatever the number of tenants; each repair one more; objects
Berth did not create are never changed. The same against the dev control plane: test_reconcile_cluster.py.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from tenants import dispatch, services
from tenants.models import AuditEvent, Cluster, OrphanNamespace, Tenant, TenantUsageDay, Tier
from tests.worker.conftest import MakeTenant, provisioned_ready
from tests.worker.fake_kube import FakeKube
from worker import manifests, provisioning, reconcile, tasks
from worker.backends import backend_for
from worker.backends.namespace import NamespaceBackend
from worker.kube import KubeForbidden, KubePermanentError
from worker.provisioning import Outcome

# Each managed kind and the two guard kinds are listed once; the cluster facts are two lists more.
KINDS = len(reconcile.MANAGED_KINDS) + 2


def _ready_tenants(make_tenant: MakeTenant, host: FakeKube, n: int, *, start: int = 0) -> list[Tenant]:
    return [provisioned_ready(make_tenant(name=f"t{i}"), host) for i in range(start, start + n)]


def _pass(cluster: Cluster, host: FakeKube) -> tuple[reconcile.PassResult, list[str]]:
    """One pass, and the writes it made."""
    before = len(host.writes)
    result = reconcile.reconcile_cluster(cluster)
    return result, host.writes[before:]


def test_an_in_sync_pass_costs_the_same_requests_for_2_or_12_tenants(make_tenant, host, cluster):
    _ready_tenants(make_tenant, host, 2)
    small, _ = _pass(cluster, host)
    _ready_tenants(make_tenant, host, 10, start=2)
    large, writes = _pass(cluster, host)
    assert (small.tenants, small.in_sync, large.tenants, large.in_sync) == (2, 2, 12, 12)
    assert small.requests == large.requests <= 3 * KINDS
    assert large.repaired == {} and writes == []


def test_k_hand_edits_are_found_and_repaired_in_one_pass_for_one_request_each(make_tenant, host, cluster):
    tenants = _ready_tenants(make_tenant, host, 4)
    in_sync = _pass(cluster, host)[0].requests
    a, b, c = (t.namespace for t in tenants[:3])
    host.objects[("ResourceQuota", a, "berth-quota")]["spec"]["hard"]["pods"] = "1000"
    del host.objects[("NetworkPolicy", b, "berth-default-deny")]
    host.objects[("Namespace", "", c)]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "privileged"
    result, writes = _pass(cluster, host)
    # One apply per edit, and one read of the deleted object, missing from the list, under the tenant's lock (a
    # watcher's repair may have made it since).
    assert result.requests == in_sync + 3 + 1
    assert sorted(writes) == sorted(
        ["apply ResourceQuota/berth-quota", "apply NetworkPolicy/berth-default-deny", f"apply Namespace/{c}"]
    )
    assert result.repaired == {
        str(tenants[0].pk): ["ResourceQuota/berth-quota was changed"],
        str(tenants[1].pk): ["NetworkPolicy/berth-default-deny was missing"],
        str(tenants[2].pk): [f"Namespace/{c} was changed"],
    }
    assert host.objects[("ResourceQuota", a, "berth-quota")]["spec"]["hard"]["pods"] == "100"
    assert ("NetworkPolicy", b, "berth-default-deny") in host.objects
    assert host.objects[("Namespace", "", c)]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] != (
        "privileged"
    )
    events = AuditEvent.objects.filter(action="tenant.drift_repaired")
    assert {e.object_id: e.after["repaired"] for e in events} == result.repaired
    assert _pass(cluster, host)[0].repaired == {}


def test_server_defaults_are_not_drift(make_tenant, host, cluster):
    (tenant,) = _ready_tenants(make_tenant, host, 1)
    policy = host.objects[("NetworkPolicy", tenant.namespace, "berth-default-deny")]
    policy["spec"]["somethingTheServerAdds"] = {"default": True}
    policy["metadata"]["labels"]["added-by-someone"] = "x"
    host.objects[("Namespace", "", tenant.namespace)]["metadata"]["labels"]["kubernetes.io/metadata.name"] = "t0"
    assert _pass(cluster, host)[0].repaired == {}


def test_someone_elses_namespace_under_a_tenants_name_is_left_alone_and_the_tenant_diverges(make_tenant, host, cluster):
    mine, replaced = _ready_tenants(make_tenant, host, 2)
    recorded = host.objects[("Namespace", "", replaced.namespace)]["metadata"]["uid"]
    # Deleted and re-created by someone else, Berth's labels copied: another UID than the one Berth recorded.
    theirs = host.objects.pop(("Namespace", "", replaced.namespace))
    theirs["metadata"]["uid"] = "someone-elses"
    theirs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "privileged"
    host.put(theirs)
    result, writes = _pass(cluster, host)
    assert list(result.diverged) == [str(replaced.pk)]
    assert writes == []
    assert host.objects[("Namespace", "", replaced.namespace)]["metadata"]["labels"][
        "pod-security.kubernetes.io/enforce"
    ] == ("privileged")
    replaced.refresh_from_db()
    assert replaced.status == "diverged"
    assert "another object (UID someone-elses; Berth recorded " + recorded in replaced.status_reason
    assert AuditEvent.objects.filter(action="tenant.diverged", object_id=str(replaced.pk)).count() == 1
    assert str(mine.pk) not in result.diverged and result.in_sync == 1
    # Diverged, it is no longer the pass's to reconcile: the next pass writes nothing either.
    again, writes = _pass(cluster, host)
    assert (again.tenants, again.diverged, writes) == (1, {}, [])


def test_a_ready_tenants_missing_namespace_is_not_recreated_and_the_tenant_diverges(make_tenant, host, cluster):
    (tenant,) = _ready_tenants(make_tenant, host, 1)
    uid = host.objects.pop(("Namespace", "", tenant.namespace))["metadata"]["uid"]
    result, writes = _pass(cluster, host)
    assert writes == []
    assert ("Namespace", "", tenant.namespace) not in host.objects
    tenant.refresh_from_db()
    assert tenant.status == "diverged" and f"(UID {uid}) is missing" in tenant.status_reason
    assert result.diverged == {str(tenant.pk): tenant.status_reason}


def test_the_tenants_own_job_does_not_recreate_a_missing_namespace_either(make_tenant, host, cluster):
    (tenant,) = _ready_tenants(make_tenant, host, 1)
    host.objects.pop(("Namespace", "", tenant.namespace))
    before = len(host.writes)
    assert provisioning.provision(str(tenant.pk)).outcome == Outcome.DIVERGED
    assert host.writes[before:] == [] and ("Namespace", "", tenant.namespace) not in host.objects


def test_berths_namespaces_no_live_tenant_has_are_listed_as_orphans_and_never_touched(make_tenant, host, cluster):
    (tenant,) = _ready_tenants(make_tenant, host, 1)
    labels = {**manifests.MANAGED_BY, manifests.TENANT_ID_LABEL: "0b1c2d3e-0000-4000-8000-000000000001"}
    meta = {"name": "dev-newer", "uid": "u-newer", "labels": labels, "creationTimestamp": "2026-11-01T10:00:00Z"}
    host.put({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    garbage = {**manifests.MANAGED_BY, manifests.TENANT_ID_LABEL: "not-a-uuid"}
    host.put(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dev-odd", "uid": "u-odd", "labels": garbage}}
    )
    result, writes = _pass(cluster, host)
    assert result.orphans == ["dev-newer", "dev-odd"] and writes == []
    newer = OrphanNamespace.objects.get(cluster=cluster, name="dev-newer")
    assert (newer.uid, newer.tenant_id, newer.labels) == ("u-newer", labels[manifests.TENANT_ID_LABEL], labels)
    assert newer.created_at is not None and newer.created_at.isoformat() == "2026-11-01T10:00:00+00:00"
    # Gone from the cluster: gone from the list at the next pass.
    del host.objects[("Namespace", "", "dev-odd")]
    assert _pass(cluster, host)[0].orphans == ["dev-newer"]
    assert list(OrphanNamespace.objects.values_list("name", flat=True)) == ["dev-newer"]
    assert str(tenant.pk) not in result.orphans


def test_objects_of_other_tenants_and_foreign_objects_are_never_deleted(make_tenant, host, cluster):
    (tenant,) = _ready_tenants(make_tenant, host, 1)
    labels = {**manifests.MANAGED_BY, manifests.TENANT_ID_LABEL: "another-tenant"}
    other = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "spec": {}}
    host.put({**other, "metadata": {"name": "berth-extra", "namespace": tenant.namespace, "labels": labels}})
    host.put({**other, "metadata": {"name": "teams-own", "namespace": tenant.namespace}})
    host.put({**other, "metadata": {"name": "berth-extra", "namespace": "elsewhere", "labels": labels}})
    _, writes = _pass(cluster, host)
    assert writes == []
    assert host.named("NetworkPolicy").count("berth-extra") == 2 and "teams-own" in host.named("NetworkPolicy")


def test_what_the_tier_no_longer_wants_is_removed_in_the_pass(make_tenant, host, cluster):
    (tenant,) = _ready_tenants(make_tenant, host, 1)
    labels = {**manifests.MANAGED_BY, manifests.TENANT_ID_LABEL: str(tenant.pk)}
    meta = {"name": "berth-allow-ingress-controller", "namespace": tenant.namespace, "labels": labels}
    host.put({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta, "spec": {}})
    result, writes = _pass(cluster, host)
    assert result.repaired == {str(tenant.pk): ["NetworkPolicy/berth-allow-ingress-controller was no longer wanted"]}
    assert writes == ["delete NetworkPolicy/berth-allow-ingress-controller"]


def test_a_tier_that_lets_viewers_read_logs_changes_existing_viewer_roles_in_one_pass(make_tenant, host, cluster):
    tenants = _ready_tenants(make_tenant, host, 2)
    tier = tenants[0].tier
    for allowed in (True, False):
        Tier.objects.filter(pk=tier.pk).update(viewers_read_logs=allowed)
        result, writes = _pass(cluster, host)
        assert writes == ["apply Role/berth-viewer"] * 2
        assert result.repaired == {str(t.pk): ["Role/berth-viewer was changed"] for t in tenants}
        for tenant in tenants:
            rules = host.objects[("Role", tenant.namespace, "berth-viewer")]["rules"]
            assert any("pods/log" in rule["resources"] for rule in rules) is allowed
        assert _pass(cluster, host)[0].repaired == {}


def test_missing_guards_are_put_back_once_per_pass(make_tenant, host, cluster):
    _ready_tenants(make_tenant, host, 3)
    del host.objects[("ValidatingAdmissionPolicyBinding", "", "berth-no-external-ips")]
    assert _pass(cluster, host)[1] == ["apply ValidatingAdmissionPolicyBinding/berth-no-external-ips"]


def test_a_tenant_another_worker_holds_is_left_to_it(make_tenant, host, cluster, other_worker):
    (tenant,) = _ready_tenants(make_tenant, host, 1)
    del host.objects[("LimitRange", tenant.namespace, "berth-limits")]
    other_worker(str(tenant.pk))
    result, writes = _pass(cluster, host)
    assert result.busy == 1 and writes == []


@pytest.mark.parametrize(
    ("grants", "extra"),
    [
        # An admin credential: the Namespace's name looked up (never adopted), the quota read back, counted.
        ([], 2),
        # The chart's RBAC: also the bare Namespace and Berth's two grants created first, since the worker may write
        # in the namespace only through those. The Namespace found missing is not looked up again, nor are the
        # grants checked with a SelfSubjectAccessReview: the apply is (a 403 then is NotReadyYet).
        (["berth-worker=berth/berth-worker", "berth-reader=berth/berth-worker"], 5),
    ],
    ids=["admin", "chart-rbac"],
)
def test_a_first_provision_costs_its_objects_and_a_few_requests(make_tenant, host, settings, grants, extra):
    settings.BERTH_NAMESPACE_GRANTS = grants
    provisioned_ready(make_tenant(name="warm"), host)  # what a worker process reads once: guards, facts, identity
    tenant = make_tenant(name="web")
    objects = len(backend_for(tenant).render(tenant, host))
    before = host.requests
    host.observe_quotas_on_apply = True
    assert provisioning.provision(str(tenant.pk)).outcome == Outcome.READY
    assert host.requests - before == objects + extra


def test_beat_sends_one_pass_per_cluster_with_ready_tenants(make_tenant, host, cluster, sent):
    _ready_tenants(make_tenant, host, 3)
    sent.clear()
    assert tasks.reconcile() == 1
    assert sent == [(dispatch.RECONCILE_CLUSTER, (str(cluster.pk),), 0.0)]
    assert tasks.reconcile_cluster.apply(args=(str(cluster.pk),), throw=True).get()["in_sync"] == 3


def _lists_in_namespaces_only(host: FakeKube, monkeypatch) -> None:
    """The API server as a least-privilege worker (the chart's RBAC) sees it: no list across namespaces."""
    listed = host.list

    def list_in_namespaces_only(kind: str, *, namespace: str | None = None, **kw: Any) -> list[dict]:
        if namespace is None and kind in reconcile.MANAGED_KINDS:
            raise KubeForbidden(f"list {kind}: forbidden", status=403)
        return listed(kind, namespace=namespace, **kw)

    monkeypatch.setattr(host, "list", list_in_namespaces_only)


def test_a_credential_that_may_not_list_cluster_wide_reconciles_tenant_by_tenant(
    make_tenant, host, cluster, monkeypatch
):
    """A least-privilege worker (the chart's RBAC) holds rights inside Berth's namespaces only."""
    (tenant,) = _ready_tenants(make_tenant, host, 1)
    del host.objects[("LimitRange", tenant.namespace, "berth-limits")]
    _lists_in_namespaces_only(host, monkeypatch)
    result, writes = _pass(cluster, host)
    assert result.per_tenant and result.tenants == 1
    assert "apply LimitRange/berth-limits" in writes
    assert AuditEvent.objects.get(action="tenant.drift_repaired").after["repaired"] == [
        "LimitRange/berth-limits was missing"
    ]


def test_without_cluster_wide_lists_the_tenants_the_watcher_reads_are_left_to_it(
    make_tenant, host, cluster, monkeypatch, settings
):
    """With the chart's RBAC and the watcher running, the pass does not read tenant by tenant what the watcher
    holds in its index (its recent reading is the proof); a tenant it has not read lately is reconciled here."""
    settings.BERTH_WATCHER = True
    watched, unread = _ready_tenants(make_tenant, host, 2)
    Tenant.objects.filter(pk=watched.pk).update(usage_sampled_at=timezone.now())
    Tenant.objects.filter(pk=unread.pk).update(
        usage_sampled_at=timezone.now() - dt.timedelta(seconds=settings.BERTH_USAGE_MAX_GAP_SECONDS + 1)
    )
    for tenant in (watched, unread):
        del host.objects[("LimitRange", tenant.namespace, "berth-limits")]
    _lists_in_namespaces_only(host, monkeypatch)
    result, _ = _pass(cluster, host)
    assert result.per_tenant and result.tenants == 2 and result.watched == 1
    assert ("LimitRange", watched.namespace, "berth-limits") not in host.objects  # the watcher's to repair
    assert ("LimitRange", unread.namespace, "berth-limits") in host.objects
    repaired = AuditEvent.objects.get(action="tenant.drift_repaired")
    assert repaired.object_id == str(unread.pk)


def test_a_tenant_whose_tier_changed_since_the_pass_began_is_left_to_its_own_job(
    make_tenant, host, cluster, monkeypatch
):
    (tenant,) = _ready_tenants(make_tenant, host, 1)
    del host.objects[("LimitRange", tenant.namespace, "berth-limits")]
    render = NamespaceBackend.render

    def render_then_change_tier(self, t, k):  # the tier changes right after the pass rendered the tenant
        objs = render(self, t, k)
        Tenant.objects.filter(pk=t.pk).update(generation=t.generation + 1)
        return objs

    monkeypatch.setattr(NamespaceBackend, "render", render_then_change_tier)
    result, writes = _pass(cluster, host)
    assert result.busy == 1 and writes == []


def test_quota_usage_read_in_the_pass_is_recorded_in_one_go(make_tenant, host, cluster):
    a, b = _ready_tenants(make_tenant, host, 2)
    host.objects[("ResourceQuota", a.namespace, "berth-quota")]["status"]["used"] = {"pods": "3"}
    _pass(cluster, host)
    a.refresh_from_db()
    b.refresh_from_db()
    assert a.quota_usage["used"] == {"pods": "3"} and b.quota_usage["used"] == {}


def test_every_pass_adds_each_tenants_reading_to_its_usage_history_even_when_unchanged(make_tenant, host, cluster):
    a, b = _ready_tenants(make_tenant, host, 2)
    host.objects[("ResourceQuota", a.namespace, "berth-quota")]["status"]["used"] = {"pods": "3"}
    # Provisioning read each tenant's usage once already.
    before = dict(TenantUsageDay.objects.values_list("tenant_id", "samples"))
    _pass(cluster, host)
    _pass(cluster, host)  # nothing changed: the quota usage is not rewritten, but the history is sampled
    days = {row.tenant_id: row for row in TenantUsageDay.objects.all()}
    assert set(days) == {a.pk, b.pk}
    assert days[a.pk].samples - before.get(a.pk, 0) == days[b.pk].samples - before.get(b.pk, 0) == 2
    assert days[a.pk].usage["pods"]["max"] == 3.0 and days[b.pk].usage["pods"]["max"] == 0.0


def test_a_change_in_what_a_tenant_uses_restarts_its_idle_clock_but_a_first_reading_does_not(
    make_tenant, host, cluster
):
    a, b = _ready_tenants(make_tenant, host, 2)
    Tenant.objects.filter(pk__in=[a.pk, b.pk]).update(quota_usage={}, last_activity_at=None)
    _pass(cluster, host)  # the first reading of each: no activity
    assert list(Tenant.objects.filter(pk__in=[a.pk, b.pk]).values_list("last_activity_at", flat=True)) == [None, None]
    host.objects[("ResourceQuota", a.namespace, "berth-quota")]["status"]["used"] = {"pods": "3"}
    _pass(cluster, host)
    a.refresh_from_db()
    b.refresh_from_db()
    assert a.last_activity_at is not None and b.last_activity_at is None


def test_an_orphan_is_deleted_only_while_it_is_the_namespace_the_admin_saw(make_tenant, host, cluster, dave):
    labels = {**manifests.MANAGED_BY, manifests.TENANT_ID_LABEL: "0b1c2d3e-0000-4000-8000-000000000001"}
    host.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dev-x", "uid": "u-1", "labels": labels}})
    _pass(cluster, host)
    orphan = OrphanNamespace.objects.get(name="dev-x")
    services.orphan_decommission(orphan=orphan, actor=dave)
    # Deleted and made again under the same name by someone else, Berth's labels copied: another UID.
    host.objects[("Namespace", "", "dev-x")]["metadata"]["uid"] = "u-2"
    before = len(host.writes)
    assert provisioning.delete_orphan(orphan.pk) == "another namespace under that name now: left alone"
    assert host.writes[before:] == []
    host.objects[("Namespace", "", "dev-x")]["metadata"]["uid"] = "u-1"
    assert provisioning.delete_orphan(orphan.pk) == "deleting"
    assert host.writes[before:] == ["delete Namespace/dev-x"]


def test_a_tenant_that_became_ready_while_the_pass_listed_does_not_diverge(make_tenant, host, cluster, monkeypatch):
    (tenant,) = _ready_tenants(make_tenant, host, 1)
    listed = reconcile.live_objects(host)
    del listed[("Namespace", "", tenant.namespace)]  # listed just before its namespace was made
    monkeypatch.setattr(reconcile, "live_objects", lambda k: listed)
    result, _ = _pass(cluster, host)
    tenant.refresh_from_db()
    assert tenant.status == "ready" and result.diverged == {}


def test_an_edit_the_watchers_repair_fixed_while_the_pass_listed_is_repaired_and_audited_once(
    make_tenant, host, cluster, monkeypatch
):
    """The API server's resourceVersion check, as the fake plays it: the pass applies over the version it listed,
    and the watcher's repair job, done in between, moved it on."""
    (tenant,) = _ready_tenants(make_tenant, host, 1)
    key = ("ResourceQuota", tenant.namespace, "berth-quota")
    for obj in host.objects.values():
        obj["metadata"]["resourceVersion"] = "1"
    host.objects[key]["spec"]["hard"]["pods"] = "1000"  # the hand edit
    apply = host._apply

    def guarded(objs, *, dry_run=False):
        for obj in objs:
            version = obj["metadata"].get("resourceVersion")
            there = host.objects.get(reconcile.key_of(obj))
            if version and there is not None and there["metadata"].get("resourceVersion") != version:
                raise KubePermanentError(f"apply {obj['kind']}: the object has been modified", status=409)
        return apply(objs, dry_run=dry_run)

    monkeypatch.setattr(host, "_apply", guarded)
    listed = reconcile.live_objects

    def list_then_watcher_repairs(k):
        found = listed(k)
        reconcile.repair_drift(str(tenant.pk), [key])  # the watcher's repair job (tasks.repair_tenant), meanwhile
        host.objects[key]["metadata"]["resourceVersion"] = "2"  # the server moved it on with that write
        return found

    monkeypatch.setattr(reconcile, "live_objects", list_then_watcher_repairs)
    result, writes = _pass(cluster, host)
    assert host.objects[key]["spec"]["hard"]["pods"] == "100"
    assert result.repaired == {} and writes == ["apply ResourceQuota/berth-quota"]  # the job's; the pass's refused
    repairs = AuditEvent.objects.filter(action="tenant.drift_repaired", object_id=str(tenant.pk))
    assert [e.after["repaired"] for e in repairs] == [["ResourceQuota/berth-quota was changed"]]


def test_an_object_the_watchers_repair_made_again_while_the_pass_listed_is_audited_once(
    make_tenant, host, cluster, monkeypatch
):
    """Deleted by hand: missing from the pass's list. The watcher's repair job makes it again before the pass gets
    the tenant's lock; the pass reads it again under the lock and finds nothing left to repair."""
    (tenant,) = _ready_tenants(make_tenant, host, 1)
    key = ("NetworkPolicy", tenant.namespace, "berth-default-deny")
    del host.objects[key]  # the hand edit
    listed = reconcile.live_objects

    def list_then_watcher_repairs(k):
        found = listed(k)
        reconcile.repair_drift(str(tenant.pk), [key])  # the watcher's repair job (tasks.repair_tenant), meanwhile
        return found

    monkeypatch.setattr(reconcile, "live_objects", list_then_watcher_repairs)
    result, writes = _pass(cluster, host)
    assert key in host.objects
    assert result.repaired == {} and writes == ["apply NetworkPolicy/berth-default-deny"]  # the job's alone
    repairs = AuditEvent.objects.filter(action="tenant.drift_repaired", object_id=str(tenant.pk))
    assert [e.after["repaired"] for e in repairs] == [["NetworkPolicy/berth-default-deny was missing"]]


def _repairs(tenant: Tenant) -> list[list[str]]:
    events = AuditEvent.objects.filter(action="tenant.drift_repaired", object_id=str(tenant.pk)).order_by("at")
    return [e.after["repaired"] for e in events]


def test_the_watchers_repair_reads_and_repairs_only_the_objects_it_names(make_tenant, host, cluster):
    """Its Namespace and each object named are read; each that differs is applied: three requests for an edit, one
    more for an object deleted (read again under the tenant's lock). What it was not told of is not touched."""
    (tenant,) = _ready_tenants(make_tenant, host, 1)
    quota = ("ResourceQuota", tenant.namespace, "berth-quota")
    deny = ("NetworkPolicy", tenant.namespace, "berth-default-deny")
    limits = ("LimitRange", tenant.namespace, "berth-limits")
    host.objects[quota]["spec"]["hard"]["pods"] = "1000"
    del host.objects[deny]
    del host.objects[limits]  # an edit the watcher has not reported yet
    before, written = host.requests, len(host.writes)
    progress = reconcile.repair_drift(str(tenant.pk), [quota])
    assert (progress.outcome, host.requests - before) == (Outcome.REPAIRED, 3)
    before = host.requests
    assert reconcile.repair_drift(str(tenant.pk), [deny]).outcome == Outcome.REPAIRED
    assert host.requests - before == 4
    assert host.writes[written:] == ["apply ResourceQuota/berth-quota", "apply NetworkPolicy/berth-default-deny"]
    assert host.objects[quota]["spec"]["hard"]["pods"] == "100" and limits not in host.objects
    assert _repairs(tenant) == [
        ["ResourceQuota/berth-quota was changed"],
        ["NetworkPolicy/berth-default-deny was missing"],
    ]
    before = host.requests
    assert reconcile.repair_drift(str(tenant.pk), [quota, deny]).outcome == Outcome.IN_SYNC  # a second job: nothing
    assert host.requests - before == 3 and len(_repairs(tenant)) == 2


def test_the_watchers_repair_never_reads_or_touches_what_berth_does_not_render_for_the_tenant(
    make_tenant, host, cluster
):
    mine, other = _ready_tenants(make_tenant, host, 2)
    theirs = ("NetworkPolicy", other.namespace, "berth-default-deny")
    foreign = ("NetworkPolicy", mine.namespace, "allow-all")
    host.put(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "allow-all", "namespace": mine.namespace},
            "spec": {},
        }
    )
    host.objects[theirs]["spec"] = {}
    before, written = host.requests, len(host.writes)
    progress = reconcile.repair_drift(str(mine.pk), [theirs, foreign, ("Secret", mine.namespace, "x")])
    assert progress.outcome == Outcome.IN_SYNC
    assert host.requests - before == 1  # its Namespace, always read
    assert host.writes[written:] == [] and host.objects[theirs]["spec"] == {} and foreign in host.objects


def test_the_watchers_repair_of_a_replaced_namespace_marks_the_tenant_diverged_and_applies_nothing(
    make_tenant, host, cluster
):
    """Someone else's namespace under the tenant's name, with its labels copied: no drift to the watcher's
    comparison, but the Namespace is always read, and its UID is not the one recorded."""
    (tenant,) = _ready_tenants(make_tenant, host, 1)
    key = ("Namespace", "", tenant.namespace)
    host.objects[key]["metadata"]["uid"] = "someone-elses"
    deny = ("NetworkPolicy", tenant.namespace, "berth-default-deny")
    del host.objects[deny]
    written = len(host.writes)
    assert reconcile.repair_drift(str(tenant.pk), [deny]).outcome == Outcome.DIVERGED
    tenant.refresh_from_db()
    assert tenant.status == "diverged" and host.writes[written:] == [] and deny not in host.objects


def test_the_watchers_repair_of_a_deleted_service_account_takes_the_tenants_own_path(make_tenant, host, cluster):
    """Made anew, its new UID is recorded (as Berth's, for a later renewal to delete): provisioning.provision."""
    (tenant,) = _ready_tenants(make_tenant, host, 1)
    key = ("ServiceAccount", tenant.namespace, manifests.TENANT_SA)
    old_uid = host.objects.pop(key)["metadata"]["uid"]
    assert reconcile.repair_drift(str(tenant.pk), [key]).outcome == Outcome.REPAIRED
    tenant.refresh_from_db()
    new_uid = host.objects[key]["metadata"]["uid"]
    assert (
        new_uid != old_uid and tenant.owned_uids[f"ServiceAccount/{tenant.namespace}/{manifests.TENANT_SA}"] == new_uid
    )


def test_the_watchers_repair_that_may_not_read_in_the_namespace_puts_berths_grants_back_first(
    make_tenant, host, cluster, monkeypatch, settings
):
    """The chart's RBAC: the worker reads inside a tenant's namespace through its own RoleBindings there. One deleted
    by hand, the repair may not read what it was told of: the tenant's own path creates the grants first."""
    settings.BERTH_NAMESPACE_GRANTS = ["berth-worker=berth/berth-worker", "berth-reader=berth/berth-worker"]
    (tenant,) = _ready_tenants(make_tenant, host, 1)
    rendered = manifests.namespace_grants(tenant, tenant.tier, manifests.parse_grants(settings.BERTH_NAMESPACE_GRANTS))
    grants = [reconcile.key_of(g) for g in rendered]
    assert grants and all(g in host.objects for g in grants)
    del host.objects[grants[0]]
    get = host._get

    def guarded(kind, name, *, namespace=None):
        if namespace == tenant.namespace and grants[0] not in host.objects:
            raise KubeForbidden(f"get {kind}/{name}: forbidden", status=403)
        return get(kind, name, namespace=namespace)

    monkeypatch.setattr(host, "_get", guarded)
    assert reconcile.repair_drift(str(tenant.pk), [grants[0]]).outcome == Outcome.REPAIRED
    assert grants[0] in host.objects
    assert any(f"{grants[0][0]}/{grants[0][2]} was missing" in r for r in _repairs(tenant)[-1])
