"""What the web servers write about a sign-in: the access log of the dev server (``manage.py runserver``, what
``BERTH_DEMO_DEBUG=1 make demo`` runs) and of gunicorn with the shipped deploy/gunicorn.conf.py never holds the
authorization code.

Each test starts the server as a process on a free loopback port, signs Alice in through the real dev provider
(the portal's own /oidc/authenticate/ and /oidc/callback/), and reads the log the server wrote.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from devcluster.oidc import OidcProvider
from devcluster.process import Component, wait_until
from tests.plugins.oidc import complete_sign_in
from tests.plugins.worker import ROOT, django_process_env, free_port

pytestmark = pytest.mark.django_db(transaction=True)

QUERY_CREDENTIALS = {
    "access_token": "at-0123456789abcdef",
    "id_token": "it-0123456789abcdef",
    "refresh_token": "rt-0123456789abcdef",
    "client_secret": "cs-0123456789abcdef",
    "password": "pw-0123456789abcdef",
    "token": "tk-0123456789abcdef",
    "code_verifier": "cv-0123456789abcdef",
}


def _server(name: str, port: int, tmp_path: Path, env: dict[str, str]) -> Component:
    if name == "runserver":  # as `BERTH_DEMO_DEBUG=1 make demo` runs it (devcluster/demo.py)
        argv = [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
        env = {**env, "DJANGO_DEBUG": "true", "LOG_FORMAT": "text"}
    else:  # as the image runs it, with the shipped access-log format
        argv = [sys.executable, "-m", "gunicorn", "-c", "deploy/gunicorn.conf.py", "--bind", f"127.0.0.1:{port}"]
        argv += ["--workers", "1"]
    return Component(name, argv, tmp_path / f"{name}.log", cwd=ROOT, env=env)


@pytest.fixture(params=["runserver", "gunicorn"])
def web_server(request, django_db_setup, oidc_provider: OidcProvider, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(base URL, log file) of the dev server or gunicorn, signing in at the run's dev provider."""
    port = free_port()
    server = _server(request.param, port, tmp_path, {**django_process_env(), **oidc_provider.portal_env()})
    server.start()
    try:
        wait_until(lambda: _answers(port), timeout=60, watched=[server], what=f"{request.param} to listen")
        yield f"http://127.0.0.1:{port}", tmp_path / f"{request.param}.log"
    finally:
        server.stop(grace_seconds=10)


def _answers(port: int) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def test_a_sign_in_leaves_no_authorization_code_in_the_access_log(web_server, oidc_provider: OidcProvider):
    base, log = web_server
    browser = requests.Session()
    browser.trust_env = False
    start = browser.get(f"{base}/oidc/authenticate/", allow_redirects=False)
    assert start.status_code == 302, start.text[:300]
    callback = complete_sign_in(
        oidc_provider, start.headers["Location"], "alice", redirect_uri=f"{base}/oidc/callback/"
    )
    code = parse_qs(urlsplit(callback).query)["code"][0]
    signed_in = browser.get(callback, allow_redirects=False)
    assert signed_in.status_code == 302 and "/login" not in signed_in.headers["Location"], signed_in.headers
    browser.get(f"{base}/healthz", params=QUERY_CREDENTIALS)
    browser.get(f"{base}/login/", params={"next": f"/oidc/callback/?code={code}&state=x"}, allow_redirects=False)

    written = log.read_text()
    assert "/oidc/callback/?code=[redacted]" in written, written[-3000:]
    assert code not in written
    for value in QUERY_CREDENTIALS.values():
        assert value not in written
    assert written.count("/healthz?") == 1  # the request with the credentials was logged, without them
