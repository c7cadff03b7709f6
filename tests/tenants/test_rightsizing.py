"""Right-sizing through the services and the API: the suggestion from recorded history, and accepting it."""

from __future__ import annotations

import datetime as dt

import pytest
import yaml
from django.utils import timezone

from tenants import services
from tenants.errors import Forbidden, InvalidTransition
from tenants.models import AuditEvent, Tenant, TenantRequest, TenantSleepPeriod, TenantUsageDay, Tier
from tenants.rightsizing import TIER_QUOTA, tier_quota
from tenants.services.rightsizing import ACCEPT_ACTION, DISMISS_ACTION

API = "/api/v1"
CPU_AND_MEMORY = ("requests.cpu", "limits.cpu", "requests.memory", "limits.memory")


def record_history(tenant: Tenant, *, average: float, peak: float, days: int = 14, tier: Tier | None = None) -> None:
    """``days`` complete days before today on ``tier`` (default: the tenant's): CPU and memory at these shares of
    the quota, 1 GiB of storage and 2 of each other object (no load balancer) throughout.
    """
    tier = tier or tenant.tier
    hard = tier_quota(tier)
    steady = {**dict.fromkeys(TIER_QUOTA, 2.0), "requests.storage": float(2**30), "services.loadbalancers": 0.0}
    today = timezone.now().date()
    for i in range(1, days + 1):
        usage = {}
        for r in TIER_QUOTA:
            mean, top = (average * hard[r], peak * hard[r]) if r in CPU_AND_MEMORY else (steady[r], steady[r])
            usage[r] = {"used_seconds": mean * 86400, "max": top, "hard": hard[r]}
        TenantUsageDay.objects.update_or_create(
            tenant=tenant,
            day=today - dt.timedelta(days=i),
            defaults={"team": tenant.team, "tier": tier, "seconds": 86400.0, "samples": 288, "usage": usage},
        )


@pytest.fixture
def roomy(team_a) -> None:
    """team-a's budget takes a large tenant."""
    type(team_a).objects.filter(pk=team_a.pk).update(budget_cpu_millis=64000, budget_memory_mib=131072)


@pytest.fixture
def web(ready_tenant, medium) -> Tenant:
    """alice's ready tenant on medium, used at 12% on average with peaks of 20% for two weeks."""
    tenant = ready_tenant()
    record_history(tenant, average=0.12, peak=0.20)
    return tenant


def test_an_under_used_tenant_is_offered_a_smaller_tier(web):
    found = services.rightsizing_assess(tenant=web)
    assert (found.direction, found.target.name) == ("down", "small")
    assert "CPU requested 12% on average, peak 20%" in found.reason


def test_history_on_another_tier_does_not_count(ready_tenant, large):
    tenant = ready_tenant()
    record_history(tenant, average=0.01, peak=0.02, tier=large)  # before a tier change, say
    found = services.rightsizing_assess(tenant=tenant)
    assert found.target is None and found.covered_seconds == 0


def test_sleep_is_left_out_of_the_averages(web):
    # Asleep 18 h of each day: the same usage over 6 awake hours is 48% of the quota, not under-use.
    today = timezone.now().date()
    for i in range(1, 15):
        start = dt.datetime.combine(today - dt.timedelta(days=i), dt.time(6), tzinfo=dt.UTC)
        TenantSleepPeriod.objects.create(
            tenant=web, reason="schedule", started_at=start, ended_at=start + dt.timedelta(hours=18)
        )
    found = services.rightsizing_assess(tenant=web)
    assert found.target is None
    cpu = next(e for e in found.evidence if e.resource == "requests.cpu")
    assert cpu.average_share == pytest.approx(0.48)


def test_accepting_files_a_change_tier_request_and_marks_it_in_the_audit(web, alice, dispatched):
    found = services.rightsizing_assess(tenant=web)
    req = services.rightsizing_accept(tenant=web, actor=alice, fingerprint=found.fingerprint)
    assert (req.action, req.tier.name, req.requested_by) == ("change_tier", "small", alice)
    assert req.purpose.startswith("Right-sizing suggestion: Used under 30% of Medium")
    # small approves every request itself; the tier change is carried out.
    assert req.status == TenantRequest.Status.APPROVED and Tenant.objects.get(pk=web.pk).tier.name == "small"
    marker = AuditEvent.objects.get(action=ACCEPT_ACTION)
    assert marker.actor == alice and marker.object_id == str(web.pk)
    assert marker.before == {"tier": "medium"}
    assert marker.after["request"] == str(req.pk) and marker.after["fingerprint"] == found.fingerprint
    assert marker.after["direction"] == "down" and marker.after["tier"] == "small"
    actions = list(AuditEvent.objects.filter(object_id__in=[str(req.pk), str(web.pk)]).values_list("action", flat=True))
    assert {"request.submit", "request.approve", "tenant.change_tier", ACCEPT_ACTION} <= set(actions)


def test_a_stale_suggestion_is_refused_and_files_nothing(web, alice):
    found = services.rightsizing_assess(tenant=web)
    record_history(web, average=0.13, peak=0.20, days=1)  # yesterday's history changed
    with pytest.raises(InvalidTransition, match="out of date"):
        services.rightsizing_accept(tenant=web, actor=alice, fingerprint=found.fingerprint)
    assert not TenantRequest.objects.filter(action="change_tier").exists()
    assert not AuditEvent.objects.filter(action=ACCEPT_ACTION).exists()


def test_a_member_or_viewer_cannot_accept(web, amir, vera):
    found = services.rightsizing_assess(tenant=web)
    for person in (amir, vera):
        with pytest.raises(Forbidden):
            services.rightsizing_accept(tenant=web, actor=person, fingerprint=found.fingerprint)


def test_a_downgrade_auto_approves_when_the_tier_it_leaves_says_so(roomy, ready_tenant, alice, carol, large, medium):
    tenant = ready_tenant(tier=large)  # large needs an approver: carol approved it
    record_history(tenant, average=0.05, peak=0.2)
    found = services.rightsizing_assess(tenant=tenant)
    assert found.target == medium and not medium.auto_approve
    # Without the tier's say-so, a downgrade waits for an approver like any change.
    req = services.rightsizing_accept(tenant=tenant, actor=alice, fingerprint=found.fingerprint)
    assert req.status == TenantRequest.Status.PENDING and not req.auto_approved
    services.request_cancel(tenant_request=req, actor=alice)
    Tier.objects.filter(pk=large.pk).update(auto_approve_downgrades=True)
    tenant = Tenant.objects.get(pk=tenant.pk)
    req = services.rightsizing_accept(tenant=tenant, actor=alice, fingerprint=found.fingerprint)
    assert req.status == TenantRequest.Status.APPROVED and req.auto_approved and req.decided_by is None
    assert "a downgrade from tier large" in req.decision_comment
    assert Tenant.objects.get(pk=tenant.pk).tier == medium


def test_an_upgrade_waits_for_an_approver_even_from_a_tier_that_lets_downgrades_through(
    roomy, ready_tenant, alice, medium
):
    tenant = ready_tenant()
    Tier.objects.filter(pk=medium.pk).update(auto_approve_downgrades=True)
    tenant = Tenant.objects.get(pk=tenant.pk)
    record_history(tenant, average=0.6, peak=0.95)
    found = services.rightsizing_assess(tenant=tenant)
    assert (found.direction, found.target.name) == ("up", "large")
    req = services.rightsizing_accept(tenant=tenant, actor=alice, fingerprint=found.fingerprint)
    assert req.status == TenantRequest.Status.PENDING


def test_a_plain_change_tier_request_to_a_smaller_tier_also_auto_approves(roomy, ready_tenant, alice, large, medium):
    tenant = ready_tenant(tier=large)
    Tier.objects.filter(pk=large.pk).update(auto_approve_downgrades=True)
    tenant = Tenant.objects.get(pk=tenant.pk)
    req = services.request_submit(actor=alice, action="change_tier", tenant=tenant, tier=medium)
    assert req.status == TenantRequest.Status.APPROVED and req.auto_approved


def test_a_budget_that_cannot_take_an_upgrade_refuses_it(ready_tenant, alice, team_a):
    tenant = ready_tenant()
    record_history(tenant, average=0.6, peak=0.95)
    found = services.rightsizing_assess(tenant=tenant)
    type(team_a).objects.filter(pk=team_a.pk).update(budget_cpu_millis=8000)
    with pytest.raises(Exception, match="budget"):
        services.rightsizing_accept(tenant=tenant, actor=alice, fingerprint=found.fingerprint)


# --- API ------------------------------------------------------------------------------------------------------


def test_the_api_shows_the_suggestion_with_its_evidence(api, alice, web):
    body = api(alice).get(f"{API}/tenants/{web.pk}/rightsizing/").json()
    assert body["tier"] == "medium" and body["days"] == 14 and body["coverage"] == 1.0
    assert body["suggestion"]["direction"] == "down" and body["suggestion"]["tier"] == "small"
    assert len(body["suggestion"]["fingerprint"]) == 64
    cpu = next(e for e in body["evidence"] if e["resource"] == "requests.cpu")
    assert cpu == {
        "resource": "requests.cpu",
        "label": "CPU requested",
        "average": pytest.approx(0.48),
        "peak": pytest.approx(0.8),
        "quota": 4.0,
        "average_share": pytest.approx(0.12),
        "peak_share": pytest.approx(0.2),
        "near_limit_days": 0,
        "limit": None,
    }
    # No Prometheus measured it: judged on the quota's requests, as the answer says.
    assert (body["basis"], body["basis_label"], body["measured_seconds"], body["measured_coverage"]) == (
        "requests",
        "quota requests",
        0.0,
        0.0,
    )


def test_no_history_no_suggestion(api, alice, ready_tenant):
    tenant = ready_tenant()
    body = api(alice).get(f"{API}/tenants/{tenant.pk}/rightsizing/").json()
    assert body["suggestion"] is None and body["coverage"] == 0 and body["evidence"] == []
    assert body["notes"] == ["No usage recorded on this tier in the last 14 days."]


def test_another_teams_tenant_is_404(api, bob, web):
    client = api(bob)
    assert client.get(f"{API}/tenants/{web.pk}/rightsizing/").status_code == 404
    found = services.rightsizing_assess(tenant=web)
    response = client.post(f"{API}/tenants/{web.pk}/rightsizing/accept/", {"fingerprint": found.fingerprint})
    assert response.status_code == 404
    assert not TenantRequest.objects.filter(action="change_tier").exists()


def test_a_member_sees_the_suggestion_but_cannot_accept_it(api, amir, web):
    client = api(amir)
    body = client.get(f"{API}/tenants/{web.pk}/rightsizing/").json()
    response = client.post(
        f"{API}/tenants/{web.pk}/rightsizing/accept/", {"fingerprint": body["suggestion"]["fingerprint"]}, format="json"
    )
    assert response.status_code == 403 and "team owners" in response.json()["detail"]
    assert AuditEvent.objects.filter(action="authz.denied", actor=amir).exists()


def test_accepting_through_the_api_answers_the_request(api, alice, web, dispatched):
    client = api(alice)
    fingerprint = client.get(f"{API}/tenants/{web.pk}/rightsizing/").json()["suggestion"]["fingerprint"]
    response = client.post(
        f"{API}/tenants/{web.pk}/rightsizing/accept/",
        {"fingerprint": fingerprint},
        format="json",
        HTTP_IDEMPOTENCY_KEY="accept-1",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["action"], body["tier"], body["status"], body["auto_approved"]) == (
        "change_tier",
        "small",
        "approved",
        True,
    )
    # The same key for the same suggestion: the first request again, though the tier has changed since.
    again = client.post(
        f"{API}/tenants/{web.pk}/rightsizing/accept/",
        {"fingerprint": fingerprint},
        format="json",
        HTTP_IDEMPOTENCY_KEY="accept-1",
    )
    assert again.status_code == 201 and again.json()["id"] == body["id"]
    # Without the key, the suggestion is stale now: the tenant is on small.
    stale = client.post(f"{API}/tenants/{web.pk}/rightsizing/accept/", {"fingerprint": fingerprint}, format="json")
    assert stale.status_code == 409 and "out of date" in stale.json()["detail"]
    # The same key for another suggestion: 409.
    other = client.post(
        f"{API}/tenants/{web.pk}/rightsizing/accept/",
        {"fingerprint": "0" * 64},
        format="json",
        HTTP_IDEMPOTENCY_KEY="accept-1",
    )
    assert other.status_code == 409
    assert TenantRequest.objects.filter(action="change_tier").count() == 1


def test_a_stale_fingerprint_is_409(api, alice, web):
    response = api(alice).post(f"{API}/tenants/{web.pk}/rightsizing/accept/", {"fingerprint": "a" * 64}, format="json")
    assert response.status_code == 409
    assert not TenantRequest.objects.filter(action="change_tier").exists()


@pytest.mark.parametrize(
    "body",
    [{}, {"fingerprint": "xyz"}, {"fingerprint": 12345}, {"fingerprint": "A" * 64}, {"fingerprint": "a" * 64, "x": 1}],
)
def test_a_malformed_accept_is_a_field_error(api, alice, web, body):
    response = api(alice).post(f"{API}/tenants/{web.pk}/rightsizing/accept/", body, format="json")
    assert response.status_code == 400
    assert set(response.json()) <= {"fingerprint", "x"}


def test_a_pending_request_makes_accepting_409(api, alice, web, small):
    services.request_submit(
        actor=alice, action="extend", tenant=web, requested_expiry=timezone.now().date() + dt.timedelta(days=100)
    )
    fingerprint = services.rightsizing_assess(tenant=web).fingerprint
    response = api(alice).post(
        f"{API}/tenants/{web.pk}/rightsizing/accept/", {"fingerprint": fingerprint}, format="json"
    )
    assert response.status_code == 409 and "pending" in response.json()["detail"]


# --- dismissing -----------------------------------------------------------------------------------------------


def test_a_dismissed_suggestion_stays_hidden_for_a_window_and_is_audited(web, alice, dispatched):
    found = services.rightsizing_assess(tenant=web)
    after = services.rightsizing_dismiss(tenant=web, actor=alice, fingerprint=found.fingerprint)
    until = timezone.now().date() + dt.timedelta(days=14)
    assert after.target is None and after.notes == (f"The suggestion of tier Small was dismissed until {until}.",)
    row = AuditEvent.objects.get(action=DISMISS_ACTION)
    assert row.actor == alice and row.after["dismissed"] == {"direction": "down", "tier": "small", "until": str(until)}
    # Accepting what was dismissed is accepting what is no longer shown.
    with pytest.raises(InvalidTransition):
        services.rightsizing_accept(tenant=web, actor=alice, fingerprint=found.fingerprint)
    # Once the dismissal has run out, it shows again; a different suggestion shows at once.
    yesterday = timezone.now().date() - dt.timedelta(days=1)
    Tenant.objects.filter(pk=web.pk).update(rightsizing_dismissed={**row.after["dismissed"], "until": str(yesterday)})
    tenant = Tenant.objects.get(pk=web.pk)
    assert services.rightsizing_assess(tenant=tenant).fingerprint == found.fingerprint
    Tenant.objects.filter(pk=web.pk).update(rightsizing_dismissed=row.after["dismissed"])
    tenant = Tenant.objects.get(pk=web.pk)
    record_history(tenant, average=0.6, peak=0.95)
    assert services.rightsizing_assess(tenant=tenant).target.name == "large"


def test_dismissing_over_the_api(api, alice, amir, bob, web):
    fingerprint = services.rightsizing_assess(tenant=web).fingerprint
    url = f"{API}/tenants/{web.pk}/rightsizing/dismiss/"
    assert api(bob).post(url, {"fingerprint": fingerprint}, format="json").status_code == 404
    assert api(amir).post(url, {"fingerprint": fingerprint}, format="json").status_code == 403
    assert api(alice).post(url, {"fingerprint": "b" * 64}, format="json").status_code == 409
    response = api(alice).post(url, {"fingerprint": fingerprint}, format="json")
    assert response.status_code == 200 and response.json()["suggestion"] is None
    assert "dismissed until" in response.json()["notes"][0]
    assert api(alice).post(url, {"fingerprint": fingerprint}, format="json").status_code == 409  # nothing to dismiss


def test_a_tenant_that_is_not_ready_gets_evidence_but_no_suggestion(web):
    Tenant.objects.filter(pk=web.pk).update(status="failed")
    found = services.rightsizing_assess(tenant=Tenant.objects.get(pk=web.pk))
    assert found.target is None and found.notes == ("A tenant that is failed cannot change tier.",)
    assert found.evidence


def test_the_history_the_worker_records_is_what_the_rule_reads(ready_tenant, settings):
    """Hourly readings through usage_record_readings for two weeks: 0.5 of 4 CPUs requested, 0.8 at the daily peak."""
    settings.BERTH_USAGE_MAX_GAP_SECONDS = 3600
    tenant = ready_tenant()
    hard = {"requests.cpu": "4", "limits.cpu": "8", "requests.memory": "8Gi", "limits.memory": "16Gi", "pods": "100"}
    start = dt.datetime.combine(timezone.now().date() - dt.timedelta(days=14), dt.time(), tzinfo=dt.UTC)
    for hour in range(14 * 24 + 1):
        peak = hour % 24 == 12
        used = {
            "requests.cpu": "800m" if peak else "500m",
            "limits.cpu": "1500m" if peak else "1",
            "requests.memory": "1Gi",
            "limits.memory": "2Gi",
            "pods": "3",
        }
        services.usage_record_readings(
            readings={str(tenant.pk): {"hard": hard, "used": used}}, at=start + dt.timedelta(hours=hour)
        )
    found = services.rightsizing_assess(tenant=Tenant.objects.get(pk=tenant.pk))
    assert found.coverage == 1.0
    cpu = next(e for e in found.evidence if e.resource == "requests.cpu")
    # Each reading covers the hour before it: 23 hours at 0.5 and 1 hour at 0.8 cores (the reading at 12:00) a day.
    assert cpu.average == pytest.approx((23 * 0.5 + 0.8) / 24) and cpu.peak == 0.8 and cpu.quota == 4.0
    assert found.target is not None, found.notes
    assert (found.direction, found.target.name) == ("down", "small")
    assert "CPU requested 13% on average, peak 20%" in found.reason


def test_a_smaller_tier_that_grants_more_is_not_let_through(ready_tenant, roomy, alice, large, cluster):
    """An owner cannot use a tier's auto-approved downgrades to reach looser isolation without an approver."""
    tenant = ready_tenant(tier=large)
    Tier.objects.filter(pk=large.pk).update(auto_approve_downgrades=True)
    privileged = Tier.objects.create(
        name="tiny-privileged",
        display_name="Tiny (privileged)",
        cpu_request_millis=100,
        cpu_limit_millis=200,
        memory_request_mib=128,
        memory_limit_mib=256,
        pod_security_level="privileged",
    )
    cluster.tiers.add(privileged)
    req = services.request_submit(
        actor=alice, action="change_tier", tenant=Tenant.objects.get(pk=tenant.pk), tier=privileged
    )
    assert req.status == TenantRequest.Status.PENDING and not req.auto_approved
    assert Tenant.objects.get(pk=tenant.pk).tier == large


def test_the_schema_says_exactly_what_the_endpoints_answer(api, erin):
    schema = yaml.safe_load(api(erin).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi").content)
    base = "/api/v1/tenants/{id}/rightsizing/"
    get = schema["paths"][base]["get"]
    accept = schema["paths"][base + "accept/"]["post"]
    dismiss = schema["paths"][base + "dismiss/"]["post"]
    assert set(get["responses"]) == {"200", "400", "401", "404", "429", "503"}
    assert set(accept["responses"]) == {"201", "400", "401", "403", "404", "409", "415", "429", "503"}
    assert set(dismiss["responses"]) == {"200", "400", "401", "403", "404", "409", "415", "429", "503"}
    ref = {"$ref": "#/components/schemas/Rightsizing"}
    assert get["responses"]["200"]["content"]["application/json"]["schema"] == ref
    assert dismiss["responses"]["200"]["content"]["application/json"]["schema"] == ref
    assert accept["responses"]["201"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Request"
    }
    components = schema["components"]["schemas"]
    body = components["RightsizingAcceptRequest"]
    assert body["required"] == ["fingerprint"] and body["additionalProperties"] is False
    assert body["properties"]["fingerprint"]["pattern"] == "^[0-9a-f]{64}$"
    rightsizing = components["Rightsizing"]["properties"]
    assert rightsizing["suggestion"]["nullable"] is True
    assert (rightsizing["coverage"]["minimum"], rightsizing["coverage"]["maximum"]) == (0, 1)
    assert components["RightsizingEvidence"]["properties"]["average_share"]["nullable"] is True
    suggestion = components["RightsizingSuggestion"]["properties"]
    assert components[suggestion["direction"]["$ref"].rsplit("/", 1)[1]]["enum"] == ["down", "up"]
    links = schema["paths"]["/api/v1/tenants/{id}/"]["get"]["responses"]["200"]["links"]
    assert links["GetRightsizing"]["operationId"] == "v1_tenants_rightsizing_retrieve"
