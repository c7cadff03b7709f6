"""Demo data: two teams with budgets and the dev control plane registered as clusters (token and OIDC access)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction
from django.utils import timezone

from tenants import services
from tenants.models import Cluster, ClusterPrice, Team, Tier

TEAMS = [
    ("team-payments", "Payments", "payments@example.test", "Europe/Berlin"),
    ("team-search", "Search", "search@example.test", "America/New_York"),
]
# Sleep in the demo (docs/sleep.md): small sandboxes sleep after a day unused and free their CPU and memory
# while asleep; medium ones may sleep on request or by schedule, and still count fully.
SLEEP: dict[str, dict[str, object]] = {
    "small": {"sleep_allowed": True, "sleep_budget": "none", "sleep_after_idle_hours": 24},
    "medium": {"sleep_allowed": True},
}
# Showback prices of the demo clusters (per CPU core-hour, memory GiB-hour, storage GiB-month), in effect
# since the first of the month the demo was seeded in, so the team and tenant pages show the month so far.
DEMO_PRICES = {
    "cpu_core_hour": Decimal("0.0400"),
    "memory_gib_hour": Decimal("0.0050"),
    "storage_gib_month": Decimal("0.1000"),
}


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--api-url", required=True)
        parser.add_argument("--kubeconfig", required=True, help="admin kubeconfig the worker uses")
        parser.add_argument("--ca-file", required=True)
        parser.add_argument("--oidc-issuer", default="")
        parser.add_argument(
            "--prometheus", default="", help="the name in BERTH_PROMETHEUS of the dev cluster's Prometheus"
        )
        parser.add_argument(
            "--vcluster",
            default="",
            help="JSON of virtual_config['vcluster'] (docs/virtual-clusters.md): the dev cluster offers vcluster too",
        )

    @transaction.atomic
    def handle(
        self,
        *args,
        api_url: str,
        kubeconfig: str,
        ca_file: str,
        oidc_issuer: str,
        vcluster: str,
        prometheus: str,
        **options,
    ) -> None:
        for slug, name, email, zone in TEAMS:
            Team.objects.update_or_create(
                slug=slug, defaults={"name": name, "oidc_group": slug, "contact_email": email, "time_zone": zone}
            )
        for tier, settings in SLEEP.items():
            Tier.objects.filter(name=tier).update(**settings)
        ca = open(ca_file).read()
        common = {
            "api_url": api_url,
            "ca_pem": ca,
            "credential_ref": f"kubeconfig:{kubeconfig}",
            "public_endpoint": api_url,
            "kinds": ["namespace"],
            # The dev cluster's own Prometheus (devcluster/prometheus.py) behind prom-label-proxy, when it runs: each
            # tenant's graphs and data source are its monitoring links (no templates that would lead nowhere).
            "prometheus": prometheus,
            "monitoring_links": [],
            # Each tenant's Ingress hosts lie under its own name (*.localhost resolves to 127.0.0.1).
            "ingress_domains": ["{namespace}.apps.localhost"],
            "is_active": True,
        }
        token_cluster = {**common, "display_name": "Dev cluster (tokens)", "access_mode": "token"}
        if vcluster:
            token_cluster["kinds"] = ["namespace", "vcluster"]
            token_cluster["virtual_config"] = {"vcluster": json.loads(vcluster)}
        clusters = [Cluster.objects.update_or_create(name="dev", defaults=token_cluster)[0]]
        if oidc_issuer:
            clusters.append(
                Cluster.objects.update_or_create(
                    name="dev-oidc",
                    defaults={
                        **common,
                        "display_name": "Dev cluster (OIDC sign-in)",
                        "access_mode": "oidc",
                        "namespace_prefix": "o-",
                        "oidc_issuer_url": oidc_issuer,
                        "oidc_client_id": "kubectl",
                        "oidc_groups_prefix": "oidc:",
                    },
                )[0]
            )
        for cluster in clusters:
            cluster.tiers.set(Tier.objects.filter(is_active=True))
            services.cluster_identify(cluster=cluster)
            # Seed data, not an admin's change (cluster_set_prices refuses past days): written directly.
            first_of_month = timezone.now().astimezone(dt.UTC).date().replace(day=1)
            ClusterPrice.objects.get_or_create(cluster=cluster, effective_from=first_of_month, defaults=DEMO_PRICES)
        self.stdout.write(f"Seeded {len(TEAMS)} teams and {len(clusters)} clusters.")
