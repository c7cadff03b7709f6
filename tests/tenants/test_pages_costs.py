"""Showback on the pages: the team page (members, approvers and admins only) and the tenant page's costs."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.tenants.test_api_costs import web  # noqa: F401  (a fixture: team-a's tenant, priced, 60 h asleep)
from tests.tenants.test_showback_db import clock  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db


def page(client: Client, user, url: str, **query):
    client.force_login(user)
    return client.get(url, query)


def test_the_team_page_shows_the_month_so_far_and_past_months(client, vera, web):  # noqa: F811
    response = page(client, vera, reverse("team-detail", args=["team-a"]))
    assert response.status_code == 200
    html = response.content.decode()
    assert "Costs · 2026-04 so far" in html
    assert 'href="/api/v1/teams/team-a/costs/export/?month=2026-04"' in html
    # April so far: 108 h live, awake: 4 × 108 × 0.04 + 8 × 108 × 0.005 + 100 × 108 / 730 × 0.10
    # = 17.28 + 4.32 + 1.48.
    assert '<td class="right"><strong>EUR 23.08</strong></td>' in html
    assert "CPU 17.28 (432.0000 core-h)" in html
    # March's total is among the past months, with a link to it.
    assert 'href="?month=2026-03"' in html and "EUR 99.55 allocation" in html
    assert f'href="/tenants/{web.pk}/"' in html


def test_the_team_page_shows_a_past_month_on_request(client, alice, web):  # noqa: F811
    html = page(client, alice, reverse("team-detail", args=["team-a"]), month="2026-03").content.decode()
    assert "Costs · 2026-03</h2>" in html and '<td class="right"><strong>EUR 99.55</strong></td>' in html
    assert '<td class="right">522.00</td>' in html and '<td class="right">60.00</td>' in html
    assert 'href="?month=2026-04">Next month' in html


def test_another_teams_page_is_not_found(client, bob, erin, web):  # noqa: F811
    for person in (bob, erin):
        assert page(client, person, reverse("team-detail", args=["team-a"])).status_code == 404
    assert page(client, bob, reverse("team-detail", args=["no-such-team"])).status_code == 404


def test_platform_admins_see_any_team_page(client, dave, web):  # noqa: F811
    assert page(client, dave, reverse("team-detail", args=["team-a"])).status_code == 200


@pytest.mark.parametrize("month", ["2026-13", "soon", "1999-12"])
def test_a_month_that_is_none_is_a_bad_request(client, alice, web, month):  # noqa: F811
    assert page(client, alice, reverse("team-detail", args=["team-a"]), month=month).status_code == 400
    assert page(client, alice, reverse("tenant-detail", args=[web.pk]), month=month).status_code == 400


def test_the_tenant_page_shows_its_costs(client, alice, web):  # noqa: F811
    html = page(client, alice, reverse("tenant-detail", args=[web.pk]), month="2026-03").content.decode()
    assert "Costs · 2026-03</h2>" in html and '<td class="right"><strong>EUR 99.55</strong></td>' in html
    assert f'href="/api/v1/tenants/{web.pk}/costs/export/?month=2026-03"' in html
    assert 'href="/teams/team-a/"' in html


def test_the_dashboard_and_the_navigation_link_to_the_team_page(client, alice, web):  # noqa: F811
    html = page(client, alice, reverse("dashboard")).content.decode()
    assert html.count('href="/teams/team-a/"') >= 3  # nav, card, link
    html = page(client, alice, reverse("team-detail", args=["team-a"])).content.decode()
    assert '<a href="/teams/team-a/" aria-current="page">Team &amp; costs</a>' in html


def test_someone_in_two_teams_can_switch_between_their_pages(client, alice, team_b, web):  # noqa: F811
    from tenants.models import Membership

    Membership.objects.create(user=alice, team=team_b, role=Membership.Role.VIEWER)
    html = page(client, alice, reverse("team-detail", args=["team-a"])).content.decode()
    assert '<strong>Team A</strong> · <a href="/teams/team-b/">Team B</a>' in html


def test_the_team_page_takes_a_bounded_number_of_queries(client, alice, web, django_assert_max_num_queries):  # noqa: F811
    client.force_login(alice)
    with django_assert_max_num_queries(20):
        assert client.get(reverse("team-detail", args=["team-a"])).status_code == 200
