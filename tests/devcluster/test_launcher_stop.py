"""`python -m devcluster.launcher --nodes 1` (what `make cluster` runs) with a pod running, stopped each way a
launcher gets stopped, leaves nothing of its run on the host: no process, mount, network namespace, link, route,
cgroup, log link or data directory.

The ways: Ctrl-C (SIGINT to the launcher), SIGTERM to the launcher, and SIGTERM to its whole process group, as
`timeout`, make, CI runners and supervisors send it. The group's case runs the launcher under `timeout`, which,
on a SIGTERM, sends it again to the launcher and to the group: the launcher gets it three times within
milliseconds (make, under `make cluster`, forwards one to its child too), and the test repeats it until the
launcher has stopped. Before the launcher ignored every signal after the first, a second one often landed in the
middle of its stop and abandoned it, leaving the shims with their pods, the mounts, the node's namespace, the
bridge and the cgroups behind.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from devcluster.launcher import find_bin_dir
from devcluster.network import NodeLink
from devcluster.nodes import CGROUP_ROOT, CONTAINER_LOG_LINKS, Node, NodeSpec
from tests.devcluster.host_traces import WEB_POD, describe, mounts_under, process_identity, survivors
from tests.plugins.kube import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.nodes]

ROOT = Path(__file__).resolve().parents[2]
READY_SECONDS = 300.0  # a start takes about half a minute; more while other runs share the machine
STOP_SECONDS = 90.0


@dataclass
class LauncherRun:
    """A launcher started in a session of its own (``process`` is it, or the ``timeout`` running it)."""

    process: subprocess.Popen[bytes]
    stderr: Path
    data_dir: Path | None = None
    kubeconfig: Path | None = None
    third: int | None = None  # K of its node network 10.243.K.0/24, which names its namespaces and links


def _start(tmp_path: Path, wrapper: list[str]) -> LauncherRun:
    stdout_path, stderr_path = tmp_path / "launcher.out", tmp_path / "launcher.err"
    with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [*wrapper, sys.executable, "-m", "devcluster.launcher", "--nodes", "1"],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
    return LauncherRun(process=process, stderr=stderr_path)


def _wait_until_ready(run: LauncherRun, stdout_path: Path) -> None:
    def printed() -> dict[str, str] | None:
        if run.process.poll() is not None:
            pytest.fail(f"the launcher exited with {run.process.returncode}:\n{run.stderr.read_text()[-3000:]}")
        text = stdout_path.read_text()
        if "export KUBECONFIG=" not in text:
            return None
        return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)

    fields = wait_for(printed, timeout=READY_SECONDS, what="the launcher to be ready", interval=0.5)
    run.data_dir, run.kubeconfig = Path(fields["data dir"].strip()), Path(fields["kubeconfig"].strip())
    api_host = fields["API server"].strip().removeprefix("https://").rsplit(":", 1)[0]
    run.third = ipaddress.IPv4Address(api_host).packed[2]


def _kubectl(run: LauncherRun, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(find_bin_dir() / "kubectl"), f"--kubeconfig={run.kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _run_pod(run: LauncherRun) -> None:
    created = _kubectl(run, "apply", "-f", "-", input=json.dumps(WEB_POD))
    assert created.returncode == 0, created.stderr

    def running() -> bool:
        got = _kubectl(run, "get", "pod", "web", "-o", "json")
        return got.returncode == 0 and json.loads(got.stdout)["status"].get("phase") == "Running"

    wait_for(running, timeout=90, what="the pod to run", interval=0.5)


# -- what a run puts on the host ------------------------------------------------------------------------------


def _parents() -> dict[int, int]:
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
    return parents


def _descendants(pid: int) -> set[int]:
    parents = _parents()
    found, frontier = {pid}, {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _naming(directory: Path) -> set[int]:
    """Processes whose command line names ``directory``: the control plane, the kubelet, containerd, its shims,
    kube-proxy."""
    needle = str(directory).encode()
    pids = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if needle in cmdline.read_bytes():
                pids.add(int(cmdline.parent.name))
        except OSError:
            continue
    return pids


def _cgroups(third: int) -> list[Path]:
    """The nodes' cgroup roots (``/berth-<node>-<netns>``, the netns ``berth<K>-<node>``) in every hierarchy."""
    pattern = f"berth-*-berth{third}-*"
    return sorted([*CGROUP_ROOT.glob(pattern), *CGROUP_ROOT.glob(f"*/{pattern}")])


def _cgroup_pids(third: int) -> set[int]:
    """The pods' processes (pause, httpd, the add-ons) and the shims, by the cgroups they run in."""
    pids: set[int] = set()
    for root in _cgroups(third):
        for procs in root.rglob("cgroup.procs"):
            try:
                pids.update(int(pid) for pid in procs.read_text().split())
            except OSError:
                continue
    return pids


def _lines(*command: str) -> list[str]:
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()


def _network(third: int) -> dict[str, list[str]]:
    names = [line.split()[0] for line in _lines("ip", "netns", "list") if line]
    links = [line.split()[0].split("@")[0] for line in _lines("ip", "-br", "link") if line]
    return {
        "network namespaces": [name for name in names if name.startswith(f"berth{third}-")],
        "links": [name for name in links if name == f"berthc{third}" or name.startswith(f"bv{third}n")],
        "routes": [r for r in _lines("ip", "-4", "route", "show", "table", "all") if f"10.243.{third}." in r],
    }


def _log_links(data_dir: Path) -> list[str]:
    if not CONTAINER_LOG_LINKS.is_dir():
        return []
    return [
        str(link)
        for link in CONTAINER_LOG_LINKS.iterdir()
        if link.is_symlink() and os.readlink(link).startswith(f"{data_dir}/")
    ]


def _run_processes(run: LauncherRun) -> set[tuple[int, str] | None]:
    assert run.data_dir is not None and run.third is not None
    pids = _descendants(run.process.pid) | _naming(run.data_dir) | _cgroup_pids(run.third)
    return {process_identity(pid) for pid in pids}


def _leftovers(run: LauncherRun, processes: set[tuple[int, str] | None]) -> dict[str, list[str]]:
    assert run.data_dir is not None and run.third is not None
    found = {
        "processes": sorted(set(survivors(processes)) | {describe(pid) for pid in _naming(run.data_dir)}),
        "mounts": mounts_under(run.data_dir) + mounts_under(Path(f"/run/netns/berth{run.third}-")),
        **_network(run.third),
        "cgroups": [str(path) for path in _cgroups(run.third)],
        "log links": _log_links(run.data_dir),
        "data dir": [str(run.data_dir)] if run.data_dir.exists() else [],
    }
    return {what: items for what, items in found.items() if items}


def _identities(third: int) -> dict[str, int]:
    """The run's bridge (its ifindex) and node namespaces (their inodes): names alone are not proof, since once
    they are gone another run on this machine may pick the same node network and names."""
    found = {}
    bridge = Path(f"/sys/class/net/berthc{third}/ifindex")
    if bridge.exists():
        found[bridge.parent.name] = int(bridge.read_text())
    for name in _network(third)["network namespaces"]:
        found[name] = os.stat(f"/run/netns/{name}").st_ino
    return found


def _clean_up(run: LauncherRun, ours: dict[str, int]) -> None:
    """Stop the launcher if it still runs, then remove whatever a failed stop left behind, so a failing test does
    not litter a machine shared with other runs; names another run may have taken since (the node network's) only
    while ``ours`` (``_identities``) shows they are still this run's."""
    if run.process.poll() is None:
        os.kill(run.process.pid, signal.SIGTERM)
        try:
            run.process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(run.process.pid, signal.SIGKILL)
            run.process.wait()
    if run.data_dir is None or run.third is None:
        return
    now = _identities(run.third)
    still_ours = {name for name, identity in ours.items() if now.get(name) == identity}
    # While the bridge is there no other run can hold this node network, nor the cgroup names made from it.
    network_is_ours = f"berthc{run.third}" in still_ours
    nodes = run.data_dir / "nodes"
    for directory in sorted(nodes.iterdir()) if nodes.is_dir() else []:
        link = NodeLink(
            name=directory.name,
            netns=f"berth{run.third}-{directory.name}",
            ip="",
            pod_subnet=ipaddress.IPv4Network("10.244.0.0/24"),
        )
        node = Node(
            spec=NodeSpec(name=directory.name),
            name=directory.name,
            directory=directory,
            link=link,
            bin_dir=Path(),
            ca_file=Path(),
            cluster_dns="",
        )
        if network_is_ours:
            node.stop()  # the pods (by cgroup), the shims, the mounts, the cgroups, the log links
        else:  # what its data directory names only
            _kill_shims(node)
    for name in sorted(still_ours):
        command = ["ip", "link", "delete", name] if name.startswith("berthc") else ["ip", "netns", "delete", name]
        subprocess.run(command, capture_output=True)
    shutil.rmtree(run.data_dir, ignore_errors=True)


def _kill_shims(node: Node) -> None:
    for pid in node._shim_pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    time.sleep(0.5)
    node._unmount_all()
    node._remove_log_links()


# -- the three ways -----------------------------------------------------------------------------------------------


def _to_launcher(sig: signal.Signals) -> Callable[[subprocess.Popen[bytes]], None]:
    return lambda process: os.kill(process.pid, sig)


def _to_group_again_and_again(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the group, then again every 0.2 s until it has stopped, as an impatient supervisor (or a user
    pressing Ctrl-C again) would: later signals land in the middle of the stop, on the launcher and on the
    `umount` and `ip` it runs in its group."""
    deadline = time.monotonic() + STOP_SECONDS
    while process.poll() is None and time.monotonic() < deadline:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        time.sleep(0.2)


@pytest.mark.parametrize(
    ("wrapper", "stop"),
    [
        pytest.param([], _to_launcher(signal.SIGINT), id="sigint-to-launcher"),
        pytest.param([], _to_launcher(signal.SIGTERM), id="sigterm-to-launcher"),
        pytest.param(["timeout", "1h"], _to_group_again_and_again, id="sigterm-to-group-under-timeout"),
    ],
)
def test_stopping_the_launcher_with_a_pod_running_leaves_nothing_of_its_run(
    tmp_path: Path, wrapper: list[str], stop: Callable[[subprocess.Popen[bytes]], None]
) -> None:
    run = _start(tmp_path, wrapper)
    ours: dict[str, int] = {}
    try:
        _wait_until_ready(run, tmp_path / "launcher.out")
        assert run.data_dir is not None and run.third is not None
        _run_pod(run)
        processes = _run_processes(run)
        ours = _identities(run.third)
        # The run has a pod's mounts, a node's namespace, its links and cgroups to leave behind.
        assert mounts_under(run.data_dir) and _cgroups(run.third)
        assert all(_network(run.third).values())
        stop(run.process)
        returncode = run.process.wait(timeout=STOP_SECONDS)
        leftovers = _leftovers(run, processes)
    finally:
        _clean_up(run, ours)
    stderr = run.stderr.read_text()
    assert leftovers == {}, f"{json.dumps(leftovers, indent=2)}\n--- the launcher's stderr ---\n{stderr[-3000:]}"
    assert returncode == 0 and "devcluster: stopped" in stderr, stderr[-3000:]
