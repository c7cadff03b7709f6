"""tenants.services.lifecycle: what a status change reads and writes."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tenants import services
from tenants.models import AuditEvent, Tenant, TenantRequest, TenantStatus
from tenants.services.lifecycle import reread

pytestmark = pytest.mark.django_db


def _loaded(pk) -> Tenant:
    return Tenant.objects.select_related("tier", "team", "cluster").get(pk=pk)


def test_reread_keeps_the_related_rows_it_is_told_to_whose_keys_are_unchanged(submit, large, django_assert_num_queries):
    tenant = _loaded(submit(name="web").tenant_id)
    Tenant.objects.filter(pk=tenant.pk).update(tier=large, purpose="moved on")
    with django_assert_num_queries(1):
        reread(tenant, keep=("tier", "team", "cluster"))
        assert tenant.purpose == "moved on" and tenant.team.slug and tenant.cluster.name
    with django_assert_num_queries(1):
        assert tenant.tier == large  # its key changed: read afresh


def test_a_transition_writes_the_status_reads_the_row_once_and_records_the_audit_event(submit, carol, dispatched):
    req = submit(name="web")
    services.request_approve(tenant_request=req, actor=carol, comment="ok")
    tenant = _loaded(req.tenant_id)
    with CaptureQueriesContext(connection) as done:
        tenant = services.tenant_mark_provisioning(tenant=tenant)
    statements = [q["sql"].split()[0] for q in done.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert statements == ["UPDATE", "SELECT", "INSERT"]  # the guarded update, the row read back, the audit event
    assert tenant.status == TenantStatus.PROVISIONING
    event = AuditEvent.objects.get(action="tenant.provisioning", object_id=str(tenant.pk))
    assert event.before["status"] == "approved" and event.after == {**event.before, "status": "provisioning"}
    assert event.team_id == tenant.team_id


def test_a_decision_reads_the_request_back_with_its_team_and_tier_still_loaded(
    submit, carol, django_assert_num_queries
):
    req = submit(name="web")
    decided = services.request_approve(tenant_request=req, actor=carol, comment="ok")
    assert decided.status == TenantRequest.Status.APPROVED and decided.decided_by == carol
    with django_assert_num_queries(0):
        assert decided.team.slug and decided.tier.name
    assert decided.tenant.status == TenantStatus.APPROVED  # the tenant the decision changed is read afresh
