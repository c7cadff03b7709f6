"""Moving a tenant to another team, in real browsers: alice (owner of team-payments) offers her tenant to
team-search from the tenant page; bob (owner of team-search) finds the offer on his dashboard and accepts it;
the tenant is bob's team's and alice no longer finds it. The new pages have no serious accessibility finding.

The cluster side of a transfer (bindings, labels, renewed ServiceAccounts) is proven in tests/security and
tests/worker; here the tenant is taken to Ready by the services, as in test_accessibility.py.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tenants import services
from tenants.models import AuditEvent, Membership, Tenant, TenantRequest, Tier, User
from tests.browser.support import Portal, axe_violations, blocking, describe_violations, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _ready_tenant(*, owner: User, cluster) -> Tenant:
    team = Membership.objects.get(user=owner).team
    req = services.request_submit(
        actor=owner,
        action=TenantRequest.Action.CREATE,
        team=team,
        name="ledger",
        tier=Tier.objects.get(name="small"),
        cluster=cluster,
        purpose="The ledger service.",
    )
    tenant = services.tenant_mark_provisioning(tenant=Tenant.objects.get(pk=req.tenant_id))
    return services.tenant_mark_ready(tenant=tenant, applied_generation=tenant.generation)


def test_alice_offers_her_tenant_to_team_search_and_bob_accepts_it(portal: Portal, cluster, dispatched, axe_installed):
    bob = portal.page_as("bob")  # signing in makes team-search and bob its owner
    alice = portal.page_as("alice")
    tenant = _ready_tenant(owner=User.objects.get(oidc_subject="alice"), cluster=cluster)

    # alice: tenant page → "Transfer to another team…" → choose team-search → offer.
    alice.goto(portal.at(f"/tenants/{tenant.pk}/"))
    alice.get_by_role("region", name="Actions").get_by_role("link", name="Transfer to another team…").click()
    expect(alice.get_by_role("heading", level=1)).to_have_text("Transfer ledger to another team")
    alice.get_by_label("Receiving team").select_option("team-search")
    alice.get_by_label("Why").fill("The search team runs the ledger from now on.")
    screenshot(alice, "transfer-form")
    alice.get_by_role("button", name="Offer ledger to this team").click()
    expect(alice.get_by_role("status")).to_contain_text("ledger is offered to team-search")
    request = alice.get_by_role("region", name="Request")
    expect(request).to_contain_text("team-search")
    expect(alice.get_by_role("region", name="Decision")).to_contain_text("Waiting for an owner of team-search")
    req = TenantRequest.objects.get(action="transfer")

    # bob: the offer is on his dashboard; he accepts it there.
    bob.goto(portal.at("/"))
    offers = bob.get_by_role("region", name="Transfers offered to your team")
    row = offers.get_by_role("row", name=re.compile(r"^ledger"))
    expect(row).to_contain_text("team-payments")
    expect(row).to_contain_text("Alice Andersen")
    screenshot(bob, "transfer-offered")
    row.get_by_role("button", name="Accept ledger from team-payments").click()
    expect(bob.get_by_role("status")).to_contain_text("ledger now belongs to team-search")
    expect(bob.get_by_role("region", name="Transfers offered to your team")).to_have_count(0)

    # The tenant is team-search's now: bob sees it, alice does not.
    bob.goto(portal.at(f"/tenants/{tenant.pk}/"))
    expect(bob.get_by_role("region", name="Overview")).to_contain_text("team-search")
    assert alice.goto(portal.at(f"/tenants/{tenant.pk}/")).status == 404
    tenant.refresh_from_db()
    assert tenant.team.slug == "team-search" and tenant.credential_epoch == 2
    actions = set(
        AuditEvent.objects.filter(object_id__in=[str(req.pk), str(tenant.pk)]).values_list("action", flat=True)
    )
    assert {"transfer.ask", "transfer.accept", "transfer.approve", "transfer.complete"} <= actions


def test_the_transfer_pages_have_no_serious_accessibility_findings(portal: Portal, cluster, dispatched, axe_installed):
    bob = portal.page_as("bob", bypass_csp=True)
    alice = portal.page_as("alice", bypass_csp=True)
    tenant = _ready_tenant(owner=User.objects.get(oidc_subject="alice"), cluster=cluster)
    found: dict[str, list[dict]] = {}
    alice.goto(portal.at(f"/tenants/{tenant.pk}/transfer/"))
    found["transfer form"] = axe_violations(alice)
    services.transfer_ask(
        tenant=tenant, target_team=Membership.objects.get(user__oidc_subject="bob").team, actor=tenant.created_by
    )
    bob.goto(portal.at("/"))
    expect(bob.get_by_role("heading", name="Transfers offered to your team")).to_be_visible()
    found["dashboard with an offer"] = axe_violations(bob)
    bob.goto(portal.at(f"/requests/{TenantRequest.objects.get(action='transfer').pk}/"))
    found["transfer request (receiving owner)"] = axe_violations(bob)
    serious = {screen: blocking(v) for screen, v in found.items() if blocking(v)}
    assert not serious, "\n".join(describe_violations(screen, v) for screen, v in serious.items())
