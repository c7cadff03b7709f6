"""The tenant page's Metrics tab: what its graphs ask the tenant's own Prometheus data source, and why a tab is empty.

The page itself never waits for Prometheus: the browser (static/js/metrics.js, uPlot) asks the data source
(tenants/api/prometheus.py) with the viewer's own session, and each graph's data is also a table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from django.urls import reverse

from tenants import selectors
from tenants.models import Tenant
from tenants.quantities import parse_quantity

# Range -> (seconds shown, step between points): about 120-170 points per graph.
RANGES = {"1h": (3600, 30), "24h": (86400, 600), "7d": (7 * 86400, 3600)}
DEFAULT_RANGE = "1h"
# Every container of the tenant's pods, without the pod-level rows cAdvisor also reports (container="").
_CONTAINERS = '{container!="", container!="POD"}'


@dataclass(frozen=True)
class Series:
    label: str
    query: str


@dataclass(frozen=True)
class Line:
    """A constant to read the series against: a quota, or what the pods request."""

    label: str
    value: float


@dataclass(frozen=True)
class Panel:
    id: str
    title: str
    unit: str  # cores, bytes, count, bytes/s
    series: list[Series]
    lines: list[Line] = field(default_factory=list)


def _number(quota: dict, resource: str) -> float | None:
    value = parse_quantity(quota.get(resource))
    return float(value) if value is not None else None


def _lines(*pairs: tuple[str, dict, str]) -> list[Line]:
    lines = []
    for label, source, resource in pairs:
        value = _number(source, resource)
        if value is not None:
            lines.append(Line(label, value))
    return lines


def panels(tenant: Tenant, step: int) -> list[Panel]:
    """The graphs: CPU against requests and quota, memory against limits and quota, restarts and OOM kills,
    network bytes. Each query is held to the tenant's namespace by the data source, not by these queries."""
    usage = tenant.quota_usage or {}
    hard, used = usage.get("hard") or {}, usage.get("used") or {}
    window = f"{max(step, 60)}s"  # at least four scrapes, so rate() has points to work with
    return [
        Panel(
            "cpu",
            "CPU used",
            "cores",
            [Series("used", f"sum(rate(container_cpu_usage_seconds_total{_CONTAINERS}[{window}]))")],
            _lines(
                ("requested by pods", used, "requests.cpu"),
                ("requests quota", hard, "requests.cpu"),
                ("limits quota", hard, "limits.cpu"),
            ),
        ),
        Panel(
            "memory",
            "Memory working set",
            "bytes",
            [Series("working set", f"sum(container_memory_working_set_bytes{_CONTAINERS})")],
            _lines(
                ("limited by pods", used, "limits.memory"),
                ("limits quota", hard, "limits.memory"),
                ("requests quota", hard, "requests.memory"),
            ),
        ),
        Panel(
            "restarts",
            "Restarts and OOM kills",
            "count",
            [
                # The resource endpoint's start time has no container id, so a restart changes its value.
                Series("restarts", f"sum(changes(container_start_time_seconds{_CONTAINERS}[{step}s])) or vector(0)"),
                Series("OOM kills", f"sum(increase(container_oom_events_total{_CONTAINERS}[{step}s])) or vector(0)"),
            ],
        ),
        Panel(
            "network",
            "Network",
            "bytes/s",
            [
                Series("received", f"sum(rate(container_network_receive_bytes_total[{window}]))"),
                Series("sent", f"sum(rate(container_network_transmit_bytes_total[{window}]))"),
            ],
        ),
    ]


def metrics_context(tenant: Tenant, range_key: str | None) -> dict:
    """What the Metrics tab shows: the ranges, the panels and their data source, or why there are none."""
    key = range_key if range_key in RANGES else DEFAULT_RANGE
    seconds, step = RANGES[key]
    data_source = selectors.metrics_data_source(tenant=tenant)
    if data_source is None:
        return {
            "range": key,
            "ranges": list(RANGES),
            "empty": "This cluster has no Prometheus set up for Berth, so there are no graphs. The platform team "
            "can set one up (Berth's docs/monitoring.md).",
        }
    note = ""
    if tenant.sleeping:
        note = "This tenant is asleep (or falling asleep): its pods are stopped, so the graphs show nothing from then."
    elif tenant.status != "ready":
        note = "This tenant is not ready, so it may have no pods to show yet."
    return {
        "range": key,
        "ranges": list(RANGES),
        "note": note,
        "data_source": data_source,
        "config": {
            "source": reverse("api-prometheus-query-range", kwargs={"id": tenant.pk}),
            "seconds": seconds,
            "step": step,
            "panels": [asdict(panel) for panel in panels(tenant, step)],
        },
    }
