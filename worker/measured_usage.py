"""Measured usage: what each namespace's containers use, read from the cluster's own Prometheus.

The quota says what a tenant's pods request; Prometheus says what they use. Per cluster whose Prometheus has a
``url`` in BERTH_PROMETHEUS (tenants.prometheus.prometheus_url_for: Prometheus itself, not the label proxy the
web sends tenants' queries through), two instant queries answer for every namespace at once: the containers' CPU
(``rate(container_cpu_usage_seconds_total[5m])``, cores) and memory working set
(``container_memory_working_set_bytes``, bytes) summed per namespace, from cAdvisor's per-container series where
Prometheus has them, else from the kubelet's resource metrics (``/metrics/resource``), never both (``queries``;
docs/monitoring.md says which scrape jobs a Prometheus needs). Only the kubelet's series count (its job and
endpoint, tenants.metric_sources, from BERTH_KUBELET_JOB and BERTH_KUBELET_*_PATH): a tenant's own exporter,
scraped by a job that keeps its labels, could otherwise claim any namespace's usage. A tenant's measured part is
its namespace's pair: a virtual cluster's is its host namespace, where its pods are synced to and its control plane
runs, as its quota counts them. A namespace without series is measured as nothing (0) only when its quota reading
says nothing runs there (no pods, no CPU requested); otherwise the node it runs on was not scraped, and the tenant
is unmeasured (``Measurement.of``) rather than recorded as having used nothing. A single tenant's reading (outside a
reconcile pass, ``measure_tenant``) asks for its namespace only.

Prometheus is not Kubernetes, so this is not worker/kube.py. It must never fail or hold up the quota readings it
goes with: each query is bounded (BERTH_MEASURED_USAGE_TIMEOUT, also sent to Prometheus as its own timeout; the
answer must be complete by then, however slowly it trickles in, see ``_vector``), the reconcile pass asks in the
background while it lists the cluster (``start``), and a Prometheus that did not answer, answered an error, or holds
no container series at all gives no measurement (``None``): the readings then carry
no measured part, and the usage history shows the gap (tenants.services.usage). After a failure the same
Prometheus is not asked again for ``BACKOFF_SECONDS`` in this process.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import requests
from django.conf import settings

from tenants.metric_sources import Sources
from tenants.prometheus import prometheus_url_for
from tenants.quantities import parse_quantity
from tenants.services.usage import measured_value

logger = logging.getLogger(__name__)


def queries(sources: Sources | None = None, namespace: str = "") -> dict[str, str]:
    """The two queries, over the kubelet's series only (``sources``, by default the settings'), for every namespace
    or only ``namespace``: cAdvisor's series of each running container (not the pod-level cgroups, not pause
    containers) where Prometheus has the namespace's containers, else the kubelet's resource metrics
    (/metrics/resource, what metrics-server reads); ``or`` keeps the left side's namespaces, never both added up."""
    s = sources or Sources.from_settings()
    scope = f', namespace="{namespace}"' if namespace else ""
    cadvisor = f'{s.cadvisor}, container!="", container!="POD", image!=""{scope}'
    resource = f'{s.resource}, container!=""{scope}'

    def per_namespace(series: str) -> str:
        return f"sum by (namespace) ({series.format(cadvisor)}) or sum by (namespace) ({series.format(resource)})"

    return {
        "cpu": per_namespace("rate(container_cpu_usage_seconds_total{{{}}}[5m])"),
        "memory": per_namespace("container_memory_working_set_bytes{{{}}}"),
    }


BACKOFF_SECONDS = 60.0
MAX_ANSWER_BYTES = 16 * 1024 * 1024  # two numbers per namespace: far more than any cluster's
_CONNECT_TIMEOUT = 3.0
_GRACE = 1.0  # seconds after the timeout Prometheus was given, for its answer to arrive

_failed_at: dict[str, float] = {}  # Prometheus URL -> when it last failed (monotonic)
_failed_lock = threading.Lock()


class MeasureError(Exception):
    """Prometheus did not give a usable answer."""


@dataclass(frozen=True)
class Measurement:
    """One cluster's measured usage by namespace: CPU in cores (a 5-minute rate), memory working set in bytes."""

    cpu: Mapping[str, float]
    memory: Mapping[str, float]

    def of(self, namespace: str, usage: Mapping[str, Any]) -> dict[str, float] | None:
        """The namespace's measured part of its quota reading ``usage``: 0 for a namespace without series only
        when the reading says nothing ran there; None (unmeasured) when it ran and Prometheus has no series of it
        (its node was not scraped: not the same as having used nothing)."""
        cpu, memory = self.cpu.get(namespace), self.memory.get(namespace)
        if (cpu is None or memory is None) and not _idle(usage):
            return None
        return {"cpu": cpu or 0.0, "memory": memory or 0.0}


def _idle(usage: Mapping[str, Any]) -> bool:
    """Whether the quota reading says no pod runs and no CPU is requested (an empty or missing reading says
    nothing, so it is not idle)."""
    used = usage.get("used") or {}
    counts = [parse_quantity(used[key]) for key in ("pods", "requests.cpu") if key in used]
    return bool(counts) and all(count is not None and count == 0 for count in counts)


# (tenant, its quota reading) -> its measured part, or None (no measurement)
Measure = Callable[[Any, Mapping[str, Any]], "dict[str, float] | None"]


def _timeout() -> float:
    return float(settings.BERTH_MEASURED_USAGE_TIMEOUT)


def _vector(url: str, query: str, timeout: float) -> dict[str, float]:
    """One instant query's answer as {namespace: value}; MeasureError when there is none to use.

    The read timeout bounds each socket read, not the answer: a Prometheus (or something in between) trickling a
    byte now and then would hold the thread for ever. So the answer must be whole within ``timeout`` plus
    ``_GRACE``: then its socket is shut down, which ends the blocked read."""
    deadline = time.monotonic() + timeout + _GRACE
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
                body = _read_until(answer, deadline)
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


def _read_until(answer: requests.Response, deadline: float) -> bytearray:
    connection = getattr(answer.raw, "connection", None)
    sock: socket.socket | None = getattr(connection, "sock", None)
    late = threading.Event()

    def cut() -> None:
        late.set()
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed: the read ended anyway

    timer = threading.Timer(max(0.0, deadline - time.monotonic()), cut)
    timer.daemon = True
    timer.start()
    try:
        body = bytearray()
        for chunk in answer.iter_content(64 * 1024):
            body += chunk
            if len(body) > MAX_ANSWER_BYTES:
                raise MeasureError(f"answer larger than {MAX_ANSWER_BYTES // 2**20} MiB")
            if late.is_set() or time.monotonic() > deadline:
                break
    except requests.RequestException:
        if not late.is_set():
            raise
    finally:
        timer.cancel()
    if late.is_set() or time.monotonic() > deadline:
        raise MeasureError("answer not complete in time")
    return body


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


def _combine(
    url: str, cluster_name: str, answers: dict[str, Future[dict[str, float]]], deadline: float, *, scoped: bool
) -> Measurement | None:
    _, pending = wait(answers.values(), timeout=max(0.0, deadline - time.monotonic()))
    if pending:  # _vector ends them soon after; the pass does not wait for that
        _failed(url, cluster_name, "did not answer in time")
        return None
    try:
        cpu, memory = answers["cpu"].result(), answers["memory"].result()
    except MeasureError as exc:
        _failed(url, cluster_name, str(exc))
        return None
    except Exception:  # a bug here must not cost the pass its quota readings
        logger.exception("measured usage of cluster %s: reading Prometheus %s failed", cluster_name, url)
        _failed(url, cluster_name, "could not be read")
        return None
    if not cpu and not memory and not scoped:
        # It answers but holds no container series at all: it does not scrape the kubelets' cAdvisor (yet).
        _failed(url, cluster_name, "holds no container series (does it scrape the kubelets' cAdvisor?)")
        return None
    with _failed_lock:
        _failed_at.pop(url, None)
    return Measurement(cpu, memory)


class Pending:
    """A measurement being taken in the background (both queries at once), waited for only when asked."""

    def __init__(self, cluster: Any, namespace: str = "") -> None:
        self._url = prometheus_url_for(cluster.prometheus or "")
        self._cluster_name = str(cluster.name)
        self._scoped = bool(namespace)
        self._measurement: Measurement | None = None
        self._answers: dict[str, Future[dict[str, float]]] | None = None
        self._done = self._url is None or _backing_off(self._url)
        timeout = _timeout()
        self._deadline = time.monotonic() + timeout + _GRACE + 0.5  # _vector's own deadline, and a little
        if not self._done:
            asked = queries(namespace=namespace)
            pool = ThreadPoolExecutor(max_workers=len(asked), thread_name_prefix="measured-usage")
            self._answers = {name: pool.submit(_vector, str(self._url), q, timeout) for name, q in asked.items()}
            pool.shutdown(wait=False)  # the threads end with their bounded queries; nobody waits here

    def result(self) -> Measurement | None:
        """The measurement, or None when there is none (no Prometheus, or no usable answer); waits at most about
        BERTH_MEASURED_USAGE_TIMEOUT (and a second or two) from the start, however slowly Prometheus answers."""
        if not self._done:
            assert self._url is not None and self._answers is not None
            self._measurement = _combine(
                self._url, self._cluster_name, self._answers, self._deadline, scoped=self._scoped
            )
            self._done = True
        return self._measurement

    def ready(self) -> bool:
        """Whether ``result`` would answer without waiting (every query answered or failed, or none was asked)."""
        return self._done or all(answer.done() for answer in (self._answers or {}).values())

    @property
    def measured(self) -> bool:
        """Whether a measurement was asked for and came (without waiting for one that has not been asked for)."""
        return self._done and self._measurement is not None

    def of_tenant(self, tenant: Any, usage: Mapping[str, Any]) -> dict[str, float] | None:
        measurement = self.result()
        return None if measurement is None else measurement.of(tenant.namespace, usage)


def start(cluster: Any, namespace: str = "") -> Pending:
    """Start measuring ``cluster``'s namespaces, or only ``namespace`` (nothing when it has no Prometheus
    ``url``)."""
    return Pending(cluster, namespace)


def measure_tenant(tenant: Any, usage: Mapping[str, Any]) -> dict[str, float] | None:
    """One tenant's measured part now, by its cluster's Prometheus, asked for its namespace only (a reading
    outside a reconcile pass)."""
    return start(tenant.cluster, tenant.namespace).of_tenant(tenant, usage)


__all__ = ["Measure", "MeasureError", "Measurement", "Pending", "measure_tenant", "queries", "start"]
