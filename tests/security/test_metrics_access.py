"""/metrics, attacked: it names every team, tenant and cluster, so only Prometheus, with the configured bearer token,
may read it. Played against the live portal (gunicorn) over HTTP."""

from __future__ import annotations

import pytest
import requests

from tests.fixtures import TokenFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_metrics_refuses_anyone_without_the_token(live_portal, api_token: TokenFactory, alice, dave):
    url = f"{live_portal.url}/metrics"
    token = live_portal.metrics_token
    attempts = {
        "no credentials": {},
        "a wrong token": {"Authorization": "Bearer " + "x" * len(token)},
        "the token's prefix": {"Authorization": f"Bearer {token[:-1]}"},
        "the token with more after it": {"Authorization": f"Bearer {token}x"},
        "the token under another scheme": {"Authorization": f"Token {token}"},
        "the token as Basic": {"Authorization": f"Basic {token}"},
        "a team member's API token": {"Authorization": f"Token {api_token(alice)}"},
        "a platform admin's API token": {"Authorization": f"Bearer {api_token(dave)}"},
    }
    for what, headers in attempts.items():
        answer = requests.get(url, headers=headers, timeout=10)
        assert answer.status_code == 401, what
        assert b"berth_" not in answer.content, what
        assert answer.headers["WWW-Authenticate"].startswith("Bearer"), what
    # Nor through the query string, a trailing slash, or another method.
    assert requests.get(url, params={"token": token}, timeout=10).status_code == 401
    assert requests.get(f"{url}/", headers={"Authorization": f"Bearer {token}"}, timeout=10).status_code == 404
    denied = requests.post(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert denied.status_code == 405 and b"berth_" not in denied.content

    answer = requests.get(url, headers={"Authorization": f"Bearer {token}", "Host": "10.0.0.7:8000"}, timeout=10)
    assert answer.status_code == 200 and b"# TYPE berth_tenants gauge" in answer.content
