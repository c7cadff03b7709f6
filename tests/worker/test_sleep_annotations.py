"""What a restore reads from ``berth.dev/slept-replicas``: a plain number, clamped; anything else nothing."""

from __future__ import annotations

import pytest

from worker.sleep import slept_replicas


@pytest.mark.parametrize(
    ("text", "restored"),
    [
        ("3", 3),
        (" 3 ", 3),
        ("0", 0),
        ("20", 20),
        ("21", 20),  # clamped to the tier's pods
        ("1000", 20),
        ("999999999", 20),
        ("9999999999", None),  # more digits than any count
        ("-5", None),
        ("+5", None),
        ("1e9", None),
        ("3.0", None),
        ("0x10", None),
        ("٣", None),  # an Arabic-Indic three: a digit to str.isdigit, not a count
        ("", None),
        ("kube-system/coredns", None),
    ],
)
def test_only_a_plain_count_is_restored_and_never_above_the_tier(text, restored):
    assert slept_replicas(text, max_replicas=20) == restored
