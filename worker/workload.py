"""A team's own workload as its tenant page shows it: pods, recent events and container logs.

Everything here is read with a fresh TokenRequest token of the tenant's own ServiceAccount (the viewer, or for
logs the identity of the caller's role), never with Berth's credential: the API server decides what the team
may read, exactly as it would for the team's kubeconfig, so a pod of another namespace is refused there. Berth's
credential only mints the token (the web's ``serviceaccounts/token`` grant), which lives the API server's
minimum of ten minutes and is never stored. Log lines are returned to the caller and never logged.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from tenants.hooks import ClusterEvent, LogQuery, PodLog, PodSummary, Workload
from worker import kube
from worker.backends.namespace import SERVICE_ACCOUNT
from worker.kube import Kube, Manifest

# The API server's floor for a TokenRequest: the shortest-lived token there is.
READ_TOKEN_SECONDS = 600
# A person is waiting for the page: give up on any one request after this long.
READ_TIMEOUT_SECONDS = 5.0
# Events are listed in name order, not by time: read this many and show the newest.
EVENTS_SCANNED = 500
PODS_SCANNED = 200
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z")


class TokenNotIssued(kube.KubeError):
    """Berth's own credential could not mint the team's token (its RBAC, a missing ServiceAccount): the portal's
    trouble, answered as the cluster being unavailable, never as the API server refusing the team."""


def team_reader(tenant: Any, *, role: str) -> Kube:
    """A client holding a fresh short-lived token of the tenant's ``role`` ServiceAccount (access mode token)."""
    host = kube.for_cluster(tenant.cluster).with_timeout(READ_TIMEOUT_SECONDS)
    try:
        token, _ = host.request_token(
            namespace=tenant.namespace, service_account=SERVICE_ACCOUNT[role], lifetime_seconds=READ_TOKEN_SECONDS
        )
    except kube.KubeError as exc:
        raise TokenNotIssued(f"Berth could not issue the team's read token: {exc}", status=exc.status) from exc
    return host.with_token(token)


def read_workload(tenant: Any, *, events: int) -> Workload:
    reader = team_reader(tenant, role="view")
    pods = reader.list_first("Pod", namespace=tenant.namespace, limit=PODS_SCANNED)
    found = reader.list_first("Event", namespace=tenant.namespace, limit=EVENTS_SCANNED)
    newest = sorted((_event(e) for e in found), key=_when, reverse=True)[:events]
    return Workload(pods=tuple(_pod(p) for p in pods), events=tuple(newest))


def read_pod_log(tenant: Any, query: LogQuery, *, role: str) -> PodLog:
    raw = team_reader(tenant, role=role).pod_log(
        namespace=tenant.namespace,
        pod=query.pod,
        container=query.container,
        tail_lines=query.tail_lines,
        limit_bytes=query.limit_bytes,
        previous=query.previous,
        since_time=query.since_time,
    )
    return parse_log(raw, limit_bytes=query.limit_bytes, after=query.since_time)


def parse_log(raw: bytes, *, limit_bytes: int, after: str = "") -> PodLog:
    """Lines without their timestamps; with ``after``, only lines stamped later (the server's ``sinceTime`` has
    whole seconds, so a follow-up read repeats the last second)."""
    truncated = len(raw) >= limit_bytes
    if truncated and b"\n" in raw:
        raw = raw[: raw.rindex(b"\n") + 1]  # no half line at the cut
    lines: list[str] = []
    last = ""
    after_key = timestamp_key(after) if after else ""
    for line in raw.decode("utf-8", errors="replace").splitlines():
        stamp, _, text = line.partition(" ")
        if not STAMP.fullmatch(stamp):  # the kubelet's own words ("unable to retrieve container logs ...")
            lines.append(line)
            continue
        if after_key and timestamp_key(stamp) <= after_key:
            continue
        lines.append(text)
        last = stamp
    return PodLog(lines=tuple(lines), truncated=truncated, last_timestamp=last)


def timestamp_key(stamp: str) -> str:
    """An RFC 3339 UTC timestamp with any number of fraction digits, as a string that sorts by time."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    return f"{whole}.{fraction.ljust(9, '0')[:9]}"


def _pod(obj: Manifest) -> PodSummary:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    restarts = sum(int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or [])
    return PodSummary(
        name=str(obj["metadata"]["name"]),
        phase=str(status.get("phase") or "Unknown"),
        restarts=restarts,
        containers=tuple(str(c["name"]) for c in spec.get("containers") or []),
    )


def _event(obj: Manifest) -> ClusterEvent:
    involved = obj.get("involvedObject") or {}
    series = obj.get("series") or {}
    seen = (
        series.get("lastObservedTime")
        or obj.get("lastTimestamp")
        or obj.get("eventTime")
        or obj.get("firstTimestamp")
        or (obj.get("metadata") or {}).get("creationTimestamp")
    )
    return ClusterEvent(
        type=str(obj.get("type") or "Normal"),
        reason=str(obj.get("reason") or ""),
        object=f"{involved.get('kind', '')}/{involved.get('name', '')}",
        message=str(obj.get("message") or "")[:1000],
        count=int(series.get("count") or obj.get("count") or 1),
        last_seen=_parse_time(seen),
    )


def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _when(event: ClusterEvent) -> float:
    return event.last_seen.timestamp() if event.last_seen else 0.0
