"""Portal API tokens: a person's own, personal or for one team; the plaintext is answered once, at creation."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request as ApiRequest
from rest_framework.response import Response

from tenants import models, selectors, services
from tenants.api import serializers as s
from tenants.api.base import BerthViewSet, actor_of, field_error, token_team_id


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
