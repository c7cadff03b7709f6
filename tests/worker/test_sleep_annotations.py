"""What a restore reads from ``berth.dev/slept-replicas``: a plain number, clamped; anything else nothing. And what
a wake's note keeps across its passes."""

from __future__ import annotations

import pytest

from worker.sleep import SleepResult, slept_replicas


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


def test_a_wake_pass_keeps_what_an_earlier_pass_of_the_wake_left_at_zero():
    first = SleepResult(changed=["Deployment/a"], conflicts=["Deployment/b"], unreadable=["Deployment/junk"])
    last = SleepResult(changed=["Deployment/b"], unreadable=["StatefulSet/odd", "Deployment/junk"])
    last.carry(first.note())
    assert last.unreadable == ["Deployment/junk", "StatefulSet/odd"]
    assert last.note() == "left at zero, unreadable berth.dev/slept-replicas: Deployment/junk, StatefulSet/odd"


@pytest.mark.parametrize(
    "earlier",
    ["", "changed while Berth worked, retried next pass: Deployment/b", "Not woken: the tenant is being deleted"],
)
def test_a_note_without_anything_left_at_zero_carries_nothing(earlier):
    result = SleepResult(unreadable=["Deployment/junk"])
    result.carry(earlier)
    assert result.unreadable == ["Deployment/junk"]
