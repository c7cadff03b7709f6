"""Clusters: which physical API server a cluster record points at.

Two records may point at one API server (say, one for token access and one for OIDC);
they then share one namespace space, so a tenant's uniqueness is checked per physical
server (``Tenant.cluster_identity``), not per record.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

from tenants import audit
from tenants.models import LIVE_STATUSES, Cluster, Tenant


@transaction.atomic
def cluster_record_identity(*, cluster: Cluster, identity: str) -> list[str]:
    """Store the physical id read from the cluster; returns the ids of live tenants that now collide.

    The id changes when a record is pointed at another API server (or the cluster was rebuilt): the
    record's live tenants follow it, except those whose namespace another record's live tenant already
    holds on that server. Those keep their old identity and fail when the worker finds the namespace
    is not theirs.
    """
    if not identity:
        return []
    if Cluster.objects.filter(pk=cluster.pk, physical_id=identity).exists():
        cluster.physical_id = identity
        return []
    before = Cluster.objects.filter(pk=cluster.pk).values_list("physical_id", flat=True).first() or ""
    Cluster.objects.filter(pk=cluster.pk).update(physical_id=identity)
    cluster.physical_id = identity
    colliding = []
    live = Tenant.objects.filter(cluster=cluster, status__in=LIVE_STATUSES).exclude(cluster_identity=identity)
    for tenant_id in live.values_list("pk", flat=True):
        try:
            with transaction.atomic():
                Tenant.objects.filter(pk=tenant_id).update(cluster_identity=identity)
        except IntegrityError:
            colliding.append(str(tenant_id))
    audit.record(
        actor=None,
        action="cluster.identity",
        obj=cluster,
        before={"physical_id": before},
        after={"physical_id": identity, "colliding_tenants": colliding},
    )
    return colliding


def cluster_identify(*, cluster: Cluster) -> None:
    """Ask the cluster who it is (quickly; nothing happens when it cannot be reached) and record it."""
    from tenants import hooks

    worker = hooks.installed()
    if worker is None:
        return
    lookup = worker.cluster_lookup(cluster)
    if lookup.identity:
        cluster_record_identity(cluster=cluster, identity=lookup.identity)
