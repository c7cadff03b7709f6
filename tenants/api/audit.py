"""The audit trail: newest first by keyset, and the same rows as CSV."""

from __future__ import annotations

from django.http import StreamingHttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action
from rest_framework.request import Request as ApiRequest

from tenants import models, selectors
from tenants.api import serializers as s
from tenants.api.base import ListViewSet
from tenants.api.filters import AuditEventFilter
from tenants.api.pagination import NewestFirstPagination
from tenants.csv_export import audit_csv_response


class AuditEventViewSet(ListViewSet):
    serializer_class = s.AuditEventSerializer
    pagination_class = NewestFirstPagination
    filterset_class = AuditEventFilter
    visible_to = staticmethod(selectors.audit_events_visible_to)
    load = staticmethod(s.AuditEventSerializer.load)

    schema_model = models.AuditEvent

    @extend_schema(filters=True, responses={(200, "text/csv"): str})
    @action(detail=False, methods=["get"], url_path="export")
    def export(self, request: ApiRequest) -> StreamingHttpResponse:
        events = self.filter_queryset(self.get_queryset()).iterator(chunk_size=500)
        return audit_csv_response(events)
