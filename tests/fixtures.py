"""People in their roles, tiers and a cluster: the cast most tests need."""

from __future__ import annotations

import copy
import datetime as dt
import importlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.utils import timezone

from devcluster.oidc import OidcProvider
from tenants import identity, services
from tenants.models import Cluster, Membership, Team, Tenant, Tier, User

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
    """A person as a sign-in leaves them: the provider confirmed them just now."""
    return User.objects.create(
        username=username,
        email=f"{username}@example.test",
        oidc_subject=f"sub-{username}",
        identity_checked_at=timezone.now(),
        **flags,
    )


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
        name="dev",
        display_name="Dev cluster",
        api_url="https://127.0.0.1:6443",
        credential_ref="env:BERTH_TEST_NO_KUBECONFIG",
        public_endpoint="https://dev.example.test:6443",
        kinds=["namespace", "vcluster"],
        monitoring_links=[{"name": "Grafana", "url": "https://grafana.example.test/d/ns?var-namespace={namespace}"}],
    )
    c.tiers.set([small, medium, large])
    return c


@pytest.fixture
def dispatched(monkeypatch) -> list[tuple[str, tuple]]:
    """Records worker jobs instead of publishing them (unit tests of the domain)."""
    sent: list[tuple[str, tuple]] = []

    def fake_send(task: str, *args: object, countdown: float = 0.0) -> bool:
        sent.append((task, args))
        return True

    monkeypatch.setattr("tenants.dispatch.send", fake_send)
    return sent


def purge_queue(name: str) -> int:
    """Drop every message waiting in queue ``name`` of this run's broker (each priority's list on Redis)."""
    from portal.celery import app

    with app.connection_for_write() as conn:
        channel: Any = conn.default_channel  # kombu's virtual channel (Redis) has queue_purge
        return int(channel.queue_purge(name) or 0)


@pytest.fixture
def empty_provision_queue() -> Iterator[None]:
    """The provision queue of this run's Redis emptied when the test starts and when it ends: for tests of the
    sweep, whose window depends on that queue's depth, read for real. Nothing else fills it meanwhile: a test with
    ``dispatched`` publishes nothing, and the run's worker is drained after each test that has it."""
    from tenants import dispatch

    purge_queue(dispatch.PROVISION_QUEUE)
    yield
    purge_queue(dispatch.PROVISION_QUEUE)


class FakeWorkerHooks:
    """Stands in for the worker's hooks in portal tests that need no cluster; records every kubeconfig grant.

    The real hooks (worker.hooks.PortalHooks) are proven in tests/worker against the dev control plane.
    """

    def __init__(self) -> None:
        self.grants: list[tuple[str, str, int]] = []
        self.preview: str | None = "kind: Namespace"
        self.preview_error: Exception | None = None
        self.lookup = None  # a tenants.hooks.ClusterLookup to answer with; None: nothing could be read
        self.workload = None  # a tenants.hooks.Workload to answer with; None: no pods, no events
        self.log = None  # a tenants.hooks.PodLog to answer with; None: no lines
        self.reads: list[tuple] = []  # ("workload" or "log", role, LogQuery or None) per read

    def manifest_preview(self, tenant, *, tier=None) -> str:
        if self.preview_error is not None:
            raise self.preview_error
        return (self.preview or "").format(namespace=tenant.namespace, tier=(tier or tenant.tier).name)

    def cluster_config_errors(self, cluster) -> dict[str, str]:
        return {}

    def cluster_lookup(self, cluster, *, kind="", namespace=""):
        from tenants.hooks import ClusterLookup

        return self.lookup if self.lookup is not None else ClusterLookup()

    def issue_kubeconfig(self, grant) -> str:
        self.grants.append((grant.tenant.name, grant.role, grant.lifetime_seconds))
        return f"apiVersion: v1\nkind: Config\n# {grant.tenant.namespace} {grant.role} {grant.lifetime_seconds}\n"

    def issue_merged_kubeconfig(self, grants) -> str:
        self.grants.extend((g.tenant.name, g.role, g.lifetime_seconds) for g in grants)
        return "apiVersion: v1\nkind: Config\n"

    def read_workload(self, tenant, *, events):
        from tenants.hooks import Workload

        self.reads.append(("workload", "view", None))
        return self.workload if self.workload is not None else Workload(pods=(), events=())

    def read_pod_log(self, tenant, query, *, role):
        from tenants.hooks import PodLog

        self.reads.append(("log", role, query))
        return self.log if self.log is not None else PodLog(lines=(), truncated=False, last_timestamp="")


@pytest.fixture
def worker_hooks(monkeypatch) -> FakeWorkerHooks:
    """Installs ``FakeWorkerHooks`` for one test (``hooks.installed()`` is back to the real ones afterwards)."""
    from tenants import hooks

    fake = FakeWorkerHooks()
    monkeypatch.setattr(hooks, "_installed", fake)
    return fake


TokenFactory = Callable[..., str]


@pytest.fixture
def api_token(db) -> TokenFactory:
    """``api_token(alice)``: a portal API token (plaintext); ``team=`` makes it a team automation token."""

    def make(user: User, *, team: Team | None = None, name: str = "test token") -> str:
        return services.api_token_create(actor=user, name=name, expires_in_days=1, team=team)[1]

    return make


@pytest.fixture
def ready_tenant_row(alice, team_a, medium, cluster) -> Callable[[str], Tenant]:
    """``ready_tenant_row(name)``: alice's team-a tenant, ready, written directly (no cluster: nothing provisions)."""

    def make(name: str) -> Tenant:
        return Tenant.objects.create(
            name=name,
            namespace=name,
            team=team_a,
            tier=medium,
            cluster=cluster,
            status="ready",
            created_by=alice,
            expires_at=timezone.now() + dt.timedelta(days=3),
        )

    return make


def point_portal_at(settings, env: dict[str, str]) -> None:
    """The portal's OIDC settings from a provider's ``portal_env()``, as the environment would set them."""
    for key in (
        "OIDC_OP_ISSUER",
        "OIDC_OP_AUTHORIZATION_ENDPOINT",
        "OIDC_OP_TOKEN_ENDPOINT",
        "OIDC_OP_USER_ENDPOINT",
        "OIDC_OP_JWKS_ENDPOINT",
        "OIDC_OP_LOGOUT_ENDPOINT",
        "OIDC_RP_CLIENT_ID",
        "OIDC_RP_CLIENT_SECRET",
        "OIDC_API_AUDIENCE",
    ):
        setattr(settings, key, env[key])
    if "OIDC_API_CLIENTS" in env:
        settings.OIDC_API_CLIENTS = env["OIDC_API_CLIENTS"].split(",")
    # mozilla-django-oidc passes this as `verify=` on each call, so REQUESTS_CA_BUNDLE cannot override it.
    settings.OIDC_VERIFY_SSL = env["OIDC_CA_BUNDLE"]
    # portal/settings.py adds the issuer to form-action from the environment at import; do the same here.
    # (Signing out posts to /logout/, which redirects to the provider: form-action covers that redirect.)
    csp = copy.deepcopy(settings.CONTENT_SECURITY_POLICY)
    csp["DIRECTIVES"]["form-action"] = ["'self'", env["OIDC_OP_ISSUER"]]
    settings.CONTENT_SECURITY_POLICY = csp
    identity.jwks_client.cache_clear()  # keys are cached per JWKS address; another provider may reuse one


@pytest.fixture
def dev_provider(settings, oidc_provider: OidcProvider) -> Iterator[OidcProvider]:
    """The run's dev OIDC provider, with the portal signing in and re-checking identities there."""
    point_portal_at(settings, oidc_provider.portal_env())
    yield oidc_provider
    identity.jwks_client.cache_clear()
