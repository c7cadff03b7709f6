from django.urls import path
from rest_framework.routers import DefaultRouter

from tenants.api import costs, rightsizing_views, schema, views  # noqa: F401  (schema: registers the auth extensions)

router = DefaultRouter(trailing_slash=True)
router.register("teams", views.TeamViewSet, basename="api-team")
router.register("tiers", views.TierViewSet, basename="api-tier")
router.register("clusters", views.ClusterViewSet, basename="api-cluster")
router.register("requests", views.RequestViewSet, basename="api-request")
router.register("tenants", views.TenantViewSet, basename="api-tenant")
router.register("tenants", rightsizing_views.TenantRightsizingViewSet, basename="api-tenant-rightsizing")
router.register("audit-events", views.AuditEventViewSet, basename="api-audit-event")
router.register("tokens", views.ApiTokenViewSet, basename="api-token")

urlpatterns = [
    path("me/", views.MeView.as_view(), name="api-me"),
    path("kubeconfig/", views.MergedKubeconfigView.as_view(), name="api-kubeconfig"),
    # Showback (tenants/api/costs.py)
    path("teams/<slug:slug>/costs/", costs.TeamCostsView.as_view(), name="api-team-costs"),
    path("teams/<slug:slug>/costs/export/", costs.TeamCostsExportView.as_view(), name="api-team-costs-export"),
    path("tenants/<uuid:id>/costs/", costs.TenantCostsView.as_view(), name="api-tenant-costs"),
    path("tenants/<uuid:id>/costs/export/", costs.TenantCostsExportView.as_view(), name="api-tenant-costs-export"),
    *router.urls,
]
