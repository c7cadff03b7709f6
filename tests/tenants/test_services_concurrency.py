"""tenants.services under real concurrency: two threads, two database connections, one winner.

These tests commit (``transaction=True``) so each thread sees the other's writes and locks.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from tenants import dispatch, services
from tenants.errors import InvalidTransition
from tenants.models import (
    AuditEvent,
    Cluster,
    Membership,
    Team,
    Tenant,
    TenantRequest,
    TenantStatus,
    TenantUsageDay,
    Tier,
    User,
)

from .conftest import run_together

pytestmark = pytest.mark.django_db(transaction=True)


def fresh(req: TenantRequest) -> TenantRequest:
    """A separate in-memory copy, as two web requests would each load their own."""
    return TenantRequest.objects.get(pk=req.pk)


def outcome(results: list[Any]) -> tuple[list[Any], list[Exception]]:
    won = [r for r in results if not isinstance(r, Exception)]
    lost = [r for r in results if isinstance(r, Exception)]
    return won, lost


def test_two_deciders_approving_at_once_yield_one_approval_one_job_and_one_audit_event(submit, carol, dave, dispatched):
    req = submit()
    results = run_together(
        lambda: services.request_approve(tenant_request=fresh(req), actor=carol),
        lambda: services.request_approve(tenant_request=fresh(req), actor=dave),
    )
    won, lost = outcome(results)
    assert len(won) == 1 and len(lost) == 1
    assert isinstance(lost[0], InvalidTransition), repr(lost[0])
    assert dispatched == [(dispatch.PROVISION, (str(req.tenant_id),))]
    assert AuditEvent.objects.filter(action="request.approve", object_id=str(req.pk)).count() == 1
    assert AuditEvent.objects.filter(action="tenant.approve", object_id=str(req.tenant_id)).count() == 1
    assert TenantRequest.objects.get(pk=req.pk).decided_by == won[0].decided_by


def test_approve_and_reject_at_once_never_deadlock_and_one_decision_stands(submit, carol, dave, dispatched, team_a):
    # Approve locks the tenant then writes the request; reject must take the same order or the two deadlock.
    team_a.budget_tenants = team_a.budget_cpu_millis = team_a.budget_memory_mib = team_a.budget_storage_gib = 10**6
    team_a.save()
    for attempt in range(5):
        req = submit(name=f"race-{attempt}")
        results = run_together(
            partial(services.request_approve, tenant_request=fresh(req), actor=carol),
            partial(services.request_reject, tenant_request=fresh(req), actor=dave, reason="no"),
        )
        won, lost = outcome(results)
        assert len(won) == 1 and isinstance(lost[0], InvalidTransition), repr(lost)
        decided = TenantRequest.objects.get(pk=req.pk)
        tenant = Tenant.objects.get(pk=req.tenant_id)
        expected: dict[str, str] = {
            TenantRequest.Status.APPROVED: TenantStatus.APPROVED,
            TenantRequest.Status.REJECTED: TenantStatus.REJECTED,
        }
        assert tenant.status == expected[decided.status]
        assert (
            AuditEvent.objects.filter(object_id=str(req.pk), action__in=["request.approve", "request.reject"]).count()
            == 1
        )


def test_two_workers_marking_provisioning_at_once_yield_one_transition(submit, carol, dispatched):
    req = services.request_approve(tenant_request=submit(), actor=carol)
    results = run_together(
        lambda: services.tenant_mark_provisioning(tenant=Tenant.objects.get(pk=req.tenant_id)),
        lambda: services.tenant_mark_provisioning(tenant=Tenant.objects.get(pk=req.tenant_id)),
    )
    won, lost = outcome(results)
    assert len(won) == 1 and isinstance(lost[0], InvalidTransition), repr(lost)
    assert Tenant.objects.get(pk=req.tenant_id).status == TenantStatus.PROVISIONING
    assert AuditEvent.objects.filter(action="tenant.provisioning").count() == 1


def test_two_submissions_racing_for_the_last_room_in_the_budget_yield_one_tenant(submit, amir, team_a):
    team_a.budget_tenants = 1
    team_a.save()
    results = run_together(lambda: submit(name="one"), lambda: submit(name="two", actor=amir))
    won, lost = outcome(results)
    assert len(won) == 1 and isinstance(lost[0], ValidationError), repr(lost)
    assert "budget" in lost[0].message_dict["tier"][0]
    assert Tenant.objects.count() == 1


def test_a_retry_racing_its_first_attempt_returns_the_same_request(submit):
    results = run_together(
        lambda: submit(name="web", idempotency_key="pipeline-981"),
        lambda: submit(name="web", idempotency_key="pipeline-981"),
    )
    won, lost = outcome(results)
    assert lost == [] and won[0].pk == won[1].pk
    assert TenantRequest.objects.count() == 1 and Tenant.objects.count() == 1


def test_two_first_sign_ins_of_one_person_at_once_make_one_user():
    claims = {"sub": "sub-twice", "preferred_username": "twice", "groups": ["team-race", "team-race2:owner"]}
    results = run_together(
        partial(services.user_sync_from_claims, claims=claims), partial(services.user_sync_from_claims, claims=claims)
    )
    won, lost = outcome(results)
    assert lost == [] and won[0].pk == won[1].pk
    assert User.objects.filter(oidc_subject="sub-twice").count() == 1
    assert Membership.objects.filter(user=won[0]).count() == 2


def test_deciding_a_request_locks_its_tenant_and_not_the_cluster_tier_or_team_it_shares(submit, alice, cluster):
    # Every request on a cluster shares its cluster and tier rows, and a submission locks its team for the budget:
    # when a decision locked those rows too, cancels and submissions of different tenants deadlocked under load
    # (bench/api_load.py's mix: 9 answers of 500 in 60 s).
    req = submit(name="lock-scope")
    held, release = threading.Event(), threading.Event()

    def hold_shared_rows() -> None:
        try:
            with transaction.atomic():
                list(Cluster.objects.select_for_update().filter(pk=cluster.pk))
                list(Tier.objects.select_for_update().filter(pk=req.tier_id))
                list(Team.objects.select_for_update().filter(pk=req.team_id))
                held.set()
                release.wait(timeout=20)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_shared_rows)
    holder.start()
    try:
        assert held.wait(timeout=10)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '2s'")
            cancelled = services.request_cancel(tenant_request=fresh(req), actor=alice)
    finally:
        release.set()
        holder.join(timeout=30)
    assert cancelled.status == TenantRequest.Status.CANCELLED


def test_two_owners_accepting_one_transfer_at_once_move_it_once(ready_tenant, small, alice, bob, team_b, dispatched):
    co_owner = User.objects.create(username="bea", oidc_subject="sub-bea")
    Membership.objects.create(user=co_owner, team=team_b, role=Membership.Role.OWNER)
    tenant = ready_tenant(name="moving", tier=small)  # small: the transfer completes on acceptance
    req = services.transfer_ask(tenant=tenant, target_team=team_b, actor=alice)
    dispatched.clear()
    results = run_together(
        lambda: services.transfer_accept(tenant_request=fresh(req), actor=bob),
        lambda: services.transfer_accept(tenant_request=fresh(req), actor=co_owner),
    )
    won, lost = outcome(results)
    assert len(won) == 1 and len(lost) == 1 and isinstance(lost[0], InvalidTransition), repr(results)
    tenant.refresh_from_db()
    assert tenant.team == team_b and (tenant.generation, tenant.credential_epoch) == (2, 2)
    assert dispatched == [(dispatch.PROVISION, (str(tenant.pk),))]
    assert AuditEvent.objects.filter(action="transfer.accept").count() == 1
    assert AuditEvent.objects.filter(action="transfer.complete").count() == 2  # one row per team


def test_approving_a_transfer_while_its_requester_cancels_never_fails_with_a_server_error(
    ready_tenant, medium, alice, bob, carol, team_a, team_b, dispatched
):
    for team in (team_a, team_b):
        team.budget_tenants = team.budget_cpu_millis = team.budget_memory_mib = team.budget_storage_gib = 10**6
        team.save()
    for attempt in range(3):
        tenant = ready_tenant(name=f"swap-{attempt}", tier=medium)  # medium: an approver decides after acceptance
        req = services.transfer_accept(
            tenant_request=services.transfer_ask(tenant=tenant, target_team=team_b, actor=alice), actor=bob
        )
        results = run_together(
            partial(services.request_approve, tenant_request=fresh(req), actor=carol),
            partial(services.request_cancel, tenant_request=fresh(req), actor=alice),
        )
        won, lost = outcome(results)
        assert len(won) == 1 and isinstance(lost[0], InvalidTransition), repr(results)
        expected = team_b if won[0].status == TenantRequest.Status.APPROVED else team_a
        assert Tenant.objects.get(pk=tenant.pk).team == expected


def test_a_tier_change_submitted_while_the_usage_sampler_commits_never_deadlocks(ready_tenant, alice, team_a, large):
    # The submission locks its team (the budget) and inserts a request pointing at the tenant; the sampler locks the
    # tenant and inserts a usage day pointing at the team. PostgreSQL checks each foreign key at commit under
    # FOR KEY SHARE, which FOR UPDATE blocks and FOR NO KEY UPDATE does not: with FOR UPDATE the two committing
    # together deadlocked (a fresh clone's make test, tests/worker/test_namespace_tenants.py, 2026-11-28).
    team_a.budget_cpu_millis = team_a.budget_memory_mib = team_a.budget_storage_gib = 10**6
    team_a.save()
    tenant = ready_tenant(name="both")
    both_written = threading.Barrier(2)

    def submit_change() -> TenantRequest:
        with transaction.atomic():
            req = services.request_submit(
                actor=alice,
                action=TenantRequest.Action.CHANGE_TIER,
                tenant=Tenant.objects.get(pk=tenant.pk),
                tier=large,
            )
            both_written.wait(timeout=10)  # each holds its locks and its unchecked foreign keys
        return req

    def sample() -> int:
        reading = {"hard": {"requests.cpu": "4"}, "used": {"requests.cpu": "1"}}
        with transaction.atomic():
            recorded = services.usage_record_readings(readings={str(tenant.pk): reading}, at=timezone.now())
            both_written.wait(timeout=10)
        return recorded

    submitted, recorded = run_together(submit_change, sample)
    assert isinstance(submitted, TenantRequest) and recorded == 1, (submitted, recorded)
    assert TenantRequest.objects.get(pk=submitted.pk).status == TenantRequest.Status.PENDING
    assert TenantUsageDay.objects.filter(tenant=tenant, team=tenant.team).count() == 1


def test_alertmanager_posting_one_new_alert_twice_at_once_records_and_tells_it_once(ready_tenant_row, settings):
    import json

    from django.core import mail

    from tenants import alerts
    from tenants.models import TenantAlert
    from tests.tenants.test_alerts import alert, webhook

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    mail.outbox.clear()
    tenant = ready_tenant_row("team-a-web")
    parsed = alerts.parse(json.dumps(webhook(alert("team-a-web"))).encode())
    for _ in range(5):  # a race is not won the same way every time
        TenantAlert.objects.all().delete()
        results = run_together(
            lambda: services.alerts_receive(alerts=parsed), lambda: services.alerts_receive(alerts=parsed)
        )
        assert sorted((r.counts for r in results), key=str) == [{"fired": 1}, {"repeated": 1}], results
        assert TenantAlert.objects.filter(tenant=tenant).count() == 1
    assert AuditEvent.objects.filter(action="tenant.alert_firing").count() == 5
    assert len(mail.outbox) == 5  # once per round


def test_both_peers_of_an_alertmanager_pair_posting_different_starts_at_once_record_one_alert(
    ready_tenant_row, settings
):
    import json

    from django.core import mail

    from tenants import alerts
    from tenants.models import TenantAlert
    from tests.tenants.test_alerts import alert, webhook

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    mail.outbox.clear()
    tenant = ready_tenant_row("team-a-web")
    one = alerts.parse(json.dumps(webhook(alert("team-a-web"))).encode())
    peer = alerts.parse(json.dumps(webhook({**alert("team-a-web"), "startsAt": "2026-11-28T20:59:30Z"})).encode())
    for _ in range(5):  # a race is not won the same way every time
        TenantAlert.objects.all().delete()
        results = run_together(
            lambda: services.alerts_receive(alerts=one), lambda: services.alerts_receive(alerts=peer)
        )
        assert sorted((r.counts for r in results), key=str) == [{"fired": 1}, {"repeated": 1}], results
        assert TenantAlert.objects.filter(tenant=tenant).count() == 1
    assert len(mail.outbox) == 5  # once per round
