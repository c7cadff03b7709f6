"""The soak's memory judgement (bench/rss.py): least-squares slope per 10 minutes and the flatness threshold."""

import os

import pytest

from bench import rss


def test_slope_of_a_straight_line_is_its_rate_per_10_minutes():
    points = [(60.0 * i, 100.0 + 0.5 * i) for i in range(10)]  # half a MiB a minute
    assert rss.slope_per_10min(points) == pytest.approx(5.0)


def test_slope_fits_through_noise_rather_than_end_minus_start():
    # Flat with one high sample at the end: end - start says 6 MiB, the fit far less.
    points = [(60.0 * i, 100.0) for i in range(30)] + [(1800.0, 106.0)]
    assert 0 < rss.slope_per_10min(points) < 1.0


def test_slope_needs_two_times():
    assert rss.slope_per_10min([]) == 0.0
    assert rss.slope_per_10min([(5.0, 80.0)]) == 0.0
    assert rss.slope_per_10min([(5.0, 80.0), (5.0, 90.0)]) == 0.0


def test_samples_before_the_warm_up_do_not_count():
    # Fast growth while warming up (imports, caches), flat afterwards.
    points = [(0.0, 40.0), (60.0, 80.0), (120.0, 100.0)] + [(120.0 + 60 * i, 100.0) for i in range(1, 20)]
    verdict = rss.judge(points, warmup_s=120)
    assert verdict.start_mib == 100.0 and verdict.end_mib == 100.0 and verdict.max_mib == 100.0
    assert verdict.slope_mib_per_10min == pytest.approx(0.0)
    assert verdict.flat
    assert not rss.judge(points, warmup_s=0).flat


def test_threshold_is_two_mib_or_two_percent_of_start_whichever_is_larger():
    small = [(60.0 * i, 50.0 + 0.25 * i) for i in range(31)]  # 2.5 MiB / 10 min on 50 MiB: over 2 MiB
    verdict = rss.judge(small, warmup_s=0)
    assert verdict.limit_mib_per_10min == 2.0
    assert not verdict.flat
    large = [(60.0 * i, 500.0 + 0.25 * i) for i in range(31)]  # the same growth on 500 MiB: under 10 MiB (2 %)
    verdict = rss.judge(large, warmup_s=0)
    assert verdict.limit_mib_per_10min == pytest.approx(10.0)
    assert verdict.flat


def test_a_steady_leak_is_not_flat():
    leak = [(60.0 * i, 120.0 + 0.4 * i) for i in range(31)]  # 4 MiB / 10 min, 12 MiB over 30 minutes
    verdict = rss.judge(leak, warmup_s=0)
    assert verdict.slope_mib_per_10min == pytest.approx(4.0)
    assert not verdict.flat


def test_no_samples_after_the_warm_up_is_an_error():
    with pytest.raises(ValueError):
        rss.judge([(10.0, 1.0)], warmup_s=60)


def test_reads_this_process_and_its_children():
    assert (rss.rss_mib(os.getpid()) or 0) > 1
    assert rss.rss_mib(2**22 + 1) is None  # above pid_max's default: no such process
    assert rss.children(os.getppid()).count(os.getpid()) == 1
