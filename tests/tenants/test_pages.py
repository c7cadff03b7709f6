"""The browser UI: who sees which page, forms that call services, htmx polling, CSP hygiene."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from collections.abc import Callable

import pytest
from django.template.loader import get_template
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tenants import hooks, services
from tenants.models import ApiToken, AuditEvent, Tenant, TenantRequest, TenantStatus, User
from tenants.views import fleet_pages
from tests.fixtures import FakeWorkerHooks

from .conftest import vacuum_analyze

pytestmark = pytest.mark.django_db


@pytest.fixture
def as_user(client: Client) -> Callable[[User | None], Client]:
    """``as_user(alice)``: the test client signed in as that person (``as_user(None)``: signed out)."""

    def _as(user: User | None) -> Client:
        client.logout()
        if user is not None:
            client.force_login(user)
        return client

    return _as


@pytest.fixture
def roomy_team_a(team_a):
    """team-a with budget for many tenants, for tests about pages rather than budgets."""
    team_a.budget_cpu_millis, team_a.budget_memory_mib, team_a.budget_storage_gib, team_a.budget_tenants = (
        10**6,
        10**7,
        10**5,
        100,
    )
    team_a.save()
    return team_a


@pytest.fixture
def pending(submit) -> TenantRequest:
    """alice asks for a medium namespace in team-a: medium needs an approver, so it waits."""
    return submit(name="web", purpose="The payments web tier.")


def _form_key(html: str) -> str:
    return re.search(r'name="idempotency_key" value="([0-9a-f]{32})"', html).group(1)


def _create_post(team, tier, cluster, **overrides) -> dict:
    data = {
        "team": team.pk,
        "kind": "namespace",
        "name": "api",
        "tier": tier.pk,
        "cluster": cluster.pk,
        "purpose": "Our API.",
        "requested_expiry": "",
        "idempotency_key": "k" * 32,
    }
    data.update(overrides)
    return data


# --- Who may open what ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dashboard", "request-new", "approvals", "audit", "audit-export", "tokens"])
def test_anonymous_is_sent_to_sign_in(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=")


def test_anonymous_is_sent_to_sign_in_from_tenant_and_request_pages(client, pending):
    for url in (
        reverse("request-detail", args=[pending.pk]),
        reverse("tenant-detail", args=[pending.tenant_id]),
        reverse("tenant-status", args=[pending.tenant_id]),
    ):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url


def test_sign_in_page_offers_the_organisations_provider(client, alice):
    response = client.get(reverse("login") + "?next=/tokens/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Sign in with your organisation (OpenID Connect)" in html
    assert f'href="{reverse("oidc_authentication_init")}?next=/tokens/"' in html

    client.force_login(alice)
    assert client.get(reverse("login"))["Location"] == reverse("dashboard")


def test_sign_in_page_ignores_a_foreign_next_url(client):
    html = client.get(reverse("login") + "?next=https://evil.example/").content.decode()
    assert "evil.example" not in html


def test_sign_out_is_post_only_and_ends_the_session(as_user, alice):
    client = as_user(alice)
    assert client.get(reverse("logout")).status_code == 405
    response = client.post(reverse("logout"))
    assert response.status_code == 302
    assert response["Location"].endswith("/login/")
    assert client.get(reverse("dashboard")).status_code == 302
    assert AuditEvent.objects.filter(action="auth.logout", actor=alice).exists()


@pytest.mark.parametrize("role", ["alice", "amir", "vera", "bob", "carol", "dave", "erin"])
@pytest.mark.parametrize("name", ["dashboard", "audit", "tokens"])
def test_everyone_signed_in_sees_the_common_pages(request, as_user, cluster, role, name):
    response = as_user(request.getfixturevalue(role)).get(reverse(name))
    assert response.status_code == 200
    assert b"Berth" in response.content


@pytest.mark.parametrize("role, status", [("alice", 200), ("amir", 200), ("dave", 200), ("vera", 403), ("erin", 403)])
def test_only_team_writers_open_the_request_form(request, as_user, team_a, cluster, role, status):
    response = as_user(request.getfixturevalue(role)).get(reverse("request-new"))
    assert response.status_code == status
    if status == 403:
        assert b"You are not allowed" in response.content


def test_vera_cannot_submit_for_team_a_even_by_forging_the_form(as_user, vera, team_a, medium, cluster):
    response = as_user(vera).post(reverse("request-new"), _create_post(team_a, medium, cluster))
    assert response.status_code == 403
    assert not TenantRequest.objects.exists()


def test_bob_cannot_pick_team_a_in_the_request_form(as_user, bob, team_a, medium, cluster):
    response = as_user(bob).post(reverse("request-new"), _create_post(team_a, medium, cluster))
    assert response.status_code == 200
    assert 'id="id_team_error"' in response.content.decode()
    assert not TenantRequest.objects.exists()


@pytest.mark.parametrize("role, status", [("carol", 200), ("dave", 200), ("alice", 403), ("erin", 403)])
def test_only_deciders_open_the_approval_queue(request, as_user, role, status):
    response = as_user(request.getfixturevalue(role)).get(reverse("approvals"))
    assert response.status_code == status


def test_a_refused_page_is_audited(as_user, alice):
    as_user(alice).get(reverse("approvals"))
    event = AuditEvent.objects.get(action="authz.denied")
    assert event.actor == alice and event.after["path"] == "/approvals/"


@pytest.mark.parametrize("role", ["alice", "amir", "vera", "carol", "dave"])
def test_team_and_deciders_see_the_tenant_and_request_pages(request, as_user, pending, role):
    client = as_user(request.getfixturevalue(role))
    for name, pk in (
        ("request-detail", pending.pk),
        ("request-status", pending.pk),
        ("tenant-detail", pending.tenant_id),
        ("tenant-status", pending.tenant_id),
    ):
        assert client.get(reverse(name, args=[pk])).status_code == 200, name


@pytest.mark.parametrize("role", ["bob", "erin"])
def test_others_get_404_on_alices_tenant_and_request(request, as_user, pending, role):
    client = as_user(request.getfixturevalue(role))
    req, tenant = pending.pk, pending.tenant_id
    gets = [
        ("request-detail", req),
        ("request-status", req),
        ("tenant-detail", tenant),
        ("tenant-status", tenant),
        ("tenant-decommission", tenant),
    ]
    posts = [
        ("request-approve", req),
        ("request-reject", req),
        ("request-cancel", req),
        ("tenant-request", tenant),
        ("tenant-decommission", tenant),
        ("tenant-retry", tenant),
        ("tenant-isolation-check", tenant),
    ]
    for name, pk in gets:
        response = client.get(reverse(name, args=[pk]))
        assert response.status_code == 404, name
        assert b"There is nothing here" in response.content
    for name, pk in posts:
        assert client.post(reverse(name, args=[pk]), {"action": "delete"}).status_code == 404, name
    pending.refresh_from_db()
    assert pending.status == TenantRequest.Status.PENDING


# --- Asking for a tenant ---------------------------------------------------------------------


def test_request_form_compares_tiers_and_shows_the_budget(as_user, alice, cluster):
    html = as_user(alice).get(reverse("request-new")).content.decode()
    for text in (
        "Pod Security level",
        "Network profile",
        "Credential lifetime",
        "Default expiry",
        "Pods",
        "Restricted",
        "Dedicated pool",
        "Automatic",
        "Approver decides",
        "1 hour",
        "12 hours",
        "Budget of Team A",
    ):
        assert text in html, text
    assert 'hx-get="/requests/new/budget/"' in html


def test_budget_panel_follows_the_team_picked_and_stays_in_the_team(as_user, alice, bob, team_a, cluster):
    response = as_user(alice).get(reverse("request-budget"), {"team": team_a.pk})
    assert response.status_code == 200
    assert b"Budget of Team A" in response.content and b"<html" not in response.content
    assert as_user(bob).get(reverse("request-budget"), {"team": team_a.pk}).status_code == 404


@pytest.mark.parametrize(
    "overrides, field, message",
    [
        ({"name": "Bad_Name!"}, "name", "RFC 1123"),
        ({"name": "default"}, "name", "reserved"),
        ({"name": ""}, "name", "This field is required."),
        ({"requested_expiry": "2001-01-01"}, "requested_expiry", "Choose a date in the future."),
        ({"requested_expiry": "03/04/2030"}, "requested_expiry", "Enter a date as YYYY-MM-DD."),
        ({"kind": "openshift"}, "kind", "Select a valid choice"),
    ],
)
def test_bad_input_is_shown_next_to_the_field_and_nothing_is_created(
    as_user, alice, team_a, medium, cluster, overrides, field, message
):
    response = as_user(alice).post(reverse("request-new"), _create_post(team_a, medium, cluster, **overrides))
    assert response.status_code == 200
    html = response.content.decode()
    error_list = re.search(rf'<ul class="errorlist" id="id_{field}_error">(.*?)</ul>', html, re.S)
    assert error_list and message in error_list.group(1)
    widget = re.search(rf'<(?:input|select)[^>]*\bid="id_{field}"[^>]*>', html).group(0)
    assert f"id_{field}_error" in widget and 'aria-invalid="true"' in widget
    assert not TenantRequest.objects.exists() and not Tenant.objects.exists()


@pytest.mark.parametrize("typed", ["{:%Y-%m-%d}", "{:%Y%m%d}", " {:%Y-%m-%d} "])
def test_an_expiry_is_read_as_an_iso_date(as_user, alice, team_a, medium, cluster, typed):
    day = timezone.now().date() + dt.timedelta(days=20)
    response = as_user(alice).post(
        reverse("request-new"), _create_post(team_a, medium, cluster, requested_expiry=typed.format(day))
    )
    assert response.status_code == 302
    assert TenantRequest.objects.get().requested_expiry == day


def test_the_expiry_fields_take_iso_dates_as_text(as_user, alice, team_a, medium, cluster):
    html = as_user(alice).get(reverse("request-new")).content.decode()
    widget = re.search(r'<input[^>]*\bid="id_requested_expiry"[^>]*>', html).group(0)
    assert 'type="text"' in widget and 'inputmode="numeric"' in widget and 'autocomplete="off"' in widget
    assert 'aria-describedby="id_requested_expiry_helptext"' in widget
    assert re.search(r'id="id_requested_expiry_helptext">YYYY-MM-DD\.', html)


def test_over_budget_is_shown_on_the_tier_field(as_user, alice, team_a, large, cluster):
    team_a.budget_cpu_millis = 1000
    team_a.save()
    response = as_user(alice).post(reverse("request-new"), _create_post(team_a, large, cluster))
    assert response.status_code == 200
    assert re.search(r'id="id_tier_error">.*budget', response.content.decode(), re.S)
    assert not TenantRequest.objects.exists()


def test_a_good_request_creates_one_pending_request(as_user, alice, team_a, medium, cluster):
    client = as_user(alice)
    key = _form_key(client.get(reverse("request-new")).content.decode())
    response = client.post(reverse("request-new"), _create_post(team_a, medium, cluster, idempotency_key=key))
    req = TenantRequest.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("request-detail", args=[req.pk])
    assert (req.status, req.name, req.requested_by, req.idempotency_key) == (
        TenantRequest.Status.PENDING,
        "api",
        alice,
        key,
    )
    page = client.get(response["Location"]).content.decode()
    assert "was sent to the approvers" in page
    event = AuditEvent.objects.get(action="request.submit")
    assert event.source_ip == "127.0.0.1" and event.request_id


def test_posting_the_same_form_twice_creates_one_request(as_user, alice, team_a, medium, cluster):
    client = as_user(alice)
    key = _form_key(client.get(reverse("request-new")).content.decode())
    data = _create_post(team_a, medium, cluster, idempotency_key=key)
    first = client.post(reverse("request-new"), data)
    second = client.post(reverse("request-new"), data)
    assert first["Location"] == second["Location"]
    assert TenantRequest.objects.count() == 1 and Tenant.objects.count() == 1


def test_each_showing_of_the_form_has_its_own_key_and_is_never_cached(as_user, alice, cluster):
    client = as_user(alice)
    first, second = client.get(reverse("request-new")), client.get(reverse("request-new"))
    assert _form_key(first.content.decode()) != _form_key(second.content.decode())
    assert "no-store" in first["Cache-Control"]


def test_a_small_tenant_is_approved_automatically(
    as_user, alice, team_a, small, cluster, dispatched, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = as_user(alice).post(reverse("request-new"), _create_post(team_a, small, cluster), follow=True)
    req = TenantRequest.objects.get()
    assert req.status == TenantRequest.Status.APPROVED and req.auto_approved
    assert ("worker.tasks.provision_tenant", (str(req.tenant_id),)) in dispatched
    assert "approved automatically" in response.content.decode()


# --- Deciding --------------------------------------------------------------------------------


def test_carol_approves_through_the_page(as_user, carol, pending, dispatched, django_capture_on_commit_callbacks):
    client = as_user(carol)
    html = client.get(reverse("request-detail", args=[pending.pk])).content.decode()
    assert f'action="{reverse("request-approve", args=[pending.pk])}"' in html
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("request-approve", args=[pending.pk]), {"approve-comment": "Looks right."})
    assert response["Location"] == reverse("request-detail", args=[pending.pk])
    pending.refresh_from_db()
    assert (pending.status, pending.decided_by, pending.decision_comment) == (
        TenantRequest.Status.APPROVED,
        carol,
        "Looks right.",
    )
    assert Tenant.objects.get(pk=pending.tenant_id).status == TenantStatus.APPROVED
    assert dispatched == [("worker.tasks.provision_tenant", (str(pending.tenant_id),))]
    assert AuditEvent.objects.get(action="request.approve").actor == carol
    assert "Approved: create web" in client.get(response["Location"]).content.decode()


def test_carol_rejects_with_a_reason(as_user, carol, pending, dispatched):
    client = as_user(carol)
    response = client.post(reverse("request-reject", args=[pending.pk]), {"reject-reason": "Use the shared one."})
    assert response.status_code == 302
    pending.refresh_from_db()
    assert pending.status == TenantRequest.Status.REJECTED
    assert Tenant.objects.get(pk=pending.tenant_id).status == TenantStatus.REJECTED
    assert dispatched == []


def test_rejecting_without_a_reason_says_why_next_to_the_field(as_user, carol, pending):
    response = as_user(carol).post(reverse("request-reject", args=[pending.pk]), {"reject-reason": "  "})
    assert response.status_code == 200
    assert re.search(r'id="id_reject-reason_error">.*Say why the request is rejected', response.content.decode(), re.S)
    pending.refresh_from_db()
    assert pending.status == TenantRequest.Status.PENDING


def test_alice_gets_no_decision_buttons_and_a_forged_approval_is_refused(as_user, alice, pending, dispatched):
    client = as_user(alice)
    html = client.get(reverse("request-detail", args=[pending.pk])).content.decode()
    assert reverse("request-approve", args=[pending.pk]) not in html
    assert reverse("request-reject", args=[pending.pk]) not in html
    assert client.post(reverse("request-approve", args=[pending.pk]), {"approve-comment": "mine"}).status_code == 403
    assert client.post(reverse("request-reject", args=[pending.pk]), {"reject-reason": "x"}).status_code == 403
    pending.refresh_from_db()
    assert pending.status == TenantRequest.Status.PENDING and dispatched == []


def test_an_admin_cannot_approve_their_own_request(as_user, dave, submit, dispatched):
    req = submit(actor=dave, name="admin-own")
    client = as_user(dave)
    html = client.get(reverse("request-detail", args=[req.pk])).content.decode()
    assert reverse("request-approve", args=[req.pk]) not in html
    assert "another approver decides it" in html
    response = client.post(reverse("request-approve", args=[req.pk]))
    assert response.status_code == 403 and b"cannot decide your own request" in response.content
    assert TenantRequest.objects.get(pk=req.pk).status == TenantRequest.Status.PENDING


def test_approval_queue_lists_oldest_first_and_decides_inline(as_user, carol, submit, dispatched):
    older, newer = submit(name="first"), submit(name="second")
    client = as_user(carol)
    html = client.get(reverse("approvals")).content.decode()
    assert html.index("Create first") < html.index("Create second")
    response = client.post(
        reverse("request-approve", args=[newer.pk]), {"approve-comment": "", "next": reverse("approvals")}
    )
    assert response["Location"] == reverse("approvals")
    response = client.post(
        reverse("request-reject", args=[older.pk]), {"reject-reason": "No.", "next": "https://evil.example/"}
    )
    assert response["Location"] == reverse("request-detail", args=[older.pk])
    assert [r.status for r in TenantRequest.objects.order_by("created_at")] == [
        TenantRequest.Status.REJECTED,
        TenantRequest.Status.APPROVED,
    ]


def test_the_requester_cancels_but_a_member_cannot(as_user, alice, amir, submit):
    req = submit(name="mine")
    assert as_user(amir).post(reverse("request-cancel", args=[req.pk])).status_code == 403
    html = as_user(alice).get(reverse("request-detail", args=[req.pk])).content.decode()
    assert reverse("request-cancel", args=[req.pk]) in html
    assert as_user(alice).post(reverse("request-cancel", args=[req.pk])).status_code == 302
    req.refresh_from_db()
    assert req.status == TenantRequest.Status.CANCELLED


def test_request_history_shows_request_and_tenant_events(as_user, alice, carol, pending, dispatched):
    as_user(carol).post(reverse("request-approve", args=[pending.pk]), {"approve-comment": "ok"})
    html = as_user(alice).get(reverse("request-detail", args=[pending.pk])).content.decode()
    # In words (tenants.audit.ACTION_LABELS), one for each of request.submit, request.approve and tenant.approve.
    for label in ("Request submitted", "Request approved", "Tenant approved"):
        assert label in html


def test_manifest_preview_is_shown_only_when_a_renderer_is_registered(
    as_user, carol, pending, worker_hooks, monkeypatch
):
    url = reverse("request-detail", args=[pending.pk])
    worker_hooks.preview = "kind: Namespace\nname: {namespace}"
    html = as_user(carol).get(url).content.decode()
    assert "Manifests that will be created" in html and f"name: {pending.tenant.namespace}" in html
    monkeypatch.setattr(hooks, "_installed", None)
    assert "Manifests that will be created" not in as_user(carol).get(url).content.decode()


def test_a_broken_preview_renderer_does_not_break_the_approval_page(as_user, carol, pending, worker_hooks):
    worker_hooks.preview_error = RuntimeError("boom")
    response = as_user(carol).get(reverse("request-detail", args=[pending.pk]))
    assert response.status_code == 200 and b"could not be rendered" in response.content


# --- Live status ---------------------------------------------------------------------------


def test_status_fragments_poll_while_moving_and_stop_when_final(as_user, alice, pending, carol, dispatched):
    client = as_user(alice)
    tenant_url, request_url = (
        reverse("tenant-status", args=[pending.tenant_id]),
        reverse("request-status", args=[pending.pk]),
    )
    for url in (tenant_url, request_url):
        fragment = client.get(url).content.decode()
        assert 'hx-trigger="every 3s"' in fragment and "<html" not in fragment

    services.request_approve(tenant_request=pending, actor=carol)
    tenant = services.tenant_mark_provisioning(tenant=Tenant.objects.get(pk=pending.tenant_id))
    assert 'hx-trigger="every 3s"' in client.get(tenant_url).content.decode()
    services.tenant_mark_ready(tenant=tenant, applied_generation=tenant.generation)

    settled = client.get(tenant_url, {"shown": "provisioning"})
    assert "hx-trigger" not in settled.content.decode() and "hx-get" not in settled.content.decode()
    assert settled["HX-Refresh"] == "true"
    assert "HX-Refresh" not in client.get(tenant_url, {"shown": "ready"})
    settled = client.get(request_url, {"request": "pending", "tenant": "requested"})
    assert "hx-trigger" not in settled.content.decode() and settled["HX-Refresh"] == "true"
    assert "hx-trigger" not in client.get(reverse("tenant-detail", args=[pending.tenant_id])).content.decode()


# --- The tenant page -----------------------------------------------------------------------


def test_tenant_page_shows_usage_isolation_and_monitoring(as_user, alice, ready_tenant):
    tenant = ready_tenant()
    services.tenant_record_usage(
        tenant=tenant,
        usage={
            "hard": {"requests.cpu": "2", "limits.memory": "4Gi", "pods": "20", "services.nodeports": "0"},
            "used": {"requests.cpu": "500m", "limits.memory": "1Gi", "pods": "19"},
        },
    )
    services.tenant_record_isolation_report(
        tenant=tenant,
        report={
            "passed": False,
            "checks": [
                {"id": "quota", "title": "ResourceQuota enforced", "passed": True, "detail": ""},
                {
                    "id": "netpol",
                    "title": "Cross-namespace traffic blocked",
                    "passed": False,
                    "detail": "reached team-b",
                },
            ],
        },
    )
    client, url = as_user(alice), reverse("tenant-detail", args=[tenant.pk])
    # The overview, and the tabs that show every quota and the isolation report in full.
    html = "".join(client.get(url, {"tab": tab}).content.decode() for tab in ("overview", "quota", "security"))
    for text in (
        "500m CPU of 2 CPU",
        "w-25",
        "1 GiB of 4 GiB",
        "19 of 20",
        "w-95",
        "bar__fill--warn",
        "0 used · none allowed",
        "Last refreshed",
        "1 of 2 checks passed",
        "Cross-namespace traffic blocked",
        "reached team-b",
        "Fail",
        f"https://grafana.example.test/d/ns?var-namespace={tenant.namespace}",
        "Ready",
    ):
        assert text in html, text


@pytest.mark.parametrize(
    "role, visible, hidden",
    [
        ("alice", ["Change tier", "Extend expiry", "Decommission…", "Run the checks again"], ["Request deletion"]),
        ("amir", ["Change tier", "Extend expiry", "Request deletion"], ["Decommission…"]),
        (
            "vera",
            ["lets you view this tenant only"],
            ["Change tier", "Extend expiry", "Request deletion", "Decommission…"],
        ),
    ],
)
def test_tenant_actions_follow_the_role(request, as_user, ready_tenant, role, visible, hidden):
    tenant = ready_tenant()
    html = as_user(request.getfixturevalue(role)).get(reverse("tenant-detail", args=[tenant.pk])).content.decode()
    for text in visible:
        assert text in html, text
    for text in hidden:
        assert text not in html, text


def test_a_member_asks_for_a_tier_change_from_the_tenant_page(as_user, amir, roomy_team_a, ready_tenant, large):
    tenant = ready_tenant()
    client = as_user(amir)
    key = re.search(
        r'name="change-idempotency_key" value="([0-9a-f]{32})"',
        client.get(reverse("tenant-detail", args=[tenant.pk])).content.decode(),
    ).group(1)
    data = {
        "action": "change_tier",
        "change-tier": large.pk,
        "change-purpose": "Launch.",
        "change-idempotency_key": key,
    }
    first = client.post(reverse("tenant-request", args=[tenant.pk]), data)
    second = client.post(reverse("tenant-request", args=[tenant.pk]), data)
    req = TenantRequest.objects.get(action=TenantRequest.Action.CHANGE_TIER)
    assert first["Location"] == second["Location"] == reverse("request-detail", args=[req.pk])
    assert (req.status, req.tier, req.requested_by) == (TenantRequest.Status.PENDING, large, amir)


def test_a_bad_extension_date_is_shown_next_to_the_field(as_user, alice, ready_tenant):
    tenant = ready_tenant()
    response = as_user(alice).post(
        reverse("tenant-request", args=[tenant.pk]),
        {
            "action": "extend",
            "extend-requested_expiry": "2001-01-01",
            "extend-idempotency_key": "e" * 32,
        },
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert re.search(r'id="id_extend-requested_expiry_error">.*Choose a date', html, re.S)
    assert "<details open>" in html
    assert not TenantRequest.objects.filter(action=TenantRequest.Action.EXTEND).exists()


def test_a_viewer_cannot_ask_for_changes(as_user, vera, ready_tenant):
    tenant = ready_tenant()
    response = as_user(vera).post(
        reverse("tenant-request", args=[tenant.pk]), {"action": "delete", "delete-idempotency_key": "v" * 32}
    )
    assert response.status_code == 403


def test_the_owner_decommissions_after_confirming(
    as_user, alice, amir, ready_tenant, dispatched, django_capture_on_commit_callbacks
):
    tenant = ready_tenant()
    url = reverse("tenant-decommission", args=[tenant.pk])
    assert as_user(amir).get(url).status_code == 403
    client = as_user(alice)
    assert b"This cannot be undone" in client.get(url).content
    response = client.post(url, {"confirm_name": "not-it", "reason": ""})
    assert response.status_code == 200 and b'id="id_confirm_name_error"' in response.content
    assert Tenant.objects.get(pk=tenant.pk).status == TenantStatus.READY
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(url, {"confirm_name": tenant.name, "reason": "Project over."})
    assert response["Location"] == reverse("tenant-detail", args=[tenant.pk])
    tenant.refresh_from_db()
    assert tenant.status == TenantStatus.DECOMMISSIONING and tenant.status_reason == "Project over."
    assert ("worker.tasks.decommission_tenant", (str(tenant.pk),)) in dispatched


def test_the_owner_retries_a_failed_tenant(
    as_user, alice, ready_tenant, dispatched, django_capture_on_commit_callbacks
):
    tenant = services.tenant_mark_failed(tenant=ready_tenant(), reason="Quota admission refused the namespace.")
    client = as_user(alice)
    html = client.get(reverse("tenant-detail", args=[tenant.pk])).content.decode()
    assert "Quota admission refused the namespace." in html and "Failed" in html
    dispatched.clear()
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("tenant-retry", args=[tenant.pk]))
    assert Tenant.objects.get(pk=tenant.pk).status == TenantStatus.APPROVED
    assert dispatched == [("worker.tasks.provision_tenant", (str(tenant.pk),))]


# --- Audit ---------------------------------------------------------------------------------


def test_audit_page_filters_and_exports_the_same_events(as_user, alice, bob, carol, pending, dispatched):
    services.request_approve(tenant_request=pending, actor=carol)
    client = as_user(alice)
    html = client.get(reverse("audit"), {"action": "request."}).content.decode()
    assert "request.submit" in html and "request.approve" in html and "tenant.approve" not in html

    today = timezone.now().date().isoformat()
    response = client.get(
        reverse("audit-export"), {"action": "request.", "team": "team-a", "since": today, "until": today}
    )
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert sorted(r["action"] for r in rows) == ["request.approve", "request.submit"]
    assert all(r["team"] == "team-a" for r in rows)

    yesterday = (timezone.now().date() - dt.timedelta(days=1)).isoformat()
    response = client.get(reverse("audit-export"), {"until": yesterday})
    assert len(list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))) == 1  # the header only

    response = as_user(bob).get(reverse("audit-export"), {"team": "team-a"})
    assert len(list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))) == 1


def test_audit_page_pages_and_keeps_its_filters(as_user, dave):
    for i in range(60):
        AuditEvent.objects.create(actor_name="robot", object_type="tier", action=f"tier.update.{i}")
    html = as_user(dave).get(reverse("audit"), {"actor": "robot"}).content.decode()
    assert "Page 1 of 2" in html and "?actor=robot&amp;page=2" in html
    assert 'href="/audit/export/?actor=robot"' in html


def test_audit_page_reports_a_bad_date(as_user, dave):
    response = as_user(dave).get(reverse("audit"), {"since": "yesterday-ish"})
    assert response.status_code == 200 and b"error-summary" in response.content


def test_the_last_day_there_is_is_a_field_error_not_a_500(as_user, dave):
    """The day after 9999-12-31 (where 'until' ends) does not exist."""
    response = as_user(dave).get(reverse("audit"), {"until": "9999-12-31"})
    assert response.status_code == 200 and b"error-summary" in response.content


@pytest.mark.parametrize("since", ["03/04/2025", "2025-13-01", "2025-03-04T10:00"])
def test_audit_page_takes_only_iso_dates_and_says_so_at_the_field(as_user, dave, since):
    client = as_user(dave)
    everything = re.search(r'id="events-title">(\d+) events?<', client.get(reverse("audit")).content.decode())
    html = client.get(reverse("audit"), {"since": since}).content.decode()
    assert re.search(r'<ul class="errorlist" id="f-since-error"><li>Enter a date as YYYY-MM-DD\.</li></ul>', html)
    widget = re.search(r'<input[^>]*\bid="f-since"[^>]*>', html).group(0)
    assert 'aria-describedby="f-since-hint f-since-error"' in widget and 'aria-invalid="true"' in widget
    assert f'value="{since}"' in widget and 'type="text"' in widget
    assert everything and f'id="events-title">{everything.group(1)} event' in html  # the bad bound filters nothing


# --- API tokens ----------------------------------------------------------------------------


def test_a_new_token_is_shown_once(as_user, alice, team_a):
    client = as_user(alice)
    response = client.post(reverse("tokens"), {"name": "CI", "expires_in_days": 30, "team": team_a.pk})
    assert response.status_code == 200
    plaintext = re.search(r'<code id="new-token">(brt_[^<]+)</code>', response.content.decode()).group(1)
    assert "no-store" in response["Cache-Control"]
    token = ApiToken.objects.get()
    assert token.team == team_a and services.api_token_digest(plaintext) == token.digest
    assert plaintext not in str(dict(client.session.items()))
    assert all(plaintext not in morsel.value for morsel in client.cookies.values())
    listing = client.get(reverse("tokens")).content.decode()
    assert plaintext not in listing and f"brt_{token.prefix}_" in listing and "Active" in listing


def test_bad_token_input_is_shown_next_to_the_field(as_user, amir):
    response = as_user(amir).post(reverse("tokens"), {"name": "", "expires_in_days": 999})
    html = response.content.decode()
    assert 'id="id_name_error"' in html and 'id="id_expires_in_days_error"' in html
    assert 'name="team"' not in html  # a member cannot make team tokens, so is not offered one
    assert not ApiToken.objects.exists()


def test_tokens_are_revoked_by_their_owner_only(as_user, alice, bob):
    token, _ = services.api_token_create(actor=alice, name="laptop", expires_in_days=7)
    assert as_user(bob).post(reverse("token-revoke", args=[token.pk])).status_code == 404
    response = as_user(alice).post(reverse("token-revoke", args=[token.pk]), follow=True)
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert "was revoked" in response.content.decode() and "Revoked" in response.content.decode()


# --- Security headers and markup hygiene -------------------------------------------------


_INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I)
_EVENT_HANDLER = re.compile(r"\son[a-z]+\s*=", re.I)


@pytest.mark.parametrize("role", ["alice", "carol"])
def test_pages_carry_a_csp_and_no_inline_script_or_style(request, as_user, ready_tenant, submit, role, worker_hooks):
    tenant = ready_tenant()
    req = submit(name="other")
    client = as_user(request.getfixturevalue(role))
    urls = [
        reverse("dashboard"),
        reverse("tenant-detail", args=[tenant.pk]),
        reverse("request-detail", args=[req.pk]),
        reverse("audit"),
        reverse("tokens"),
        reverse("tenant-status", args=[tenant.pk]),
    ]
    urls += (
        [reverse("request-new"), reverse("tenant-decommission", args=[tenant.pk])]
        if role == "alice"
        else [reverse("approvals")]
    )
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        csp = response["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "style-src 'self'" in csp, url
        html = response.content.decode()
        assert not _INLINE_SCRIPT.search(html), url
        assert ' style="' not in html and "<style" not in html, url
        assert not _EVENT_HANDLER.search(html), url


def test_htmx_is_served_locally_and_configured_for_the_csp(as_user, alice):
    html = as_user(alice).get(reverse("dashboard")).content.decode()
    assert '<script src="/static/vendor/htmx.min.js" defer></script>' in html
    assert '<meta name="htmx-config" content=\'{"includeIndicatorStyles": false' in html
    token = re.search(r'hx-headers=\'\{"X-CSRFToken": "([^"]+)"\}\'', html).group(1)
    assert len(token) >= 32


def test_posts_without_the_csrf_token_are_refused(alice, pending):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    response = client.post(reverse("request-cancel", args=[pending.pk]))
    assert response.status_code == 403 and b"This form has expired" in response.content
    pending.refresh_from_db()
    assert pending.status == TenantRequest.Status.PENDING


def test_the_dashboard_shows_tenants_requests_and_budgets_in_few_queries(
    as_user, alice, make_tenant, roomy_team_a, submit, django_assert_max_num_queries
):
    for _ in range(8):
        make_tenant(team=roomy_team_a, created_by=alice)
    submit(name="waiting")
    client = as_user(alice)
    with django_assert_max_num_queries(9):
        html = client.get(reverse("dashboard")).content.decode()
    assert html.count('href="/tenants/') == 9 and "Create waiting" in html and "Team A" in html


def test_list_pages_do_not_grow_queries_with_rows(
    as_user, carol, dave, roomy_team_a, submit, django_assert_max_num_queries
):
    for i in range(6):
        submit(name=f"q{i}")
    client = as_user(carol)
    with django_assert_max_num_queries(7):
        assert client.get(reverse("approvals")).status_code == 200
    client = as_user(dave)
    with django_assert_max_num_queries(8):
        assert client.get(reverse("audit")).status_code == 200


def test_error_pages_keep_the_product_look(as_user, alice):
    response = as_user(alice).get("/no/such/page/")
    assert (
        response.status_code == 404 and b"There is nothing here" in response.content and b"Sign out" in response.content
    )
    # Django renders 500.html without a request or context processors: it must still render.
    html = get_template("500.html").render()
    assert "Something went wrong on our side" in html and "berth.css" in html


def test_the_worker_app_installs_its_hooks_once_and_they_render_the_preview(ready_tenant):
    from worker.hooks import PortalHooks

    installed = hooks.installed()
    assert isinstance(installed, PortalHooks)
    hooks.install(PortalHooks())  # installing the same kind again (a second ready()) is harmless
    with pytest.raises(RuntimeError, match="already installed"):
        hooks.install(FakeWorkerHooks())
    tenant = ready_tenant()
    assert f"name: {tenant.namespace}" in installed.manifest_preview(tenant)


def test_without_the_worker_app_there_are_no_hooks(monkeypatch):
    monkeypatch.setattr(hooks, "_installed", None)
    assert hooks.installed() is None
    with pytest.raises(LookupError, match="worker"):
        hooks.worker()


@pytest.fixture
def fake_kubeconfigs(worker_hooks) -> list[tuple]:
    """Stands in for the worker's issuer (the real one is proven in tests/worker against the dev cluster)."""
    return worker_hooks.grants


def test_kubeconfig_download_from_the_tenant_page_is_audited(as_user, alice, ready_tenant, fake_kubeconfigs):
    tenant = ready_tenant()
    page = as_user(alice).get(f"/tenants/{tenant.pk}/")
    assert b"Download kubeconfig" in page.content
    response = as_user(alice).post(f"/tenants/{tenant.pk}/kubeconfig/", {"lifetime_seconds": "600"})
    assert response.status_code == 200
    assert response["Content-Type"] == "application/yaml" and "attachment" in response["Content-Disposition"]
    assert response["Cache-Control"] == "no-store"
    assert fake_kubeconfigs == [(tenant.name, "edit", 600)]
    event = AuditEvent.objects.get(action="tenant.kubeconfig_issued", object_id=str(tenant.pk))
    assert event.actor == alice and event.after["lifetime_seconds"] == 600


def test_kubeconfig_page_refuses_lifetimes_beyond_the_tier_and_outsiders(
    as_user, alice, bob, ready_tenant, fake_kubeconfigs
):
    tenant = ready_tenant()  # small tier: at most one hour
    too_long = as_user(alice).post(f"/tenants/{tenant.pk}/kubeconfig/", {"lifetime_seconds": str(12 * 3600)})
    assert too_long.status_code == 302 and fake_kubeconfigs == []
    assert as_user(bob).post(f"/tenants/{tenant.pk}/kubeconfig/", {"lifetime_seconds": "600"}).status_code == 404
    assert not AuditEvent.objects.filter(action="tenant.kubeconfig_issued").exists()


def test_quota_bars_show_any_use_and_label_every_resource_berth_sets():
    from tenants.views.quota import usage_rows

    rows = {
        r.label: r
        for r in usage_rows(
            {"hard": {"pods": "100", "count/jobs.batch": "20"}, "used": {"pods": "1", "count/jobs.batch": "0"}}
        )
    }
    assert rows["Pods"].width_class == "w-1"  # 1 % still shows, and narrower than 2 % or 6 %
    assert rows["Jobs"].width_class == "w-0"


# --- All tenants (the fleet view) ---------------------------------------------------------


def test_a_member_sees_only_their_teams_tenants_and_an_admin_every_teams(
    as_user, alice, bob, dave, team_a, team_b, make_tenant
):
    make_tenant(team=team_a, created_by=alice, name="alpha")
    make_tenant(team=team_b, created_by=bob, name="bravo")
    html = as_user(alice).get(reverse("fleet")).content.decode()
    assert "alpha" in html and "bravo" not in html
    html = as_user(dave).get(reverse("fleet")).content.decode()
    assert "alpha" in html and "bravo" in html


def test_the_export_holds_the_filtered_rows_only(as_user, alice, bob, dave, team_a, team_b, make_tenant):
    make_tenant(team=team_a, created_by=alice, name="alpha")
    make_tenant(team=team_b, created_by=bob, name="bravo", status=TenantStatus.FAILED)
    make_tenant(team=team_b, created_by=bob, name="charlie")
    response = as_user(dave).get(reverse("fleet-export"), {"team": "team-b", "status": "failed"})
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [(r["name"], r["team"], r["status"]) for r in rows] == [("bravo", "team-b", "failed")]
    response = as_user(alice).get(reverse("fleet-export"), {"team": "team-b"})
    assert b"".join(response.streaming_content).decode().count("\n") == 1  # the header: team-b is not alice's


def test_a_value_that_is_not_offered_is_a_field_error(as_user, dave):
    response = as_user(dave).get(reverse("fleet"), {"status": "sunny", "sort": "-nonsense"})
    assert response.status_code == 200 and b"error-summary" in response.content


def test_the_fleet_views_default_pages_list_live_tenants_by_name_then_id(as_user, alice, dave, team_a, make_tenant):
    """The default page (live tenants, by name, id breaking ties) and its reverse, page after page: what the index
    tenant_live_by_name serves; deleted and rejected tenants only with "Any, deleted too"."""
    live = [make_tenant(team=team_a, created_by=alice, name=f"t{i:02d}") for i in reversed(range(52))]
    live += [make_tenant(team=team_a, created_by=alice, name="twin", namespace=f"twin-{i}") for i in range(2)]
    live.append(make_tenant(team=team_a, created_by=alice, name="t07", namespace="t07-failed", status="failed"))
    gone = [
        make_tenant(team=team_a, created_by=alice, name="t00", namespace="t00-old", status=TenantStatus.DELETED),
        make_tenant(team=team_a, created_by=alice, name="a", status=TenantStatus.REJECTED),
    ]
    row = re.compile(r'<a href="/tenants/([0-9a-f-]{36})/"><strong>([^<]+)</strong></a>')
    client = as_user(dave)

    def shown(**query: str) -> list[str]:
        html = client.get(reverse("fleet"), query).content.decode()
        return [pk for pk, _ in row.findall(html)]

    by_name = [str(t.pk) for t in sorted(live, key=lambda t: (t.name, t.pk))]
    assert shown() + shown(page="2") == by_name and len(shown()) == 50
    assert "55 tenants" in client.get(reverse("fleet")).content.decode()
    assert shown(sort="-name") + shown(sort="-name", page="2") == by_name[::-1]
    every = [str(t.pk) for t in sorted(live + gone, key=lambda t: (t.name, t.pk))]
    assert shown(status="any") + shown(status="any", page="2") == every


def test_the_dashboard_counts_the_live_fleet_and_the_filters_list_the_same_tenants(
    as_user, alice, bob, carol, dave, team_a, team_b, make_tenant
):
    """The admin's dashboard counts live tenants, failed ones, those whose last isolation report failed and those
    expiring soon; deleted tenants count nowhere, a report that passed or none at all is not failing. Each count
    links to the tenants list filtered to the same tenants."""
    failing, passing = {"passed": False, "checks": [{"id": "x", "passed": False}]}, {"passed": True, "checks": []}
    soon, later = timezone.now() + dt.timedelta(days=1), timezone.now() + dt.timedelta(days=365)
    make_tenant(team=team_a, created_by=alice, name="ok", isolation_report=passing, expires_at=later)
    make_tenant(team=team_a, created_by=alice, name="unchecked", status=TenantStatus.PROVISIONING)
    make_tenant(team=team_b, created_by=bob, name="leaky", isolation_report=failing, expires_at=soon)
    make_tenant(team=team_b, created_by=bob, name="broken", status=TenantStatus.FAILED, isolation_report=failing)
    make_tenant(team=team_a, created_by=alice, name="drifted", status=TenantStatus.DIVERGED, expires_at=soon)
    make_tenant(team=team_a, created_by=alice, name="odd", isolation_report={"passed": None})
    for status in (TenantStatus.DELETED, TenantStatus.REJECTED, TenantStatus.CANCELLED):
        make_tenant(team=team_b, created_by=bob, status=status, isolation_report=failing, expires_at=soon)

    for user in (dave, carol):  # a platform admin, an approver: both see every team
        assert fleet_pages.fleet_summary(user=user) == {"live": 6, "failed": 1, "isolation_failing": 2, "expiring": 2}
    client = as_user(dave)
    html = client.get(reverse("dashboard")).content.decode()
    for text in ("6</strong> live tenants", "1</strong> failed", "2</strong> failing isolation", "2</strong> expiring"):
        assert text in html

    def listed(**query: str) -> list[str]:
        html = client.get(reverse("fleet"), query).content.decode()
        return re.findall(r'<a href="/tenants/[0-9a-f-]{36}/"><strong>([^<]+)</strong></a>', html)

    assert listed(isolation_failing="on") == ["broken", "leaky"]
    assert listed(isolation_failing="on", sort="-name") == ["leaky", "broken"]
    assert listed(isolation_failing="on", status="any") == sorted(["broken", "leaky", "row-1", "row-2", "row-3"])
    assert listed(expiring="on") == ["drifted", "leaky"]


@pytest.mark.django_db(transaction=True)  # VACUUM cannot run inside a transaction
def test_the_dashboard_counts_and_the_admins_api_list_are_read_from_their_indexes(
    as_user, api, alice, dave, team_a, make_tenant
):
    """What keeps the admin's pages from growing with the fleet: the dashboard's counts read from the indexes
    tenant_live_summary and tenant_live_isolation_failing alone, the API's newest-first page of every team's
    tenants from tenant_newest_first without a sort. A query whose conditions or order no longer match its index's
    would read and sort the table."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for i in range(3):
        make_tenant(team=team_a, created_by=alice, isolation_report={"passed": i != 1})
    with CaptureQueriesContext(connection) as dashboard:
        as_user(dave).get(reverse("dashboard"))
    with CaptureQueriesContext(connection) as listed:
        assert api(dave).get("/api/v1/tenants/").status_code == 200
    queries = [q["sql"] for q in dashboard.captured_queries + listed.captured_queries]
    summary = [sql for sql in queries if 'AS "live"' in sql]
    failing = [sql for sql in queries if "COUNT(*)" in sql and "isolation_report" in sql]
    newest = [sql for sql in queries if 'FROM "tenants_tenant" ORDER BY "tenants_tenant"."created_at" DESC' in sql]
    assert len(summary) == len(failing) == len(newest) == 1, queries
    with connection.cursor() as cursor:
        vacuum_analyze(cursor, "tenants_tenant")
        # A table of 3 rows is best read whole and sorted: with those ways (and bitmaps) set aside, the plan shows
        # the index that serves each query, as the planner picks it on a fleet (bench/README.md).
        for way in ("seqscan", "sort", "bitmapscan"):
            cursor.execute(f"SET enable_{way} = off")
        try:
            for sql, index in (
                (summary[0], "tenant_live_summary"),
                (failing[0], "tenant_live_isolation_failing"),
                (newest[0], "tenant_newest_first"),
            ):
                cursor.execute("EXPLAIN " + sql)
                plan = "\n".join(row[0] for row in cursor.fetchall())
                assert f"Index Only Scan using {index} " in plan and "Sort" not in plan, plan
        finally:
            cursor.execute("RESET ALL")


def test_the_fleet_view_does_not_grow_queries_with_rows(
    as_user, alice, dave, team_a, make_tenant, django_assert_max_num_queries
):
    for i in range(30):
        make_tenant(team=team_a, created_by=alice, name=f"t{i:02d}")
    client = as_user(dave)
    with django_assert_max_num_queries(12):
        response = client.get(reverse("fleet"), {"sort": "-status"})
    assert response.status_code == 200 and response.content.decode().count('href="/tenants/') >= 30
