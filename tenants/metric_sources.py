"""Which scraped series Berth believes a ``namespace`` label of: the alert rules (tenants.alert_rules, and the
chart's _alerts.tpl) and measured usage (worker/measured_usage.py) select only these.

A series' ``namespace`` is only as true as the scrape job that gave it. The kubelet's sets it from the pod's
namespace, and Berth's own web job from the tenant's; but a job that keeps a target's own labels (``honor_labels``:
the prometheus-community chart's ``kubernetes-pods`` job, a PodMonitor with ``honorLabels``) lets any tenant's
exporter publish ``container_oom_events_total{namespace="someone-else"}``. So every selector pins the job and, for
the kubelet, the endpoint (``metrics_path``, the label kube-prometheus's kubelet ServiceMonitor sets from
``__metrics_path__``). What it cannot stop is a job with ``honor_labels: true`` scraping tenants' pods, whose
exporters can then claim ``job`` and ``metrics_path`` too: docs/monitoring.md asks operators for
``honor_labels: false`` on every job that scrapes tenants' workloads.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sources:
    """The scrape jobs of the kubelet (``kubelet_job``, a regular expression of job names, as kube-prometheus names
    its one job for all three endpoints) and of Berth's web pods (``berth_job``, which export the quota gauges)."""

    kubelet_job: str = "kubelet"
    cadvisor_path: str = "/metrics/cadvisor"
    resource_path: str = "/metrics/resource"
    berth_job: str = "berth-web"

    @property
    def cadvisor(self) -> str:
        """Matchers of cAdvisor's series (the kubelet's ``/metrics/cadvisor``)."""
        return f'job=~"{self.kubelet_job}", metrics_path="{self.cadvisor_path}"'

    @property
    def resource(self) -> str:
        """Matchers of the kubelet's resource metrics (``/metrics/resource``)."""
        return f'job=~"{self.kubelet_job}", metrics_path="{self.resource_path}"'

    @property
    def berth(self) -> str:
        """Matchers of Berth's own gauges."""
        return f'job=~"{self.berth_job}"'

    @classmethod
    def from_settings(cls) -> Sources:
        """The sources the worker reads measured usage from (BERTH_KUBELET_JOB, BERTH_KUBELET_CADVISOR_PATH,
        BERTH_KUBELET_RESOURCE_PATH; the chart sets them from the same values as the rules)."""
        from django.conf import settings

        return cls(
            kubelet_job=settings.BERTH_KUBELET_JOB,
            cadvisor_path=settings.BERTH_KUBELET_CADVISOR_PATH,
            resource_path=settings.BERTH_KUBELET_RESOURCE_PATH,
        )
