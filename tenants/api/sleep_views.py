"""Sleep and wake over the API: ``POST /tenants/{id}/sleep/``, ``/wake/`` and ``/sleep-schedule/``.

A mixin of ``TenantViewSet`` (same lookup, scoping and throttles); each action parses input, calls one service
(tenants.services.sleep) and answers with the tenant. Sleep and wake answer 202: the worker scales the workloads
after the commit, and ``sleep_state`` says when it has (``falling_asleep`` → ``asleep``, ``waking`` → ``awake``).
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.parsers import JSONParser
from rest_framework.request import Request as ApiRequest
from rest_framework.response import Response

from tenants import services
from tenants.api import serializers as s


class TenantSleepActions:
    """Mixed into ``tenants.api.views.TenantViewSet``."""

    @extend_schema(
        request=None,
        responses={202: s.TenantSerializer},
        description="Put the tenant to sleep (team owners and platform admins; the tier must allow it): its "
        "Deployments and StatefulSets are scaled to zero and its CronJobs suspended, each remembering what it "
        "was. 409 when it is already asleep, not ready, or its tier or kind cannot sleep (the reason says which).",
    )
    @action(detail=True, methods=["post"])
    def sleep(self, request: ApiRequest, pk=None) -> Response:
        from tenants.api.views import actor_of

        tenant = services.tenant_sleep(tenant=self.get_object(), actor=actor_of(request), ctx=self.ctx())  # type: ignore[attr-defined]
        return Response(s.TenantSerializer(tenant).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        request=None,
        responses={202: s.TenantSerializer},
        description="Wake the tenant (team owners and platform admins): each workload gets back exactly what it "
        "had. 409 when it is not asleep, or waking would take the team over its budget.",
    )
    @action(detail=True, methods=["post"])
    def wake(self, request: ApiRequest, pk=None) -> Response:
        from tenants.api.views import actor_of

        tenant = services.tenant_wake(tenant=self.get_object(), actor=actor_of(request), ctx=self.ctx())  # type: ignore[attr-defined]
        return Response(s.TenantSerializer(tenant).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        request=s.SleepScheduleInputSerializer,
        responses=s.TenantSerializer,
        description="Set the weekly sleep schedule, read in the team's time zone: asleep every night from "
        "`nights.start` to `nights.end` (an end before the start wraps past midnight; the same time is refused) "
        "and, with `weekends`, all of Saturday and Sunday. `nights` null: no nightly sleep. JSON only. 409 when "
        "the tenant is being removed, or a schedule is set where the tier or the kind cannot sleep.",
    )
    @action(detail=True, methods=["post"], url_path="sleep-schedule", parser_classes=[JSONParser])
    def sleep_schedule(self, request: ApiRequest, pk=None) -> Response:
        from tenants.api.views import actor_of

        tenant = self.get_object()  # type: ignore[attr-defined]
        body = s.SleepScheduleInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        tenant = services.tenant_set_sleep_schedule(
            tenant=tenant,
            actor=actor_of(request),
            ctx=self.ctx(),  # type: ignore[attr-defined]
            **body.validated_data,
        )
        return Response(s.TenantSerializer(tenant).data)
