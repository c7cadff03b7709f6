"""worker.measured_usage without a cluster: which address it asks, and that a Prometheus that is down, silent or
not configured gives no measurement, quickly, and is left alone for a while. (Real answers, from the dev nodes'
Prometheus: test_measured_usage_nodes.py.)"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from devcluster.launcher import free_port
from tenants import prometheus
from worker import measured_usage


@pytest.fixture(autouse=True)
def no_backoff() -> Iterator[None]:
    measured_usage._failed_at.clear()
    yield
    measured_usage._failed_at.clear()


def cluster(name: str = "p") -> SimpleNamespace:
    return SimpleNamespace(name="dev", prometheus=name)


def test_an_entry_names_the_label_proxy_the_prometheus_or_both(settings):
    settings.BERTH_PROMETHEUS = {
        "old": "http://127.0.0.1:9091/",
        "both": {"label_proxy": "http://127.0.0.1:9092", "url": "http://prometheus:9090/"},
        "direct": {"url": "http://prometheus:9090"},
    }
    assert (prometheus.upstream_for("old"), prometheus.prometheus_url_for("old")) == ("http://127.0.0.1:9091", None)
    assert (prometheus.upstream_for("both"), prometheus.prometheus_url_for("both")) == (
        "http://127.0.0.1:9092",
        "http://prometheus:9090",
    )
    assert (prometheus.upstream_for("direct"), prometheus.prometheus_url_for("direct")) == (
        None,
        "http://prometheus:9090",
    )
    assert prometheus.prometheus_url_for("") is None and prometheus.prometheus_url_for("nope") is None


def test_without_a_prometheus_url_nothing_is_asked(settings):
    # A label proxy alone is never asked across namespaces: it would refuse, and it is the tenants' gate.
    settings.BERTH_PROMETHEUS = {"p": f"http://127.0.0.1:{free_port()}"}
    for name in ("p", ""):
        pending = measured_usage.start(cluster(name))
        assert pending.result() is None
        assert pending.of_tenant(SimpleNamespace(namespace="web"), {"used": {"pods": "1"}}) is None
        assert not pending.measured
    assert measured_usage._failed_at == {}


def test_a_prometheus_that_is_down_gives_no_measurement_and_is_left_alone_a_while(settings, caplog):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens
    settings.BERTH_PROMETHEUS = {"p": {"url": url}}
    pending = measured_usage.start(cluster())
    assert pending.result() is None and not pending.measured
    assert url in measured_usage._failed_at
    assert "readings carry requests only" in caplog.text
    failed_at = measured_usage._failed_at[url]
    assert measured_usage.start(cluster()).result() is None  # not asked again: the same failure time
    assert measured_usage._failed_at[url] == failed_at


def test_a_silent_prometheus_costs_at_most_the_timeout(settings):
    settings.BERTH_MEASURED_USAGE_TIMEOUT = 0.5
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        settings.BERTH_PROMETHEUS = {"p": {"url": f"http://127.0.0.1:{silent.getsockname()[1]}"}}
        started = time.monotonic()
        pending = measured_usage.start(cluster())
        assert time.monotonic() - started < 0.2  # asked in the background
        assert pending.result() is None
        assert time.monotonic() - started < 3.0


def test_a_trickling_prometheus_costs_at_most_the_timeout_and_its_thread_ends(settings):
    """Headers at once, then a byte every 0.2 s for ever: each read is quick, the answer never whole. The pass gets
    no measurement by its deadline, and the reading thread is cut off too (not left trickling)."""
    settings.BERTH_MEASURED_USAGE_TIMEOUT = 0.5
    stop = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as server:

        def trickle() -> None:
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                threading.Thread(target=_trickle_to, args=(conn, stop), daemon=True).start()

        threading.Thread(target=trickle, daemon=True).start()
        settings.BERTH_PROMETHEUS = {"p": {"url": f"http://127.0.0.1:{server.getsockname()[1]}"}}
        started = time.monotonic()
        try:
            pending = measured_usage.start(cluster())
            assert pending.result() is None
            waited = time.monotonic() - started
            assert waited < 2.5, waited
            answers = pending._answers or {}
            while not all(f.done() for f in answers.values()) and time.monotonic() - started < 5:
                time.sleep(0.05)
            assert all(f.done() for f in answers.values()), "the reading threads still trickle"
        finally:
            stop.set()


def _trickle_to(conn: socket.socket, stop: threading.Event) -> None:
    with conn:
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            while not stop.is_set():
                conn.sendall(b" ")
                time.sleep(0.2)
        except OSError:
            return


def test_only_the_kubelets_series_are_asked_for_and_a_single_tenant_by_its_namespace(settings):
    settings.BERTH_KUBELET_JOB = "kubelet"
    every = measured_usage.queries()
    one = measured_usage.queries(namespace="team-a-web")
    for query in every.values():
        assert query.count('job=~"kubelet"') == 2 and 'metrics_path="/metrics/cadvisor"' in query
        assert 'metrics_path="/metrics/resource"' in query and "namespace=" not in query
    for query in one.values():
        assert query.count('namespace="team-a-web"') == 2
    asked: list[str] = []
    with _prometheus(asked, [{"metric": {"namespace": "team-a-web"}, "value": [0, "0.25"]}]) as url:
        settings.BERTH_PROMETHEUS = {"p": {"url": url}}
        tenant = SimpleNamespace(namespace="team-a-web", cluster=cluster())
        measured = measured_usage.measure_tenant(tenant, {"used": {"pods": "1"}})
    assert measured == {"cpu": 0.25, "memory": 0.25}
    assert sorted(asked) == sorted(one.values())


def test_a_tenant_missing_from_the_answer_is_unmeasured_unless_nothing_runs_there():
    measurement = measured_usage.Measurement(cpu={"busy": 0.5}, memory={"busy": 2.0**20})
    assert measurement.of("busy", {"used": {"pods": "3"}}) == {"cpu": 0.5, "memory": 2.0**20}
    # Pods run (or CPU is requested), yet no series: their node was not scraped. Not "used nothing".
    assert measurement.of("gone", {"used": {"pods": "2", "requests.cpu": "0"}}) is None
    assert measurement.of("gone", {"used": {"pods": "0", "requests.cpu": "100m"}}) is None
    assert measurement.of("gone", {}) is None  # no quota reading: nothing known
    # Nothing runs there: it truly used nothing.
    assert measurement.of("idle", {"used": {"pods": "0", "requests.cpu": "0"}}) == {"cpu": 0.0, "memory": 0.0}


@contextlib.contextmanager
def _prometheus(asked: list[str], result: list[dict]) -> Iterator[str]:
    """A Prometheus answering every instant query with ``result``, recording the queries asked."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            asked.append(urllib.parse.parse_qs(self.rfile.read(length).decode())["query"][0])
            body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
