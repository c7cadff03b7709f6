"""worker.measured_usage without a cluster: which address it asks, and that a Prometheus that is down, silent or
not configured gives no measurement, quickly, and is left alone for a while. (Real answers, from the dev nodes'
Prometheus: test_measured_usage_nodes.py.)"""

from __future__ import annotations

import socket
import time
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
        assert pending.of_tenant(SimpleNamespace(namespace="web")) is None
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
