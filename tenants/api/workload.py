"""A tenant's pods, events and container logs in the API, read with the team's own identity.

The same reads and bounds as the tenant page's *Events and logs* tab (tenants.services.workload): each request
mints a ten-minute TokenRequest token of the tenant's own ServiceAccount and reads with it, never with Berth's
rights. Counted per person in the ``workload`` rate-limit scope, shared with the page.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request as ApiRequest
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants import selectors, services
from tenants.api.base import OneValueEach, actor_of, field_error, token_team_id
from tenants.api.throttling import SharedRateThrottle
from tenants.audit import AuditContext
from tenants.hooks import Workload
from tenants.models import Tenant


class PodSerializer(serializers.Serializer):
    name = serializers.CharField()
    phase = serializers.CharField(help_text="Pending, Running, Succeeded, Failed or Unknown.")
    restarts = serializers.IntegerField(help_text="Restarts of all its containers.")
    containers = serializers.ListField(child=serializers.CharField())


class EventSerializer(serializers.Serializer):
    type = serializers.CharField(help_text="Normal or Warning.")
    reason = serializers.CharField()
    object = serializers.CharField(help_text="Kind/name of what it is about, e.g. Pod/web-1.")
    message = serializers.CharField(help_text="At most 1000 characters.")
    count = serializers.IntegerField()
    last_seen = serializers.DateTimeField(allow_null=True)


class PodsSerializer(serializers.Serializer):
    pods = PodSerializer(many=True, help_text="At most 200, in name order.")


class EventsSerializer(serializers.Serializer):
    events = EventSerializer(
        many=True, help_text="At most 50, newest first, of the first 500 the cluster lists (in name order)."
    )


class PodLogSerializer(serializers.Serializer):
    lines = serializers.ListField(child=serializers.CharField(), help_text="Oldest first, without timestamps.")
    truncated = serializers.BooleanField(help_text="Cut at 256 KiB: the log holds more.")
    last_timestamp = serializers.CharField(
        help_text="RFC 3339 time of the last line; pass it as since_time to read what comes next ('' for none)."
    )


_ERROR = {"$ref": "#/components/schemas/Error"}
# 400, 401 and 429 (with Retry-After) are added for every operation by tenants.api.schema.
_REFUSALS = {
    403: OpenApiResponse(
        _ERROR, description="Not in the tenant's team, or a viewer on a tier that does not let viewers."
    ),
    404: OpenApiResponse(_ERROR, description="Not a tenant the caller may see, or no such pod in its namespace."),
    409: OpenApiResponse(_ERROR, description="Not readable as the team: not ready, OIDC access mode, virtual cluster."),
    503: OpenApiResponse(_ERROR, description="The cluster could not be reached; try again."),
}
READS = (
    "Read with a fresh ten-minute token of the tenant's own ServiceAccount (berth-viewer), never with Berth's "
    "rights. The tenant's team and platform admins; 404 for anyone who cannot see the tenant."
)


class _WorkloadView(OneValueEach, APIView):
    throttle_classes = [SharedRateThrottle]
    throttle_scope = "workload"

    def tenant(self, pk) -> Tenant:
        tenants = selectors.tenants_visible_to(user=actor_of(self.request)).select_related("cluster", "tier")
        team_id = token_team_id(self.request)
        return get_object_or_404(tenants if team_id is None else tenants.filter(team_id=team_id), pk=pk)

    def workload(self, pk) -> Workload:
        tenant = self.tenant(pk)
        return services.tenant_read_workload(tenant=tenant, actor=actor_of(self.request))


class TenantPodsView(_WorkloadView):
    @extend_schema(
        responses={200: PodsSerializer, **_REFUSALS},
        description=f"The pods of the tenant's namespace. {READS}",
    )
    def get(self, request: ApiRequest, id) -> Response:
        return Response(PodsSerializer(self.workload(id)).data)


class TenantEventsView(_WorkloadView):
    @extend_schema(
        responses={200: EventsSerializer, **_REFUSALS},
        description=f"The newest Events of the tenant's namespace, of the first 500 the cluster lists (in name order; "
        f"it keeps them about an hour). {READS}",
    )
    def get(self, request: ApiRequest, id) -> Response:
        return Response(EventsSerializer(self.workload(id)).data)


_POD = OpenApiParameter(
    "pod",
    {"type": "string", "pattern": services.POD_NAME_PATTERN, "maxLength": 253},
    OpenApiParameter.PATH,
    description="A pod of the tenant's namespace.",
)
_LOG_PARAMETERS = [
    _POD,
    OpenApiParameter(
        "container",
        {"type": "string", "pattern": services.CONTAINER_NAME_PATTERN, "maxLength": 63},
        description="Which container (default: the pod's only one).",
    ),
    OpenApiParameter(
        "tail",
        {"type": "integer", "minimum": 1, "maximum": services.LOG_LINES_MAX, "default": services.LOG_LINES_DEFAULT},
        description="At most this many lines, the last ones.",
    ),
    OpenApiParameter("previous", {"type": "boolean", "default": False}, description="The previous run's log."),
    OpenApiParameter(
        "since_time",
        {"type": "string", "format": "date-time", "pattern": services.RFC3339_PATTERN},
        description="Only lines after this time in UTC, e.g. the last answer's last_timestamp (live follow).",
    ),
]


class TenantPodLogView(_WorkloadView):
    @extend_schema(
        parameters=_LOG_PARAMETERS,
        responses={
            200: PodLogSerializer,
            **_REFUSALS,
        },
        description=(
            "A container's log: at most 500 lines and 256 KiB. Read with a fresh ten-minute token of the identity "
            "the caller's kubeconfig carries (berth-tenant for owners, members and platform admins; berth-viewer "
            "for viewers, only where the tier sets viewers_read_logs), never with Berth's rights. The lines are "
            "never logged or stored."
        ),
    )
    def get(self, request: ApiRequest, id, pod: str) -> Response:
        tenant = self.tenant(id)
        params = request.query_params
        try:
            tail = int(params.get("tail", services.LOG_LINES_DEFAULT))
        except ValueError:
            raise field_error("tail", "A whole number.") from None
        previous = params.get("previous", "false").lower()
        if previous not in ("true", "false", "1", "0"):
            raise field_error("previous", "true or false.")
        log = services.tenant_read_pod_log(
            tenant=tenant,
            actor=actor_of(request),
            pod=pod,
            container=params.get("container", ""),
            previous=previous in ("true", "1"),
            tail_lines=tail,
            since_time=params.get("since_time", ""),
            ctx=AuditContext.from_http(request),
        )
        return Response(PodLogSerializer(log).data)
