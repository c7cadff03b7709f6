"""`berth costs` against a live portal: the API's figures for a team and for a tenant, in a table and as JSON."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal as D

import pytest
from django.utils import timezone

from tenants.costs import showback
from tenants.models import ClusterPrice, Tenant, TenantStatus
from tests.fixtures import TokenFactory
from tests.plugins.portal import BerthRunner

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ledger(cluster, team_a, alice, small) -> Tenant:
    """team-a's small tenant (1 core, 2 GiB, 10 GiB), live since the first of last month, at 0.13 an hour."""
    ClusterPrice.objects.create(
        cluster=cluster,
        effective_from=dt.date(2000, 1, 1),
        currency="EUR",
        cpu_core_hour=D("0.10"),
        memory_gib_hour=D("0.01"),
        storage_gib_month=D("0.73"),
    )
    last_month = showback.previous_month(timezone.now().astimezone(dt.UTC).date())
    return Tenant.objects.create(
        name="ledger",
        namespace="ledger",
        team=team_a,
        tier=small,
        cluster=cluster,
        status=TenantStatus.READY,
        created_by=alice,
        ready_at=showback.midnight(last_month),
    )


def test_costs_of_a_team_and_a_tenant_last_month(berth: BerthRunner, api_token: TokenFactory, alice, ledger):
    token = api_token(alice)
    this_month = timezone.now().astimezone(dt.UTC).date().replace(day=1)
    last_month = showback.previous_month(this_month)
    hours = (this_month - last_month).days * 24
    total = f"{D('0.13') * hours:.2f}"
    month = showback.month_label(last_month)

    team = berth("costs", "--team", "team-a", "--month", month, token=token)
    assert team.code == 0, team.stderr
    header, line, total_row = team.stdout.splitlines()
    assert header.split() == ["TENANT", "CLUSTER", "TEAM", "LIVE", "H", "ASLEEP", "H", "ALLOCATION", "USAGE"]
    assert line.split() == ["ledger", "dev", "team-a", f"{hours}.00", "0.00", "EUR", total, "EUR", "0.00"]
    assert total_row.split() == ["TOTAL", "EUR", total, "EUR", "0.00"]

    report = berth("costs", "--tenant", "ledger", "--month", month, "-o", "json", token=token)
    assert report.code == 0, report.stderr
    assert report.json()["totals"][0]["allocation"]["total"] == total
    assert report.json()["lines"][0]["tenant"] == str(ledger.pk)


def test_costs_refuses_what_is_not_a_question(berth: BerthRunner, api_token: TokenFactory, alice, bob, ledger):
    assert berth("costs", token=api_token(alice)).code == 2  # neither --team nor --tenant
    bad = berth("costs", "--team", "team-a", "--month", "2026-13", token=api_token(alice))
    assert bad.code == 6 and "month" in bad.stderr  # INVALID: the API's field error
    assert berth("costs", "--team", "team-a", token=api_token(bob)).code == 5  # NOT_FOUND: not bob's team
