"""At most N of one person's slow reads at once, across every portal process (counted in the shared cache).

A rate limit counts requests per minute; it does not stop one person from holding every web worker with a few
slow requests at the same moment (a metrics query may take 15 s, a log read up to three cluster calls). Each
slow read takes a slot of its kind for the person; with none free the read is refused at once (429) instead of
queueing behind a worker. A slot left by a killed process frees itself after ``SLOT_SECONDS``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.core.cache import cache

from tenants.errors import Busy

SLOT_SECONDS = 120  # longer than any read may take (the slowest is bounded at about 20 s)


@contextmanager
def slot(kind: str, person: object) -> Iterator[None]:
    """Hold one of ``BERTH_READS_AT_ONCE`` slots of ``kind`` for ``person`` while the block runs; Busy if none."""
    key = f"berth:inflight:{kind}:{person}"
    cache.add(key, 0, timeout=SLOT_SECONDS)
    try:
        held = int(cache.incr(key))
    except ValueError:  # evicted between add and incr
        cache.set(key, 1, timeout=SLOT_SECONDS)
        held = 1
    try:
        if held > settings.BERTH_READS_AT_ONCE:
            raise Busy(f"At most {settings.BERTH_READS_AT_ONCE} of these at once; wait for the others to finish.")
        yield
    finally:
        try:
            cache.decr(key)
        except ValueError:  # expired meanwhile: nothing left to give back
            pass
