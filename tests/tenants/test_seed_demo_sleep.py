"""The demo's data lets its teams try sleep: small and medium tiers allow it, each team has a time zone."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from tenants import services
from tenants.models import Team, Tier

pytestmark = pytest.mark.django_db


def test_seed_demo_sets_sleep_on_the_tiers_and_time_zones_on_the_teams(tmp_path, monkeypatch, small, medium, large):
    monkeypatch.setattr(services, "cluster_identify", lambda **kwargs: None)
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    call_command(
        "seed_demo", "--api-url", "https://127.0.0.1:6443", "--kubeconfig", "/nonexistent", "--ca-file", str(ca)
    )
    assert Team.objects.get(slug="team-payments").time_zone == "Europe/Berlin"
    assert [
        (t.name, t.sleep_allowed, t.sleep_budget, t.sleep_after_idle_hours) for t in Tier.objects.order_by("order")
    ] == [
        ("small", True, "none", 24),
        ("medium", True, "full", None),
        ("large", False, "full", None),
    ]
    for team in Team.objects.all():
        team.full_clean()
