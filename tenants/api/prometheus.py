"""A tenant's metrics as a Prometheus data source: ``/api/v1/tenants/{id}/prometheus/api/v1/...``.

Prometheus's HTTP query API (query, query_range, series, labels, label values), answered for whoever may see
the tenant (404 for anyone else) and held to its namespace by prom-label-proxy (tenants/prometheus.py). A team
adds ``…/api/v1/tenants/{id}/prometheus`` as a Prometheus data source in its own Grafana, with its API token
(``Authorization: Token brt_…``); GET and POST (a form, as Grafana sends) both work. Answers and query errors
are Prometheus's own JSON; who-may-ask errors (401, 404, 429) are the API's.
"""

from __future__ import annotations

import time

from django.http import HttpResponse, JsonResponse, QueryDict
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.parsers import FormParser
from rest_framework.request import Request as ApiRequest
from rest_framework.views import APIView

from tenants import concurrency, prometheus, selectors
from tenants.api.base import actor_of, token_team_id
from tenants.api.throttling import SharedRateThrottle
from tenants.models import Tenant

# Prometheus's own shapes (tenants/api/schema.py registers them as components).
ANSWER_SCHEMA = {"$ref": "#/components/schemas/PrometheusAnswer"}
ERROR_SCHEMA = {"$ref": "#/components/schemas/PrometheusError"}
_ERRORS = {
    400: "A parameter Berth will not send (outside its bounds, malformed), or a query Prometheus cannot parse.",
    422: "Prometheus could not run the query (too many samples, timeout) or the answer is too large.",
    502: "Prometheus answered something other than an answer or an error.",
    503: "The cluster's Prometheus is not reachable (or not set up to hold queries to a namespace).",
    504: "Prometheus did not answer in time.",
}
_TIME = {"type": "string", "description": "RFC 3339 or Unix seconds."}
_DURATION = {"type": "string", "description": "A duration (30s, 5m, 1h) or float seconds."}
_PARAMS = {
    "query": OpenApiParameter("query", str, description="PromQL; held to the tenant's namespace.", required=True),
    "time": OpenApiParameter("time", _TIME, description="Evaluation time (default: now)."),
    "start": OpenApiParameter("start", _TIME, required=True),
    "end": OpenApiParameter("end", _TIME, required=True),
    "step": OpenApiParameter("step", _DURATION, required=True, description="Query resolution."),
    "timeout": OpenApiParameter("timeout", _DURATION, description="At most 15s (the default)."),
    "match": OpenApiParameter("match[]", {"type": "array", "items": {"type": "string"}}, explode=True),
    "window_start": OpenApiParameter("start", _TIME, description="Default: 8 days before end."),
    "window_end": OpenApiParameter("end", _TIME, description="Default: now."),
    "limit": OpenApiParameter("limit", {"type": "integer", "minimum": 0}, description="At most 10000 (default)."),
}
_ENDPOINT_PARAMS = {
    "query": ["query", "time", "timeout"],
    "query_range": ["query", "start", "end", "step", "timeout"],
    "series": ["match", "window_start", "window_end", "limit"],
    "labels": ["match", "window_start", "window_end", "limit"],
    "label_values": ["match", "window_start", "window_end", "limit"],
}


class _PrometheusView(APIView):
    endpoint = ""
    parser_classes = [FormParser]
    throttle_classes = [SharedRateThrottle]
    throttle_scope = "prometheus"

    def tenant(self, pk) -> Tenant:
        tenants = selectors.tenants_visible_to(user=actor_of(self.request)).select_related("cluster")
        team_id = token_team_id(self.request)
        return get_object_or_404(tenants if team_id is None else tenants.filter(team_id=team_id), pk=pk)

    def answer(self, request: ApiRequest, id, name: str | None = None) -> HttpResponse:
        tenant = self.tenant(id)  # 404 for what is not the caller's, before anything about the query
        if not prometheus.holds_namespace(tenant):
            raise exceptions.NotFound("This tenant no longer holds a namespace, so it has no metrics.")
        upstream = prometheus.upstream_for(tenant.cluster.prometheus)
        if upstream is None:
            raise exceptions.NotFound("No Prometheus is set up for this tenant's cluster.")
        # The query string and, for POST, the form: Prometheus reads both.
        params = {key: request.query_params.getlist(key) for key in request.query_params}
        form = request.data if request.method == "POST" else None
        if isinstance(form, QueryDict):  # FormParser's; nothing else is parsed here
            for key in form:
                params.setdefault(key, []).extend(form.getlist(key))
        try:
            if name is not None and not prometheus.LABEL_NAME.fullmatch(name):
                raise prometheus.QueryError(f"invalid label name {name!r}")
            sent = prometheus.checked(self.endpoint, params, now=time.time(), since=tenant.created_at.timestamp())
            with concurrency.slot("prometheus", request.user.pk):
                answer = prometheus.forward(
                    upstream=upstream, endpoint=self.endpoint, label_name=name, namespace=tenant.namespace, params=sent
                )
        except prometheus.QueryError as error:
            return JsonResponse(error.body(), status=error.status)
        return HttpResponse(answer.body, status=answer.status, content_type="application/json")


def _schema(endpoint: str, summary: str, *, form: bool):
    """The operation: its parameters in the query string (GET) or as a form (POST), Prometheus's answers."""
    params = [_PARAMS[key] for key in _ENDPOINT_PARAMS[endpoint]]
    path = [OpenApiParameter("name", str, OpenApiParameter.PATH, description="A label name.")]
    responses = {200: OpenApiResponse(ANSWER_SCHEMA, description="Prometheus's answer.")}
    responses |= {status: OpenApiResponse(ERROR_SCHEMA, description=text) for status, text in _ERRORS.items()}
    # A body the API cannot read at all (too large, say) is refused before Prometheus's rules apply.
    responses[400] = OpenApiResponse(
        {"oneOf": [ERROR_SCHEMA, {"$ref": "#/components/schemas/FieldErrors"}]}, description=_ERRORS[400]
    )
    body = None
    if form:
        properties = {p.name: dict(p.type) if isinstance(p.type, dict) else {"type": "string"} for p in params}
        for p in params:
            if p.description:
                properties[p.name]["description"] = str(p.description)
        required = [p.name for p in params if p.required]
        body = {"application/x-www-form-urlencoded": {"type": "object", "properties": properties, "required": required}}
    return extend_schema(
        summary=summary,
        description=__doc__,
        parameters=(path if endpoint == "label_values" else []) + ([] if form else params),
        request=body,
        responses=responses,
    )


def _view(endpoint: str, summary: str) -> type[_PrometheusView]:
    class View(_PrometheusView):
        @_schema(endpoint, summary, form=False)
        def get(self, request: ApiRequest, id, name: str | None = None) -> HttpResponse:
            return self.answer(request, id, name)

    if endpoint != "label_values":  # as in Prometheus, which reads label values by GET only

        class View(View):  # type: ignore[no-redef]
            @_schema(endpoint, summary, form=True)
            def post(self, request: ApiRequest, id, name: str | None = None) -> HttpResponse:
                return self.answer(request, id, name)

    View.endpoint = endpoint
    View.__name__ = View.__qualname__ = "Prometheus" + "".join(part.title() for part in endpoint.split("_")) + "View"
    return View


QueryView = _view("query", "An instant query over the tenant's series.")
QueryRangeView = _view("query_range", "A range query over the tenant's series.")
SeriesView = _view("series", "The tenant's series matching selectors.")
LabelsView = _view("labels", "Label names of the tenant's series.")
LabelValuesView = _view("label_values", "Values of one label over the tenant's series.")
