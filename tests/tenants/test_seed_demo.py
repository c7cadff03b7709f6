"""The demo's seed data: teams, clusters, and showback prices from the first of the month."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.management import call_command
from django.utils import timezone

from tenants.models import Cluster, ClusterPrice, Team


@pytest.mark.django_db
def test_the_demo_seed_prices_its_clusters_from_the_first_of_the_month_and_can_run_twice(tmp_path, medium):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    args = ["--api-url", "https://127.0.0.1:6443", "--kubeconfig", str(tmp_path / "k"), "--ca-file", str(ca)]
    call_command("seed_demo", *args, "--oidc-issuer", "https://127.0.0.1:9999")
    call_command("seed_demo", *args, "--oidc-issuer", "https://127.0.0.1:9999")
    assert set(Team.objects.values_list("slug", flat=True)) >= {"team-payments", "team-search"}
    first = timezone.now().astimezone(dt.UTC).date().replace(day=1)
    for cluster in Cluster.objects.filter(name__in=["dev", "dev-oidc"]):
        (price,) = ClusterPrice.objects.filter(cluster=cluster)
        assert price.effective_from == first and price.currency
