#!/usr/bin/env python
"""The isolation report with its packet checks: how long one report takes per tenant, and N in a row.

    .venv/bin/python bench/isolation.py            # 20 tenants
    .venv/bin/python bench/isolation.py --tenants 5

Starts a throwaway PostgreSQL and Redis (devcluster.servers) and the dev cluster with two nodes (kube-proxy, CoreDNS,
kube-network-policies), provisions N medium-tier tenants in this process, then runs each tenant's report
(worker.provisioning.isolation_report: the API checks and one probe run of packet checks) one after the other,
and the same report without the packet checks beside it, in the same run. Prints a table to stderr and a
one-line JSON summary to stdout. No Celery worker: the report is called as the worker's task calls it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.provision import approve_in_process, configure_django, create_database, provision_in_process, seed  # noqa: E402
from devcluster import servers  # noqa: E402
from devcluster.launcher import ControlPlane  # noqa: E402


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tenants", type=int, default=20)
    args = parser.parse_args(argv)
    with (
        servers.postgres_server() as db,
        servers.redis_server() as redis,
        ControlPlane(name="berth-bench-isolation", nodes=2) as plane,
    ):
        create_database(db)
        configure_django(db, redis.url)
        from django.core.management import call_command
        from django.db import connections

        try:
            call_command("migrate", verbosity=0)
            from worker import isolation, kube, provisioning
            from worker.backends.namespace import NamespaceBackend

            ctx = seed(plane, args.tenants)
            ids = []
            for index in range(args.tenants):
                tenant_id = approve_in_process(ctx, f"iso-{index}")
                progress, _ = provision_in_process(tenant_id, timeout=120)
                assert progress.outcome == "ready", progress
                ids.append(tenant_id)
            say(f"{len(ids)} tenants ready; running the reports one after the other")
            with_packets, without, passed = [], [], 0
            began = time.monotonic()
            for tenant_id in ids:
                start = time.monotonic()
                report = provisioning.isolation_report(tenant_id)
                with_packets.append(time.monotonic() - start)
                assert report is not None
                passed += bool(report["passed"])
            in_a_row = time.monotonic() - began
            api_only = [c for c in isolation.CHECKS if isinstance(c, isolation.Check)]
            from tenants.models import Tenant

            for tenant_id in ids:
                tenant = Tenant.objects.get(pk=tenant_id)
                client = NamespaceBackend().isolation_client(tenant, kube.for_cluster(tenant.cluster))
                start = time.monotonic()
                isolation.report(client, tenant, api_only)
                without.append(time.monotonic() - start)
        finally:
            connections.close_all()  # before PostgreSQL stops: a smart shutdown waits for clients
    summary = {
        "benchmark": "isolation_report",
        "tenants": len(ids),
        "reports_passed": passed,
        "with_packets_p50_s": round(statistics.median(with_packets), 2),
        "with_packets_max_s": round(max(with_packets), 2),
        "in_a_row_s": round(in_a_row, 1),
        "api_checks_only_p50_s": round(statistics.median(without), 2),
    }
    say(json.dumps(summary, indent=2))
    print(json.dumps(summary))
    return 0 if passed == len(ids) else 1


if __name__ == "__main__":
    sys.exit(main())
