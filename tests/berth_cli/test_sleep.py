"""`berth sleep TENANT` and `berth wake TENANT` against a live portal (no worker: the state is what Berth wants
and what the API answers; tests/worker/test_sleep_cluster.py has the cluster side)."""

from __future__ import annotations

import pytest

from tenants.models import AuditEvent, Tenant
from tests.fixtures import TokenFactory
from tests.plugins.portal import BerthRunner

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def web(ready_tenant_row, medium) -> Tenant:
    medium.sleep_allowed = True
    medium.save()
    return ready_tenant_row("web")


def test_alice_puts_web_to_sleep_and_wakes_it(berth: BerthRunner, api_token: TokenFactory, alice, web) -> None:
    token = api_token(alice)
    slept = berth("sleep", "web", "-o", "json", token=token)
    assert slept.code == 0, slept.stderr
    assert slept.json()["sleep_state"] == "falling_asleep" and slept.json()["sleep_reason"] == "owner"
    again = berth("sleep", "web", token=token)
    assert again.code == 7 and "already asleep" in again.stderr
    table = berth("wake", "web", token=token)
    assert table.code == 0, table.stderr
    assert "SLEEP" in table.stdout and "waking" in table.stdout
    assert not Tenant.objects.get(pk=web.pk).sleeping
    actions = list(AuditEvent.objects.filter(object_id=str(web.pk)).values_list("action", flat=True))
    assert {"tenant.slept", "tenant.woke"} <= set(actions)


def test_a_member_is_refused_and_another_team_does_not_find_it(
    berth: BerthRunner, api_token: TokenFactory, amir, bob, web
) -> None:
    assert berth("sleep", "web", token=api_token(amir)).code == 4
    assert berth("sleep", str(web.pk), token=api_token(bob)).code == 5
    assert not Tenant.objects.get(pk=web.pk).sleeping
