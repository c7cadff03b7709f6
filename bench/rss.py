"""Resident memory of processes over a run, and whether it stayed flat (bench/soak.py).

Reading: ``rss_mib(pid)`` is ``VmRSS`` from ``/proc/<pid>/status``; ``children(pid)`` the live processes whose
parent is ``pid``. Judging (pure, unit-tested in tests/bench/test_rss.py): a least-squares line through a process's
samples taken after the warm-up, its slope in MiB per 10 minutes, and ``flat`` against a stated threshold.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# A process is flat when the least-squares slope of its RSS after the warm-up is at most this many MiB per 10
# minutes, or at most FLAT_SHARE of its RSS at the start per 10 minutes, whichever is larger (a small process may
# move by a MiB or two as the allocator maps and returns arenas; a large one by a small share of itself).
FLAT_MIB_PER_10MIN = 2.0
FLAT_SHARE_PER_10MIN = 0.02


def rss_mib(pid: int) -> float | None:
    """VmRSS of ``pid`` in MiB; None once it is gone (or a kernel thread, which has none)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None


def children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``, in PID order."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(text[text.rindex(")") + 2 :].split()[1]) == pid:
            found.append(int(entry))
    return sorted(found)


def slope_per_10min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB) points, in MiB per 10 minutes; 0 for fewer than two distinct times."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_m = sum(m for _, m in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    cov = sum((t - mean_t) * (m - mean_m) for t, m in points)
    return cov / var * 600


@dataclass(frozen=True)
class Verdict:
    start_mib: float
    end_mib: float
    max_mib: float
    slope_mib_per_10min: float
    limit_mib_per_10min: float
    flat: bool


def judge(points: list[tuple[float, float]], warmup_s: float) -> Verdict:
    """Start, end, max, slope and flatness of one process's (seconds since the run began, MiB) samples.

    Only samples at or after ``warmup_s`` count (the first of them is "start"). The limit is FLAT_MIB_PER_10MIN or
    FLAT_SHARE_PER_10MIN of the start, whichever is larger; flat when the slope is at most the limit.
    """
    kept = sorted(p for p in points if p[0] >= warmup_s)
    if not kept:
        raise ValueError("no samples after the warm-up")
    start, end = kept[0][1], kept[-1][1]
    slope = slope_per_10min(kept)
    limit = max(FLAT_MIB_PER_10MIN, FLAT_SHARE_PER_10MIN * start)
    return Verdict(
        start_mib=start,
        end_mib=end,
        max_mib=max(m for _, m in kept),
        slope_mib_per_10min=slope,
        limit_mib_per_10min=limit,
        flat=slope <= limit,
    )
