"""worker.provisioning against an in-memory API server (tests/worker/fake_kube.py): every outcome of one step.

The real backends render and apply here; only the cluster is a stand-in. The same paths against the dev
control plane and a real Celery worker are in test_namespace_tenants.py and tests/worker/backends/.
"""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from celery.exceptions import Retry
from django.db import connections
from django.utils import timezone

from tenants import dispatch, services
from tenants.models import AuditEvent, Tenant
from tests.worker.conftest import MakeTenant, provisioned_ready
from tests.worker.fake_kube import FakeKube
from worker import provisioning, tasks
from worker.backends import backend_for
from worker.kube import KubeForbidden, KubePermanentError, KubeTransientError
from worker.provisioning import Outcome


def _provisioned_ready(make_tenant: MakeTenant, host: FakeKube) -> Tenant:
    return provisioned_ready(make_tenant(), host)


# --- ready, not yet, in sync, repaired ----------------------------------------------------------------------


def test_a_tenant_the_cluster_has_not_enforced_yet_is_not_ready_and_asks_to_come_back(make_tenant, host):
    tenant = make_tenant()
    progress = provisioning.provision(str(tenant.pk))
    assert progress.outcome == Outcome.NOT_YET
    assert progress.requeue_after == provisioning.POLL_MIN_SECONDS
    tenant.refresh_from_db()
    assert tenant.status == "provisioning" and "waiting for the cluster" in tenant.status_reason
    # Everything is applied already; only the quota controller has not reported the quota yet.
    assert "berth-quota" in host.named("ResourceQuota") and "dev-web" in host.named("Namespace")


def test_once_the_quota_is_enforced_the_tenant_is_ready_and_its_owned_uids_recorded(make_tenant, host):
    tenant = _provisioned_ready(make_tenant, host)
    assert tenant.status == "ready" and tenant.status_reason == ""
    assert tenant.owned_uids["Namespace//dev-web"] == host.get("Namespace", "dev-web")["metadata"]["uid"]
    assert tenant.quota_usage["hard"]["pods"] == "100"


def test_a_ready_tenant_reapplied_without_changes_is_in_sync(make_tenant, host):
    tenant = _provisioned_ready(make_tenant, host)
    progress = provisioning.provision(str(tenant.pk))
    assert progress.outcome == Outcome.IN_SYNC and progress.requeue_after is None


def test_drift_on_a_ready_tenant_is_repaired_and_audited(make_tenant, host):
    tenant = _provisioned_ready(make_tenant, host)
    del host.objects[("NetworkPolicy", "dev-web", "berth-default-deny")]
    progress = provisioning.provision(str(tenant.pk))
    assert progress.outcome == Outcome.REPAIRED
    assert "NetworkPolicy/berth-default-deny was missing" in progress.reason
    assert ("NetworkPolicy", "dev-web", "berth-default-deny") in host.objects
    event = AuditEvent.objects.get(action="tenant.drift_repaired", object_id=str(tenant.pk))
    assert event.after["repaired"] == ["NetworkPolicy/berth-default-deny was missing"]


def test_readiness_and_usage_checks_only_read(make_tenant, host):
    tenant = _provisioned_ready(make_tenant, host)
    backend = backend_for(tenant)
    before = list(host.writes)
    assert backend.is_ready(tenant, host) is True
    assert backend.usage(tenant, host)["hard"]["pods"] == "100"
    assert host.writes == before


# --- locked, gone, raced, skipped ---------------------------------------------------------------------------


def test_a_tenant_another_worker_holds_is_left_to_it(make_tenant, host, other_worker):
    tenant = make_tenant()
    other_worker(str(tenant.pk))
    assert provisioning.provision(str(tenant.pk)).outcome == Outcome.LOCKED
    tenant.refresh_from_db()
    assert tenant.status == "approved" and host.writes == []


def test_a_tenant_that_no_longer_exists_is_gone(host, db):
    assert provisioning.provision(str(uuid.uuid4())).outcome == Outcome.GONE
    assert provisioning.decommission(str(uuid.uuid4())).outcome == Outcome.GONE
    assert host.writes == []


def test_a_tenant_someone_else_moved_first_is_raced(make_tenant, host, monkeypatch):
    tenant = make_tenant()
    stale = Tenant.objects.get(pk=tenant.pk)
    services.tenant_mark_provisioning(tenant=tenant)  # another worker got there between our read and our write
    monkeypatch.setattr(provisioning, "_load", lambda tenant_id: stale)
    assert provisioning.provision(str(tenant.pk)).outcome == Outcome.RACED
    assert host.writes == []


@pytest.mark.parametrize("status", ["requested", "failed", "decommissioning", "deleted"])
def test_a_tenant_in_a_status_with_nothing_to_provision_is_skipped(make_tenant, host, status):
    tenant = make_tenant(status=status)
    progress = provisioning.provision(str(tenant.pk))
    assert (progress.outcome, progress.reason) == (Outcome.SKIPPED, status)
    assert host.writes == []


# --- failed ----------------------------------------------------------------------------------------------------


def test_a_permanent_refusal_fails_the_tenant_with_the_servers_message(make_tenant, host):
    host.refuse["LimitRange"] = KubePermanentError(
        "apply LimitRange/berth-limits: admission webhook said no", status=422
    )
    tenant = make_tenant()
    progress = provisioning.provision(str(tenant.pk))
    assert progress.outcome == Outcome.FAILED and progress.requeue_after is None
    tenant.refresh_from_db()
    assert (
        tenant.status == "failed" and tenant.status_reason == "apply LimitRange/berth-limits: admission webhook said no"
    )


def test_someone_elses_namespace_under_the_tenants_name_fails_it_and_is_left_alone(make_tenant, host):
    theirs = host.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dev-web"}})
    tenant = make_tenant()
    assert provisioning.provision(str(tenant.pk)).outcome == Outcome.FAILED
    tenant.refresh_from_db()
    assert tenant.status == "failed" and "not Berth's; Berth never adopts" in tenant.status_reason
    assert host.writes == [] and host.get("Namespace", "dev-web") == {**theirs, "status": {"phase": "Active"}}


def test_a_mistake_in_the_cluster_settings_fails_the_tenant_before_anything_is_created(make_tenant, host, cluster):
    cluster.kinds = ["namespace", "virtualcluster"]
    cluster.virtual_config = {"virtualcluster": {"clusterVersion": "cv"}}
    cluster.save()
    tenant = make_tenant(kind="virtualcluster")
    progress = provisioning.provision(str(tenant.pk))
    assert progress.outcome == Outcome.FAILED
    assert progress.reason == (
        "Cluster dev: unknown setting clusterVersion in virtual_config.virtualcluster "
        "(known: cluster_version, endpoint_template)."
    )
    tenant.refresh_from_db()
    assert tenant.status == "failed" and tenant.status_reason == progress.reason
    assert host.writes == []


def test_a_tenant_still_not_ready_when_its_time_is_up_fails_saying_so(make_tenant, host, settings):
    settings.BERTH_PROVISION_TIMEOUT_SECONDS = 600
    tenant = make_tenant(status="provisioning")
    Tenant.objects.filter(pk=tenant.pk).update(status_changed_at=timezone.now() - dt.timedelta(minutes=11))
    progress = provisioning.provision(str(tenant.pk))
    assert progress.outcome == Outcome.FAILED
    assert progress.reason == "Not ready after 10 minutes: Applied; waiting for the cluster to report it ready."


def test_transient_trouble_is_noted_and_raised_for_the_task_to_retry(make_tenant, host):
    tenant = make_tenant()
    host.fail_next = KubeTransientError("get Namespace/kube-system: cluster unreachable (MaxRetryError)")
    with pytest.raises(KubeTransientError):
        provisioning.provision(str(tenant.pk))
    tenant.refresh_from_db()
    assert tenant.status == "provisioning" and tenant.status_reason.startswith("Waiting for the cluster: get")


# --- the task and decommissioning ---------------------------------------------------------------------------


def test_the_task_requeues_itself_with_a_countdown_instead_of_waiting(make_tenant, host, sent):
    tenant = make_tenant()
    result = tasks.provision_tenant.apply(args=(str(tenant.pk),), throw=True).get()
    assert result == "not yet: Applied; waiting for the cluster to report it ready."
    # It comes back knowing that generation 1 is applied in full: the next step only looks.
    assert sent == [(dispatch.PROVISION, (str(tenant.pk), 1), provisioning.POLL_MIN_SECONDS)]
    host.observe_quotas()
    writes = list(host.writes)
    assert tasks.provision_tenant.apply(args=sent[0][1], throw=True).get() == "ready"
    assert len(sent) == 1  # ready: nothing more to come back for
    assert host.writes == writes


def test_a_kind_whose_apply_finishes_only_once_its_cluster_is_up_applies_again_when_it_comes_back(
    make_tenant, host, sent, monkeypatch
):
    """A virtual cluster's apply sets up access inside it only once its control plane answers; a step that
    came back for readiness must apply again, or that set-up never happens and the tenant never gets ready."""
    tenant = make_tenant()
    backend = backend_for(tenant)
    monkeypatch.setattr(type(backend), "applied_in_one_step", False)
    applies: list[str] = []
    real_apply = type(backend).apply

    def counted_apply(self, tenant, host, *, detect_drift):
        applies.append(tenant.name)
        return real_apply(self, tenant, host, detect_drift=detect_drift)

    monkeypatch.setattr(type(backend), "apply", counted_apply)
    assert tasks.provision_tenant.apply(args=(str(tenant.pk),), throw=True).get().startswith("not yet")
    host.observe_quotas()
    assert tasks.provision_tenant.apply(args=sent[0][1], throw=True).get() == "ready"
    assert applies == [tenant.name, tenant.name]


def test_decommissioning_comes_back_until_everything_is_gone(make_tenant, host, sent):
    tenant = _provisioned_ready(make_tenant, host)
    services.tenant_expire(tenant=tenant)
    assert tasks.decommission_tenant.apply(args=(str(tenant.pk),), throw=True).get().startswith("not yet")
    assert [(task, countdown) for task, _, countdown in sent] == [
        (dispatch.DECOMMISSION, provisioning.POLL_MIN_SECONDS)
    ]
    assert host.named("Namespace") == ["kube-system"]  # the fake deletes at once; the next look sees it gone
    assert provisioning.decommission(str(tenant.pk)).outcome == Outcome.DELETED
    tenant.refresh_from_db()
    assert tenant.status == "deleted"


def test_a_namespace_whose_default_service_account_is_not_made_yet_is_not_ready_rather_than_failed(
    make_tenant, host, monkeypatch
):
    """After an API server restart (tests/chaos), the ServiceAccount controller can lag: admission then refuses the
    guards' Pod probes for want of the namespace's ServiceAccount, which says nothing about the guards."""
    from worker.kube import KubeForbidden

    tenant = make_tenant()
    admit = host.create

    def no_service_account_yet(obj, *, dry_run=False):
        if obj["kind"] == "Pod":
            namespace = obj["metadata"]["namespace"]
            raise KubeForbidden(
                f'create Pod/berth-guard-probe: pods "berth-guard-probe" is forbidden: error looking up service '
                f'account {namespace}/default: serviceaccount "default" not found',
                status=403,
            )
        return admit(obj, dry_run=dry_run)

    monkeypatch.setattr(host, "create", no_service_account_yet)
    assert provisioning.provision(str(tenant.pk)).outcome == Outcome.NOT_YET
    host.observe_quotas()
    assert provisioning.provision(str(tenant.pk)).outcome == Outcome.NOT_YET
    tenant.refresh_from_db()
    assert tenant.status == "provisioning"
    monkeypatch.setattr(host, "create", admit)  # the controller caught up
    assert provisioning.provision(str(tenant.pk)).outcome == Outcome.READY


# --- a look when the watcher sees the quota counted (worker.tasks.look_again) -----------------------------


def test_a_look_makes_a_tenant_ready_at_once_and_its_countdown_job_then_does_nothing(make_tenant, host, sent):
    tenant = make_tenant()
    assert tasks.provision_tenant.apply(args=(str(tenant.pk),), throw=True).get().startswith("not yet")
    countdown_job = sent[0][1]
    host.observe_quotas()  # what the watcher saw, and said so
    assert tasks.look_again.apply(args=(str(tenant.pk),), throw=True).get() == "ready"
    assert len(sent) == 1  # a look re-queues nothing: the step's own job is still on its way
    writes = list(host.writes)
    # The step's job comes back to a tenant already ready at the generation it applied: its run is over.
    assert tasks.provision_tenant.apply(args=countdown_job, throw=True).get() == "skipped: ready, nothing to apply"
    assert host.writes == writes
    assert list(AuditEvent.objects.filter(object_id=str(tenant.pk), action="tenant.ready")) != []


def test_a_look_at_a_tenant_not_provisioning_or_held_changes_nothing(make_tenant, host, sent):
    ready = _provisioned_ready(make_tenant, host)
    writes = list(host.writes)
    assert tasks.look_again.apply(args=(str(ready.pk),), throw=True).get() == "skipped: not provisioning"
    held = make_tenant(name="held", status="provisioning")
    other = connections.create_connection("default")  # another worker's session
    try:
        with other.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", [provisioning.lock_key(str(held.pk))])
        # Another job holds it: the look comes back a moment later (its retries run at once here), a few times at
        # most, and then leaves it to the holder.
        with pytest.raises(Retry):
            tasks.look_again.apply(args=(str(held.pk),), throw=True)
    finally:
        other.close()
    assert host.writes == writes and sent == []


GRANTS = ["berth-worker=berth/berth-worker", "berth-reader=berth/berth-worker"]  # as the chart sets them


def test_a_grant_not_in_effect_yet_is_looked_at_again_soon(make_tenant, host, monkeypatch, settings):
    """The chart's RBAC: the worker may write in a tenant's namespace through the RoleBindings it creates there, which
    the API server's authorizer sees a moment later. Refused meanwhile, the step comes back in a quarter second."""
    settings.BERTH_NAMESPACE_GRANTS = GRANTS
    tenant = make_tenant()
    refusals = [1]
    apply = host._apply

    def authorizer_lags(objs, *, dry_run=False):
        if refusals[0] and any(o["metadata"].get("namespace", o["metadata"]["name"]) == tenant.namespace for o in objs):
            refusals[0] -= 1
            raise KubeForbidden(f"namespaces {tenant.namespace!r} is forbidden", status=403)
        return apply(objs, dry_run=dry_run)

    monkeypatch.setattr(host, "_apply", authorizer_lags)
    progress = provisioning.provision(str(tenant.pk))
    assert progress.outcome == Outcome.NOT_YET and progress.requeue_after == 0.25
    assert [w for w in host.writes if w.startswith("create")] == [
        f"create Namespace/{tenant.namespace}",
        "create RoleBinding/berth-worker",
        "create RoleBinding/berth-reader",
    ]
    host.observe_quotas_on_apply = True
    assert provisioning.provision(str(tenant.pk)).outcome == Outcome.READY  # the grants are there: no create again
    assert len([w for w in host.writes if w.startswith("create")]) == 3


def test_a_refusal_with_no_grant_just_written_is_not_waited_for(make_tenant, host, monkeypatch, settings):
    settings.BERTH_NAMESPACE_GRANTS = GRANTS
    tenant = make_tenant()
    host.refuse["LimitRange"] = KubeForbidden("limitranges is forbidden: denied", status=403)
    assert provisioning.provision(str(tenant.pk)).outcome == Outcome.NOT_YET  # grants created this step
    progress = provisioning.provision(str(tenant.pk))
    assert progress.outcome == Outcome.FAILED and "forbidden" in progress.reason


def test_a_stray_job_for_a_ready_tenant_with_nothing_owed_does_nothing(make_tenant, host, sent):
    """A duplicate (the sweep re-sent a job only waiting in a long queue): no full reconcile per stray job. A tier
    change or a transfer (something owed) is applied as before."""
    tenant = _provisioned_ready(make_tenant, host)
    writes, requests = list(host.writes), host.requests
    assert tasks.provision_tenant.apply(args=(str(tenant.pk),), throw=True).get() == "skipped: ready, nothing to apply"
    assert (host.writes, host.requests) == (writes, requests)
    Tenant.objects.filter(pk=tenant.pk).update(credential_epoch=tenant.credential_epoch + 1)  # a transfer
    assert tasks.provision_tenant.apply(args=(str(tenant.pk),), throw=True).get() != "skipped: ready, nothing to apply"
    assert host.requests > requests
