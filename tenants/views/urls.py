"""The browser UI. Names are stable: services and notifications reverse 'request-detail' and 'tenant-detail'."""

from django.urls import path

from tenants.costs import views as costs
from tenants.views import (
    approvals,
    audit_pages,
    auth_pages,
    dashboard,
    fleet_pages,
    request_pages,
    rightsizing_pages,
    sleep_pages,
    tenant_pages,
    token_pages,
    transfer_pages,
)

urlpatterns = [
    path("", dashboard.dashboard, name="dashboard"),
    path("login/", auth_pages.login, name="login"),
    path("logout/", auth_pages.LogoutView.as_view(), name="logout"),
    path("requests/new/", request_pages.request_new, name="request-new"),
    path("requests/new/budget/", request_pages.request_budget, name="request-budget"),
    path("requests/<uuid:pk>/", request_pages.request_detail, name="request-detail"),
    path("requests/<uuid:pk>/status/", request_pages.request_status, name="request-status"),
    path("requests/<uuid:pk>/approve/", request_pages.request_approve, name="request-approve"),
    path("requests/<uuid:pk>/reject/", request_pages.request_reject, name="request-reject"),
    path("requests/<uuid:pk>/cancel/", request_pages.request_cancel, name="request-cancel"),
    path("tenants/", fleet_pages.fleet, name="fleet"),
    path("tenants/export/", fleet_pages.fleet_export, name="fleet-export"),
    path("tenants/<uuid:pk>/", tenant_pages.tenant_detail, name="tenant-detail"),
    path("tenants/<uuid:pk>/status/", tenant_pages.tenant_status, name="tenant-status"),
    path("tenants/<uuid:pk>/requests/", tenant_pages.tenant_request, name="tenant-request"),
    path("tenants/<uuid:pk>/decommission/", tenant_pages.tenant_decommission, name="tenant-decommission"),
    path("tenants/<uuid:pk>/kubeconfig/", tenant_pages.tenant_kubeconfig, name="tenant-kubeconfig"),
    path("tenants/<uuid:pk>/retry/", tenant_pages.tenant_retry, name="tenant-retry"),
    path("tenants/<uuid:pk>/isolation-check/", tenant_pages.tenant_isolation_check, name="tenant-isolation-check"),
    path(
        "tenants/<uuid:pk>/rightsizing/accept/",
        rightsizing_pages.tenant_rightsizing_accept,
        name="tenant-rightsizing-accept",
    ),
    path(
        "tenants/<uuid:pk>/rightsizing/dismiss/",
        rightsizing_pages.tenant_rightsizing_dismiss,
        name="tenant-rightsizing-dismiss",
    ),
    path("tenants/<uuid:pk>/sleep/", sleep_pages.tenant_sleep, name="tenant-sleep"),
    path("tenants/<uuid:pk>/sleep/card/", sleep_pages.tenant_sleep_card, name="tenant-sleep-card"),
    path("tenants/<uuid:pk>/wake/", sleep_pages.tenant_wake, name="tenant-wake"),
    path("tenants/<uuid:pk>/sleep-schedule/", sleep_pages.tenant_sleep_schedule, name="tenant-sleep-schedule"),
    path("tenants/<uuid:pk>/transfer/", transfer_pages.tenant_transfer, name="tenant-transfer"),
    path("requests/<uuid:pk>/accept/", transfer_pages.transfer_accept, name="transfer-accept"),
    path("requests/<uuid:pk>/decline/", transfer_pages.transfer_decline, name="transfer-decline"),
    path("approvals/", approvals.approvals, name="approvals"),
    path("audit/", audit_pages.audit, name="audit"),
    path("audit/export/", audit_pages.audit_export, name="audit-export"),
    path("tokens/", token_pages.tokens, name="tokens"),
    path("tokens/<int:pk>/revoke/", token_pages.token_revoke, name="token-revoke"),
    path("teams/<slug:slug>/", costs.team_detail, name="team-detail"),
]
