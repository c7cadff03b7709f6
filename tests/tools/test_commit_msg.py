"""The commit-msg hook's rules (CONTRIBUTING.md)."""

from __future__ import annotations

import pytest

from tools.commit_msg import problems


@pytest.mark.parametrize(
    "message",
    [
        "Remove the kept-pages cache",
        "Remove the kept-pages cache\n\nWhy, in the body.\n",
        "Address a review's points",
        "# Please enter the commit message\nPin the OpenAPI schema\n",
        "Merge branch 'main' into simplify, with a subject longer than seventy-two characters",
        "fixup! Remove the kept-pages cache",
        "x" * 0 + "A" + "b" * 71,
    ],
)
def test_a_short_imperative_subject_passes(message):
    assert problems(message) == []


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ("Removed the kept-pages cache", "imperative"),
        ("Removes the kept-pages cache", "imperative"),
        ("Removing the kept-pages cache", "imperative"),
        ("remove the kept-pages cache", "imperative"),
        ("tests/tenants/test_kept_pages.py: read() returns the page alone", "imperative"),
        ("Remove the kept-pages cache.", "full stop"),
        ("Remove " + "x" * 70, "at most 72"),
        ("Remove the cache\nand the log", "second line blank"),
        ("# only a comment\n", "empty"),
    ],
)
def test_a_long_or_reporting_subject_is_refused_with_the_reason(message, says):
    assert any(says in problem for problem in problems(message)), problems(message)
