"""Divergence between Berth's database and its clusters, typically after a restore from an older dump.

Two cases, both found by the worker (docs/deployment.md, "Backup and restore"):

- a tenant the database believes ready whose namespace is gone, or is another object (its UID is not the one
  Berth recorded): ``diverged``. Nothing is recreated or deleted;
- a namespace that carries Berth's labels and a tenant id no live tenant has (made after the dump was taken): an
  ``OrphanNamespace``. Never deleted by a pass or a sweep.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction

from tenants.audit import SYSTEM
from tenants.models import Cluster, OrphanNamespace, Tenant
from tenants.services.lifecycle import S, transition


@transaction.atomic
def tenant_mark_diverged(*, tenant: Tenant, reason: str) -> Tenant:
    """The worker found the ready tenant's recorded namespace gone or replaced: stop acting on it, say why."""
    return transition(tenant=tenant, new=S.DIVERGED, actor=None, action="tenant.diverged", reason=reason, ctx=SYSTEM)


def orphan_namespaces_record(*, cluster: Cluster, found: list[dict[str, Any]], at: dt.datetime) -> None:
    """What one reconcile pass listed as orphans on ``cluster`` (name, uid, tenant_id, labels, created_at); rows of
    namespaces no longer found go. An observation of the cluster, not a change by anyone: not audited."""
    with transaction.atomic():
        for row in found:
            OrphanNamespace.objects.update_or_create(
                cluster=cluster,
                name=row["name"],
                defaults={**{k: row[k] for k in ("uid", "tenant_id", "labels", "created_at")}, "last_seen_at": at},
            )
        OrphanNamespace.objects.filter(cluster=cluster).exclude(name__in=[row["name"] for row in found]).delete()
