"""A team's own workload on its tenant page: pods, recent events and bounded reads of container logs.

The reads go through the worker's hooks with a fresh short-lived token of the tenant's own identity, never
Berth's rights; the bounds below are the only ones, and nothing read is stored, audited or logged.
"""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError

from tenants import audit, concurrency, hooks
from tenants.audit import SYSTEM, AuditContext
from tenants.errors import InvalidTransition
from tenants.hooks import LogQuery, PodLog, Workload
from tenants.models import Tenant, User
from tenants.services.lifecycle import S
from tenants.services.permissions import kubeconfig_role, log_reader_role, role_of

EVENTS_SHOWN = 50
LOG_LINES_MAX = 500
LOG_LINES_DEFAULT = 200
LOG_BYTES_MAX = 256 * 1024
# DNS-1123 names as the API server allows them, and times in UTC as the kubelet stamps lines.
POD_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
CONTAINER_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
RFC3339_PATTERN = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$"
POD_NAME = re.compile(POD_NAME_PATTERN)
CONTAINER_NAME = re.compile(CONTAINER_NAME_PATTERN)
RFC3339 = re.compile(RFC3339_PATTERN)


def workload_unavailable(*, tenant: Tenant) -> str:
    """Why Berth cannot read this tenant's workload with the team's own identity; '' when it can."""
    if tenant.kind != "namespace":
        return (
            "Events and logs of a virtual cluster live inside it: use your kubeconfig (kubectl get events, "
            "kubectl logs). Berth reads only with your team's own identity, and on the host your team has none."
        )
    if tenant.cluster.access_mode == "oidc":
        return (
            "This cluster signs teams in with OIDC, so Berth holds no identity of your team to read events and logs "
            "with, and it never reads them with its own rights: use your kubeconfig (kubectl get events, kubectl logs)."
        )
    if tenant.status != S.READY:
        return f"Events and logs can be read once the tenant is ready; it is {tenant.get_status_display().lower()}."
    if tenant.credential_epoch != tenant.applied_credential_epoch:
        return "Your team's identities are being renewed after a transfer; try again shortly."
    return ""


def _require_readable(*, tenant: Tenant) -> None:
    reason = workload_unavailable(tenant=tenant)
    if reason:
        raise InvalidTransition(reason)


def tenant_read_workload(*, tenant: Tenant, actor: User) -> Workload:
    """The namespace's pods and newest events, read as the tenant's viewer (any member of its team may look)."""
    kubeconfig_role(tenant=tenant, actor=actor)  # the team and platform admins only
    _require_readable(tenant=tenant)
    with concurrency.slot("workload", actor.pk):
        return hooks.worker().read_workload(tenant, events=EVENTS_SHOWN)


def tenant_read_pod_log(
    *,
    tenant: Tenant,
    actor: User,
    pod: str,
    container: str = "",
    previous: bool = False,
    tail_lines: int = LOG_LINES_DEFAULT,
    since_time: str = "",
    ctx: AuditContext = SYSTEM,
) -> PodLog:
    """At most ``tail_lines`` (up to 500) lines and 256 KiB of a container's log, read as the actor's own role in
    the team; with ``since_time``, only what came after (live follow)."""
    role = log_reader_role(tenant=tenant, actor=actor)
    errors = {}
    if len(pod) > 253 or not POD_NAME.fullmatch(pod):
        errors["pod"] = "Not a pod name."
    if container and not CONTAINER_NAME.fullmatch(container):
        errors["container"] = "Not a container name."
    if not 1 <= tail_lines <= LOG_LINES_MAX:
        errors["tail_lines"] = f"Between 1 and {LOG_LINES_MAX} lines."
    if since_time and not RFC3339.fullmatch(since_time):
        errors["since_time"] = "An RFC 3339 time in UTC, such as 2026-01-31T12:00:00Z."
    if errors:
        raise ValidationError(errors)
    _require_readable(tenant=tenant)
    query = LogQuery(
        pod=pod,
        container=container,
        previous=previous,
        tail_lines=tail_lines,
        limit_bytes=LOG_BYTES_MAX,
        since_time=since_time,
    )
    if not since_time and role_of(user=actor, team=tenant.team) is None:
        # A platform admin reading a team's logs is accountable for it, as for a kubeconfig (never the content;
        # follow polls of the same read are not recorded again).
        audit.record(
            actor=actor,
            action="tenant.log_read_outside_team",
            obj=tenant,
            team=tenant.team,
            after={"pod": pod, "container": container, "previous": previous},
            ctx=ctx,
        )
    with concurrency.slot("workload", actor.pk):
        return hooks.worker().read_pod_log(tenant, query, role=role)
