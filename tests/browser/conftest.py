"""Real-browser tests: Debian's headless Chromium, the portal on pytest-django's live server, and
sign-in at the run's real OpenID Connect provider. How to run them: docs/browser-tests.md.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Playwright, sync_playwright

from devcluster import demo, servers
from devcluster.process import Component
from tests.browser.support import AXE_JS, BROWSER_TESTS, Portal
from tests.fixtures import point_portal_at
from tests.plugins.worker import OUTPUT, ROOT, django_process_env, free_port

# The real worker and a Cluster row on the dev control plane, as the worker tests use them.

# Read when the session's live server starts: Chromium then never has to guess between ::1 and 127.0.0.1.
os.environ.setdefault("DJANGO_LIVE_TEST_SERVER_ADDRESS", "127.0.0.1")

CHROMIUM = Path(os.environ.get("BERTH_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
_NPM_TIMEOUT_SECONDS = 300


@pytest.fixture(scope="package")
def playwright_driver() -> Iterator[Playwright]:
    """Playwright's driver, once: every Chromium of the run is launched from it."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: browser tests use Debian's chromium (make deps installs it)")
    # Playwright's sync API keeps an asyncio loop running on this thread, and Django refuses ORM calls
    # under a running loop. Safe here: the loop only carries Playwright's own messages, never our code.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as driver:
            yield driver
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(scope="package")
def chromium(playwright_driver: Playwright) -> Iterator[Browser]:
    """One headless Chromium for the browser tests; each test opens fresh contexts (fresh profiles) in it."""
    browser = playwright_driver.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture(scope="package")
def chromium_en_us(playwright_driver: Playwright) -> Iterator[Browser]:
    """A headless Chromium whose own language is American English (``--lang`` and ``LANG``), as many people's
    is: there a native date input shows 03/15/2026 and a time input 07:00 PM."""
    browser = playwright_driver.chromium.launch(
        executable_path=str(CHROMIUM),
        headless=True,
        args=[*CHROMIUM_ARGS, "--lang=en-US"],
        env={**os.environ, "LANG": "en_US.UTF-8", "LANGUAGE": "en_US"},
    )
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture(scope="session")
def _live_server(request: pytest.FixtureRequest):
    """pytest-django's ``live_server``, asked for by name so it is session-wide here.

    (It escapes pytest-django's per-test helper, which adds 127.0.0.1 to ALLOWED_HOSTS, already
    there, and transactional_db, which every browser test marks.)
    """
    return request.getfixturevalue("live_server")


def _portal(chromium: Browser, url: str, issuer: str, *, locale: str = "en-GB") -> Iterator[Portal]:
    portal = Portal(url=url, issuer=issuer, browser=chromium, locale=locale)
    try:
        yield portal
    finally:
        portal.close()
    if portal.csp_violations:
        pytest.fail("Content-Security-Policy violations:\n" + "\n".join(portal.csp_violations))


@pytest.fixture
def portal(chromium: Browser, _live_server, settings, oidc_provider) -> Iterator[Portal]:
    """The portal on a live server, signing in at the session's OIDC provider (settings from ``portal_env()``).

    A page that breaks the Content-Security-Policy (blocked script, style or form target) fails the test.
    """
    env = oidc_provider.portal_env()
    point_portal_at(settings, env)
    yield from _portal(chromium, _live_server.url, env["OIDC_OP_ISSUER"])


@pytest.fixture
def portal_en_us(chromium_en_us: Browser, _live_server, settings, oidc_provider) -> Iterator[Portal]:
    """``portal``, in a browser that speaks American English (``chromium_en_us``; its pages' locale en-US too)."""
    env = oidc_provider.portal_env()
    point_portal_at(settings, env)
    yield from _portal(chromium_en_us, _live_server.url, env["OIDC_OP_ISSUER"], locale="en-US")


@pytest.fixture
def keycloak_portal(chromium: Browser, _live_server, settings, keycloak) -> Iterator[Portal]:
    """The portal on a live server, signing in at the session's Keycloak (the realm compose imports).

    The realm registers the portal on 127.0.0.1:8000; the live server's port is added to the client's redirect
    and post-logout URIs through the admin REST API, as an admin would for another portal address.
    """
    keycloak.add_redirect_uris("berth-portal", [f"{_live_server.url}/oidc/callback/"], [f"{_live_server.url}/login/"])
    env = keycloak.portal_env()
    point_portal_at(settings, env)
    yield from _portal(chromium, _live_server.url, env["OIDC_OP_ISSUER"])


@pytest.fixture(scope="module")
def demo_web(django_db_setup, oidc_provider, tmp_path_factory) -> Iterator[str]:
    """The portal's web process as `make demo` starts it (devcluster/demo.py: its settings, its static
    files, its command), on this run's test database, Redis and provider; its URL. Log: test-output/demo-web.log.

    Only what the demo takes from elsewhere comes from the test run: no DJANGO_* of the tests' own settings. The
    one difference: the settings module adds a URL that fails (tests/browser/settings_with_failure.py), so the demo's
    500 page can be seen.
    """
    port = free_port()
    process = django_process_env()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path_factory.mktemp("demo-home")),
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": process["DATABASE_URL"],
        "CELERY_BROKER_URL": process["CELERY_BROKER_URL"],
        "CACHE_URL": os.environ["CACHE_URL"],
        **oidc_provider.portal_env(),
        **demo.settings_env(data_dir=tmp_path_factory.mktemp("demo"), port=port, debug=False),
    }
    env["DJANGO_SETTINGS_MODULE"] = "tests.browser.settings_with_failure"
    demo.collect_static(env)
    OUTPUT.mkdir(exist_ok=True)
    web = Component("demo-web", demo.web_command(port=port, debug=False), OUTPUT / "demo-web.log", cwd=ROOT, env=env)
    web.start()
    try:
        servers.wait_port(port, web, timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        web.stop(grace_seconds=10)


@pytest.fixture
def demo_portal(chromium: Browser, demo_web: str, oidc_provider) -> Iterator[Portal]:
    """Browsers on the demo's web process (``demo_web``), signing in at the run's provider; CSP enforced."""
    yield from _portal(chromium, demo_web, oidc_provider.portal_env()["OIDC_OP_ISSUER"])


def _pinned_axe_version() -> str:
    return json.loads((BROWSER_TESTS / "package.json").read_text())["dependencies"]["axe-core"]


def _installed_axe_version() -> str | None:
    try:
        return json.loads((BROWSER_TESTS / "node_modules" / "axe-core" / "package.json").read_text())["version"]
    except FileNotFoundError:
        return None


@pytest.fixture(scope="session")
def axe_installed() -> Path:
    """axe-core as pinned in tests/browser/package-lock.json, installed with `npm ci` when missing."""
    if _installed_axe_version() != _pinned_axe_version():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is needed to install axe-core for the accessibility tests (Debian: apt-get install npm)")
        with open(Path(tempfile.gettempdir()) / "berth-browser-npm.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if _installed_axe_version() != _pinned_axe_version():
                result = subprocess.run(
                    [npm, "ci", "--no-audit", "--no-fund"],
                    cwd=BROWSER_TESTS,
                    capture_output=True,
                    text=True,
                    timeout=_NPM_TIMEOUT_SECONDS,
                )
                if result.returncode != 0:
                    pytest.fail(f"npm ci failed in {BROWSER_TESTS}:\n{result.stdout}\n{result.stderr}")
    return AXE_JS
