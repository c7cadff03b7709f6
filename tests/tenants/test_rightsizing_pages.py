"""Right-sizing on the tenant page: the suggestion with its evidence, and the owner's accept button."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from tenants import services
from tenants.models import AuditEvent, Tenant, TenantRequest, TenantUsageDay, Tier
from tenants.services.rightsizing import ACCEPT_ACTION
from tests.tenants.test_rightsizing import record_history

pytestmark = pytest.mark.django_db


@pytest.fixture
def web(ready_tenant) -> Tenant:
    tenant = ready_tenant()
    record_history(tenant, average=0.12, peak=0.20)
    return tenant


def page(client: Client, tenant: Tenant, **params: str) -> str:
    response = client.get(reverse("tenant-detail", args=[tenant.pk]), params)
    assert response.status_code == 200
    return response.content.decode()


def form_of(html: str) -> dict[str, str]:
    section = html[html.index('id="rightsizing"') :]
    return {
        "fingerprint": re.search(r'name="fingerprint" value="([0-9a-f]{64})"', section).group(1),
        "idempotency_key": re.search(r'name="idempotency_key" value="([0-9a-f]{32})"', section).group(1),
    }


def test_the_owner_sees_the_suggestion_its_evidence_and_the_button(client, alice, web):
    client.force_login(alice)
    html = page(client, web)
    assert "Suggested: a smaller tier, Small." in html
    assert "CPU requested 12% on average, peak 20%" in html
    assert re.search(r"<th scope=\"row\">CPU requested</th><td>12%</td><td>20%</td><td>0</td>", html)
    assert 'id="accept-rightsizing"' in html and "Move to Small" in html
    assert "approved automatically" in html  # small approves every request itself


def test_a_member_sees_the_suggestion_without_the_button(client, amir, web):
    client.force_login(amir)
    html = page(client, web)
    assert "Suggested: a smaller tier, Small." in html
    assert 'id="accept-rightsizing"' not in html and "A team owner can accept this suggestion." in html


def test_no_history_says_why_there_is_no_suggestion(client, alice, ready_tenant):
    client.force_login(alice)
    html = page(client, ready_tenant())
    assert "No change suggested. No usage recorded on this tier in the last 14 days." in html
    assert 'id="accept-rightsizing"' not in html


def test_pressing_accept_files_the_request_and_leads_to_it(client, alice, web, dispatched):
    client.force_login(alice)
    data = form_of(page(client, web))
    response = client.post(reverse("tenant-rightsizing-accept", args=[web.pk]), data, follow=True)
    req = TenantRequest.objects.get(action="change_tier")
    assert response.redirect_chain[-1][0] == reverse("request-detail", args=[req.pk])
    assert "moves to tier Small: approved automatically" in response.content.decode()
    assert Tenant.objects.get(pk=web.pk).tier.name == "small"
    assert AuditEvent.objects.filter(action=ACCEPT_ACTION, after__request=str(req.pk)).exists()
    # A second press of the same form: the same request, not another.
    client.post(reverse("tenant-rightsizing-accept", args=[web.pk]), data)
    assert TenantRequest.objects.filter(action="change_tier").count() == 1


def test_a_stale_suggestion_is_refused_on_the_page(client, alice, web):
    client.force_login(alice)
    data = form_of(page(client, web))
    Tier.objects.filter(name="medium").update(cpu_limit_millis=9000)  # an admin changed the tier meanwhile
    response = client.post(reverse("tenant-rightsizing-accept", args=[web.pk]), data, follow=True)
    assert response.redirect_chain[-1][0] == reverse("tenant-detail", args=[web.pk])
    assert "This suggestion is out of date" in response.content.decode()
    assert not TenantRequest.objects.filter(action="change_tier").exists()


def test_a_member_posting_anyway_gets_403_and_another_team_404(client, amir, bob, web):
    fingerprint = services.rightsizing_assess(tenant=web).fingerprint
    url = reverse("tenant-rightsizing-accept", args=[web.pk])
    client.force_login(amir)
    assert client.post(url, {"fingerprint": fingerprint, "idempotency_key": "k" * 32}).status_code == 403
    client.force_login(bob)
    assert client.post(url, {"fingerprint": fingerprint, "idempotency_key": "k" * 32}).status_code == 404
    assert not TenantRequest.objects.filter(action="change_tier").exists()


def test_dismissing_on_the_page_hides_the_suggestion(client, alice, web):
    client.force_login(alice)
    data = form_of(page(client, web))
    response = client.post(reverse("tenant-rightsizing-dismiss", args=[web.pk]), data, follow=True)
    html = response.content.decode()
    assert response.redirect_chain[-1][0] == reverse("tenant-detail", args=[web.pk])
    assert "The suggestion of tier Small was dismissed until" in html
    assert 'id="accept-rightsizing"' not in html and 'id="dismiss-rightsizing"' not in html


def add_measured(tenant: Tenant, *, cpu: float, memory: float, hours: float = 24.0) -> None:
    """Measured usage on each recorded day: CPU and memory at these shares of the requests quotas, over ``hours``."""
    for row in TenantUsageDay.objects.filter(tenant=tenant):
        seconds = hours * 3600
        for resource, quota, share in (
            ("measured.cpu", "requests.cpu", cpu),
            ("measured.memory", "requests.memory", memory),
        ):
            hard = row.usage[quota]["hard"]
            row.usage[resource] = {
                "used_seconds": share * hard * seconds,
                "max": share * hard,
                "hard": hard,
                "seconds": seconds,
            }
        row.usage["measured.memory"]["limit"] = row.usage["limits.memory"]["hard"]
        row.save(update_fields=["usage"])


def test_the_card_says_requests_were_the_evidence_on_a_cluster_without_prometheus(client, alice, web):
    client.force_login(alice)
    html = page(client, web, tab="quota")
    assert '<p class="small" id="rightsizing-basis"><strong>Evidence: quota requests.</strong>' in html
    assert "CPU and memory judged on what the pods requested of the quota (this cluster has no Prometheus" in html


def test_the_card_shows_measured_evidence_and_what_the_owner_must_do_first(client, alice, ready_tenant, settings):
    tenant = ready_tenant()
    record_history(tenant, average=0.8, peak=0.8)  # pods request 80% of medium: requests alone keep the tier
    add_measured(tenant, cpu=0.05, memory=0.08)
    settings.BERTH_PROMETHEUS = {"p": {"url": "http://127.0.0.1:9"}}
    tenant.cluster.prometheus = "p"
    tenant.cluster.save(update_fields=["prometheus"])
    client.force_login(alice)
    html = page(client, tenant, tab="quota")
    assert "<strong>Evidence: measured (Prometheus).</strong>" in html
    assert "as the cluster&#x27;s Prometheus measured it (100% of the window)" in html
    assert "Suggested: a smaller tier, Small." in html
    assert re.search(r"<th scope=\"row\">CPU used \(measured\)</th><td>5%</td><td>5%</td><td>0</td>", html)
    assert "lower their requests and limits first" in html


def test_the_card_says_why_too_little_measured_usage_was_not_used(client, alice, ready_tenant, settings):
    tenant = ready_tenant()
    record_history(tenant, average=0.8, peak=0.8)
    add_measured(tenant, cpu=0.05, memory=0.08, hours=12)
    settings.BERTH_PROMETHEUS = {"p": "http://127.0.0.1:9091"}  # a label proxy alone: no measured usage from it
    tenant.cluster.prometheus = "p"
    tenant.cluster.save(update_fields=["prometheus"])
    client.force_login(alice)
    html = page(client, tenant, tab="quota")
    assert "<strong>Evidence: quota requests.</strong>" in html
    assert "this cluster has no Prometheus to measure them" in html
    settings.BERTH_PROMETHEUS = {"p": {"label_proxy": "http://127.0.0.1:9091", "url": "http://127.0.0.1:9"}}
    html = page(client, tenant, tab="quota")
    assert "(measured usage covers 50% of the window, 80% needed)" in html
    assert "No change suggested." in html
