"""Hostile tenants files against `berth apply -f` (berth_cli/): 50 MB in a file or on stdin, a billion laughs,
nesting 100,000 levels deep, a flood of tiny values, and text that is not UTF-8.

Each is refused with exit code 6 (invalid input) and a line naming the problem before anything is sent to the
portal (the portal URL here has nobody listening, and no credential is set), in bounded time and memory: the CLI
reads at most MAX_BYTES + 1 bytes, and stops composing the YAML at the first anchor or alias, the ninth level or
the 17,001st value. Time is measured alone, memory with tracemalloc in a second run (tracing slows Python down),
and the real command's peak RSS with getrusage.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from berth_cli.errors import Exit
from berth_cli.main import cli
from berth_cli.tenantsfile import MAX_BYTES

ROOT = Path(__file__).resolve().parents[2]
HEADER = b"apiVersion: berth.dev/v1\nkind: TenantList\nteams: [team-a]\ntenants:\n"
FIFTY_MB = 50 * 1024 * 1024
# Each takes well under a second alone; a 2-core machine shared with node clusters and builds gets headroom.
SECONDS = 5.0
TRACED_BYTES = 16 * 1024 * 1024  # Python allocations while refusing one file
RSS_GROWTH_KB = 16 * 1024  # the real command's peak RSS above refusing an empty file


def _billion_laughs() -> bytes:
    laughs = b'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for level in "bcdefghi":
        previous = chr(ord(level) - 1)
        laughs += f"{level}: &{level} [{','.join(['*' + previous] * 9)}]\n".encode()
    return laughs


HOSTILE: dict[str, tuple[Callable[[], bytes], str]] = {
    "50-mb": (
        lambda: HEADER + b"  - {name: web, team: team-a, cluster: dev, tier: small}\n" * (FIFTY_MB // 56),
        f"larger than {MAX_BYTES} bytes",
    ),
    "billion-laughs": (_billion_laughs, ":1: not valid YAML: anchors and aliases (& and *) are not allowed"),
    "merge-key-bomb": (
        lambda: HEADER + b"  - &t {name: web, team: team-a, cluster: dev, tier: small}\n  - {<<: *t}\n",
        "not valid YAML: anchors and aliases (& and *) are not allowed",
    ),
    "deep-flow-lists": (lambda: b"a: " + b"[" * 100_000 + b"]" * 100_000, ":1: not valid YAML: nested too deeply"),
    "deep-flow-mappings": (
        lambda: b"a: " + b"{a: " * 100_000 + b"1" + b"}" * 100_000,
        ":1: not valid YAML: nested too deeply",
    ),
    "deep-block-mappings": (
        lambda: b"".join(b" " * level + b"a:\n" for level in range(1000)),
        ":8: not valid YAML: nested too deeply",
    ),
    "150k-tiny-tenants": (
        lambda: HEADER + b"  - {}\n" * 149_000,
        "not valid YAML: more than 17000 values, more than 1000 tenants need",
    ),
    "100k-unknown-keys": (
        lambda: HEADER + b"".join(b"k%d: 1\n" % i for i in range(100_000)),
        "not valid YAML: more than 17000 values, more than 1000 tenants need",
    ),
    "latin-1": (lambda: "apiVersion: berth.dev/v1\nteams: [équipe]\n".encode("latin-1"), ":2: not UTF-8 text"),
    "utf-16": (lambda: "apiVersion: berth.dev/v1\n".encode("utf-16"), ":1: not UTF-8 text"),
    "utf-8-surrogate": (lambda: HEADER + b"  - {name: \xed\xa0\x80}\n", ":5: not UTF-8 text"),
}


def _env(tmp_path: Path) -> dict[str, str]:
    """A user with no config and no credential, pointed at a portal nobody serves: reaching it would fail with
    another exit code than 6."""
    return {"HOME": str(tmp_path), "BERTH_URL": "http://127.0.0.1:9", "BERTH_TOKEN": ""}


def _measured(call: Callable[[], Result]) -> tuple[Result, float, int]:
    began = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - began
    tracemalloc.start()
    try:
        call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, seconds, peak


def _assert_refused(result: Result, expected: str) -> None:
    assert result.exit_code == Exit.INVALID, result.output
    assert "is not a valid tenants file" in result.stderr
    assert expected in result.stderr


@pytest.mark.parametrize(("make", "expected"), HOSTILE.values(), ids=HOSTILE.keys())
def test_berth_apply_refuses_a_hostile_file_quickly_and_in_little_memory(
    tmp_path: Path, make: Callable[[], bytes], expected: str
) -> None:
    path = tmp_path / "tenants.yaml"
    path.write_bytes(make())
    runner = CliRunner()
    result, seconds, peak = _measured(lambda: runner.invoke(cli, ["apply", "-f", str(path)], env=_env(tmp_path)))
    _assert_refused(result, expected)
    assert seconds < SECONDS
    assert peak < TRACED_BYTES


def test_berth_apply_reads_no_more_of_50_mb_on_stdin_than_it_accepts(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(HOSTILE["50-mb"][0]())

    def apply_from_stdin() -> Result:
        with path.open("rb") as stdin:
            return CliRunner().invoke(cli, ["apply", "-f", "-"], input=stdin, env=_env(tmp_path))

    result, seconds, peak = _measured(apply_from_stdin)
    _assert_refused(result, f"<stdin>:1: larger than {MAX_BYTES} bytes")
    assert seconds < SECONDS
    assert peak < TRACED_BYTES


def _run_berth(tmp_path: Path, stdin_path: Path) -> tuple[int, str, float, int]:
    """`python -m berth_cli apply -f -` as a process: (exit code, stderr, seconds, its peak RSS in kB)."""
    began = time.perf_counter()
    with stdin_path.open("rb") as stdin:
        process = subprocess.Popen(
            [sys.executable, "-m", "berth_cli", "apply", "-f", "-"],
            cwd=ROOT,
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), **_env(tmp_path)},
            stdin=stdin,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert process.stderr is not None
        stderr = process.stderr.read().decode()
        _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, stderr, time.perf_counter() - began, usage.ru_maxrss


def test_the_berth_command_refuses_50_mb_on_stdin_without_growing(tmp_path: Path) -> None:
    empty, big = tmp_path / "empty.yaml", tmp_path / "big.yaml"
    empty.write_bytes(b"")
    big.write_bytes(HOSTILE["50-mb"][0]())
    code, stderr, _, baseline_kb = _run_berth(tmp_path, empty)
    assert (code, "the file is empty" in stderr) == (Exit.INVALID, True), stderr
    code, stderr, seconds, peak_kb = _run_berth(tmp_path, big)
    assert code == Exit.INVALID and f"<stdin>:1: larger than {MAX_BYTES} bytes" in stderr, stderr
    assert seconds < SECONDS
    assert peak_kb - baseline_kb < RSS_GROWTH_KB
