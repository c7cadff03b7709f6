"""The chaos table: one row per scenario, kept for the terminal summary and written to
test-output/chaos/results.json as each scenario ends."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from tests.plugins.worker import OUTPUT


@dataclass
class ScenarioResult:
    scenario: str
    in_flight: dict[str, int]  # tenants by status when the fault began
    fault_seconds: float  # from the fault to the part being back (restarted, resumed)
    converge_seconds: float | None  # from the part being back to every lane's tenant being as asked; None: not within
    bound_seconds: float
    answers: dict[str, int]  # the API's answers during the burst, by status (0: no answer)
    outcome: str
    notes: str = ""


RESULTS: list[ScenarioResult] = []
RESULTS_FILE = OUTPUT / "chaos" / "results.json"


def record(result: ScenarioResult) -> None:
    RESULTS.append(result)
    RESULTS_FILE.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_FILE.write_text(json.dumps([asdict(r) for r in RESULTS], indent=2) + "\n")


def _in_flight(counts: dict[str, int]) -> str:
    return ", ".join(f"{status} {count}" for status, count in sorted(counts.items())) or "-"


def table() -> list[str]:
    header = ("scenario", "in flight at the fault", "fault", "converged", "bound", "answers", "outcome")
    rows = [
        (
            r.scenario,
            _in_flight(r.in_flight),
            f"{r.fault_seconds:.0f} s",
            "-" if r.converge_seconds is None else f"{r.converge_seconds:.0f} s",
            f"{r.bound_seconds:.0f} s",
            " ".join(f"{status}:{count}" for status, count in sorted(r.answers.items())),
            r.outcome + (f" ({r.notes})" if r.notes else ""),
        )
        for r in RESULTS
    ]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        " | ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)) for row in [header, *rows]
    ]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    return lines


def annotate(note: str) -> None:
    """Add what a scenario found after its checks (the kubelet's isolation reports) to its row."""
    last = RESULTS[-1]
    last.notes = f"{last.notes}; {note}" if last.notes else note
    RESULTS_FILE.write_text(json.dumps([asdict(r) for r in RESULTS], indent=2) + "\n")
