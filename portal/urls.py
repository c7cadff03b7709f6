from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from tenants.views.api_docs import api_docs

urlpatterns = [
    path("admin/", admin.site.urls),
    path("oidc/", include("mozilla_django_oidc.urls")),
    path("api/v1/", include("tenants.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", api_docs, name="api-docs"),
    path("", include("tenants.views.urls")),
]

handler400 = "tenants.api.errors.bad_request"
handler404 = "tenants.api.errors.not_found"
handler500 = "tenants.api.errors.server_error"
