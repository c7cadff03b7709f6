"""Showback in the API: the same figures as JSON and CSV, only for the caller's teams and tenants, and field errors
for a month that is none. The arithmetic itself is tested in test_showback.py and test_showback_db.py."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal as D

import pytest
import yaml

from tenants import services
from tenants.models import Tenant, TenantSleepPeriod, TenantUsageDay
from tests.tenants.test_showback_db import MARCH, at, clock  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db
API = "/api/v1"


@pytest.fixture
def web(clock, dave, cluster, ready_tenant) -> Tenant:  # noqa: F811
    """team-a's medium tenant, ready on 10 March 06:00 on a cluster priced from 1 March; asleep 60 hours."""
    clock.set(at(25, month=2))
    services.cluster_set_prices(
        cluster=cluster,
        actor=dave,
        effective_from=MARCH,
        cpu_core_hour=D("0.04"),
        memory_gib_hour=D("0.005"),
        storage_gib_month=D("0.10"),
    )
    clock.set(at(10, 6))
    tenant = ready_tenant(name="web")
    TenantSleepPeriod.objects.create(tenant=tenant, reason="idle", started_at=at(20, 18), ended_at=at(23, 6))
    clock.set(at(5, 12, month=4))
    return tenant


MARCH_FIGURES = {
    # 522 h live, 462 awake: 4 cores, 8 GiB and 100 GiB (all 522 h) at 0.04, 0.005 and 0.10 per GiB-month.
    "cpu_core_hours": "1848.0000",
    "memory_gib_hours": "3696.0000",
    "storage_gib_months": "71.5068",
    "cpu": "73.92",
    "memory": "18.48",
    "storage": "7.15",
    "total": "99.55",
}
NOTHING = {
    "cpu_core_hours": "0.0000",
    "memory_gib_hours": "0.0000",
    "storage_gib_months": "0.0000",
    "cpu": "0.00",
    "memory": "0.00",
    "storage": "0.00",
    "total": "0.00",
}


def test_a_team_member_reads_the_teams_month(api, vera, web):
    response = api(vera).get(f"{API}/teams/team-a/costs/", {"month": "2026-03"})
    assert response.status_code == 200, response.content
    assert response.json() == {
        "month": "2026-03",
        "period_start": "2026-03-01T00:00:00Z",
        "period_end": "2026-04-01T00:00:00Z",
        "hours_per_month": 730,
        "lines": [
            {
                "tenant": str(web.pk),
                "tenant_name": "web",
                "cluster": "dev",
                "team": "team-a",
                "currency": "EUR",
                "live_hours": "522.00",
                "asleep_hours": "60.00",
                "allocation": MARCH_FIGURES,
                "usage": NOTHING,
                "usage_basis": "none",
            }
        ],
        "totals": [{"currency": "EUR", "allocation": MARCH_FIGURES, "usage": NOTHING}],
    }


def test_the_default_is_this_month_so_far(api, alice, web):
    body = api(alice).get(f"{API}/teams/team-a/costs/").json()
    assert (body["month"], body["period_end"]) == ("2026-04", "2026-04-05T12:00:00Z")
    assert body["lines"][0]["live_hours"] == "108.00"
    assert body["totals"][0]["allocation"]["cpu"] == "17.28"  # 4 × 108 × 0.04


def test_the_tenants_costs_are_the_same_figures(api, alice, web):
    body = api(alice).get(f"{API}/tenants/{web.pk}/costs/", {"month": "2026-03"}).json()
    assert body["totals"] == [{"currency": "EUR", "allocation": MARCH_FIGURES, "usage": NOTHING}]


def test_the_csv_has_the_same_figures(api, alice, web):
    for path in ("teams/team-a/costs/export/", f"tenants/{web.pk}/costs/export/"):
        response = api(alice).get(f"{API}/{path}", {"month": "2026-03"})
        assert response.status_code == 200 and response["Content-Type"] == "text/csv; charset=utf-8"
        assert "2026-03.csv" in response["Content-Disposition"]
        (row,) = csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode()))
        assert (row["month"], row["tenant_id"], row["team"], row["currency"]) == (
            "2026-03",
            str(web.pk),
            "team-a",
            "EUR",
        )
        assert (row["live_hours"], row["asleep_hours"]) == ("522.00", "60.00")
        assert {name: row[f"allocation_{name}"] for name in MARCH_FIGURES} == MARCH_FIGURES
        assert {name: row[f"usage_{name}"] for name in NOTHING} == NOTHING
        assert row["usage_basis"] == "none"


def _usage_day(tenant: Tenant, day: int, *, measured_hours: float) -> None:
    """A whole day of 10 March-like readings: 2 cores and 4 GiB requested, 0.5 cores and 1 GiB used over the
    ``measured_hours`` Prometheus answered for."""
    hard = {"hard": 0.0}
    usage = {
        "requests.cpu": {**hard, "used_seconds": 2.0 * 86400, "max": 2.0},
        "requests.memory": {**hard, "used_seconds": 4.0 * 2**30 * 86400, "max": 4.0 * 2**30},
    }
    if measured_hours:
        seconds = measured_hours * 3600
        usage["measured.cpu"] = {**hard, "used_seconds": 0.5 * seconds, "max": 0.5, "seconds": seconds}
        usage["measured.memory"] = {**hard, "used_seconds": 2.0**30 * seconds, "max": 2.0**30, "seconds": seconds}
    TenantUsageDay.objects.create(
        tenant=tenant, day=dt.date(2026, 3, day), team=tenant.team, tier=tenant.tier, seconds=86400.0, usage=usage
    )


def test_usage_says_which_evidence_it_comes_from_in_json_csv_and_on_the_page(api, client, alice, web):
    _usage_day(web, 11, measured_hours=24)
    body = api(alice).get(f"{API}/tenants/{web.pk}/costs/", {"month": "2026-03"}).json()
    (line,) = body["lines"]
    assert line["usage_basis"] == "measured"
    assert (line["usage"]["cpu_core_hours"], line["usage"]["memory_gib_hours"]) == ("12.0000", "24.0000")
    _usage_day(web, 12, measured_hours=0)  # Prometheus did not answer all day: requests
    _usage_day(web, 13, measured_hours=6)  # 6 h measured, 18 h by requests
    body = api(alice).get(f"{API}/tenants/{web.pk}/costs/", {"month": "2026-03"}).json()
    (line,) = body["lines"]
    # 12 + 48 + (0.5 × 6 + 2 × 18) core-hours; 24 + 96 + (1 × 6 + 4 × 18) GiB-hours
    assert line["usage_basis"] == "mixed"
    assert (line["usage"]["cpu_core_hours"], line["usage"]["memory_gib_hours"]) == ("99.0000", "198.0000")
    response = api(alice).get(f"{API}/tenants/{web.pk}/costs/export/", {"month": "2026-03"})
    (row,) = csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode()))
    assert (row["usage_basis"], row["usage_cpu_core_hours"]) == ("mixed", "99.0000")
    client.force_login(alice)
    html = client.get(f"/tenants/{web.pk}/", {"month": "2026-03"}).content.decode()
    assert '<td data-usage-basis="mixed">measured and requests</td>' in html


def test_another_team_and_its_tenants_are_not_found(api, bob, erin, web):
    for person in (bob, erin):
        for path in ("teams/team-a/costs/", "teams/team-a/costs/export/", f"tenants/{web.pk}/costs/"):
            response = api(person).get(f"{API}/{path}", {"month": "2026-03"})
            assert response.status_code == 404, (person, path)
            assert response.json() == {"detail": "No Team matches the given query."} or "detail" in response.json()
    # Not found comes before any question about the month.
    assert api(bob).get(f"{API}/teams/team-a/costs/", {"month": "nope"}).status_code == 404
    assert api(bob).get(f"{API}/teams/no-such-team/costs/").status_code == 404


def test_a_team_token_answers_only_for_its_team(token_client, alice, team_b, web):
    from tenants.models import Membership

    Membership.objects.create(user=alice, team=team_b, role=Membership.Role.OWNER)
    client = token_client(alice, team=team_b)
    assert client.get(f"{API}/teams/team-b/costs/").status_code == 200
    assert client.get(f"{API}/teams/team-a/costs/").status_code == 404
    assert client.get(f"{API}/tenants/{web.pk}/costs/").status_code == 404


def test_platform_admins_read_any_team(api, dave, web):
    assert api(dave).get(f"{API}/teams/team-a/costs/", {"month": "2026-03"}).json()["totals"][0]["allocation"] == (
        MARCH_FIGURES
    )


@pytest.mark.parametrize(
    "month", ["2026-3", "2026-13", "march", "", "0000-01", "1999-12", "3000-01", "9999-12", "２０２６-03", "2026-03x"]
)
def test_a_month_that_is_none_is_a_field_error(api, alice, web, month):
    for path in ("teams/team-a/costs/", "teams/team-a/costs/export/", f"tenants/{web.pk}/costs/"):
        response = api(alice).get(f"{API}/{path}", {"month": month})
        assert response.status_code == 400, (path, month, response.content)
        assert list(response.json()) == ["month"] and isinstance(response.json()["month"][0], str)


def test_a_month_not_begun_has_no_costs_yet(api, alice, web):
    body = api(alice).get(f"{API}/teams/team-a/costs/", {"month": "2999-12"}).json()
    assert body["lines"] == [] and body["totals"] == []
    assert body["period_start"] == body["period_end"] == "2999-12-01T00:00:00Z"


def test_a_month_given_twice_is_refused(api, alice, web):
    response = api(alice).get(f"{API}/teams/team-a/costs/?month=2026-03&month=2026-02")
    assert response.status_code == 400 and list(response.json()) == ["month"]


def test_the_schema_describes_the_costs_exactly(api, erin):
    schema = yaml.safe_load(api(erin).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi").content)
    for path in ("/api/v1/teams/{slug}/costs/", "/api/v1/tenants/{id}/costs/"):
        operation = schema["paths"][path]["get"]
        assert {"200", "400", "401", "404", "429"} <= set(operation["responses"]), path
        (month,) = [p for p in operation["parameters"] if p["name"] == "month"]
        assert month["schema"] == {"type": "string", "pattern": "^2[0-9]{3}-(0[1-9]|1[0-2])$"}
        assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/CostReport"
        }
    for path in ("/api/v1/teams/{slug}/costs/export/", "/api/v1/tenants/{id}/costs/export/"):
        assert list(schema["paths"][path]["get"]["responses"]["200"]["content"]) == ["text/csv"]
        assert "404" in schema["paths"][path]["get"]["responses"]
    components = schema["components"]["schemas"]
    assert set(components["CostLine"]["required"]) == {
        "tenant",
        "tenant_name",
        "cluster",
        "team",
        "currency",
        "live_hours",
        "asleep_hours",
        "allocation",
        "usage",
        "usage_basis",
    }
    basis = components["CostLine"]["properties"]["usage_basis"]
    assert components[basis["allOf"][0]["$ref"].rsplit("/", 1)[1]]["enum"] == ["measured", "requests", "mixed", "none"]
    assert components["Figures"]["properties"]["cpu"]["format"] == "decimal"
    assert components["CostLine"]["properties"]["currency"]["pattern"] == "^[A-Z]{3}$"
    assert components["CostReport"]["properties"]["month"]["pattern"] == "^2[0-9]{3}-(0[1-9]|1[0-2])$"
    assert components["HoursPerMonthEnum"]["enum"] == [730]
