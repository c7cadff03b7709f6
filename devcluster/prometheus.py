"""The dev cluster's Prometheus: the real server (build.sh prometheus), scraping every node's kubelet and Berth.

    prometheus = Prometheus(directory, bin_dir, control_plane_files)
    prometheus.start([("shared-1", "10.x.y.2"), ...])
    prometheus.set_targets("berth-web", ["127.0.0.1:8000"])   # the portal, once it runs

Jobs, as a kubeadm cluster's Prometheus scrapes them (kube-prometheus' ServiceMonitors for the kubelet):

- ``kubelet``, ``cadvisor`` and ``resource``: each node's kubelet at ``/metrics``, ``/metrics/cadvisor`` and
  ``/metrics/resource`` over TLS, each series labelled with its endpoint (``metrics_path``, as kube-prometheus
  does), verified against the cluster CA, as the user ``berth-dev-prometheus`` whose ClusterRole grants
  ``nodes/metrics`` and nothing else (the kubelet asks the API server, webhook authorization);
- ``berth-web`` and ``berth-worker``: the portal's ``/metrics`` (bearer token, BERTH_METRICS_TOKEN) and the
  worker's exporter (BERTH_WORKER_METRICS_PORT), named in file_sd files whoever starts them writes;
- ``synthetic``: empty unless a benchmark names targets (bench/metrics.py serves many tenants' worth of
  kubelet-like series); their own labels are kept, as the kubelet jobs keep theirs.

With an Alertmanager (devcluster/alertmanager.py) it evaluates the alert rules about tenants' workloads
(tenants/alert_rules.py, the chart's thresholds unless ``set_rules`` gives others, over ``SOURCES``: these kubelet
jobs and ``berth-web``) and sends what fires there.

It listens on 127.0.0.1 on a free port with its own data directory, and it is one Component: stopped with the
rest of the control plane.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from devcluster.kubeconfig import write_private
from devcluster.process import Component, wait_until
from tenants.alert_rules import rule_group
from tenants.metric_sources import Sources

USER = "berth-dev-prometheus"
CLUSTER_ROLE = "berth:dev-prometheus"
SCRAPE_INTERVAL = "10s"
# Bounds of the server itself, whatever a caller asks: no query runs longer or loads more than this.
QUERY_TIMEOUT = "20s"
QUERY_MAX_SAMPLES = 5_000_000
RETENTION = "8d"  # the tenant page's longest graph (7 days), and a little
FILE_SD_JOBS = ("berth-web", "berth-worker", "synthetic")
RULES_FILE = "rules.yml"
KUBELET_PATHS = {"kubelet": "/metrics", "cadvisor": "/metrics/cadvisor", "resource": "/metrics/resource"}
# The series Berth believes a namespace of here (tenants.metric_sources; BERTH_KUBELET_JOB in tests/settings.py).
SOURCES = Sources(kubelet_job="|".join(KUBELET_PATHS), berth_job="berth-web")


def rbac_objects() -> list[dict]:
    """What the scraping user may do: read kubelet metrics (nodes/metrics), which is all it does."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": CLUSTER_ROLE},
            "rules": [{"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": CLUSTER_ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        },
    ]


@dataclass(frozen=True)
class ClientFiles:
    """The files Prometheus reads to reach the kubelets: the cluster CA, and its own client certificate and key."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def config(
    *,
    nodes: Iterable[tuple[str, str]],
    kubelet_port: int,
    client: ClientFiles,
    directory: Path,
    alertmanager: str | None = None,
) -> dict:
    """prometheus.yml: the kubelet jobs for these (name, address) nodes, the file_sd jobs for Berth, and with an
    ``alertmanager`` (host:port) the rules file and where its alerts go."""
    nodes = list(nodes)
    tls = {"ca_file": str(client.ca_file), "cert_file": str(client.cert_file), "key_file": str(client.key_file)}
    jobs: list[dict] = []
    for job, path in KUBELET_PATHS.items():
        jobs.append(
            {
                "job_name": job,
                "scheme": "https",
                "metrics_path": path,
                "tls_config": tls,
                # The kubelet's own labels (namespace, pod, container) are the ones tenants are held to.
                "honor_labels": True,
                "relabel_configs": [{"source_labels": ["__metrics_path__"], "target_label": "metrics_path"}],
                "static_configs": [
                    {"targets": [f"{address}:{kubelet_port}"], "labels": {"node": name}} for name, address in nodes
                ],
            }
        )
    for job in FILE_SD_JOBS:
        entry: dict = {"job_name": job, "file_sd_configs": [{"files": [str(directory / f"{job}.json")]}]}
        if job == "berth-web":
            entry["authorization"] = {"credentials_file": str(directory / "berth-web.token")}
        if job == "synthetic":
            entry["honor_labels"] = True
        jobs.append(entry)
    document: dict = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "scrape_configs": jobs,
    }
    if alertmanager is not None:
        document["rule_files"] = [str(directory / RULES_FILE)]
        document["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    return document


def label_proxy(
    bin_dir: Path, *, upstream: str, port: int, label: str, header: str, log_path: Path | None
) -> Component:
    """prom-label-proxy (build.sh prom-label-proxy) on 127.0.0.1:``port`` in front of ``upstream``: every query,
    series and label request must carry ``header``, whose value it holds each selector's ``label`` to. What
    runs beside the portal (tenants/prometheus.py), as the chart's sidecar does; the caller starts and stops it."""
    return Component(
        "prom-label-proxy",
        [
            str(bin_dir / "prom-label-proxy"),
            f"-label={label}",
            f"-header-name={header}",
            "-enable-label-apis",
            f"-upstream={upstream}",
            f"-insecure-listen-address=127.0.0.1:{port}",
        ],
        log_path,
    )


def start_label_proxy(
    bin_dir: Path, *, upstream: str, port: int, label: str, header: str, log_path: Path | None
) -> Component:
    """``label_proxy(...)`` started, once it answers HTTP on its port; the caller stops it."""
    proxy = label_proxy(bin_dir, upstream=upstream, port=port, label=label, header=header, log_path=log_path)
    proxy.start()
    try:
        wait_until(lambda: _answers(f"http://127.0.0.1:{port}"), timeout=30.0, watched=[proxy], what="prom-label-proxy")
    except BaseException:
        proxy.stop()
        raise
    return proxy


def _answers(url: str) -> bool:
    """Whether anything answers HTTP at ``url`` (an error status is an answer)."""
    try:
        urllib.request.urlopen(f"{url}/healthz", timeout=2).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


class Prometheus:
    """One Prometheus server for one dev cluster (see the module's docstring)."""

    def __init__(self, directory: Path, bin_dir: Path, client: ClientFiles, *, port: int) -> None:
        self.directory = directory
        self.bin_dir = bin_dir
        self.client = client
        self.port = port
        self.component: Component | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(
        self,
        nodes: Iterable[tuple[str, str]],
        *,
        kubelet_port: int,
        watched: list[Component],
        alertmanager: str | None = None,
    ) -> Component:
        self.directory.mkdir(parents=True, exist_ok=True)
        for job in FILE_SD_JOBS:
            self.set_targets(job, [])
        write_private(self.directory / "berth-web.token", "unset\n")
        self._write_rules([rule_group(sources=SOURCES)])
        document = config(
            nodes=nodes,
            kubelet_port=kubelet_port,
            client=self.client,
            directory=self.directory,
            alertmanager=alertmanager,
        )
        (self.directory / "prometheus.yml").write_text(json.dumps(document))
        self.component = Component(
            "prometheus",
            [
                str(self.bin_dir / "prometheus"),
                f"--config.file={self.directory / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.directory / 'data'}",
                f"--storage.tsdb.retention.time={RETENTION}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--query.timeout={QUERY_TIMEOUT}",
                f"--query.max-samples={QUERY_MAX_SAMPLES}",
                "--web.enable-lifecycle",
            ],
            self.directory / "prometheus.log",
        )
        self.component.start()
        wait_until(
            lambda: self._get("/-/ready") == 200,
            timeout=60.0,
            watched=[*watched, self.component],
            what="Prometheus /-/ready",
        )
        return self.component

    def set_targets(self, job: str, targets: list[str], *, token: str | None = None) -> None:
        """Point a file_sd job (berth-web, berth-worker) at these host:port targets; Prometheus notices the file."""
        if token is not None:
            write_private(self.directory / "berth-web.token", token + "\n")
        self.set_target_groups(job, [{"targets": targets, "labels": {"service": job}}] if targets else [])

    def set_target_groups(self, job: str, groups: list[dict]) -> None:
        """Write a file_sd job's target groups as they are (``targets`` and ``labels``, such as
        ``__metrics_path__``); Prometheus notices the file."""
        if job not in FILE_SD_JOBS:
            raise ValueError(f"no file_sd job {job!r}")
        path = self.directory / f"{job}.json"
        path.with_suffix(".tmp").write_text(json.dumps(groups))
        path.with_suffix(".tmp").replace(path)  # whole or not at all: Prometheus may read it at any moment

    def set_rules(self, groups: list[dict]) -> None:
        """Evaluate these rule groups instead (tests give short thresholds); applied at once (``/-/reload``)."""
        self._write_rules(groups)
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=30) as answer:
            if answer.status != 200:
                raise RuntimeError(f"Prometheus refused the rules ({answer.status}); see its log")

    def rules(self) -> list[dict]:
        """The rule groups Prometheus evaluates, with each rule's state (its API)."""
        with urllib.request.urlopen(f"{self.url}/api/v1/rules", timeout=10) as answer:
            return json.load(answer)["data"]["groups"]

    def _write_rules(self, groups: list[dict]) -> None:
        path = self.directory / RULES_FILE
        path.with_suffix(".tmp").write_text(json.dumps({"groups": groups}))  # JSON is YAML
        path.with_suffix(".tmp").replace(path)

    def query(self, promql: str) -> list[dict]:
        """An instant query's result vector, unscoped: for tests and the launcher, never for a tenant."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as answer:
            return json.load(answer)["data"]["result"]

    def targets_up(self) -> dict[str, str]:
        """Each active target's scrape URL and its health (up, down, unknown)."""
        with urllib.request.urlopen(f"{self.url}/api/v1/targets?state=active", timeout=10) as answer:
            active = json.load(answer)["data"]["activeTargets"]
        return {target["scrapeUrl"]: target["health"] for target in active}

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop()
            self.component = None

    def _get(self, path: str) -> int | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=3) as answer:
                return answer.status
        except (urllib.error.URLError, OSError):
            return None
