#!/usr/bin/env python
"""Real vclusters beside namespaces: approval to ready for each kind, an idle vcluster's memory, how many fit.

    .venv/bin/python bench/vcluster.py              # 5 of each
    .venv/bin/python bench/vcluster.py --tenants 3

Starts a throwaway PostgreSQL and Redis and the dev cluster with two nodes and vcluster's images, then approves
a namespace tenant and a vcluster tenant in turn, N times, and provisions each in this process as the worker's
re-queues would (bench.provision.provision_in_process), the worker's real helm installing the vendored chart.
Approval to ready is timed for both kinds in the same run; the vclusters stay up, so later ones start beside
the earlier ones, as on a busy cluster. Then it reads the memory of the vclusters' processes (syncer, kine,
kube-apiserver, controller manager, CoreDNS) and says how many would fit on the shared node, by the scheduler's
CPU requests and by this machine's free memory. Prints a table to stderr and a one-line JSON summary to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.provision import approve_in_process, configure_django, create_database, provision_in_process, seed  # noqa: E402
from devcluster import servers  # noqa: E402
from devcluster.images import (  # noqa: E402
    VCLUSTER_IMAGES,
    VCLUSTER_KUBERNETES_IMAGE,
    VCLUSTER_REGISTRY,
    VCLUSTER_SYNCER_IMAGE,
)
from devcluster.launcher import ControlPlane, helm_binary  # noqa: E402

CHART = ROOT / "third_party" / "upstream" / "vcluster-chart-0.30.0"
# A vcluster's processes, by what their command line starts with (the host's own CoreDNS is told apart by count).
PROCESSES = {
    "syncer": "/vcluster start",
    "kine": "/usr/local/bin/kine",
    "kube-apiserver": "/binaries/kube-apiserver",
    "controller-manager": "/binaries/kube-controller-manager",
    "coredns": "/coredns -conf /etc/coredns/Corefile",
}


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def rss_mib(prefix: str) -> list[float]:
    """The resident memory of every process whose command line starts with ``prefix``, in MiB."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if not cmdline.startswith(prefix):
                continue
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        found.append(kib / 1024)
    return found


def mem_available_mib() -> float:
    line = next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemAvailable:"))
    return int(line.split()[1]) / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tenants", type=int, default=5)
    args = parser.parse_args(argv)
    helm = helm_binary()
    os.environ["BERTH_HELM_BINARY"] = str(helm)  # the worker's helm, read by the settings
    with (
        tempfile.TemporaryDirectory(prefix="berth-bench-charts-") as charts,
        servers.postgres_server() as db,
        servers.redis_server() as redis,
        ControlPlane(name="berth-bench-vcluster", nodes=2, extra_images=VCLUSTER_IMAGES) as plane,
    ):
        subprocess.run(
            [str(helm), "package", str(CHART), "--version", "0.30.0", "--app-version", "0.30.0", "-d", charts],
            check=True,
            capture_output=True,
        )
        create_database(db)
        configure_django(db, redis.url)
        from django.core.management import call_command
        from django.db import connections

        try:
            call_command("migrate", verbosity=0)
            ctx = seed(plane, 2 * args.tenants)
            cluster = ctx["cluster"]
            cluster.kinds = ["namespace", "vcluster"]
            cluster.virtual_config = {
                "vcluster": {
                    "installer": "helm",
                    "chart_repo": f"file://{charts}",
                    "expose": "LoadBalancer",
                    "image_registry": VCLUSTER_REGISTRY,
                    "syncer_image": VCLUSTER_SYNCER_IMAGE,
                    "kubernetes_image": VCLUSTER_KUBERNETES_IMAGE,
                }
            }
            cluster.save()
            times: dict[str, list[float]] = {"namespace": [], "vcluster": []}
            for index in range(args.tenants):
                for kind in ("namespace", "vcluster"):
                    began = time.monotonic()
                    tenant_id = approve_in_process(ctx, f"{kind[:2]}-{index}", kind=kind)
                    progress, _ = provision_in_process(tenant_id, timeout=600)
                    assert progress.outcome == "ready", progress
                    times[kind].append(time.monotonic() - began)
                    say(f"{kind:<9} {index + 1}/{args.tenants}: ready in {times[kind][-1]:.1f}s")
            time.sleep(30)  # idle
            memory = {name: rss_mib(prefix) for name, prefix in PROCESSES.items()}
            memory["coredns"] = sorted(memory["coredns"])[: args.tenants]  # the host's own CoreDNS left out
            per_vcluster = sum(sum(values) for values in memory.values()) / args.tenants
            from worker import kube

            host = kube.for_cluster(cluster)
            shared = next(n for n in host.list("Node") if n["metadata"]["name"] == "shared-1")
            allocatable = _millis(shared["status"]["allocatable"]["cpu"])
            requested = sum(
                _millis(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
                for pod in host.list("Pod")
                if pod["spec"].get("nodeName") == "shared-1" and pod["status"].get("phase") in ("Running", "Pending")
                for c in pod["spec"]["containers"]
            )
            per_cpu = 200 + 20  # the control plane's request and CoreDNS's (worker.vcluster_values)
            fit_cpu = args.tenants + (allocatable - requested) // per_cpu
            fit_memory = args.tenants + int(mem_available_mib() // per_vcluster)
        finally:
            connections.close_all()
    summary = {
        "tenants": args.tenants,
        "namespace_ready_p50_s": round(statistics.median(times["namespace"]), 1),
        "vcluster_ready_p50_s": round(statistics.median(times["vcluster"]), 1),
        "vcluster_ready_max_s": round(max(times["vcluster"]), 1),
        "idle_vcluster_mib": round(per_vcluster),
        "idle_vcluster_mib_by_process": {k: round(sum(v) / args.tenants) for k, v in memory.items()},
        "fit_on_shared_node_by_cpu_requests": fit_cpu,
        "fit_by_free_memory": fit_memory,
    }
    say(
        f"\napprove->ready p50: namespace {summary['namespace_ready_p50_s']}s, vcluster "
        f"{summary['vcluster_ready_p50_s']}s (max {summary['vcluster_ready_max_s']}s)\nidle vcluster: "
        f"{summary['idle_vcluster_mib']} MiB {summary['idle_vcluster_mib_by_process']}\nfit: {fit_cpu} on the shared "
        f"node by CPU requests, {fit_memory} by this machine's free memory"
    )
    print(json.dumps(summary))
    return 0


def _millis(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


if __name__ == "__main__":
    sys.exit(main())
