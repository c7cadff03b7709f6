"""Sleep and wake in a real browser: alice (owner of team-payments) presses "Put to sleep" on her tenant's page,
the real worker scales its Deployment to zero on the dev control plane, she sets a nights-and-weekends schedule,
then presses "Wake up" and the Deployment gets its replicas back."""

from __future__ import annotations

import pytest
from kubernetes import client
from playwright.sync_api import Page, expect

from tenants import services
from tenants.models import AuditEvent, Team, Tenant, TenantRequest, Tier, User
from tests.browser.support import (
    PROVISIONING_TIMEOUT_MS,
    Portal,
    axe_violations,
    blocking,
    describe_violations,
    screenshot,
)
from tests.plugins.kube import manifest
from tests.plugins.worker import wait_status
from tests.worker.sleep_workloads import deployment, state

pytestmark = [pytest.mark.browser, pytest.mark.cluster, pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _sleep_state_becomes(page: Page, label: str) -> None:
    """The Sleep card follows the worker by itself (it polls while the change is applied)."""
    expect(page.locator("#sleep-state")).to_have_text(f"Sleep: {label}", timeout=PROVISIONING_TIMEOUT_MS)


def test_alice_puts_her_tenant_to_sleep_sets_a_schedule_and_wakes_it(
    celery_worker, live_cluster, kube_admin, portal: Portal, small, axe_installed
):
    alice = portal.page_as("alice")  # signing in makes alice and team-payments
    Tier.objects.filter(pk=small.pk).update(sleep_allowed=True)
    tenant = services.request_submit(
        actor=User.objects.get(username="alice"),
        action=TenantRequest.Action.CREATE,
        team=Team.objects.get(slug="team-payments"),
        tier=Tier.objects.get(pk=small.pk),
        cluster=live_cluster,
        name="nightly",
    ).tenant
    wait_status(tenant, "ready")
    client.AppsV1Api(kube_admin).create_namespaced_deployment(tenant.namespace, manifest(deployment("api", 2)))

    alice.goto(portal.at(f"/tenants/{tenant.pk}/"))
    card = alice.get_by_role("region", name="Sleep")
    expect(card.locator("#sleep-state")).to_have_text("Sleep: Awake")
    card.get_by_role("button", name="Put to sleep").click()
    expect(alice.get_by_role("status").filter(has_text="is going to sleep")).to_be_visible()
    _sleep_state_becomes(alice, "Asleep")
    assert state(kube_admin, tenant.namespace) == {"Deployment/api": (0, "2")}
    card = alice.get_by_role("region", name="Sleep")
    expect(card).to_contain_text("put to sleep by an owner")
    screenshot(alice, "tenant-asleep")

    card.locator("summary").filter(has_text="Schedule").click()  # the schedule form is folded until opened
    card.get_by_label("Sleep from").fill("19:00")
    card.get_by_label("Wake at").fill("07:00")
    card.get_by_label("Asleep all weekend (Saturday and Sunday)").check()
    card.get_by_role("button", name="Save schedule").click()
    expect(alice.get_by_role("status").filter(has_text="Sleep schedule saved")).to_be_visible()
    saved = Tenant.objects.get(pk=tenant.pk)
    assert services.schedule_json(saved) == {"start": "19:00", "end": "07:00", "weekends": True, "time_zone": "UTC"}
    # The Sleep card, asleep and with its schedule open, has no serious accessibility problem (axe-core; the
    # second page lets axe's script in past the Content-Security-Policy).
    audit = portal.page_as("alice", bypass_csp=True)
    audit.goto(portal.at(f"/tenants/{tenant.pk}/"))
    found = blocking(axe_violations(audit))
    assert not found, describe_violations("tenant-asleep", found)
    audit.close()

    alice.get_by_role("region", name="Sleep").get_by_role("button", name="Wake up").click()
    expect(alice.get_by_role("status").filter(has_text="is waking up")).to_be_visible()
    _sleep_state_becomes(alice, "Awake")
    assert state(kube_admin, tenant.namespace) == {"Deployment/api": (2, None)}
    expect(alice.get_by_role("region", name="Sleep").get_by_role("button", name="Put to sleep")).to_be_visible()
    actions = set(AuditEvent.objects.filter(object_id=str(tenant.pk)).values_list("action", flat=True))
    assert {"tenant.slept", "tenant.sleep_schedule_set", "tenant.woke"} <= actions
