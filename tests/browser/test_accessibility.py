"""axe-core on every main screen, filled with realistic data: no serious or critical violation anywhere.

axe is injected into the page, which the portal's Content-Security-Policy rightly forbids, so these
browsers bypass the CSP; every other browser test runs under it. Moderate and minor findings are
printed (run with -s to see them) but do not fail the test.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from tenants import services
from tenants.models import Cluster, Membership, OrphanNamespace, Tenant, TenantRequest, Tier, User
from tests.browser.support import Portal, axe_violations, blocking, describe_violations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

USAGE = {
    "hard": {
        "requests.cpu": "1",
        "limits.cpu": "2",
        "requests.memory": "2Gi",
        "limits.memory": "4Gi",
        "requests.storage": "10Gi",
        "pods": "20",
        "services": "10",
        "services.nodeports": "0",
    },
    "used": {
        "requests.cpu": "900m",
        "limits.cpu": "2",
        "requests.memory": "512Mi",
        "limits.memory": "1Gi",
        "requests.storage": "0",
        "pods": "4",
        "services": "1",
        "services.nodeports": "0",
    },
}
ISOLATION = {
    "passed": False,
    "checks": [
        {"id": "MTB-PL1-CC-CPI-2", "title": "Tenants cannot read other namespaces", "passed": True, "detail": ""},
        {"id": "MTB-PL1-BC-HI-5", "title": "Host networking is refused", "passed": True, "detail": ""},
        {
            "id": "MTB-PL1-CC-FNS-2",
            "title": "No extra role bindings",
            "passed": False,
            "detail": "RoleBinding too-much grants cluster-admin",
        },
    ],
}


def _ready_tenant(*, owner: User, cluster: Cluster) -> Tenant:
    """A small (auto-approved) namespace taken to Ready by the services, with usage and an isolation report."""
    team = Membership.objects.get(user=owner).team
    req = services.request_submit(
        actor=owner,
        action=TenantRequest.Action.CREATE,
        team=team,
        name="api",
        tier=Tier.objects.get(name="small"),
        cluster=cluster,
        purpose="The payments API.",
    )
    tenant = services.tenant_mark_provisioning(tenant=Tenant.objects.get(pk=req.tenant_id))
    tenant = services.tenant_mark_ready(tenant=tenant, applied_generation=tenant.generation)
    services.tenant_record_usage(tenant=tenant, usage=USAGE)
    services.tenant_record_isolation_report(tenant=tenant, report=ISOLATION)
    return tenant


class Audit:
    """Runs axe on each screen and keeps every finding, so one run reports all screens at once."""

    def __init__(self) -> None:
        self.blocking: dict[str, list[dict]] = {}

    def check(self, page: Page, screen: str) -> None:
        expect(page.locator("main#main")).to_be_visible()
        found = axe_violations(page)
        if found:
            print(describe_violations(screen, found))
        if blocking(found):
            self.blocking[screen] = blocking(found)


def _orphan(cluster: Cluster) -> OrphanNamespace:
    """A namespace of a tenant the database does not know, as a restore from an older dump leaves one."""
    labels = {
        "app.kubernetes.io/managed-by": "berth",
        "berth.dev/tenant-id": "0b1c2d3e-0000-4000-8000-000000000001",
        "berth.dev/team": "team-payments",
        "berth.dev/tier": "small",
    }
    return OrphanNamespace.objects.create(
        cluster=cluster, name="newer", uid="3f0c", tenant_id=labels["berth.dev/tenant-id"], labels=labels,
        created_at=timezone.now() - dt.timedelta(days=2), last_seen_at=timezone.now(),
    )  # fmt: skip


def test_main_screens_have_no_serious_or_critical_accessibility_violations(
    portal: Portal, cluster, dispatched, axe_installed
):
    audit = Audit()

    visitor = portal.new_page(bypass_csp=True)
    visitor.goto(portal.at("/login/"))
    audit.check(visitor, "login")

    alice = portal.page_as("alice", bypass_csp=True)
    tenant = _ready_tenant(owner=User.objects.get(oidc_subject="alice"), cluster=cluster)

    alice.goto(portal.at("/requests/new/"))
    audit.check(alice, "request form")
    alice.get_by_label("Name", exact=True).fill("Bad_Name!")
    alice.get_by_role("button", name="Submit request").click()
    expect(alice.get_by_role("heading", name="Please correct the following")).to_be_visible()
    audit.check(alice, "request form with errors")
    alice.get_by_label("Name", exact=True).fill("web")
    alice.get_by_role("radio", name="Medium").check()
    alice.get_by_role("button", name="Submit request").click()
    expect(alice.locator("#request-status")).to_contain_text("Request: Pending")
    audit.check(alice, "request detail (requester)")

    alice.goto(portal.at("/"))
    audit.check(alice, "dashboard")
    alice.goto(portal.at(f"/tenants/{tenant.pk}/"))
    expect(alice.get_by_role("meter").first).to_be_visible()
    audit.check(alice, "tenant detail")
    alice.goto(portal.at(f"/tenants/{tenant.pk}/decommission/"))
    audit.check(alice, "decommission confirmation")
    alice.goto(portal.at("/tokens/"))
    audit.check(alice, "tokens")
    alice.get_by_label("Name", exact=True).fill("CI for payments")
    alice.get_by_role("button", name="Create token").click()
    expect(alice.get_by_role("heading", name="Copy your new token now")).to_be_visible()
    audit.check(alice, "tokens with a new token")

    carol = portal.page_as("carol", bypass_csp=True)
    carol.goto(portal.at("/approvals/"))
    expect(carol.get_by_role("link", name="Create web")).to_be_visible()
    audit.check(carol, "approvals")
    carol.get_by_role("link", name="Create web").click()
    expect(carol.get_by_role("region", name="Manifests that will be created")).to_be_visible()
    audit.check(carol, "request detail (approver)")

    dave = portal.page_as("dave", bypass_csp=True)
    dave.goto(portal.at("/audit/"))
    audit.check(dave, "audit")
    _orphan(cluster)
    dave.goto(portal.at("/tenants/orphans/"))
    dave.get_by_text("Re-attach to a team").click()
    dave.get_by_text("Decommission", exact=True).click()
    audit.check(dave, "orphan namespaces")

    assert not any(audit.blocking.values()), "serious or critical accessibility violations:\n" + "\n".join(
        describe_violations(screen, found) for screen, found in audit.blocking.items() if found
    )
