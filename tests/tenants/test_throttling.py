"""The shared write throttle's counting, against the real shared cache (Redis), with a clock the test moves.

Several processes at once are played in tests/tenants/test_api_shared_limits.py under gunicorn.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from tenants.api.throttling import SharedRateThrottle, WriteThrottle


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    # The start of a minute, long ago: no real request's counters share its keys.
    clock = Clock(60.0 * 20_000_000)
    monkeypatch.setattr(SharedRateThrottle, "timer", clock)
    monkeypatch.setattr(SharedRateThrottle, "THROTTLE_RATES", {"writes": "4/min"})
    return clock  # the counters go with the cache, which every test starts and ends empty (tests/conftest.py)


VIEW = SimpleNamespace(throttle_scope="writes")


def ask(person: int = 1, method: str = "POST") -> tuple[bool, SharedRateThrottle]:
    throttle = WriteThrottle()
    request = SimpleNamespace(method=method, user=SimpleNamespace(pk=person, is_authenticated=True))
    return throttle.allow_request(request, VIEW), throttle


def test_the_budget_is_exact_and_refusals_do_not_spend_it(clock):
    assert [ask()[0] for _ in range(6)] == [True] * 4 + [False] * 2
    assert ask(person=2)[0], "each person has a budget of their own"
    assert ask(method="GET")[0], "reads are not counted"
    clock.now += 60  # the next minute: the last minute still weighs fully at its start
    assert not ask()[0]
    clock.now += 15  # a quarter in: 4 × 0.75 = 3, so one more fits
    assert [ask()[0] for _ in range(2)] == [True, False]


def test_a_burst_at_a_minutes_end_and_one_at_the_next_minutes_start_cannot_spend_the_budget_twice(clock):
    clock.now += 59
    assert [ask()[0] for _ in range(4)] == [True] * 4
    clock.now += 2  # one second into the next minute
    assert not ask()[0]


def test_retry_after_says_when_one_more_request_fits(clock):
    for _ in range(4):
        ask()
    clock.now += 30
    allowed, throttle = ask()
    assert not allowed
    # This minute holds 4 already: wait 30 s for the next minute, then 15 s until 4 × (1 - e) + 1 ≤ 4.
    assert throttle.wait() == pytest.approx(45)
    clock.now += 45
    assert ask()[0]


def test_many_threads_at_once_get_exactly_the_budget(clock):
    barrier = threading.Barrier(16)
    results: list[bool] = []

    def one() -> None:
        barrier.wait(timeout=10)
        results.append(ask()[0])

    threads = [threading.Thread(target=one) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(results) == [False] * 12 + [True] * 4
