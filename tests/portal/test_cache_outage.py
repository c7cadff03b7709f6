"""While Redis is away the shared cache reads as empty (portal/cache.py), so a Redis restart costs no request a
500: throttles and sign-in failure counts start afresh, and count again once it is back."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from devcluster.servers import RedisServer, redis_server
from portal.cache import ForgivingRedisCache
from portal.settings import cache_config


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


def _cache(server: RedisServer) -> ForgivingRedisCache:
    config = cache_config(f"redis://127.0.0.1:{server.port}/1")
    return ForgivingRedisCache(config["LOCATION"], {k: v for k, v in config.items() if k != "LOCATION"})


def test_a_cache_whose_redis_is_away_reads_as_empty_then_counts_again(
    own_redis: RedisServer, caplog, monkeypatch
) -> None:
    monkeypatch.setattr(ForgivingRedisCache, "_warned_at", 0.0)  # warned lately in this process: warn again
    cache = _cache(own_redis)
    cache.add("count", 0)
    assert cache.incr("count") == 1
    assert cache.get("count") == 1

    own_redis.stop()
    started = time.monotonic()
    assert cache.get("count", "nothing") == "nothing"
    assert cache.add("count", 0) is True
    assert cache.incr("count") == 1
    assert cache.decr("count") == -1
    cache.set("other", 1)
    assert cache.delete("other") is False
    assert time.monotonic() - started < 5  # refused at once, never waiting on a timeout per call
    assert "the cache (Redis) is not reachable" in caplog.text

    own_redis.start()  # empty: Redis keeps nothing across a restart here
    assert cache.add("count", 0) is True
    assert cache.incr("count") == 1
    assert cache.incr("count") == 2


def test_a_query_error_is_still_an_error(own_redis: RedisServer) -> None:
    cache = _cache(own_redis)
    cache.set("text", "not a number")
    with pytest.raises(Exception):  # noqa: B017  (redis's ResponseError: not what an outage raises)
        cache.incr("text")
