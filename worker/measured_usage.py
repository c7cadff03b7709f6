"""Measured usage: what each namespace's containers use, read from the cluster's own Prometheus.

The quota says what a tenant's pods request; Prometheus says what they use. Per cluster whose Prometheus has a
``url`` in BERTH_PROMETHEUS (tenants.prometheus.prometheus_url_for: Prometheus itself, not the label proxy the
web sends tenants' queries through), two instant queries answer for every namespace at once: the containers' CPU
(``rate(container_cpu_usage_seconds_total[5m])``, cores) and memory working set
(``container_memory_working_set_bytes``, bytes) summed per namespace, from cAdvisor's per-container series where
Prometheus has them, else from the kubelet's resource metrics (``/metrics/resource``), never both (``QUERIES``;
docs/monitoring.md says which scrape jobs a Prometheus needs). A tenant's
measured part is its namespace's pair: a virtual cluster's is its host namespace, where its pods are synced to
and its control plane runs, as its quota counts them. A namespace without series measured nothing (0): nothing ran
there long enough to be scraped.

Prometheus is not Kubernetes, so this is not worker/kube.py. It must never fail or hold up the quota readings it
goes with: each query is bounded (BERTH_MEASURED_USAGE_TIMEOUT, also sent to Prometheus as its own timeout), the
reconcile pass asks in the background while it lists the cluster (``start``), and a Prometheus that did not answer,
answered an error, or holds no container series at all gives no measurement (``None``): the readings then carry
no measured part, and the usage history shows the gap (tenants.services.usage). After a failure the same
Prometheus is not asked again for ``BACKOFF_SECONDS`` in this process.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import requests
from django.conf import settings

from tenants.prometheus import prometheus_url_for
from tenants.services.usage import measured_value

logger = logging.getLogger(__name__)

# cAdvisor's series of each running container (not the pod-level cgroups, not pause containers); and the kubelet's
# resource metrics (/metrics/resource, what metrics-server reads), whose series carry no cgroup id.
CADVISOR = 'container!="",container!="POD",image!=""'
RESOURCE = 'container!="",id=""'


def _per_namespace(series: str) -> str:
    """``series`` (``{}`` for the selector) summed per namespace: cAdvisor's where it has the namespace's
    containers, else the resource metrics' (``or`` keeps the left side's namespaces: never both added up)."""
    return f"sum by (namespace) ({series.format(CADVISOR)}) or sum by (namespace) ({series.format(RESOURCE)})"


QUERIES = {
    "cpu": _per_namespace("rate(container_cpu_usage_seconds_total{{{}}}[5m])"),
    "memory": _per_namespace("container_memory_working_set_bytes{{{}}}"),
}
BACKOFF_SECONDS = 60.0
MAX_ANSWER_BYTES = 16 * 1024 * 1024  # two numbers per namespace: far more than any cluster's
_CONNECT_TIMEOUT = 3.0

_failed_at: dict[str, float] = {}  # Prometheus URL -> when it last failed (monotonic)
_failed_lock = threading.Lock()


class MeasureError(Exception):
    """Prometheus did not give a usable answer."""


@dataclass(frozen=True)
class Measurement:
    """One cluster's measured usage by namespace: CPU in cores (a 5-minute rate), memory working set in bytes."""

    cpu: Mapping[str, float]
    memory: Mapping[str, float]

    def of(self, namespace: str) -> dict[str, float]:
        """The namespace's measured part of a reading (0 for a namespace where nothing ran)."""
        return {"cpu": self.cpu.get(namespace, 0.0), "memory": self.memory.get(namespace, 0.0)}


Measure = Callable[[Any], "dict[str, float] | None"]  # tenant -> its measured part, or None (no measurement)


def _timeout() -> float:
    return float(settings.BERTH_MEASURED_USAGE_TIMEOUT)


def _vector(url: str, query: str, timeout: float) -> dict[str, float]:
    """One instant query's answer as {namespace: value}; MeasureError when there is none to use."""
    try:
        with requests.Session() as session:
            session.trust_env = False  # no proxy from the environment between the worker and Prometheus
            with session.post(
                f"{url}/api/v1/query",
                data={"query": query, "timeout": f"{max(1, round(timeout * 1000))}ms"},
                timeout=(min(_CONNECT_TIMEOUT, timeout), timeout + 1.0),
                allow_redirects=False,
                stream=True,
            ) as answer:
                body = bytearray()
                for chunk in answer.iter_content(64 * 1024):
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        raise MeasureError(f"answer larger than {MAX_ANSWER_BYTES // 2**20} MiB")
                status = answer.status_code
        parsed = json.loads(bytes(body)) if status == 200 else None
    except (requests.RequestException, ValueError) as exc:
        raise MeasureError(str(exc) or type(exc).__name__) from exc
    if status != 200 or not isinstance(parsed, dict) or parsed.get("status") != "success":
        raise MeasureError(f"answered {status}")
    data = parsed.get("data") or {}
    if data.get("resultType") != "vector":
        raise MeasureError(f"answered a {data.get('resultType')!r}, not a vector")
    found: dict[str, float] = {}
    for row in data.get("result") or []:
        namespace = (row.get("metric") or {}).get("namespace")
        pair = row.get("value") or []
        value = measured_value(pair[1]) if len(pair) == 2 else None
        if isinstance(namespace, str) and namespace and value is not None:
            found[namespace] = value
    return found


def _backing_off(url: str) -> bool:
    with _failed_lock:
        failed = _failed_at.get(url)
        return failed is not None and time.monotonic() - failed < BACKOFF_SECONDS


def _failed(url: str, cluster_name: str, why: str) -> None:
    with _failed_lock:
        _failed_at[url] = time.monotonic()
    logger.warning(
        "measured usage of cluster %s: Prometheus %s %s; readings carry requests only for %.0fs",
        cluster_name,
        url,
        why,
        BACKOFF_SECONDS,
    )


def _combine(url: str, cluster_name: str, answers: dict[str, Future[dict[str, float]]]) -> Measurement | None:
    try:
        cpu, memory = answers["cpu"].result(), answers["memory"].result()
    except MeasureError as exc:
        _failed(url, cluster_name, str(exc))
        return None
    except Exception:  # a bug here must not cost the pass its quota readings
        logger.exception("measured usage of cluster %s: reading Prometheus %s failed", cluster_name, url)
        _failed(url, cluster_name, "could not be read")
        return None
    if not cpu and not memory:
        # It answers but holds no container series at all: it does not scrape the kubelets' cAdvisor (yet).
        _failed(url, cluster_name, "holds no container series (does it scrape the kubelets' cAdvisor?)")
        return None
    with _failed_lock:
        _failed_at.pop(url, None)
    return Measurement(cpu, memory)


class Pending:
    """A measurement being taken in the background (both queries at once), waited for only when asked."""

    def __init__(self, cluster: Any) -> None:
        self._url = prometheus_url_for(cluster.prometheus or "")
        self._cluster_name = str(cluster.name)
        self._measurement: Measurement | None = None
        self._answers: dict[str, Future[dict[str, float]]] | None = None
        self._done = self._url is None or _backing_off(self._url)
        if not self._done:
            timeout = _timeout()
            pool = ThreadPoolExecutor(max_workers=len(QUERIES), thread_name_prefix="measured-usage")
            self._answers = {name: pool.submit(_vector, str(self._url), q, timeout) for name, q in QUERIES.items()}
            pool.shutdown(wait=False)  # the threads end with their bounded queries; nobody waits here

    def result(self) -> Measurement | None:
        """The measurement, or None when there is none (no Prometheus, or no usable answer); waits at most about
        BERTH_MEASURED_USAGE_TIMEOUT from the start."""
        if not self._done:
            assert self._url is not None and self._answers is not None
            self._measurement = _combine(self._url, self._cluster_name, self._answers)
            self._done = True
        return self._measurement

    def ready(self) -> bool:
        """Whether ``result`` would answer without waiting (every query answered or failed, or none was asked)."""
        return self._done or all(answer.done() for answer in (self._answers or {}).values())

    @property
    def measured(self) -> bool:
        """Whether a measurement was asked for and came (without waiting for one that has not been asked for)."""
        return self._done and self._measurement is not None

    def of_tenant(self, tenant: Any) -> dict[str, float] | None:
        measurement = self.result()
        return None if measurement is None else measurement.of(tenant.namespace)


def start(cluster: Any) -> Pending:
    """Start measuring ``cluster``'s namespaces (nothing when it has no Prometheus ``url``)."""
    return Pending(cluster)


def measure_tenant(tenant: Any) -> dict[str, float] | None:
    """One tenant's measured part now, by its cluster's Prometheus (a reading outside a reconcile pass)."""
    return start(tenant.cluster).of_tenant(tenant)


__all__ = ["QUERIES", "Measure", "MeasureError", "Measurement", "Pending", "measure_tenant", "start"]
