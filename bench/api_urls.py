"""The portal's URLs plus ``/bench/stock/…``: each list as a stock DRF endpoint would serve it.

Each is what the DRF tutorial writes: a ``ReadOnlyModelViewSet`` over the caller's rows with ``select_related``,
the API's own ``ModelSerializer`` (so a page holds the same rows in the same bytes; for the audit trail, whose
serializer writes its fields out, a ``ModelSerializer`` of the same fields, rendered by DRF's own walk), the query's
``team`` as a plain filter, and DRF's own paging (``LimitOffsetPagination``, which counts every page;
``CursorPagination`` for the audit trail). bench/api_load.py serves the same page from it and from Berth's API, in
turns, on the same data, and compares the two.
"""

from typing import Any

from django.db.models import Q, QuerySet
from django.urls import include, path
from rest_framework import pagination, routers, serializers, viewsets

from portal.urls import urlpatterns as portal_urlpatterns
from tenants.api.serializers import AuditEventSerializer, RequestSerializer, TenantSerializer
from tenants.models import AuditEvent, Membership, Team, Tenant, TenantRequest


class Offset(pagination.LimitOffsetPagination):
    default_limit = 50
    max_limit = 200


class Newest(pagination.CursorPagination):
    ordering = ("-at", "-id")
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200


class StockAuditEventSerializer(serializers.ModelSerializer):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, allow_null=True
    )

    class Meta:
        model = AuditEvent
        fields = AuditEventSerializer.Meta.fields


class Stock(viewsets.ReadOnlyModelViewSet):
    def caller(self) -> int:
        return int(self.request.user.pk or 0)

    def teams(self) -> QuerySet[Membership, int]:
        return Membership.objects.filter(user_id=self.caller()).values_list("team_id", flat=True)

    def by_team(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        team = self.request.query_params.get("team")
        return queryset.filter(team__slug=team) if team else queryset


class Tenants(Stock):
    serializer_class = TenantSerializer
    pagination_class = Offset

    def get_queryset(self) -> QuerySet[Tenant]:
        rows = Tenant.objects.select_related("team", "tier", "cluster").filter(team__in=self.teams())
        return self.by_team(rows).order_by("-created_at", "-id")


class Requests(Stock):
    serializer_class = RequestSerializer
    pagination_class = Offset

    def get_queryset(self) -> QuerySet[TenantRequest]:
        rows = TenantRequest.objects.select_related(
            "team", "tier", "cluster", "requested_by", "decided_by", "target_team", "accepted_by"
        ).filter(Q(team__in=self.teams()) | Q(target_team__in=self.teams()))
        return self.by_team(rows).order_by("-created_at", "-id")


class AuditEvents(Stock):
    serializer_class = StockAuditEventSerializer
    pagination_class = Newest

    def get_queryset(self) -> QuerySet[AuditEvent]:
        rows = AuditEvent.objects.select_related("team").filter(Q(team__in=self.teams()) | Q(actor_id=self.caller()))
        return self.by_team(rows)


router = routers.SimpleRouter()
router.register("tenants", Tenants, basename="stock-tenant")
router.register("requests", Requests, basename="stock-request")
router.register("audit-events", AuditEvents, basename="stock-audit-event")

urlpatterns = [path("bench/stock/", include(router.urls)), *portal_urlpatterns]
