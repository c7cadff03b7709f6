"""Limits and races that only show with several server processes: the portal under gunicorn, two workers.

The write throttle counts in the shared cache (Redis, CACHE_URL), so its limit holds across workers rather
than per process; two first sign-ins of one person at the same instant both get in, as one user.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
import requests

from devcluster.oidc import API_RESOURCE, OidcProvider
from tenants.models import Membership, User
from tests.plugins.portal import LivePortal, portal_server
from tests.plugins.worker import django_process_env

pytestmark = pytest.mark.django_db(transaction=True)

WRITES_PER_MINUTE = 4


@pytest.fixture
def strict_portal(oidc_provider: OidcProvider) -> Iterator[LivePortal]:
    """Two gunicorn workers with a write budget small enough to spend in a test."""
    env = {
        **django_process_env(),
        **oidc_provider.portal_env(),
        "BERTH_WRITE_THROTTLE": f"{WRITES_PER_MINUTE}/min",
    }
    with portal_server("strict-portal", env, workers=2) as portal:
        yield portal


def all_at_once(calls: list[Callable[[], requests.Response]]) -> list[int]:
    """Send every call at the same instant, each on its own connection; their status codes, in order."""
    barrier = threading.Barrier(len(calls))
    statuses: list[int] = [0] * len(calls)

    def send(i: int) -> None:
        barrier.wait(timeout=30)
        statuses[i] = calls[i]().status_code

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return statuses


def test_the_write_budget_holds_across_gunicorn_workers(strict_portal, api_token, alice):
    token = api_token(alice)

    def write() -> requests.Response:
        # An empty submission: refused (400) once the throttle let it through, 429 once the budget is spent.
        return requests.post(
            f"{strict_portal.url}/api/v1/requests/",
            json={},
            headers={"Authorization": f"Token {token}", "Connection": "close"},
            timeout=30,
        )

    statuses = all_at_once([write] * (3 * WRITES_PER_MINUTE))
    assert sorted(statuses) == [400] * WRITES_PER_MINUTE + [429] * (2 * WRITES_PER_MINUTE), statuses
    # Reads are not throttled.
    me = requests.get(f"{strict_portal.url}/api/v1/me/", headers={"Authorization": f"Token {token}"}, timeout=30)
    assert me.status_code == 200


def test_two_first_sign_ins_of_one_person_at_once_both_get_in_as_one_user(strict_portal, oidc_tokens):
    token = oidc_tokens("amir", resource=API_RESOURCE)["access_token"]
    assert not User.objects.filter(username="amir").exists()

    def first_call() -> requests.Response:
        return requests.get(
            f"{strict_portal.url}/api/v1/me/",
            headers={"Authorization": f"Bearer {token}", "Connection": "close"},
            timeout=30,
        )

    assert all_at_once([first_call] * 4) == [200] * 4
    user = User.objects.get(username="amir")
    assert User.objects.filter(oidc_subject=user.oidc_subject).count() == 1
    assert Membership.objects.filter(user=user).count() == 1
