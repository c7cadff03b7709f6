"""`berth rightsizing` against a live portal: the suggestion with its evidence, accepting and dismissing it."""

from __future__ import annotations

import pytest

from tenants.models import AuditEvent, Tenant, TenantRequest, TenantStatus, Tier
from tests.fixtures import TokenFactory
from tests.plugins.portal import BerthRunner
from tests.tenants.test_rightsizing import record_history

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def web(alice, team_a, cluster) -> Tenant:
    tenant = Tenant.objects.create(
        name="web",
        namespace=cluster.namespace_prefix + "web",
        team=team_a,
        tier=Tier.objects.get(name="medium"),
        cluster=cluster,
        status=TenantStatus.READY,
        created_by=alice,
    )
    record_history(tenant, average=0.12, peak=0.2)
    return tenant


def test_alice_reads_the_evidence_and_accepts_by_fingerprint_prefix(
    berth: BerthRunner, api_token: TokenFactory, alice, web
):
    token = api_token(alice)
    shown = berth("rightsizing", "web", token=token)
    assert shown.code == 0, shown.stderr
    assert "RESOURCE" in shown.stdout and "requests.cpu" in shown.stdout
    assert "Suggested: small (down). Used under 30% of Medium" in shown.stdout
    fingerprint = shown.stdout.split("Fingerprint: ")[1].split()[0]
    assert len(fingerprint) == 64

    made = berth("rightsizing", "web", "--accept", fingerprint[:10], "-o", "json", token=token)
    assert made.code == 0, made.stderr
    request = made.json()
    assert (request["action"], request["tier"], request["status"]) == ("change_tier", "small", "approved")
    assert AuditEvent.objects.filter(action="tenant.rightsizing_accept", after__request=request["id"]).exists()

    # The same prefix again: the tenant is on small now, so that suggestion is gone (exit 7, nothing filed).
    again = berth("rightsizing", "web", "--accept", fingerprint[:10], token=token)
    assert again.code == 7 and "out of date" in again.stderr
    full = berth("rightsizing", "web", "--accept", fingerprint, token=token)
    assert full.code == 7 and "out of date" in full.stderr
    assert TenantRequest.objects.filter(action="change_tier").count() == 1


def test_a_member_cannot_accept_and_an_owner_can_dismiss(berth: BerthRunner, api_token: TokenFactory, alice, amir, web):
    fingerprint = berth("rightsizing", "web", "-o", "json", token=api_token(alice)).json()["suggestion"]["fingerprint"]
    refused = berth("rightsizing", "web", "--accept", fingerprint, token=api_token(amir))
    assert refused.code == 4 and "team owners" in refused.stderr
    dismissed = berth("rightsizing", "web", "--dismiss", fingerprint[:8], token=api_token(alice))
    assert dismissed.code == 0, dismissed.stderr
    assert "was dismissed until" in dismissed.stdout
    assert not TenantRequest.objects.exists()
    bad = berth("rightsizing", "web", "--accept", "XYZ", token=api_token(alice))
    assert bad.code == 2
