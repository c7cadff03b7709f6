"""What a dev cluster with nodes puts on the host, for the tests that prove a stop leaves none of it behind."""

from __future__ import annotations

from pathlib import Path

from devcluster.images import WORKLOAD_IMAGE

WEB_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "namespace": "default"},
    "spec": {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "web",
                "image": WORKLOAD_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["httpd", "-f", "-p", "8080", "-h", "/www"],
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    },
}


def process_identity(pid: int) -> tuple[int, str] | None:
    """(pid, start time) while the process runs, else None. The pair names one process even when the machine's
    small pid space (32768 here) hands the number to a newcomer; a zombie has ended (this VM's init reaps
    orphans, such as containerd's killed shims, a little later)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return None if fields[0] == "Z" else (pid, fields[19])


def survivors(processes: set[tuple[int, str] | None]) -> list[str]:
    """Which of ``processes`` (from ``process_identity``) still run, described."""
    return [describe(p[0]) for p in processes if p is not None and process_identity(p[0]) == p]


def describe(pid: int) -> str:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return f"{pid} (gone)"
    return f"{pid}: {cmdline}"


def mounts_under(directory: Path) -> list[str]:
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(directory) in line]
