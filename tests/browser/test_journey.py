"""The main journey in real browsers, with a real Celery worker provisioning on the dev control plane.

alice asks for a medium namespace → carol approves it after reading the manifests → alice's page
follows the tenant to Ready by itself → alice gets a kubeconfig that works with kubectl → bob
cannot see the tenant → dave finds every step in the audit log and its CSV export.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import Page, expect

from tenants import dispatch
from tenants.models import AuditEvent, Tenant, TenantRequest
from tests.browser.support import PROVISIONING_TIMEOUT_MS, Portal, screenshot
from tests.plugins.kube import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.cluster, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

# Passes Pod Security "restricted"; no resources, so the tier's LimitRange defaults are charged to the quota.
# The dev control plane has no nodes: the pod stays Pending, which is all the quota needs.
POD = """
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  securityContext: {runAsNonRoot: true, runAsUser: 1000, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: web
      image: registry.invalid/checkout:1
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
"""


def _ask_for_medium_namespace(page: Page, name: str) -> None:
    page.get_by_role("link", name="Request a tenant").click()
    expect(page.get_by_role("heading", name="Request a tenant", level=1)).to_be_visible()
    form = page.locator("form", has=page.get_by_role("button", name="Submit request"))
    form.get_by_label("Team").select_option(label="Payments")
    form.get_by_label("Kind of tenant").select_option(label="Namespace")
    form.get_by_label("Name").fill(name)
    form.get_by_role("radio", name="Medium").check()
    form.get_by_label("Cluster").select_option(label="Dev control plane")
    form.get_by_label("Purpose").fill("Checkout service for the payments team.")
    expect(page.get_by_role("region", name="Budget of Payments")).to_be_visible()
    screenshot(page, "request-form")
    form.get_by_role("button", name="Submit request").click()


def _download_kubeconfig(page: Page, folder: Path) -> Path:
    """The tenant page's "Download kubeconfig", as alice would use it."""
    access = page.get_by_role("region", name="Access")
    access.get_by_label("Valid for").select_option(label="1 hour")
    with page.expect_download() as download:
        access.get_by_role("button", name="Download kubeconfig").click()
    path = folder / download.value.suggested_filename
    download.value.save_as(path)
    return path


def test_alice_asks_carol_approves_the_worker_provisions_and_everyone_sees_only_what_they_may(
    celery_worker,
    live_cluster,
    kubectl,
    portal: Portal,
    tmp_path,
):
    # alice asks for a medium namespace: medium needs an approver.
    alice = portal.page_as("alice")
    _ask_for_medium_namespace(alice, "checkout")
    expect(alice.get_by_role("heading", level=1)).to_contain_text("checkout")
    expect(alice.get_by_role("status").filter(has_text="sent to the approvers")).to_be_visible()
    status = alice.locator("#request-status")
    expect(status).to_contain_text("Request: Pending")
    expect(status).to_contain_text("Updates automatically")
    req = TenantRequest.objects.get(name="checkout")
    tenant_id = str(req.tenant_id)
    polls: list[str] = []
    alice.on("request", lambda r: polls.append(r.url) if "/status/" in r.url else None)

    # carol finds it in her queue, reads the manifests and approves.
    carol = portal.page_as("carol")
    carol.locator("header").get_by_role("link", name=re.compile(r"^Approvals")).click()
    expect(carol).to_have_url(portal.at("/approvals/"))
    row = carol.get_by_role("row", name=re.compile(r"Create checkout"))
    expect(row).to_contain_text("team-payments")
    expect(row).to_contain_text("Medium")
    expect(row).to_contain_text("Alice Andersen")
    screenshot(carol, "approvals")
    row.get_by_role("link", name="Create checkout").click()
    preview = carol.get_by_role("region", name="Manifests that will be created")
    expect(preview).to_contain_text("kind: Namespace")
    expect(preview).to_contain_text("kind: ResourceQuota")
    expect(preview).to_contain_text(f"name: {live_cluster.namespace_prefix}checkout")
    screenshot(carol, "request-detail")
    decision = carol.get_by_role("region", name="Your decision")
    decision.get_by_label("Comment").fill("Fits the payments budget.")
    decision.get_by_role("button", name="Approve").click()
    expect(carol.get_by_role("status")).to_contain_text("Approved: create checkout for team-payments")

    # alice's page follows on its own (htmx polling, then one refresh the server asks for) up to Ready.
    expect(status).to_contain_text("Tenant: Ready", timeout=PROVISIONING_TIMEOUT_MS)
    expect(status).to_contain_text("Request: Approved")
    assert polls, "the request page never polled its status"
    expect(alice.get_by_role("region", name="Decision")).to_contain_text("Carol Chen")

    # The tenant page: quota bars read back from the cluster, monitoring links, a working kubeconfig.
    alice.get_by_role("link", name="View tenant").click()
    expect(alice).to_have_url(portal.at(f"/tenants/{tenant_id}/"))
    tenant = Tenant.objects.get(pk=tenant_id)
    expect(alice.locator("#tenant-status")).to_contain_text("Status: Ready")
    usage = alice.get_by_role("region", name="Quota usage")
    expect(usage.get_by_role("meter", name="Pods")).to_have_attribute("aria-valuetext", "0 of 100")
    expect(usage.get_by_role("meter", name="CPU limit")).to_have_attribute("aria-valuetext", "0 CPU of 8 CPU")
    grafana = alice.get_by_role("region", name="Monitoring").get_by_role("link", name=re.compile("^Grafana"))
    expect(grafana).to_have_attribute("href", f"https://grafana.example.test/d/ns?var-namespace={tenant.namespace}")
    screenshot(alice, "tenant-detail")

    kubeconfig = _download_kubeconfig(alice, tmp_path)
    assert kubeconfig.name == f"{live_cluster.name}-{tenant.namespace}.kubeconfig.yaml"
    config = yaml.safe_load(kubeconfig.read_text())
    assert config["contexts"][0]["context"]["namespace"] == tenant.namespace
    issued = AuditEvent.objects.get(action="tenant.kubeconfig_issued", object_id=tenant_id)
    assert issued.actor.username == "alice" and issued.after["lifetime_seconds"] == 3600
    assert config["users"][0]["user"]["token"] not in str(AuditEvent.objects.values_list("before", "after"))

    def can_i(*args: str) -> str:
        return kubectl("auth", "can-i", *args, kubeconfig=kubeconfig).stdout.strip()

    assert can_i("create", "deployments", "-n", tenant.namespace) == "yes"
    assert can_i("list", "pods", "-n", "kube-system") == "no"
    made = kubectl("apply", "-f", "-", "-n", tenant.namespace, kubeconfig=kubeconfig, input=POD)
    assert made.returncode == 0, made.stderr

    # The bars follow what runs there once the worker reads usage back (the periodic reconcile's job; asked for here).
    dispatch.send(dispatch.REFRESH_USAGE, tenant_id)
    wait_for(
        lambda: (Tenant.objects.get(pk=tenant_id).quota_usage or {}).get("used", {}).get("pods") == "1",
        timeout=60,
        what="the worker to read back the pod's quota usage",
    )
    alice.reload()
    expect(usage.get_by_role("meter", name="Pods")).to_have_attribute("aria-valuetext", "1 of 100")
    expect(usage.get_by_role("meter", name="CPU limit")).to_have_attribute("aria-valuetext", "500m CPU of 8 CPU")
    usage.scroll_into_view_if_needed()
    screenshot(alice, "tenant-detail-quota")

    # bob owns another team: alice's tenant and request do not exist for him.
    bob = portal.page_as("bob")
    assert bob.goto(portal.at(f"/tenants/{tenant_id}/")).status == 404
    assert bob.goto(portal.at(f"/requests/{req.pk}/")).status == 404

    # dave (platform admin) reads every step in the audit log, and in its CSV export.
    dave = portal.page_as("dave")
    dave.locator("header").get_by_role("link", name="Audit log").click()
    events = dave.get_by_role("region", name=re.compile(r"\d+ events"))
    steps = [
        "request.submit",
        "request.approve",
        "tenant.approve",
        "tenant.provisioning",
        "tenant.ready",
        "tenant.kubeconfig_issued",
    ]
    for action in steps:
        expect(events.locator("td code", has_text=re.compile(f"^{re.escape(action)}$")).first).to_be_visible()
    screenshot(dave, "audit")
    with dave.expect_download() as download:
        dave.get_by_role("link", name="Export CSV").click()
    assert download.value.suggested_filename == "berth-audit.csv"
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    about_it = {(row["action"], row["actor_name"]) for row in rows if row["object_id"] in (tenant_id, str(req.pk))}
    assert {
        ("request.submit", "alice"),
        ("request.approve", "carol"),
        ("tenant.approve", "carol"),
        ("tenant.provisioning", "system"),
        ("tenant.ready", "system"),
        ("tenant.kubeconfig_issued", "alice"),
    } <= about_it, about_it

    # Back on alice's dashboard: the tenant is listed as ready and holds part of the team's budget.
    alice.locator("header").get_by_role("link", name="Dashboard").click()
    row = alice.get_by_role("row", name=re.compile("^checkout"))
    expect(row).to_contain_text("Ready")
    expect(alice.get_by_role("region", name="Payments").get_by_role("meter", name="Tenants")).to_have_attribute(
        "aria-valuetext", "1 of 10"
    )
    screenshot(alice, "dashboard")
    alice.locator("header").get_by_role("link", name="API tokens").click()
    alice.get_by_label("Name").fill("CI for payments")
    alice.get_by_role("button", name="Create token").click()
    expect(alice.get_by_role("heading", name="Copy your new token now")).to_be_visible()
    alice.locator("header").get_by_role("link", name="API tokens").click()
    expect(alice.get_by_role("row", name=re.compile("^CI for payments"))).to_contain_text("Active")
    screenshot(alice, "tokens")
