"""What a caller may choose from: teams (with their budgets' allocation), tiers and clusters."""

from __future__ import annotations

from rest_framework import mixins

from tenants import models, selectors
from tenants.api import serializers as s
from tenants.api.base import BerthViewSet, actor_of


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
