"""REST API v1. Each view parses input, calls one service and serializes the result."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, cast

from django.db.models import Model, QuerySet
from django.http import HttpResponse, StreamingHttpResponse
from django.utils import timezone
from django_filters import FilterSet
from django_filters.constants import EMPTY_VALUES
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request as ApiRequest
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from tenants import models, selectors, services
from tenants.api import kept_pages
from tenants.api import serializers as s
from tenants.api.authentication import OidcBearerAuthentication
from tenants.api.filters import AuditEventFilter, BerthFilterSet, RequestFilter, TenantFilter
from tenants.api.pages import AFTER, CALLER, CALLER_TEAMS, TOKEN_TEAM, PageQueries, Window, shape_of, team_ids_of
from tenants.api.pagination import After, BerthPagination, NewestFirstPagination
from tenants.api.rows import PageJSONRenderer, PlainRows, RenderedRows
from tenants.api.sleep_views import TenantSleepActions
from tenants.api.throttling import SharedRateThrottle, WriteThrottle
from tenants.audit import AuditContext
from tenants.csv_export import audit_csv_response
from tenants.models import ApiToken
from tenants.services.credentials import LIFETIME_FLOOR_SECONDS

_IDEMPOTENCY_KEY = re.compile(r"[!-~]{1,64}")


def actor_of(request: ApiRequest) -> models.User:
    """The signed-in caller (every API view requires authentication)."""
    user = request.user
    if not isinstance(user, models.User):
        raise exceptions.NotAuthenticated()
    return user


def credential_scope(request: ApiRequest) -> str:
    """Which credential made the call: a portal token (by id), an OIDC bearer token, or a browser session."""
    if isinstance(request.auth, ApiToken):
        return f"token:{request.auth.pk}"
    return "bearer" if isinstance(request.successful_authenticator, OidcBearerAuthentication) else "session"


def token_team_id(request: ApiRequest) -> int | None:
    """The one team an automation token acts for; None for a person's own credentials."""
    return request.auth.team_id if isinstance(request.auth, ApiToken) else None


def field_error(field: str, message: str) -> serializers.ValidationError:
    return serializers.ValidationError({field: [message]})


class OneValueEach:
    """Refuses a query parameter given twice (``?limit=5&limit=x``) unless it is a list (``?status=a&status=b``).

    Django would read the last value and ignore the others, so a request could say two things and be
    answered for one of them.
    """

    list_params: frozenset[str] = frozenset()

    def initial(self, request: ApiRequest, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        for name, values in request.query_params.lists():
            if len(values) > 1 and name not in self.list_params:
                raise field_error(name, "Give this parameter once.")


class BerthViewSet(OneValueEach, viewsets.GenericViewSet):
    schema_model: type[Model]

    def get_queryset(self) -> QuerySet[Any]:
        if getattr(self, "swagger_fake_view", False):  # OpenAPI generation: there is no caller to scope to
            return self.schema_model._default_manager.none()
        return self.scoped_queryset()

    def scoped_queryset(self):
        raise NotImplementedError

    throttle_classes = [WriteThrottle]
    throttle_scope = "writes"

    def ctx(self) -> AuditContext:
        return AuditContext.from_http(self.request)

    def for_token_team(self, queryset, lookup: str = "team_id"):
        """Narrow ``queryset`` to the token's team when the caller uses a team automation token."""
        team_id = token_team_id(self.request)
        return queryset if team_id is None else of_team(queryset, team_id, lookup)


def of_team(queryset: QuerySet[Any], team_id: int, lookup: str = "team_id") -> QuerySet[Any]:
    return queryset.filter(**{lookup: team_id})


# A list whose page is built by ``list_rows`` (tenants.api.rows) rather than by ``serializer_class``. The output is
# the serializer's, byte for byte (tests/tenants/test_api_rows.py); the schema still comes from ``serializer_class``.
# With ``list_rows = None`` the view lists through the serializer, as DRF does. (Comments, not a docstring: the
# schema would take a docstring for the description of every view that inherits it.)
#
# The page's ids and count come from SQL compiled once per shape of request (tenants.api.pages), from the same
# selector (``visible_in``, a function of the caller's Scope), token narrowing and filters as ``get_queryset`` and
# ``filter_queryset``; a shape it cannot compile is listed through those, as before. A compiled page's ids and its
# rows' versions come in one statement (PlainRows.listed_after); rows rendered before at the same version are not
# read again (PlainRows.fragments).
class PlainListMixin(mixins.ListModelMixin, BerthViewSet):
    list_rows: PlainRows | None = None
    # A page's rows come rendered (RenderedRows); PageJSONRenderer answers anything else as JSONRenderer does.
    renderer_classes: list[type[BaseRenderer]] = [
        PageJSONRenderer if r is JSONRenderer else cast(type[BaseRenderer], r)
        for r in api_settings.DEFAULT_RENDERER_CLASSES
    ]
    filterset_class: type[BerthFilterSet]
    visible_in: Callable[[selectors.Scope], QuerySet[Any]]
    # Whether ``visible_in`` reads a member's teams from the Scope (selectors.Scope.team_ids), and the filters that
    # pin a page to one team, whose compiled page does without them (tenants.api.pages.PageQueries).
    scope_team_ids = False
    one_team_filters: frozenset[str] = frozenset()

    list_pages: PageQueries | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Only a view that lists what ``visible_in``, ``of_team`` and its filters say, and nothing else, has its
        # SQL compiled: an override of how the queryset is built or filtered would be skipped by it.
        cls.list_pages = None
        if "visible_in" in cls.__dict__ and (
            cls.get_queryset is BerthViewSet.get_queryset
            and cls.scoped_queryset is PlainListMixin.scoped_queryset
            and cls.filter_queryset is viewsets.GenericViewSet.filter_queryset
            and cls.filter_backends == [DjangoFilterBackend]
            and issubclass(cls.filterset_class, BerthFilterSet)
            and cls.filterset_class.filter_queryset is FilterSet.filter_queryset
            and cls.filterset_class.qs is FilterSet.qs
        ):
            paging = cls.pagination_class
            after = paging.narrow if paging is not None and issubclass(paging, NewestFirstPagination) else None
            cls.list_pages = PageQueries(
                cls.__dict__["visible_in"],
                of_team,
                cls.filterset_class,
                after,
                team_values=cls.scope_team_ids,
                one_team=cls.one_team_filters,
            )

    def scoped_queryset(self):
        scope = selectors.scope_of(actor_of(self.request), with_team_ids=self.scope_team_ids)
        return self.for_token_team(type(self).visible_in(scope))

    def list(self, request: ApiRequest, *args: Any, **kwargs: Any) -> Response:
        rows = self.list_rows
        if rows is None:
            return super().list(request, *args, **kwargs)
        key, scopes = self._kept_as(request)
        return Response(kept_pages.PAGES.answer(key, scopes, lambda: self._page(request, rows).data))

    def _kept_as(self, request: ApiRequest) -> tuple[tuple[Any, ...] | None, kept_pages.Scopes | None]:
        """The key a page of ``request`` is kept under, and what it shows (tenants.api.kept_pages); or Nones for a
        page that is not kept: one filtered by more than its team, paged by more than its position, answered in
        another format than JSON, or of every team (an approver's or admin's, pinned to none)."""
        paginator = self.paginator
        assert paginator is not None
        position = getattr(paginator, "cursor_query_param", None) or getattr(paginator, "offset_query_param", None)
        if not isinstance(request.accepted_renderer, PageJSONRenderer) or not set(request.query_params) <= {
            "team",
            paginator.limit_query_param,  # type: ignore[attr-defined]
            position,
        }:
            return None, None
        try:
            # The team the filter names as it filters by it (trimmed; empty is no filter), never the raw value.
            slug = self.filterset_class.cleaned(request.query_params).get("team")
        except exceptions.ValidationError:
            return None, None  # the page's own build answers the 400
        scope = selectors.scope_of(actor_of(request))
        team_id = token_team_id(request)
        if team_id is not None:
            scopes = kept_pages.Scopes(scope.user_id, teams=(team_id,))
        elif slug not in EMPTY_VALUES:
            if "\x00" in str(slug):
                return None, None  # names no team (the filter matches nothing), and PostgreSQL takes no NUL in text
            scopes = kept_pages.Scopes(scope.user_id, team_slug=slug)
        elif scope.kind == "member":
            scopes = kept_pages.Scopes(scope.user_id, members_of=scope.user_id)
        else:
            return None, None
        key = (
            type(self).__name__,
            request.build_absolute_uri(),
            request.accepted_media_type,
            timezone.get_current_timezone_name(),
            scope.kind,
            scope.user_id,
            team_id,
        )
        return key, scopes

    def _page(self, request: ApiRequest, rows: PlainRows) -> Response:
        paginator = self.paginator
        if isinstance(paginator, NewestFirstPagination):
            return self.get_paginated_response(RenderedRows(rows.fragments(self._newest_first(request, paginator))))
        assert isinstance(paginator, BerthPagination)
        window = self._compiled_window(request)
        listed: list[tuple[Any, str]]
        if window is None:
            listed = rows.listed(paginator.page_ids(self.filter_queryset(self.get_queryset()), request))
        else:
            listed = []
            counted: list[int] = []

            def ids(offset: int, limit: int) -> list[Any]:
                page, total, _ = rows.listed_after(
                    window.db, *window.page(offset, limit), limit, window.count_sql, window.params
                )
                listed[:], counted[:] = page, ([] if total is None else [int(total)])
                return [pk for pk, _ in page]

            # A full page's statement has counted; an empty one past the end has not.
            paginator.window(request, ids, lambda: counted[0] if counted else window.count())
        return self.get_paginated_response(RenderedRows(rows.fragments(listed)))

    def _newest_first(self, request: ApiRequest, paginator: NewestFirstPagination) -> Sequence[tuple[Any, str]]:
        """The (pk, version) of a keyset page's rows: one row more is read, to know whether a next page exists.

        A page of one team's trail, filtered by nothing else, is prepared: the team's index finds its rows in order
        whatever the values, and a prepared statement cost PostgreSQL 0.27-0.43 ms of CPU a page where one planned
        with its values, parsed afresh as Django's cursors send it, cost 0.95-1.03 (10,000 tenants, 100,000 audit
        rows, dense and sparse teams, 2026-11-28). Any other page is planned with its values every time: how many of
        a trail's rows a caller may see varies by orders of magnitude, and a generic plan cannot know. Prepared,
        PostgreSQL settled on a generic plan that walks the trail newest first and filters, which reads a team of
        120 events among 100,000 nearly to the end: 7.1 ms a page, where planned with its values it takes the
        team's index, 3.1 ms, as the uniform teams' pages do (2026-11-24).
        """
        rows = self.list_rows
        assert rows is not None
        after = paginator.begin(request)
        window = self._compiled_window(request, after)
        if window is None:
            return rows.listed(paginator.ids(self.filter_queryset(self.get_queryset()), after))
        limit = paginator.limit
        read = limit + 1
        page, _, at = rows.listed_after(
            window.db,
            *window.page(0, read),
            read,
            None,
            (),
            at=(paginator.at_field, limit),
            prepared=window.one_team_only,
        )
        return page[: paginator.end(len(page), lambda: After(at, page[limit - 1][0]))]

    def _compiled_window(self, request: ApiRequest, after: After | None = None) -> Window | None:
        if self.list_pages is None:
            return None
        cleaned = self.filterset_class.cleaned(request.query_params)
        scope = selectors.scope_of(actor_of(request))
        team_id = token_team_id(request)
        shape = shape_of(scope, team_id, cleaned, self.filterset_class.base_filters, after=after is not None)
        if shape is None:
            return None
        values: dict[str, Any] = {
            CALLER: [scope.user_id],
            CALLER_TEAMS: lambda: [team_ids_of(scope.user_id)],
            TOKEN_TEAM: [team_id],
            AFTER: list(after or ()),
        }
        for name, given in shape[2]:
            if name != AFTER:
                value = cleaned[name]
                values[name] = list(set(value)) if given else [value]
        return self.list_pages.window(shape, values)


class MeView(APIView):
    @extend_schema(responses=s.MeSerializer)
    def get(self, request: ApiRequest) -> Response:
        return Response(s.MeSerializer(actor_of(request)).data)


class TeamViewSet(mixins.ListModelMixin, BerthViewSet):
    serializer_class = s.TeamSerializer

    schema_model = models.Team

    def scoped_queryset(self):
        teams = self.for_token_team(selectors.teams_visible_to(user=actor_of(self.request)), lookup="pk")
        return selectors.with_allocation(teams)


class TierViewSet(mixins.ListModelMixin, BerthViewSet):
    serializer_class = s.TierSerializer

    schema_model = models.Tier

    def scoped_queryset(self):
        return selectors.tiers_available()


class ClusterViewSet(mixins.ListModelMixin, BerthViewSet):
    serializer_class = s.ClusterSerializer

    schema_model = models.Cluster

    def scoped_queryset(self):
        return selectors.clusters_available()


class RequestViewSet(PlainListMixin, mixins.RetrieveModelMixin):
    serializer_class = s.RequestSerializer
    list_rows = s.REQUEST_ROWS
    filterset_class = RequestFilter
    visible_in = staticmethod(selectors.requests_in)

    schema_model = models.TenantRequest

    @extend_schema(
        request=s.RequestCreateSerializer,
        responses={201: s.RequestSerializer},
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                {"type": "string", "pattern": f"^{_IDEMPOTENCY_KEY.pattern}$", "maxLength": 64},
                OpenApiParameter.HEADER,
                required=False,
                description="Repeat a POST safely: the same key, from the same person, credential and team, "
                "returns the first request; the same key with a different request answers 409.",
            )
        ],
    )
    def create(self, request: ApiRequest) -> Response:
        data = s.RequestCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = dict(data.validated_data)
        user = actor_of(request)
        teams = self.for_token_team(selectors.teams_visible_to(user=user), lookup="pk")
        if v.get("team") is not None and not teams.filter(pk=v["team"].pk).exists():
            raise field_error("team", f"Object with slug={v['team'].slug} does not exist.")
        if v.get("tenant"):
            v["tenant"] = self.for_token_team(selectors.tenants_visible_to(user=user)).filter(pk=v["tenant"]).first()
            if v["tenant"] is None:
                raise field_error("tenant", "No such tenant.")
        key = request.headers.get("Idempotency-Key", "")
        if key and not _IDEMPOTENCY_KEY.fullmatch(key):
            raise field_error("Idempotency-Key", "At most 64 printable ASCII characters.")
        req = services.request_submit(
            actor=user, idempotency_key=key, idempotency_scope=credential_scope(request), ctx=self.ctx(), **v
        )
        return Response(s.RequestSerializer(req).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.DecisionSerializer, responses=s.RequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request: ApiRequest, pk=None) -> Response:
        tenant_request = self.get_object()  # 404 for what is not the caller's, before anything about the body
        body = s.DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        req = services.request_approve(
            tenant_request=tenant_request,
            actor=actor_of(request),
            ctx=self.ctx(),
            **body.validated_data,
        )
        return Response(s.RequestSerializer(req).data)

    @extend_schema(request=s.RejectSerializer, responses=s.RequestSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request: ApiRequest, pk=None) -> Response:
        tenant_request = self.get_object()  # 404 for what is not the caller's, before anything about the body
        body = s.RejectSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        req = services.request_reject(
            tenant_request=tenant_request,
            actor=actor_of(request),
            ctx=self.ctx(),
            **body.validated_data,
        )
        return Response(s.RequestSerializer(req).data)

    @extend_schema(request=None, responses=s.RequestSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: ApiRequest, pk=None) -> Response:
        req = services.request_cancel(tenant_request=self.get_object(), actor=actor_of(request), ctx=self.ctx())
        return Response(s.RequestSerializer(req).data)

    @extend_schema(request=None, responses=s.RequestSerializer)
    @action(detail=True, methods=["post"])
    def accept(self, request: ApiRequest, pk=None) -> Response:
        """Accept a transfer offered to your team (its owners)."""
        req = services.transfer_accept(tenant_request=self.get_object(), actor=actor_of(request), ctx=self.ctx())
        return Response(s.RequestSerializer(req).data)

    @extend_schema(request=s.DeclineSerializer, responses=s.RequestSerializer)
    @action(detail=True, methods=["post"])
    def decline(self, request: ApiRequest, pk=None) -> Response:
        """Decline a transfer offered to your team (its owners)."""
        tenant_request = self.get_object()  # 404 for what is not the caller's, before anything about the body
        body = s.DeclineSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        req = services.transfer_decline(
            tenant_request=tenant_request, actor=actor_of(request), ctx=self.ctx(), **body.validated_data
        )
        return Response(s.RequestSerializer(req).data)


class TenantViewSet(TenantSleepActions, PlainListMixin, mixins.RetrieveModelMixin):
    serializer_class = s.TenantSerializer
    list_rows = s.TENANT_ROWS
    list_params = frozenset({"status"})
    filterset_class = TenantFilter
    visible_in = staticmethod(selectors.tenants_in)

    schema_model = models.Tenant

    @extend_schema(request=s.DecommissionSerializer, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def decommission(self, request: ApiRequest, pk=None) -> Response:
        tenant = self.get_object()  # 404 for what is not the caller's, before anything about the body
        body = s.DecommissionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        tenant = services.tenant_decommission(
            tenant=tenant,
            actor=actor_of(request),
            ctx=self.ctx(),
            **body.validated_data,
        )
        return Response(s.TenantSerializer(tenant).data)

    @extend_schema(request=s.TransferSerializer, responses={201: s.RequestSerializer})
    @action(detail=True, methods=["post"])
    def transfer(self, request: ApiRequest, pk=None) -> Response:
        """Offer the tenant to another team (owners and platform admins); an owner of that team accepts."""
        tenant = self.get_object()  # 404 for what is not the caller's, before anything about the body
        body = s.TransferSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        req = services.transfer_ask(tenant=tenant, actor=actor_of(request), ctx=self.ctx(), **body.validated_data)
        return Response(s.RequestSerializer(req).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=s.TenantSerializer)
    @action(detail=True, methods=["post"])
    def retry(self, request: ApiRequest, pk=None) -> Response:
        tenant = services.tenant_retry(tenant=self.get_object(), actor=actor_of(request), ctx=self.ctx())
        return Response(s.TenantSerializer(tenant).data)

    @extend_schema(request=s.KubeconfigSerializer, responses={(200, "application/yaml"): str})
    @action(detail=True, methods=["post"])
    def kubeconfig(self, request: ApiRequest, pk=None) -> HttpResponse:
        tenant = self.get_object()  # 404 for what is not the caller's, before anything about the body
        body = s.KubeconfigSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        text = services.tenant_issue_kubeconfig(
            tenant=tenant,
            actor=actor_of(request),
            ctx=self.ctx(),
            **body.validated_data,
        )
        return kubeconfig_response(text, "kubeconfig.yaml")

    @extend_schema(request=None, responses={202: None})
    @action(detail=True, methods=["post"], url_path="isolation-check")
    def isolation_check(self, request: ApiRequest, pk=None) -> Response:
        services.tenant_request_isolation_check(tenant=self.get_object(), actor=actor_of(request), ctx=self.ctx())
        return Response({"detail": "Isolation check queued."}, status=status.HTTP_202_ACCEPTED)


def kubeconfig_response(text: str, filename: str) -> HttpResponse:
    response = HttpResponse(text, content_type="application/yaml")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response


class MergedKubeconfigView(OneValueEach, APIView):
    throttle_classes = [SharedRateThrottle]
    throttle_scope = "writes"

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "lifetime_seconds",
                {"type": "integer", "minimum": LIFETIME_FLOOR_SECONDS},
                required=False,
                description="Token lifetime per tenant, capped at each tier's maximum (default: one hour or the "
                "maximum).",
            )
        ],
        responses={(200, "application/yaml"): str},
    )
    def get(self, request: ApiRequest) -> HttpResponse:
        if token_team_id(request) is not None:
            # The merged file spans all of the person's teams; an automation token acts for one.
            raise exceptions.PermissionDenied(
                "A team automation token gets kubeconfigs per tenant: POST /api/v1/tenants/{id}/kubeconfig/."
            )
        # A plain dict: from a QueryDict, DRF would take ``lifetime_seconds=`` (blank) for null. Other query
        # parameters are ignored, as on every other GET.
        body = s.KubeconfigSerializer(data={k: v for k, v in request.query_params.items() if k == "lifetime_seconds"})
        body.is_valid(raise_exception=True)
        text = services.user_issue_merged_kubeconfig(
            actor=actor_of(request),
            ctx=AuditContext.from_http(request),
            **body.validated_data,
        )
        return kubeconfig_response(text, "berth-kubeconfig.yaml")


class AuditEventViewSet(PlainListMixin):
    serializer_class = s.AuditEventSerializer
    pagination_class = NewestFirstPagination
    list_rows = s.AUDIT_EVENT_ROWS
    filterset_class = AuditEventFilter
    visible_in = staticmethod(selectors.audit_events_in)
    scope_team_ids = True
    one_team_filters = frozenset({"team"})

    schema_model = models.AuditEvent

    @extend_schema(filters=True, responses={(200, "text/csv"): str})
    @action(detail=False, methods=["get"], url_path="export")
    def export(self, request: ApiRequest) -> StreamingHttpResponse:
        events = self.filter_queryset(self.get_queryset()).iterator(chunk_size=500)
        return audit_csv_response(events)


class ApiTokenCreateSerializer(s.Input):
    name = s.TextField(max_length=100)
    expires_in_days = serializers.IntegerField(min_value=1, max_value=365, default=30)
    team = s.LookupField(slug_field="slug", queryset=selectors.Team.objects.all(), required=False, allow_null=True)


class ApiTokenViewSet(mixins.ListModelMixin, BerthViewSet):
    serializer_class = s.ApiTokenSerializer

    schema_model = models.ApiToken

    def scoped_queryset(self):
        return self.for_token_team(selectors.api_tokens_of(user=actor_of(self.request)))

    @extend_schema(request=ApiTokenCreateSerializer, responses={201: s.ApiTokenSerializer})
    def create(self, request: ApiRequest) -> Response:
        body = ApiTokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        team = body.validated_data.get("team")
        if team is not None and not selectors.teams_visible_to(user=actor_of(request)).filter(pk=team.pk).exists():
            raise field_error("team", f"Object with slug={team.slug} does not exist.")
        if token_team_id(request) is not None:
            # A leaked automation token must not be able to mint others that outlive its revocation,
            # least of all a personal one with all of its owner's rights.
            raise exceptions.PermissionDenied("A team automation token cannot create tokens; a person creates them.")
        token, plaintext = services.api_token_create(actor=actor_of(request), ctx=self.ctx(), **body.validated_data)
        return Response({**s.ApiTokenSerializer(token).data, "token": plaintext}, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=s.ApiTokenSerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request: ApiRequest, pk=None) -> Response:
        token = services.api_token_revoke(token=self.get_object(), actor=actor_of(request), ctx=self.ctx())
        return Response(s.ApiTokenSerializer(token).data)
