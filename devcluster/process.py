"""Child processes of the dev control plane: started in their own process group,
logged to a file, killed with their parent, stopped without leaving orphans."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A preexec_fn asking the kernel to SIGKILL the child when its parent goes away.

    Caveat (prctl(2)): "parent" is the *thread* that forked, so start components
    from a thread that lives as long as the control plane (normally the main thread).
    """
    # Loaded before fork: dlopen() in a forked child of a threaded parent can deadlock.
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            os._exit(127)
        # The parent may have died between fork() and prctl(); then nobody would kill us.
        if os.getppid() != parent_pid:
            os._exit(127)

    return preexec


class Component:
    """One long-running binary (etcd, kube-apiserver, PostgreSQL, a Celery worker, ...) with its log file.

    ``stop_signal`` is what asks it to stop (PostgreSQL's fast shutdown is SIGINT); no log_path: output discarded.
    """

    def __init__(
        self,
        name: str,
        argv: list[str],
        log_path: Path | None,
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        stop_signal: signal.Signals = signal.SIGTERM,
    ) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.cwd = cwd
        self.env = env
        self.stop_signal = stop_signal
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> None:
        # Truncate: a retried start must not show the previous attempt's errors.
        with open(self.log_path or os.devnull, "wb") as log:
            self._process = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Own session: Ctrl-C in the terminal reaches only the launcher, which
                # then stops components in order, and killpg() reaches any helpers.
                start_new_session=True,
                preexec_fn=_die_with_parent(os.getpid()),
                close_fds=True,
            )

    def exited(self) -> int | None:
        """The exit code if the process has ended, else None."""
        return self._process.poll() if self._process else None

    def stop(self, grace_seconds: float = 5.0) -> None:
        """Send the stop signal to the process group, wait, then SIGKILL whatever is left."""
        process = self._process
        if process is None:
            return
        self._signal_group(process.pid, self.stop_signal)
        try:
            process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            pass
        # Also after a clean exit: a component's own children share its group.
        self._signal_group(process.pid, signal.SIGKILL)
        process.wait()

    @staticmethod
    def _signal_group(pgid: int, sig: signal.Signals) -> None:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None:
            return "(output discarded)"
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log written)"
        return "\n".join(text.splitlines()[-lines:])


def wait_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    watched: list[Component],
    what: str,
    interval: float = 0.2,
) -> None:
    """Poll `check` until it is true; fail fast if a watched component dies meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        for component in watched:
            code = component.exited()
            if code is not None:
                raise ComponentFailed(component, f"{component.name} exited with code {code} while waiting for {what}")
        if check():
            return
        if time.monotonic() > deadline:
            raise ComponentFailed(watched[-1], f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Service:
    """Something started and stopped as a whole (an identity provider): a context manager that stops what a
    failed ``start()`` had already started, and everything on exit."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()


class ComponentFailed(RuntimeError):
    """A component did not come up; the message carries the tail of its log."""

    def __init__(self, component: Component, reason: str) -> None:
        self.component = component
        self.log_text = component.log_tail()
        super().__init__(f"{reason}\n--- last lines of {component.log_path} ---\n{self.log_text}")

    @property
    def port_conflict(self) -> bool:
        return "address already in use" in self.log_text


def celery_worker(
    log_path: Path,
    *,
    cwd: Path,
    env: dict[str, str],
    app: str = "portal",
    pool: str = "prefork",
    concurrency: int = 4,
    node: str | None = None,
    queues: list[str] | None = None,
    heartbeat: bool = False,
    nice: int = 0,
) -> Component:
    """`celery -A <app> worker` as a Component: the one way the demo, the tests and the bench start a worker.

    Gossip and mingle are off (the workers of one deployment need not talk to each other), heartbeats too
    unless asked for; ``queues`` limits what it consumes (default: every queue the app declares); ``nice`` lowers
    its CPU priority (a background worker on a machine it shares with provisioning).
    """
    argv = [sys.executable, "-m", "celery", "-A", app, "worker", f"--pool={pool}", f"--concurrency={concurrency}"]
    if queues:
        argv.append("--queues=" + ",".join(queues))
    argv += ["--without-gossip", "--without-mingle"]
    if not heartbeat:
        argv.append("--without-heartbeat")
    argv += ["-l", "INFO"]
    if node:
        argv += ["-n", node]
    if nice:
        argv = ["nice", "-n", str(nice), *argv]
    return Component("celery worker", argv, log_path, cwd=cwd, env=env)


def berth_watcher(
    log_path: Path, *, cwd: Path, env: dict[str, str], clusters: list[str] | None = None, name: str = "berth watcher"
) -> Component:
    """`manage.py berth_watch` (worker/watcher.py) as a Component: the demo, the tests and the bench start it so."""
    argv = [sys.executable, "manage.py", "berth_watch"]
    for cluster in clusters or []:
        argv += ["--cluster", cluster]
    return Component(name, argv, log_path, cwd=cwd, env=env)


def wait_for_celery_ready(worker: Component, timeout: float = 60.0) -> None:
    """Wait for the worker's "ready." log line (it is consuming); fail fast if it exits."""
    log_path = worker.log_path
    assert log_path is not None, "a Celery worker started without a log file cannot be watched"
    wait_until(lambda: b"ready." in log_path.read_bytes(), timeout=timeout, watched=[worker], what="the celery worker")
