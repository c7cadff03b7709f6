"""Email: approvers on a new request, the requester on a decision, the team when a tenant is ready or failed."""

from __future__ import annotations

import pytest
from django.core import mail

from tenants import services
from tenants.models import Tenant


@pytest.fixture(autouse=True)
def _outbox(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    mail.outbox.clear()


def test_approvers_hear_of_a_new_request_after_commit(submit, carol, dave, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        req = submit(name="web")
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert set(message.to) == {"carol@example.test", "dave@example.test"}
    assert "alice" in message.subject and "web" in message.subject
    assert f"/requests/{req.pk}/" in message.body


def test_the_requester_hears_the_decision_with_the_reason(submit, carol, django_capture_on_commit_callbacks):
    req = submit(name="web")
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        services.request_reject(tenant_request=req, actor=carol, reason="Use the small tier for tests.")
    assert [m.to for m in mail.outbox] == [["alice@example.test"]]
    assert "rejected" in mail.outbox[0].subject and "Use the small tier" in mail.outbox[0].body


def test_the_team_hears_when_its_tenant_is_ready_or_failed(
    submit, carol, amir, vera, dispatched, django_capture_on_commit_callbacks
):
    req = submit(name="web")
    services.request_approve(tenant_request=req, actor=carol)
    tenant = services.tenant_mark_provisioning(tenant=Tenant.objects.get(pk=req.tenant_id))
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        services.tenant_mark_failed(tenant=tenant, reason="quota admission refused: exceeded quota")
    (message,) = mail.outbox
    assert set(message.to) == {"alice@example.test", "amir@example.test"}  # owners and members, not viewers
    assert "failed" in message.subject and "exceeded quota" in message.body


def test_a_broken_mail_server_never_undoes_the_action(submit, settings, django_capture_on_commit_callbacks):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 9, 2
    with django_capture_on_commit_callbacks(execute=True):
        req = submit(name="web")
    req.refresh_from_db()
    assert req.status == "pending"


def test_owners_hear_of_repaired_drift_and_admins_too_of_a_failed_isolation_report(
    ready_tenant, amir, dave, django_capture_on_commit_callbacks
):
    tenant = ready_tenant(name="web")
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        services.tenant_record_applied(tenant=tenant, generation=1, repaired=["ResourceQuota/web/berth-quota"])
        services.tenant_record_isolation_report(
            tenant=tenant, report={"passed": False, "checks": [{"id": "external-ips", "passed": False}]}
        )
    drift, isolation = mail.outbox
    assert drift.to == ["alice@example.test"] and "ResourceQuota/web/berth-quota" in drift.body
    assert set(isolation.to) == {"alice@example.test", "dave@example.test"} and "external-ips" in isolation.body


def test_the_team_hears_when_its_tenant_is_decommissioned(
    ready_tenant, alice, amir, django_capture_on_commit_callbacks
):
    tenant = ready_tenant(name="web")
    tenant = services.tenant_decommission(tenant=tenant, actor=alice)
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        services.tenant_mark_deleted(tenant=tenant)
    (message,) = mail.outbox
    assert set(message.to) == {"alice@example.test", "amir@example.test"} and "web is deleted" in message.subject


def test_a_cancelled_request_sends_no_mail(submit, alice, django_capture_on_commit_callbacks):
    req = submit(name="web")
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        services.request_cancel(tenant_request=req, actor=alice)
    assert mail.outbox == []
