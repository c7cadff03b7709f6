from django.urls import path
from rest_framework.routers import SimpleRouter

from tenants.api import (  # noqa: F401  (schema: registers the auth extensions)
    audit,
    catalog,
    me,
    prometheus,
    requests,
    schema,
    tenants,
    tokens,
    webhooks,
    workload,
)
from tenants.costs import api as costs

# SimpleRouter, not DefaultRouter: that one also serves a browsable index at the API's root and every route again
# with a format suffix (``tenants.json``, ``requests/<id>/approve.api``), none of which is in the OpenAPI schema.
router = SimpleRouter(trailing_slash=True)
router.register("teams", catalog.TeamViewSet, basename="api-team")
router.register("tiers", catalog.TierViewSet, basename="api-tier")
router.register("clusters", catalog.ClusterViewSet, basename="api-cluster")
router.register("requests", requests.RequestViewSet, basename="api-request")
router.register("tenants", tenants.TenantViewSet, basename="api-tenant")
router.register("tenants", tenants.TenantRightsizingViewSet, basename="api-tenant-rightsizing")
router.register("tenants", tenants.TenantAlertsViewSet, basename="api-tenant-alerts")
router.register("audit-events", audit.AuditEventViewSet, basename="api-audit-event")
router.register("tokens", tokens.ApiTokenViewSet, basename="api-token")
# A team's own webhook endpoints and their deliveries (tenants/api/webhooks.py).
TEAM = r"teams/(?P<slug>[-a-zA-Z0-9_]{1,50})"
router.register(f"{TEAM}/webhooks", webhooks.TeamWebhookViewSet, basename="api-team-webhook")
router.register(
    rf"{TEAM}/webhooks/(?P<webhook_id>[0-9]{{1,18}})/deliveries",
    webhooks.TeamWebhookDeliveryViewSet,
    basename="api-team-webhook-delivery",
)

urlpatterns = [
    path("me/", me.MeView.as_view(), name="api-me"),
    path("kubeconfig/", me.MergedKubeconfigView.as_view(), name="api-kubeconfig"),
    # Showback (tenants/costs/api.py)
    path("teams/<slug:slug>/costs/", costs.TeamCostsView.as_view(), name="api-team-costs"),
    path("teams/<slug:slug>/costs/export/", costs.TeamCostsExportView.as_view(), name="api-team-costs-export"),
    path("tenants/<uuid:id>/costs/", costs.TenantCostsView.as_view(), name="api-tenant-costs"),
    path("tenants/<uuid:id>/costs/export/", costs.TenantCostsExportView.as_view(), name="api-tenant-costs-export"),
    # A tenant's pods, events and pod logs, read with the team's own identity (tenants/api/workload.py).
    path("tenants/<uuid:id>/pods/", workload.TenantPodsView.as_view(), name="api-tenant-pods"),
    path("tenants/<uuid:id>/events/", workload.TenantEventsView.as_view(), name="api-tenant-events"),
    path("tenants/<uuid:id>/pods/<str:pod>/log/", workload.TenantPodLogView.as_view(), name="api-tenant-pod-log"),
    # A tenant's metrics as a Prometheus data source (tenants/api/prometheus.py): Prometheus's own paths under it.
    path("tenants/<uuid:id>/prometheus/api/v1/query", prometheus.QueryView.as_view(), name="api-prometheus-query"),
    path(
        "tenants/<uuid:id>/prometheus/api/v1/query_range",
        prometheus.QueryRangeView.as_view(),
        name="api-prometheus-query-range",
    ),
    path("tenants/<uuid:id>/prometheus/api/v1/series", prometheus.SeriesView.as_view(), name="api-prometheus-series"),
    path("tenants/<uuid:id>/prometheus/api/v1/labels", prometheus.LabelsView.as_view(), name="api-prometheus-labels"),
    path(
        "tenants/<uuid:id>/prometheus/api/v1/label/<str:name>/values",
        prometheus.LabelValuesView.as_view(),
        name="api-prometheus-label-values",
    ),
    *router.urls,
]
