"""The dev cluster's Prometheus (devcluster/prometheus.py): the real server scraping each node's kubelet."""

from __future__ import annotations

import functools
import subprocess
from urllib.parse import urlsplit

import pytest

from devcluster import prometheus
from devcluster.launcher import KUBELET_PORT, ControlPlane
from tests.plugins.kube import wait_for


def test_the_config_scrapes_each_kubelet_three_ways_and_berth_from_files(tmp_path):
    client = prometheus.ClientFiles(tmp_path / "ca.crt", tmp_path / "p.crt", tmp_path / "p.key")
    config = prometheus.config(
        nodes=[("a", "10.0.0.2"), ("b", "10.0.1.2")], kubelet_port=10250, client=client, directory=tmp_path
    )
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"kubelet", "cadvisor", "resource", "berth-web", "berth-worker", "synthetic"}
    assert jobs["cadvisor"]["metrics_path"] == "/metrics/cadvisor"
    assert jobs["resource"]["static_configs"] == [
        {"targets": ["10.0.0.2:10250"], "labels": {"node": "a"}},
        {"targets": ["10.0.1.2:10250"], "labels": {"node": "b"}},
    ]
    assert jobs["kubelet"]["tls_config"]["ca_file"] == str(tmp_path / "ca.crt")
    assert jobs["berth-web"]["authorization"] == {"credentials_file": str(tmp_path / "berth-web.token")}
    assert jobs["synthetic"]["honor_labels"] is True  # a benchmark's series keep their namespace
    # Each kubelet series names its endpoint, as kube-prometheus labels them: the rules and measured usage trust
    # only these jobs and endpoints (prometheus.SOURCES), never the synthetic job's look-alikes.
    for job in ("kubelet", "cadvisor", "resource"):
        relabel = {"source_labels": ["__metrics_path__"], "target_label": "metrics_path"}
        assert jobs[job]["relabel_configs"] == [relabel]
    assert "synthetic" not in prometheus.SOURCES.kubelet_job.split("|")


@pytest.mark.nodes
def test_every_kubelet_is_scraped_with_a_user_that_may_read_metrics_only(node_control_plane: ControlPlane):
    server = node_control_plane.prometheus
    assert server is not None
    want = {
        f"https://{node.node_ip}:{KUBELET_PORT}{path}"
        for node in node_control_plane.nodes
        for path in prometheus.KUBELET_PATHS.values()
    }
    wait_for(
        lambda: {url for url, health in server.targets_up().items() if health == "up"} >= want,
        timeout=60,
        what="every kubelet target up",
        interval=1,
    )
    # Pod-level series come with the labels tenants are held to.
    rows = wait_for(
        lambda: server.query('container_memory_working_set_bytes{namespace="kube-system"}'),
        timeout=60,
        what="cAdvisor series",
        interval=1,
    )
    assert all({"namespace", "pod", "node"} <= set(row["metric"]) for row in rows)
    # The scraping identity reads kubelet metrics and nothing else.
    for verb, resource, subresource in (
        ("get", "nodes", "metrics"),
        ("get", "nodes", "proxy"),
        ("list", "pods", ""),
        ("get", "secrets", ""),
    ):
        answer = subprocess.run(
            [
                str(node_control_plane.kubectl),
                f"--kubeconfig={node_control_plane.kubeconfig_path}",
                "auth",
                "can-i",
                verb,
                resource,
                f"--subresource={subresource}",
                f"--as={prometheus.USER}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        allowed = subresource == "metrics"
        assert answer.stdout.strip() == ("yes" if allowed else "no"), (verb, resource, subresource, answer.stderr)


@pytest.mark.nodes
@pytest.mark.django_db(transaction=True)
def test_berths_web_and_worker_metrics_are_scraped(node_control_plane: ControlPlane, live_portal, celery_worker):
    """The file_sd jobs pointed at the running portal (with its bearer token) and worker, as `make demo` does."""
    server = node_control_plane.prometheus
    assert server is not None
    web = urlsplit(live_portal.url).netloc
    worker = urlsplit(celery_worker.metrics_url).netloc
    server.set_targets("berth-web", [web], token=live_portal.metrics_token)
    server.set_targets("berth-worker", [worker])
    try:
        for job in ("berth-web", "berth-worker"):
            wait_for(
                functools.partial(server.query, f'up{{job="{job}"}} == 1'),
                timeout=60,
                what=f"{job} scraped",
                interval=1,
            )
        # The portal's state, computed at scrape time, is in Prometheus.
        assert server.query('berth_tenants{job="berth-web"}') or server.query('{job="berth-web", __name__=~"berth_.+"}')
        # A wrong token is a failed scrape, not a silent one.
        server.set_targets("berth-web", [web], token="not-the-token")
        wait_for(
            functools.partial(server.query, 'up{job="berth-web"} == 0'), timeout=60, what="a refused scrape", interval=1
        )
    finally:
        server.set_targets("berth-web", [])
        server.set_targets("berth-worker", [])


def test_with_an_alertmanager_the_config_loads_the_rules_file_and_sends_there(tmp_path):
    client = prometheus.ClientFiles(tmp_path / "ca.crt", tmp_path / "p.crt", tmp_path / "p.key")
    bare = prometheus.config(nodes=[("a", "10.0.0.2")], kubelet_port=10250, client=client, directory=tmp_path)
    assert "alerting" not in bare and "rule_files" not in bare
    config = prometheus.config(
        nodes=[("a", "10.0.0.2")], kubelet_port=10250, client=client, directory=tmp_path, alertmanager="127.0.0.1:9"
    )
    assert config["rule_files"] == [str(tmp_path / prometheus.RULES_FILE)]
    assert config["alerting"] == {"alertmanagers": [{"static_configs": [{"targets": ["127.0.0.1:9"]}]}]}
