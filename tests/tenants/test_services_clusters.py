"""Physical cluster identity: records that point at one API server share one namespace space."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError

from tenants import services
from tenants.hooks import ClusterLookup
from tenants.models import AuditEvent, Cluster, Tenant, TenantStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def oidc_cluster(cluster, small, medium, large) -> Cluster:
    """A second record of the same API server, with a namespace prefix (as the demo's dev-oidc)."""
    other = Cluster.objects.create(
        name="dev-oidc",
        display_name="Dev (OIDC)",
        api_url=cluster.api_url,
        credential_ref=cluster.credential_ref,
        public_endpoint=cluster.public_endpoint,
        namespace_prefix="o-",
        kinds=["namespace"],
    )
    other.tiers.set([small, medium, large])
    return other


def test_a_name_that_already_exists_on_the_cluster_is_refused_at_request_time(submit, worker_hooks):
    worker_hooks.lookup = ClusterLookup(identity="uid-1", name_exists=True)
    with pytest.raises(ValidationError) as refused:
        submit(name="web")
    assert "already exists on cluster dev and is not Berth's" in refused.value.message_dict["name"][0]
    assert not Tenant.objects.exists()


def test_when_the_cluster_cannot_be_asked_the_request_goes_on_and_the_worker_checks(submit, worker_hooks):
    worker_hooks.lookup = ClusterLookup()
    assert submit(name="web").tenant.cluster_identity == ""


def test_two_records_of_one_api_server_cannot_place_two_tenants_on_one_namespace(
    submit, bob, team_b, cluster, oidc_cluster, worker_hooks
):
    worker_hooks.lookup = ClusterLookup(identity="uid-1", name_exists=False)
    alices = submit(name="web", cluster=oidc_cluster).tenant  # namespace o-web
    assert (alices.namespace, alices.cluster_identity) == ("o-web", "uid-1")
    with pytest.raises(ValidationError) as refused:
        submit(actor=bob, team=team_b, name="o-web", cluster=cluster)
    assert "already in use" in refused.value.message_dict["name"][0]
    assert Tenant.objects.filter(namespace="o-web").count() == 1


def test_the_database_refuses_two_live_tenants_on_one_physical_namespace(
    make_tenant, alice, team_a, cluster, oidc_cluster
):
    make_tenant(
        team=team_a, created_by=alice, cluster=oidc_cluster, name="web", namespace="o-web", cluster_identity="u"
    )
    with pytest.raises(IntegrityError):
        make_tenant(
            team=team_a, created_by=alice, cluster=cluster, name="o-web", namespace="o-web", cluster_identity="u"
        )


def test_recording_a_new_identity_moves_live_tenants_and_reports_collisions(
    make_tenant, alice, team_a, cluster, oidc_cluster
):
    services.cluster_record_identity(cluster=cluster, identity="old")
    services.cluster_record_identity(cluster=oidc_cluster, identity="new")
    mine = make_tenant(
        team=team_a, created_by=alice, cluster=cluster, name="web", namespace="web", cluster_identity="old"
    )
    other = make_tenant(
        team=team_a, created_by=alice, cluster=cluster, name="api", namespace="o-api", cluster_identity="old"
    )
    make_tenant(
        team=team_a, created_by=alice, cluster=oidc_cluster, name="api", namespace="o-api", cluster_identity="new"
    )
    gone = make_tenant(
        team=team_a, created_by=alice, cluster=cluster, name="gone", namespace="gone", status=TenantStatus.DELETED
    )
    # The record is pointed at the other record's API server: its tenants follow, but o-api is taken there.
    colliding = services.cluster_record_identity(cluster=cluster, identity="new")
    assert colliding == [str(other.pk)]
    mine.refresh_from_db(), other.refresh_from_db(), gone.refresh_from_db()
    assert (mine.cluster_identity, other.cluster_identity, gone.cluster_identity) == ("new", "old", "")
    assert Cluster.objects.get(pk=cluster.pk).physical_id == "new"
    event = AuditEvent.objects.filter(action="cluster.identity", object_id=str(cluster.pk)).latest("at")
    assert (event.before, event.after["physical_id"]) == ({"physical_id": "old"}, "new")
    assert services.cluster_record_identity(cluster=cluster, identity="new") == []  # unchanged: nothing audited
    assert AuditEvent.objects.filter(action="cluster.identity", object_id=str(cluster.pk)).count() == 2
