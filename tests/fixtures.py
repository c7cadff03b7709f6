"""People in their roles, tiers and a cluster: the cast most tests need."""
from __future__ import annotations

import importlib

import pytest

from tenants.models import Cluster, Membership, Team, Tier, User

_SEED = importlib.import_module("tenants.migrations.0002_seed_tiers").TIERS


def seeded_tier(name: str) -> Tier:
    """The migration's tier; recreated when a transactional test's flush removed it."""
    spec = next(t for t in _SEED if t["name"] == name)
    return Tier.objects.get_or_create(name=name, defaults=spec)[0]


@pytest.fixture
def team_a(db) -> Team:
    return Team.objects.create(slug="team-a", name="Team A", oidc_group="team-a")


@pytest.fixture
def team_b(db) -> Team:
    return Team.objects.create(slug="team-b", name="Team B", oidc_group="team-b")


def _user(username: str, **flags) -> User:
    return User.objects.create(username=username, email=f"{username}@example.test", oidc_subject=f"sub-{username}", **flags)


@pytest.fixture
def alice(team_a) -> User:
    """Owner of team-a."""
    user = _user("alice")
    Membership.objects.create(user=user, team=team_a, role=Membership.Role.OWNER)
    return user


@pytest.fixture
def amir(team_a) -> User:
    """Plain member of team-a."""
    user = _user("amir")
    Membership.objects.create(user=user, team=team_a, role=Membership.Role.MEMBER)
    return user


@pytest.fixture
def vera(team_a) -> User:
    """Viewer in team-a: reads, never writes."""
    user = _user("vera")
    Membership.objects.create(user=user, team=team_a, role=Membership.Role.VIEWER)
    return user


@pytest.fixture
def bob(team_b) -> User:
    """Owner of team-b: must never see team-a's things."""
    user = _user("bob")
    Membership.objects.create(user=user, team=team_b, role=Membership.Role.OWNER)
    return user


@pytest.fixture
def carol(db) -> User:
    """Approver."""
    return _user("carol", is_approver=True)


@pytest.fixture
def dave(db) -> User:
    """Platform admin."""
    return _user("dave", is_platform_admin=True, is_staff=True, is_superuser=True)


@pytest.fixture
def erin(db) -> User:
    """Signed in, in no team."""
    return _user("erin")


@pytest.fixture
def small(db) -> Tier:
    return seeded_tier("small")


@pytest.fixture
def medium(db) -> Tier:
    return seeded_tier("medium")


@pytest.fixture
def large(db) -> Tier:
    return seeded_tier("large")


@pytest.fixture
def cluster(db, small, medium, large) -> Cluster:
    """A registered cluster record (no real API server behind it: see tests/plugins/kube.py for that)."""
    c = Cluster.objects.create(
        name="dev", display_name="Dev cluster", api_url="https://127.0.0.1:6443", credential_ref="env:BERTH_TEST_NO_KUBECONFIG",
        public_endpoint="https://dev.example.test:6443", kinds=["namespace", "vcluster"],
        monitoring_links=[{"name": "Grafana", "url": "https://grafana.example.test/d/ns?var-namespace={namespace}"}],
    )
    c.tiers.set([small, medium, large])
    return c


@pytest.fixture
def dispatched(monkeypatch) -> list[tuple[str, tuple]]:
    """Records worker jobs instead of publishing them (unit tests of the domain)."""
    sent: list[tuple[str, tuple]] = []

    def fake_send(task: str, *args: object) -> bool:
        sent.append((task, args))
        return True

    monkeypatch.setattr("tenants.dispatch.send", fake_send)
    return sent
