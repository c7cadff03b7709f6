"""The commit-msg hook (.pre-commit-config.yaml): a subject of at most 72 characters, in the imperative, and the
details in a body after a blank line (CONTRIBUTING.md).

    .venv/bin/python -m tools.commit_msg .git/COMMIT_EDITMSG
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

MAX_SUBJECT = 72
# Subjects git writes itself, left as they are.
GENERATED = re.compile(r"(Merge|Revert|fixup!|squash!|amend!) ")
# "Added", "Adding", "Adds": a report of what was done, where the subject says what the commit does.
NOT_IMPERATIVE = re.compile(r"[A-Za-z]+(ed|ing)|(?!(Address|Access|Bypass|Process|Focus|Pass)$)[A-Za-z]+[^s]s")


def problems(message: str) -> list[str]:
    """What is wrong with ``message`` (as git passes it: comment lines included), or nothing."""
    lines = [line for line in message.splitlines() if not line.startswith("#")]
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return ["The message is empty."]
    subject = lines[0]
    if GENERATED.match(subject):
        return []
    found = []
    if len(subject) > MAX_SUBJECT:
        found.append(f"The subject has {len(subject)} characters; at most {MAX_SUBJECT}: put the details in the body.")
    first = subject.split(" ", 1)[0].rstrip(":,")
    if not first[:1].isupper() or NOT_IMPERATIVE.fullmatch(first):
        found.append(f'Start the subject with a verb in the imperative, capitalised ("Remove", not "{first}").')
    if subject.rstrip().endswith("."):
        found.append("End the subject without a full stop.")
    if len(lines) > 1 and lines[1].strip():
        found.append("Leave the second line blank: the body follows it.")
    return found


def main(argv: list[str]) -> int:
    found = problems(Path(argv[1]).read_text())
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
