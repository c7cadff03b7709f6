"""Rate limits that hold across every portal process: counted with atomic increments in the shared cache.

DRF's own throttles read a list of timestamps from the cache, decide, then write the list back. Two gunicorn
workers serving one person at the same instant both read the same list and both let the request through, so
a burst gets past the budget. Here each request is one atomic ``incr`` of a per-window counter (Redis
INCR in production), and a request that is refused gives its increment back, so at most ``num_requests``
are ever let through per window however many processes count.

The window slides: the previous fixed window's count is weighted by how much of it still overlaps the last
``duration`` seconds (the "sliding window counter" of nginx and Cloudflare), so a burst at the end of one
minute and another at the start of the next cannot spend the budget twice.
"""

from __future__ import annotations

import math

from rest_framework.throttling import ScopedRateThrottle


class SharedRateThrottle(ScopedRateThrottle):
    """ScopedRateThrottle's scopes and rates, counted atomically in the shared cache."""

    def allow_request(self, request, view) -> bool:
        self.scope = getattr(view, self.scope_attr, None)
        if not self.scope:
            return True
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        key = self.get_cache_key(request, view)
        if self.num_requests is None or self.duration is None or key is None:
            return True
        self.limit, self.seconds = self.num_requests, self.duration
        now = self.timer()
        window = int(now // self.seconds)
        self.elapsed = (now % self.seconds) / self.seconds
        current_key = f"{key}:{window}"
        # Kept for two windows: while it is "current" and while it weighs as "previous".
        self.cache.add(current_key, 0, timeout=2 * self.seconds)
        try:
            count = int(self.cache.incr(current_key))
        except ValueError:  # evicted between add and incr: count afresh
            self.cache.set(current_key, 1, timeout=2 * self.seconds)
            count = 1
        self.previous = int(self.cache.get(f"{key}:{window - 1}") or 0)
        if self.previous * (1 - self.elapsed) + count <= self.limit:
            return True
        # Refused: give the increment back, so refused requests never spend the budget.
        self.cache.decr(current_key)
        self.current = count - 1
        return False

    def wait(self) -> float | None:
        """Seconds until one more request fits the sliding window (for Retry-After)."""
        left_in_window = (1 - self.elapsed) * self.seconds
        if self.current + 1 > self.limit:
            # This window alone is full: wait for the next one, where it weighs as "previous".
            if self.current == 0:
                return left_in_window
            next_elapsed = max(0.0, 1 - (self.limit - 1) / self.current)
            return left_in_window + next_elapsed * self.seconds
        # The previous window's weight has to shrink until the request fits.
        needed_elapsed = 1 - (self.limit - self.current - 1) / self.previous if self.previous else 0.0
        return max(0.0, math.ceil((needed_elapsed - self.elapsed) * self.seconds * 1000) / 1000)


class WriteThrottle(SharedRateThrottle):
    """Throttle writes only; reads stay cheap for dashboards and CI polling."""

    def allow_request(self, request, view) -> bool:
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return True
        return super().allow_request(request, view)


class _Scoped:
    """What ScopedRateThrottle reads from a view: only its scope."""

    def __init__(self, scope: str) -> None:
        self.throttle_scope = scope


def page_wait(request, scope: str) -> float | None:
    """For pages: None when the person may make one more request of ``scope`` (counted with the API's own requests
    of that scope), otherwise the seconds until one fits."""
    throttle = SharedRateThrottle()
    if throttle.allow_request(request, _Scoped(scope)):
        return None
    return throttle.wait() or 1.0
