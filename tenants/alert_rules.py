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
- ``BerthTenantOOMKilled``: cAdvisor counted an OOM kill of a container in the last ``oom_window``: the counter
  increased in the window, or it first appeared in the window already above zero (each container instance is its
  own series, so a killed container's counter may start at 1). Once the window has passed, it stops firing.

Every selector names its source (tenants.metric_sources: the kubelet's jobs and endpoints, Berth's web job), so a
``namespace`` label comes from the kubelet or Berth (set from the pod's namespace, never from the pod's labels,
which a tenant writes), not from a tenant's own exporter. Every alert carries ``berth="tenant"`` so an
Alertmanager routes it to Berth. The quota alert also carries ``berth_cluster``, copied from the gauge's
``cluster`` (the cluster as Berth names it): a rule's labels win over a Prometheus's external labels, so it names
the tenant's cluster even when one Prometheus scrapes Berth for all clusters.

The receiver (tenants.services.alerts) takes only these alerts (``ALERT_NAMES``) and tells the team in its own
words (``summary``), never the annotation's text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tenants.metric_sources import Sources

GROUP = "berth-tenants"
ROUTE_LABEL = ("berth", "tenant")
CLUSTER_LABEL = "berth_cluster"  # the cluster as Berth names it (Cluster.name)


@dataclass(frozen=True)
class Thresholds:
    quota_ratio: float = 0.9
    quota_for: str = "10m"
    restarts: int = 3
    restart_window: str = "15m"
    crash_loop_for: str = "5m"
    oom_window: str = "15m"
    interval: str = ""  # the group's evaluation interval; '' is Prometheus's global one


KUBE_PROMETHEUS = Sources()  # the chart's default sources: kube-prometheus's kubelet job and Berth's web Service


def rule_group(thresholds: Thresholds = Thresholds(), sources: Sources = KUBE_PROMETHEUS) -> dict[str, Any]:
    t, s = thresholds, sources
    oom = f'container_oom_events_total{{{s.cadvisor}, container!="", pod!=""}}'
    route = {ROUTE_LABEL[0]: ROUTE_LABEL[1]}
    group: dict[str, Any] = {
        "name": GROUP,
        "rules": [
            {
                "alert": "BerthTenantQuotaNearlyFull",
                "expr": "label_replace(max by (namespace, resource, cluster) "
                f"(berth_tenant_quota_used{{{s.berth}}} / (berth_tenant_quota_hard{{{s.berth}}} > 0)) "
                f'>= {t.quota_ratio:g}, "{CLUSTER_LABEL}", "$1", "cluster", "(.*)")',
                "for": t.quota_for,
                "labels": {"severity": "warning", **route},
                "annotations": {
                    "summary": "{{ $labels.resource }} of the quota is {{ $value | humanizePercentage }} used.",
                },
            },
            {
                "alert": "BerthTenantCrashLooping",
                "expr": "max by (namespace, pod, container) (changes(container_start_time_seconds"
                f'{{{s.resource}, container!="", pod!=""}}[{t.restart_window}])) >= {t.restarts}',
                "for": t.crash_loop_for,
                "labels": {"severity": "warning", **route},
                "annotations": {
                    "summary": "Container {{ $labels.container }} of pod {{ $labels.pod }} restarted "
                    f"{{{{ $value }}}} times in {t.restart_window}.",
                },
            },
            {
                "alert": "BerthTenantOOMKilled",
                "expr": f"max by (namespace, pod, container) (increase({oom}[{t.oom_window}]) > 0 "
                f"or ({oom} > 0 unless {oom} offset {t.oom_window}))",
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


ALERT_NAMES = frozenset(rule["alert"] for rule in rule_group()["rules"])


def summary(name: str, labels: dict[str, str]) -> str:
    """What Berth tells a team about one of its own alerts, from the rule's name and the labels it sets; '' for a
    name that is not Berth's."""
    pod, container = labels.get("pod", ""), labels.get("container", "")
    which = f"Container {container}" if container else "A container"
    which += f" of pod {pod}" if pod else ""
    if name == "BerthTenantQuotaNearlyFull":
        return f"{labels.get('resource') or 'A resource'} of the quota is nearly used up."
    if name == "BerthTenantCrashLooping":
        return f"{which} keeps restarting (crash loop)."
    if name == "BerthTenantOOMKilled":
        return f"{which} ran out of memory and was killed (OOMKilled)."
    return ""
