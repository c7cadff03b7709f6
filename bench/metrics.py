#!/usr/bin/env python
"""Tenant metrics: Prometheus's memory and scrape time, and what a scoped query costs through Berth.

    .venv/bin/python bench/metrics.py                  # 50 tenants' worth of series (a few minutes)
    .venv/bin/python bench/metrics.py --tenants 1000   # 1,000 tenants' worth

Starts a throwaway PostgreSQL and Redis and the dev cluster with two nodes and its Prometheus (as ``make demo``
runs it, without the demo's own pods), provisions one namespace tenant in this process, then:

1. **Demo cluster.** After ``--settle`` seconds of scrapes: Prometheus's resident memory (VmRSS of its process),
   its head series, and ``scrape_duration_seconds`` of the kubelet jobs.
2. **N tenants.** It copies one real pod's series as this kubelet reports them (``/metrics/cadvisor`` and
   ``/metrics/resource``: CPU, memory, pressure, tasks, start time …) with what a kubelet on a real node adds
   (``completed``: the same per container, and the pod's network), renamed to ``--pods`` pods in each
   of N namespaces (the tenant's own among them), and serves them from a small exporter in this process, split
   into synthetic nodes of ``--pods-per-node`` pods, each one target of the dev Prometheus's ``synthetic`` job.
   The tenant's own CPU series also get the 24 hours before the run (promtool backfill), so the 24 h graph reads
   a day of samples. After ``--settle`` seconds of scrapes: memory, series and scrape time again.
3. **A scoped query, three ways, side by side:** straight to Prometheus (the namespace matcher written into the
   query), through prom-label-proxy (the header), and through Berth's API (the portal under gunicorn,
   deploy/gunicorn.conf.py, with a real API token of the tenant's owner). Each repetition sends the same query
   each way, in an order that turns round from one repetition to the next. The queries are the tenant page's
   CPU graph (tenants/views/metrics.py): an instant query over 5 minutes, and the 1 h and 24 h range queries.

Prints its progress and figures to stderr and a one-line JSON summary to stdout.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.api_load import portal_env, start_portal  # noqa: E402
from bench.provision import (  # noqa: E402
    _raise_keyboard_interrupt,
    approve_in_process,
    configure_django,
    create_database,
    pct,
    provision_in_process,
    seed,
)
from devcluster import servers  # noqa: E402
from devcluster.launcher import ControlPlane, find_bin_dir, free_port, promtool_binary  # noqa: E402
from devcluster.process import wait_until  # noqa: E402
from devcluster.prometheus import Prometheus, start_label_proxy  # noqa: E402

KUBELET_JOBS = ("kubelet", "cadvisor", "resource")
CPU = "container_cpu_usage_seconds_total"
PROMETHEUS_NAME = "bench"
# Labels the scrape gives a series; the synthetic node's target gives its own.
TARGET_LABELS = {"job", "instance", "node"}


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")) / 1024


def head_series(prometheus: Prometheus) -> int:
    answer = requests.get(f"{prometheus.url}/api/v1/status/tsdb", timeout=30)
    return int(answer.json()["data"]["headStats"]["numSeries"])


def scrape_seconds(prometheus: Prometheus, jobs: tuple[str, ...], seconds: int) -> list[float]:
    """Every ``scrape_duration_seconds`` sample of these jobs' targets in the last ``seconds``."""
    jobs_re = "|".join(jobs)
    rows = prometheus.query(f'scrape_duration_seconds{{job=~"{jobs_re}"}}[{seconds}s]')
    return [float(value) for row in rows for _, value in row["values"]]


def prometheus_figures(prometheus: Prometheus, jobs: tuple[str, ...], seconds: int) -> dict:
    assert prometheus.component is not None and prometheus.component.pid is not None
    durations = scrape_seconds(prometheus, jobs, seconds)
    return {
        "rss_mib": round(rss_mib(prometheus.component.pid)),
        "series": head_series(prometheus),
        "scrapes": len(durations),
        "scrape_p50_s": round(statistics.median(durations), 3),
        "scrape_p95_s": round(pct(durations, 95), 3),
    }


# --- synthetic series --------------------------------------------------------------------------------------


def template_pod(prometheus: Prometheus, *, only_reported: bool) -> tuple[str, list[dict]]:
    """A CoreDNS pod (an ordinary pod: one container, on the pod network) and its series from the kubelet's
    cAdvisor and resource endpoints, as label sets; unless ``only_reported``, with what a kubelet on a real node
    reports besides (see ``completed``)."""
    rows = prometheus.query('count by (pod) ({namespace="kube-system", pod=~"coredns-.+", job=~"cadvisor|resource"})')
    pod = sorted(row["metric"]["pod"] for row in rows)[0]
    answer = requests.get(
        f"{prometheus.url}/api/v1/series",
        params={"match[]": f'{{namespace="kube-system", pod="{pod}", job=~"cadvisor|resource"}}'},
        timeout=30,
    )
    series = answer.json()["data"]
    return pod, series if only_reported else completed(series)


def completed(series: list[dict]) -> list[dict]:
    """The dev nodes' cAdvisor sees each pod's cgroup but not its containers' (they run nested in the node's own
    cgroup), and counts network traffic only for the whole node. A kubelet on a real node also reports every
    cAdvisor series per container (``container``, ``image``, ``name`` labels) and each pod's network interface:
    added here, for the one container the resource endpoint names."""
    container = next(labels["container"] for labels in series if labels.get("container"))
    pod_rows = [labels for labels in series if labels["job"] == "cadvisor" and not labels.get("container")]
    pod_id = pod_rows[0]["id"]
    per_container = [
        {
            **labels,
            "container": container,
            "image": f"registry.example/{container}:1",
            "name": container,
            "id": f"{labels['id']}/{container}",
        }
        for labels in pod_rows
    ]
    network = [
        {
            **{key: pod_rows[0][key] for key in ("job", "namespace", "pod", "instance", "node")},
            "id": pod_id,
            "interface": "eth0",
            "__name__": f"container_network_{direction}_{what}_total",
        }
        for direction in ("receive", "transmit")
        for what in ("bytes", "packets", "errors", "packets_dropped")
    ]
    return series + per_container + network


def _line_prefix(labels: dict[str, str], namespace: str, pod: str, source_pod: str) -> str:
    renamed = {}
    for key, value in labels.items():
        if key in TARGET_LABELS or key == "__name__":
            continue
        # The pod's name also appears in cgroup paths (id, name): renamed with it, so each copy is its own series.
        renamed[key] = value.replace(source_pod, pod).replace("kube-system", namespace)
    # As kube-prometheus labels the kubelet's series: which endpoint they came from.
    renamed["metrics_path"] = f"/metrics/{labels['job']}"
    inner = ",".join(f'{key}="{value}"' for key, value in sorted(renamed.items()))
    return f"{labels['__name__']}{{{inner}}} "


class SyntheticNodes:
    """Each synthetic node's exposition, served at /node-<i>: the template pod's series, once per pod."""

    def __init__(self, template: list[dict], source_pod: str, namespaces: list[str], pods: int, per_node: int):
        self.started = time.time()
        prefixes = [
            (_line_prefix(labels, namespace, f"{namespace}-app-{index}", source_pod), labels["__name__"])
            for namespace in namespaces
            for index in range(pods)
            for labels in template
        ]
        per_pod = len(template)
        chunk = per_pod * per_node
        self.nodes = [prefixes[start : start + chunk] for start in range(0, len(prefixes), chunk)]
        self.series = len(prefixes)

    def exposition(self, node: int) -> bytes:
        # Counters grow with time, so rate() has something to work on; gauges stay put.
        elapsed = time.time() - self.started
        lines = []
        for number, (prefix, name) in enumerate(self.nodes[node]):
            if name.endswith("_total"):
                value = (number % 97 + 1) * (1000 + elapsed)
            elif name.endswith("start_time_seconds"):
                value = self.started
            else:
                value = (number % 89 + 1) * 1_048_576
            lines.append(f"{prefix}{value:.3f}\n")
        return "".join(lines).encode()

    def serve(self) -> tuple[ThreadingHTTPServer, int]:
        nodes = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                match = re.fullmatch(r"/node-(\d+)", self.path)
                if match is None or int(match[1]) >= len(nodes.nodes):
                    self.send_error(404)
                    return
                body = nodes.exposition(int(match[1]))
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, server.server_address[1]


def backfill(prometheus: Prometheus, nodes: SyntheticNodes, namespace: str, target: dict[str, str], work: Path) -> int:
    """Give ``namespace``'s CPU series (the graph measured) the 24 hours before now, 10 s apart, as if they had been
    scraped all day: promtool writes the blocks, Prometheus loads them within a minute. How many series."""
    labels = ",".join(f'{key}="{value}"' for key, value in sorted(target.items()))
    mine = [
        prefix[:-2] + "," + labels + "} "
        for prefix, name in nodes.nodes[0]
        if name == CPU and f'namespace="{namespace}"' in prefix
    ]
    end = time.time() - 300
    stamps = [end - 86400 + 10 * i for i in range(8640)]
    source = work / "backfill.om"
    with source.open("w") as out:
        out.write(f"# TYPE {CPU.removesuffix('_total')} counter\n")
        for number, prefix in enumerate(mine):
            out.writelines(f"{prefix}{(number + 1) * 0.01 * (t - stamps[0]):.3f} {t:.0f}\n" for t in stamps)
        out.write("# EOF\n")
    blocks = work / "blocks"
    subprocess.run(
        [str(promtool_binary()), "tsdb", "create-blocks-from", "openmetrics", "-q", str(source), str(blocks)],
        check=True,
        capture_output=True,
    )
    for block in blocks.iterdir():
        shutil.move(str(block), prometheus.directory / "data" / block.name)
    wait_until(
        lambda: bool(prometheus.query(f'{CPU}{{namespace="{namespace}"}} offset 23h')),
        timeout=180,
        watched=[prometheus.component] if prometheus.component else [],
        what="the backfilled blocks loaded",
    )
    return len(mine)


# --- queries -----------------------------------------------------------------------------------------------


def scoped(query: str, namespace: str) -> str:
    """The query as prom-label-proxy sends it on: each container_* selector held to ``namespace``."""
    return re.sub(
        r"\b(container_[a-z_]+)(\{?)",
        lambda m: f'{m[1]}{{namespace="{namespace}"' + (", " if m[2] else "}"),
        query,
    )


def page_queries(tenant) -> dict[str, tuple[str, dict[str, str]]]:
    """The tenant page's CPU graph, as an instant query over 5 minutes and as its 1 h and 24 h range queries."""
    from tenants.views.metrics import RANGES, panels

    now = time.time()
    out: dict[str, tuple[str, dict[str, str]]] = {}
    instant = panels(tenant, 300)[0].series[0].query
    out["instant"] = ("query", {"query": instant, "time": f"{now:.3f}"})
    for key in ("1h", "24h"):
        seconds, step = RANGES[key]
        query = panels(tenant, step)[0].series[0].query
        out[key] = (
            "query_range",
            {"query": query, "start": f"{now - seconds:.3f}", "end": f"{now:.3f}", "step": str(step)},
        )
    return out


def timed(send: Callable[[], requests.Response]) -> tuple[float, dict]:
    began = time.perf_counter()
    answer = send()
    took = time.perf_counter() - began
    answer.raise_for_status()
    body = answer.json()
    assert body["status"] == "success", body
    return took, body


def measure_queries(
    *, prometheus_url: str, proxy_url: str, berth_url: str, token: str, tenant, repetitions: int
) -> dict[str, dict[str, list[float]]]:
    from tenants.prometheus import HEADER

    namespace = tenant.namespace
    sessions = {way: requests.Session() for way in ("direct", "proxy", "berth")}
    sessions["berth"].headers["Authorization"] = f"Token {token}"
    sessions["proxy"].headers[HEADER] = namespace
    base = {
        "direct": f"{prometheus_url}/api/v1",
        "proxy": f"{proxy_url}/api/v1",
        "berth": f"{berth_url}/api/v1/tenants/{tenant.pk}/prometheus/api/v1",
    }
    times: dict[str, dict[str, list[float]]] = {}
    for name, (endpoint, params) in page_queries(tenant).items():
        direct = {**params, "query": scoped(params["query"], namespace)}
        ways: dict[str, Callable[[], requests.Response]] = {
            way: functools.partial(
                sessions[way].get, f"{base[way]}/{endpoint}", params=direct if way == "direct" else params, timeout=60
            )
            for way in base
        }
        # Unmeasured: Berth's first query to an address checks that it enforces a namespace.
        results = {way: timed(send)[1]["data"]["result"] for way, send in ways.items() for _ in range(3)}
        # The same series each way (their last values may differ by a scrape that landed in between).
        shapes = {way: [row["metric"] for row in result] for way, result in results.items()}
        assert results["direct"] and shapes["direct"] == shapes["proxy"] == shapes["berth"], (name, results)
        times[name] = {way: [] for way in ways}
        order = list(ways)
        for repetition in range(repetitions):
            turn = order[repetition % 3 :] + order[: repetition % 3]
            for way in turn:
                times[name][way].append(timed(ways[way])[0])
        say(
            f"{name}: p50 ms "
            + ", ".join(f"{way} {1000 * statistics.median(values):.1f}" for way, values in times[name].items())
        )
    return times


# --- the run -----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tenants", type=int, default=50, help="namespaces of synthetic series (1000: the issue's)")
    parser.add_argument("--pods", type=int, default=5, help="pods per namespace")
    parser.add_argument("--pods-per-node", type=int, default=100, help="pods per synthetic node (scrape target)")
    parser.add_argument("--settle", type=int, default=90, help="seconds of scrapes before memory is read")
    parser.add_argument("--repetitions", type=int, default=30, help="of each query, each way")
    parser.add_argument(
        "--only-reported", action="store_true", help="copy only the series the dev kubelet reports for a pod"
    )
    args = parser.parse_args(argv)
    # Stopped by a signal, the control plane and the servers are still stopped (the with blocks' exits).
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_keyboard_interrupt)
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="berth-bench-metrics-"))
    with (
        servers.postgres_server() as db,
        servers.redis_server() as redis,
        ControlPlane(name="berth-bench-metrics", nodes=2, prometheus=True) as plane,
    ):
        prometheus = plane.prometheus
        assert prometheus is not None
        create_database(db)
        configure_django(db, redis.url)
        from django.core.management import call_command
        from django.db import connections

        try:
            call_command("migrate", verbosity=0)
            ctx = seed(plane, 1)
            ctx["cluster"].prometheus = PROMETHEUS_NAME
            ctx["cluster"].save(update_fields=["prometheus"])
            tenant_id = approve_in_process(ctx, "metrics")
            progress, _ = provision_in_process(tenant_id, timeout=120)
            assert progress.outcome == "ready", progress
            from django.utils import timezone

            from tenants import services
            from tenants.models import Tenant, User

            tenant = Tenant.objects.get(pk=tenant_id)
            # As if the provider had just confirmed the owner, so the portal need not ask it about the token.
            User.objects.filter(pk=ctx["requester"].pk).update(identity_checked_at=timezone.now())
            token = services.api_token_create(actor=ctx["requester"], name="bench", expires_in_days=1)[1]

            say(f"demo cluster: {args.settle} s of scrapes")
            time.sleep(args.settle)
            demo = prometheus_figures(prometheus, KUBELET_JOBS, args.settle)
            say(f"demo cluster: {demo}")

            source_pod, template = template_pod(prometheus, only_reported=args.only_reported)
            namespaces = [tenant.namespace] + [f"bench-synthetic-{i:04d}" for i in range(1, args.tenants)]
            nodes = SyntheticNodes(template, source_pod, namespaces, args.pods, args.pods_per_node)
            say(
                f"{args.tenants} tenants: {nodes.series} series ({len(template)} per pod, copied from {source_pod}) "
                f"on {len(nodes.nodes)} synthetic nodes"
            )
            exporter, port = nodes.serve()
            try:
                backfilled = backfill(
                    prometheus,
                    nodes,
                    tenant.namespace,
                    {"job": "synthetic", "instance": f"127.0.0.1:{port}", "node": "synthetic-0"},
                    work,
                )
                say(f"{backfilled} of the tenant's CPU series have the last 24 hours")
                prometheus.set_target_groups(
                    "synthetic",
                    [
                        {
                            "targets": [f"127.0.0.1:{port}"],
                            "labels": {"__metrics_path__": f"/node-{i}", "node": f"synthetic-{i}"},
                        }
                        for i in range(len(nodes.nodes))
                    ],
                )
                wait_until(
                    lambda: head_series(prometheus) >= demo["series"] + nodes.series,
                    timeout=300,
                    watched=[prometheus.component] if prometheus.component else [],
                    what="the synthetic series in Prometheus",
                )
                time.sleep(args.settle)
                many = prometheus_figures(prometheus, ("synthetic",), args.settle)
                say(f"{args.tenants} tenants: {many}")

                times = query_through_berth(args, db, redis.url, prometheus, tenant, token, work)
            finally:
                exporter.shutdown()
        finally:
            connections.close_all()
            shutil.rmtree(work, ignore_errors=True)
    n = args.tenants
    summary: dict = {
        "bench": "metrics",
        "tenants": n,
        "pods_per_tenant": args.pods,
        "series_per_pod": len(template),
        "series_as_the_dev_kubelet_reports": args.only_reported,
        "prometheus_rss_mib_demo": demo["rss_mib"],
        "series_demo": demo["series"],
        "scrape_seconds_p95_demo": demo["scrape_p95_s"],
        f"prometheus_rss_mib_{n}": many["rss_mib"],
        f"series_{n}": many["series"],
        f"scrape_seconds_p50_{n}": many["scrape_p50_s"],
        f"scrape_seconds_p95_{n}": many["scrape_p95_s"],
        "synthetic_targets": len(nodes.nodes),
        "tenant_cpu_series_backfilled_24h": backfilled,
        "repetitions": args.repetitions,
    }
    for name, ways in times.items():
        for way, values in ways.items():
            summary[f"{name}_p50_ms_{way}"] = round(1000 * statistics.median(values), 1)
            summary[f"{name}_p95_ms_{way}"] = round(1000 * pct(values, 95), 1)
        direct = statistics.median(ways["direct"])
        summary[f"{name}_overhead_ratio_proxy_vs_direct"] = round(statistics.median(ways["proxy"]) / direct, 2)
        summary[f"{name}_overhead_ratio_berth_vs_direct"] = round(statistics.median(ways["berth"]) / direct, 2)
        summary[f"{name}_overhead_ms_berth_vs_direct"] = round(1000 * (statistics.median(ways["berth"]) - direct), 1)
    summary["run_s"] = round(time.monotonic() - began)
    say(json.dumps(summary, indent=2))
    print(json.dumps(summary))
    return 0


def query_through_berth(args, db: dict, redis_url: str, prometheus: Prometheus, tenant, token: str, work: Path):
    """prom-label-proxy and the portal under gunicorn in front of Prometheus; the queries timed three ways."""
    from django.conf import settings

    from tenants.prometheus import HEADER, LABEL

    port = free_port()
    proxy = start_label_proxy(
        find_bin_dir("prom-label-proxy"),
        upstream=prometheus.url,
        port=port,
        label=LABEL,
        header=HEADER,
        log_path=work / "prom-label-proxy.log",
    )
    proxy_url = f"http://127.0.0.1:{port}"
    try:
        env = {
            **portal_env(db, redis_url),
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "BERTH_PROMETHEUS": json.dumps({PROMETHEUS_NAME: proxy_url}),
            "BERTH_PROMETHEUS_THROTTLE": "100000/min",  # the bench asks far faster than a person
            "GUNICORN_WORKERS": "2",
            # This process made the token: the portal must read the database with the same secret key.
            "DJANGO_SECRET_KEY": settings.SECRET_KEY,
        }
        server, berth_url = start_portal(env, work / "gunicorn.log")
        try:
            return measure_queries(
                prometheus_url=prometheus.url,
                proxy_url=proxy_url,
                berth_url=berth_url,
                token=token,
                tenant=tenant,
                repetitions=args.repetitions,
            )
        finally:
            server.stop(grace_seconds=10)
    finally:
        proxy.stop()


if __name__ == "__main__":
    sys.exit(main())
