"""A tenant's own metrics: Prometheus's HTTP query API, held to the tenant's namespace by prom-label-proxy.

Berth does not rewrite PromQL. Each Prometheus a cluster may name (``Cluster.prometheus``) has, in
``BERTH_PROMETHEUS``, the address of an upstream prom-label-proxy run beside the portal in front of that
Prometheus (the entry itself, or its ``label_proxy``; its ``url``, Prometheus itself, is the worker's, see
worker/measured_usage.py)::

    prom-label-proxy -label namespace -header-name X-Berth-Namespace -enable-label-apis \\
        -upstream http://prometheus:9090 -insecure-listen-address 127.0.0.1:9091

For every query, series and label request the proxy adds ``namespace="<the tenant's namespace>"`` to each
selector, from the header Berth sets (never from anything the caller sends). Berth's own part is what comes
before: who may ask (the tenant's viewers, as everywhere, 404 for anyone else), which parameters go through (only
Prometheus's own, within bounds: a range of at most ``MAX_RANGE``, at most ``MAX_POINTS`` points, a timeout of at
most ``MAX_TIMEOUT``), and that an answer never hangs a web worker or fills its memory.

Before the first query to an address, Berth asks it once without the header: a prom-label-proxy refuses, a bare
Prometheus answers, and then nothing is sent there (a deployment that points the setting at Prometheus itself
would otherwise hand every tenant every namespace's series).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import requests
from django.conf import settings

logger = logging.getLogger(__name__)

HEADER = "X-Berth-Namespace"
LABEL = "namespace"
ENDPOINTS = ("query", "query_range", "series", "labels", "label_values")
MAX_RANGE = dt.timedelta(days=8)  # the tenant page's longest graph (7 days) and a little
MAX_POINTS = 11_000  # Prometheus's own bound on a range query's points per series
MAX_TIMEOUT = 15.0  # seconds Prometheus may spend on one query
MAX_QUERY_LENGTH = 4096
MAX_MATCHERS = 20
MAX_LIMIT = 10_000  # series and label values per answer
MAX_ANSWER_BYTES = 16 * 1024 * 1024
_CONNECT_TIMEOUT = 3.0
_READ_TIMEOUT = MAX_TIMEOUT + 5.0
_CHECK_SECONDS = 300.0
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,127}")
_DURATION = re.compile(r"(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?")
_DURATION_UNITS = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)


class QueryError(ValueError):
    """A request Berth will not send: Prometheus's own answer shape, ``errorType`` and message."""

    def __init__(self, message: str, *, status: int = 400, error_type: str = "bad_data") -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type

    def body(self) -> dict:
        return {"status": "error", "errorType": self.error_type, "error": str(self)}


@dataclass(frozen=True)
class Answer:
    """What Prometheus answered, passed on as it is: its status and its JSON body."""

    status: int
    body: bytes


def holds_namespace(tenant) -> bool:
    """Whether the tenant holds its namespace now: only then are the namespace's series its own. A cancelled or
    deleted tenant's name may since belong to another team's tenant."""
    from tenants.models import LIVE_STATUSES

    return tenant.status in LIVE_STATUSES


def _address(name: str, key: str) -> str | None:
    """One address of the Prometheus ``name`` in BERTH_PROMETHEUS: an entry is the label proxy's address alone,
    or an object with ``label_proxy`` and/or ``url`` (portal/settings.py checks the shape)."""
    entry = settings.BERTH_PROMETHEUS.get(name) if name else None
    if isinstance(entry, str):
        entry = {"label_proxy": entry}
    url = (entry or {}).get(key)
    return url.rstrip("/") if url else None


def upstream_for(name: str) -> str | None:
    """The label-enforcing address configured for the Prometheus a cluster names (None: not configured)."""
    return _address(name, "label_proxy")


def prometheus_url_for(name: str) -> str | None:
    """The address of the Prometheus a cluster names itself, unfiltered (None: not configured): for the worker's
    cross-namespace reads of measured usage only, never for a tenant's query."""
    return _address(name, "url")


# --- Parameters -------------------------------------------------------------------


def parse_time(name: str, value: str) -> float:
    """A Prometheus time parameter (RFC 3339 or Unix seconds) as Unix seconds."""
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = dt.datetime.fromisoformat(value)
        except ValueError:
            raise QueryError(f"invalid parameter {name!r}: {value!r} is not RFC 3339 or Unix seconds") from None
        if moment.tzinfo is None:
            raise QueryError(f"invalid parameter {name!r}: {value!r} has no time zone") from None
        return moment.timestamp()
    if not math.isfinite(seconds):
        raise QueryError(f"invalid parameter {name!r}: {value!r} is not a finite time")
    return seconds


def parse_duration(name: str, value: str) -> float:
    """A Prometheus duration (``15s``, ``1h30m``) or float seconds, in seconds."""
    try:
        seconds = float(value)
    except ValueError:
        match = _DURATION.fullmatch(value)
        if not value or not match:
            raise QueryError(f"invalid parameter {name!r}: {value!r} is not a duration such as 30s or 5m") from None
        seconds = sum(int(part) * unit for part, unit in zip(match.groups(), _DURATION_UNITS, strict=True) if part)
    if not math.isfinite(seconds) or seconds <= 0:
        raise QueryError(f"invalid parameter {name!r}: must be a positive duration")
    return seconds


def _one(params: Mapping[str, Sequence[str]], name: str, *, required: bool = False) -> str | None:
    values = params.get(name) or []
    if len(values) > 1:
        raise QueryError(f"parameter {name!r} given {len(values)} times; give it once")
    if not values:
        if required:
            raise QueryError(f"parameter {name!r} is required")
        return None
    return values[0]


def _query(params: Mapping[str, Sequence[str]]) -> str:
    query = _one(params, "query", required=True) or ""
    if not query.strip():
        raise QueryError("parameter 'query' is empty")
    if len(query) > MAX_QUERY_LENGTH:
        raise QueryError(f"parameter 'query' is longer than {MAX_QUERY_LENGTH} characters")
    return query


def _timeout(params: Mapping[str, Sequence[str]]) -> str:
    value = _one(params, "timeout")
    seconds = MAX_TIMEOUT if value is None else min(parse_duration("timeout", value), MAX_TIMEOUT)
    return f"{max(1, round(seconds * 1000))}ms"  # Prometheus's durations are whole numbers of a unit


def _window(params: Mapping[str, Sequence[str]], now: float, since: float) -> tuple[float, float]:
    """start and end of a series or label request: end defaults to now, start to MAX_RANGE before it, and never
    before ``since``."""
    end_value, start_value = _one(params, "end"), _one(params, "start")
    end = now if end_value is None else parse_time("end", end_value)
    start = end - MAX_RANGE.total_seconds() if start_value is None else parse_time("start", start_value)
    _check_range(start, end)
    return _not_before(since, start, end)


def _not_before(since: float, start: float, end: float) -> tuple[float, float]:
    """The range from when the tenant existed: its namespace's earlier series were another tenant's."""
    if end < since:
        raise QueryError("the range ends before this tenant existed")
    return max(start, since), end


def _check_range(start: float, end: float) -> None:
    if end < start:
        raise QueryError("end is before start")
    if end - start > MAX_RANGE.total_seconds():
        raise QueryError(f"the range is longer than {MAX_RANGE.days} days; ask for a shorter one")


def _matchers(params: Mapping[str, Sequence[str]], *, required: bool) -> list[str]:
    matchers = list(params.get("match[]") or [])
    if required and not matchers:
        raise QueryError("at least one 'match[]' is required")
    if len(matchers) > MAX_MATCHERS:
        raise QueryError(f"at most {MAX_MATCHERS} 'match[]' parameters")
    for matcher in matchers:
        if not matcher.strip() or len(matcher) > MAX_QUERY_LENGTH:
            raise QueryError(f"each 'match[]' must be a selector of at most {MAX_QUERY_LENGTH} characters")
    return matchers


def _limit(params: Mapping[str, Sequence[str]]) -> str:
    value = _one(params, "limit")
    if value is None:
        return str(MAX_LIMIT)
    if not value.isdigit():
        raise QueryError("invalid parameter 'limit': must be a whole number")
    return str(min(int(value), MAX_LIMIT) or MAX_LIMIT)  # Prometheus reads 0 as "no limit"


def checked(
    endpoint: str, params: Mapping[str, Sequence[str]], *, now: float, since: float = -math.inf
) -> list[tuple[str, str]]:
    """The parameters Berth sends for ``endpoint``, within bounds; QueryError for a request it will not send.

    Only Prometheus's own parameters pass (anything else is dropped), each at most once but ``match[]``. No
    evaluation time, range or window starts before ``since`` (when the tenant was created): what the namespace
    held before was another tenant's.
    """
    if endpoint not in ENDPOINTS:
        raise QueryError(f"unknown endpoint {endpoint!r}", status=404, error_type="not_found")
    out: list[tuple[str, str]] = []
    if endpoint == "query":
        out.append(("query", _query(params)))
        moment = _one(params, "time")
        if moment is not None:
            if parse_time("time", moment) < since:
                raise QueryError("the evaluation time is before this tenant existed")
            out.append(("time", moment))
        out.append(("timeout", _timeout(params)))
    elif endpoint == "query_range":
        query = _query(params)
        start = parse_time("start", _one(params, "start", required=True) or "")
        end = parse_time("end", _one(params, "end", required=True) or "")
        step = parse_duration("step", _one(params, "step", required=True) or "")
        _check_range(start, end)
        if (end - start) / step > MAX_POINTS:
            raise QueryError(f"more than {MAX_POINTS} points per series; ask for a larger step or a shorter range")
        if start < since:  # the first point from the tenant's start, on the same grid of steps
            start += math.ceil((since - start) / step) * step
            if start > end:
                raise QueryError("the range ends before this tenant existed")
        out += [("query", query), ("start", f"{start:.3f}"), ("end", f"{end:.3f}"), ("step", f"{step:.3f}")]
        out.append(("timeout", _timeout(params)))
    else:
        matchers = _matchers(params, required=endpoint == "series")
        start, end = _window(params, now, since)
        out += [("match[]", matcher) for matcher in matchers]
        out += [("start", f"{start:.3f}"), ("end", f"{end:.3f}"), ("limit", _limit(params))]
    return out


# --- Forwarding -------------------------------------------------------------------

_connections = threading.local()


def _session() -> requests.Session:
    """This thread's connections to the label proxies, kept open between queries (a sync worker is one thread)."""
    session = getattr(_connections, "session", None)
    if session is None:
        session = _connections.session = requests.Session()
        session.trust_env = False  # never a proxy from the environment between Berth and its sidecar
    return session


_enforcing: dict[str, float] = {}  # upstream URL -> when it last proved to enforce the label
_not_enforcing: dict[str, float] = {}  # upstream URL -> when it last answered an unlabelled request
_enforcing_lock = threading.Lock()
_RECHECK_SECONDS = 30.0  # a misconfigured address is asked again (and logged) at most this often


def _proves_enforcing(upstream: str) -> bool:
    """Whether ``upstream`` refuses an unlabelled request, as prom-label-proxy does (asked once per few minutes)."""
    with _enforcing_lock:
        if time.monotonic() - _enforcing.get(upstream, -math.inf) < _CHECK_SECONDS:
            return True
        if time.monotonic() - _not_enforcing.get(upstream, -math.inf) < _RECHECK_SECONDS:
            return False
    try:
        answer = _session().get(f"{upstream}/api/v1/labels", timeout=(_CONNECT_TIMEOUT, 10.0), allow_redirects=False)
    except requests.RequestException as exc:
        raise QueryError("the cluster's Prometheus is not reachable", status=503, error_type="unavailable") from exc
    if answer.status_code == 400 and HEADER.lower() in answer.text.lower():
        with _enforcing_lock:
            _enforcing[upstream] = time.monotonic()
        return True
    with _enforcing_lock:
        _not_enforcing[upstream] = time.monotonic()
    logger.error(
        "the Prometheus address %s does not enforce a namespace: it must be prom-label-proxy with "
        "-label %s -header-name %s; no tenant query is sent there",
        upstream,
        LABEL,
        HEADER,
    )
    return False


def forward(
    *, upstream: str, endpoint: str, label_name: str | None, namespace: str, params: list[tuple[str, str]]
) -> Answer:
    """Send checked parameters for one namespace to the label proxy at ``upstream``; its answer, bounded."""
    if not _proves_enforcing(upstream):
        raise QueryError(
            "monitoring is misconfigured for this cluster; the platform team has been told",
            status=503,
            error_type="unavailable",
        )
    path = f"label/{label_name}/values" if endpoint == "label_values" else endpoint
    # Prometheus reads a form on every endpoint but label values, which is GET only.
    form = endpoint != "label_values"
    try:
        with _session().request(
            "POST" if form else "GET",
            f"{upstream}/api/v1/{path}",
            data=params if form else None,
            params=None if form else params,
            headers={HEADER: namespace},
            timeout=(_CONNECT_TIMEOUT, _READ_TIMEOUT),
            allow_redirects=False,
            stream=True,
        ) as answer:
            body = bytearray()
            for chunk in answer.iter_content(64 * 1024):
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    raise QueryError(
                        f"the answer is larger than {MAX_ANSWER_BYTES // 2**20} MiB; narrow the query",
                        status=422,
                        error_type="execution",
                    )
            status = answer.status_code
    except requests.Timeout as exc:
        raise QueryError("Prometheus did not answer in time", status=504, error_type="timeout") from exc
    except requests.RequestException as exc:
        raise QueryError("the cluster's Prometheus is not reachable", status=503, error_type="unavailable") from exc
    if status in (200, 400, 422, 503):
        return Answer(status, bytes(body))
    logger.warning("Prometheus behind %s answered %s to a tenant query", upstream, status)
    raise QueryError(f"Prometheus answered {status}", status=502, error_type="internal")
