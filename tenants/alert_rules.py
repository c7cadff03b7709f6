"""The Prometheus alert rules about tenants' workloads, whose alerts Alertmanager sends to Berth's receiver.

One rule group, rendered from thresholds (the chart renders the same group from its values,
deploy/helm/berth/templates/_alerts.tpl; tests/deploy checks the two agree):

- ``BerthTenantQuotaNearlyFull``: a resource of a tenant's ResourceQuota is at least ``quota_ratio`` used, for
  ``quota_for``. From Berth's own gauges (``berth_tenant_quota_used``/``_hard``, which the worker reads back from each
  tenant's ResourceQuota): the kubelet has no quota metrics, and kube-state-metrics is not on the Go module proxy,
  so the dev cluster could not build it; Berth's gauges are already one series per tenant and resource.
- ``BerthTenantCrashLooping``: a container started ``restarts`` times or more in ``restart_window``: the kubelet's
  resource endpoint (``/metrics/resource``) reports ``container_start_time_seconds`` without a container id, so a
  restart changes its value (cAdvisor's series, which carry ``id``, are left out).
- ``BerthTenantOOMKilled``: cAdvisor counted an OOM kill of a container in ``oom_window`` (each container instance
  is its own series, so its counter above zero is a kill).

Every alert carries ``namespace`` from the kubelet's or Berth's own labels (set from the pod's namespace, never
from the pod's labels, which a tenant writes), and ``berth="tenant"`` so an Alertmanager routes it to Berth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GROUP = "berth-tenants"
ROUTE_LABEL = ("berth", "tenant")


@dataclass(frozen=True)
class Thresholds:
    quota_ratio: float = 0.9
    quota_for: str = "10m"
    restarts: int = 3
    restart_window: str = "15m"
    crash_loop_for: str = "5m"
    oom_window: str = "15m"
    interval: str = ""  # the group's evaluation interval; '' is Prometheus's global one


def rule_group(thresholds: Thresholds = Thresholds()) -> dict[str, Any]:
    t = thresholds
    route = {ROUTE_LABEL[0]: ROUTE_LABEL[1]}
    group: dict[str, Any] = {
        "name": GROUP,
        "rules": [
            {
                "alert": "BerthTenantQuotaNearlyFull",
                "expr": "max by (namespace, resource, cluster) "
                f"(berth_tenant_quota_used / (berth_tenant_quota_hard > 0)) >= {t.quota_ratio:g}",
                "for": t.quota_for,
                "labels": {"severity": "warning", **route},
                "annotations": {
                    "summary": "{{ $labels.resource }} of the quota is {{ $value | humanizePercentage }} used.",
                },
            },
            {
                "alert": "BerthTenantCrashLooping",
                "expr": "max by (namespace, pod, container) (changes(container_start_time_seconds"
                f'{{container!="", pod!="", id=""}}[{t.restart_window}])) >= {t.restarts}',
                "for": t.crash_loop_for,
                "labels": {"severity": "warning", **route},
                "annotations": {
                    "summary": "Container {{ $labels.container }} of pod {{ $labels.pod }} restarted "
                    f"{{{{ $value }}}} times in {t.restart_window}.",
                },
            },
            {
                "alert": "BerthTenantOOMKilled",
                "expr": "max by (namespace, pod, container) (max_over_time(container_oom_events_total"
                f'{{container!="", pod!=""}}[{t.oom_window}])) > 0',
                "labels": {"severity": "warning", **route},
                "annotations": {
                    "summary": "Container {{ $labels.container }} of pod {{ $labels.pod }} ran out of memory "
                    "and was killed (OOMKilled).",
                },
            },
        ],
    }
    if t.interval:
        group["interval"] = t.interval
    return group
