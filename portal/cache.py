"""The shared cache (Redis): while Redis is away it holds nothing, rather than failing every request.

The cache holds counters only: the write and read throttles, the sign-in failure counts, the slots of slow reads.
With Django's own backend, a Redis restart made every API call a 500 (each call counts something). Here an
unreachable Redis reads as an empty cache: a counter starts again at its first step, so throttles and the
failure counts let requests through until it is back (a warning says so, at most once a minute per process).
Everything Berth must not lose is in PostgreSQL.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.core.cache.backends.redis import RedisCache
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

logger = logging.getLogger(__name__)
AWAY = (RedisConnectionError, RedisTimeoutError)
WARN_EVERY_SECONDS = 60.0


class ForgivingRedisCache(RedisCache):
    """Django's RedisCache, read as empty while Redis cannot be reached."""

    _warned_at = 0.0

    def _away(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - ForgivingRedisCache._warned_at >= WARN_EVERY_SECONDS:
            ForgivingRedisCache._warned_at = now
            logger.warning(
                "the cache (Redis) is not reachable: throttles and sign-in failure counts start afresh until it is "
                "back: %s",
                exc,
            )

    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        try:
            return super().get(key, default, version)
        except AWAY as exc:
            self._away(exc)
            return default

    def set(self, key: Any, value: Any, timeout: Any = None, version: int | None = None) -> None:
        try:
            super().set(key, value, timeout, version)
        except AWAY as exc:
            self._away(exc)

    def add(self, key: Any, value: Any, timeout: Any = None, version: int | None = None) -> bool:
        try:
            return bool(super().add(key, value, timeout, version))
        except AWAY as exc:
            self._away(exc)
            return True

    def incr(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        """Counts from nothing while Redis is away (as if ``add(key, 0)`` had just stored the key); ``decr`` is
        ``incr`` of ``-delta``."""
        try:
            return int(super().incr(key, delta, version))
        except AWAY as exc:
            self._away(exc)
            return delta

    def delete(self, key: Any, version: int | None = None) -> bool:
        try:
            return bool(super().delete(key, version))
        except AWAY as exc:
            self._away(exc)
            return False

    def clear(self) -> None:
        try:
            super().clear()
        except AWAY as exc:
            self._away(exc)
