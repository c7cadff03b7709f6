"""Test-wide set-up: a real PostgreSQL and Redis for the run, started before Django connects."""

from __future__ import annotations

import os
from contextlib import ExitStack

import pytest

from devcluster import servers

pytest_plugins = [
    "tests.plugins.kube",
    "tests.plugins.oidc",
    "tests.plugins.keycloak",
    "tests.plugins.worker",
    "tests.plugins.portal",
    "tests.plugins.tools",
    "tests.plugins.webhooks",
    "tests.fixtures",
]

_stack = ExitStack()
_redis: servers.RedisServer | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config) -> None:
    """pytest-django has read settings already; point them (in place) at this run's servers."""
    from django.conf import settings

    url = os.environ.get("BERTH_TEST_DATABASE_URL")
    if url:
        import environ

        db = environ.Env.db_url_config(url)
    else:
        db = _stack.enter_context(servers.postgres_server())
    settings.DATABASES["default"].update({k: db[k] for k in ("HOST", "PORT", "USER", "PASSWORD", "NAME")})
    os.environ["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    global _redis
    if os.environ.get("BERTH_TEST_REDIS_URL"):
        broker = os.environ["BERTH_TEST_REDIS_URL"]
    else:
        _redis = _stack.enter_context(servers.redis_server())
        broker = _redis.url
    settings.CELERY_BROKER_URL = broker
    os.environ["CELERY_BROKER_URL"] = broker
    # Throttles and failure counts live in the run's Redis, shared with the worker and live servers.
    cache_url = f"{broker.rsplit('/', 1)[0]}/1"
    from portal.settings import cache_config

    settings.CACHES["default"] = cache_config(cache_url)
    os.environ["CACHE_URL"] = cache_url
    from portal.celery import app

    app.conf.update(broker_url=broker)


def pytest_unconfigure(config) -> None:
    _stack.close()


@pytest.fixture(scope="session")
def redis_server() -> servers.RedisServer:
    """This run's Redis, which a test may stop and start again; not available with BERTH_TEST_REDIS_URL."""
    if _redis is None:
        pytest.skip("Redis is external (BERTH_TEST_REDIS_URL); outage tests need the run's own Redis")
    return _redis


@pytest.fixture(autouse=True)
def _empty_cache():
    """Throttle and sign-in failure counters live in the shared cache: no test may inherit another's."""
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()
