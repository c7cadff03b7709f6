"""A thin runner of the ``helm`` binary (settings.BERTH_HELM_BINARY, found on PATH by default).

Each call writes the host kubeconfig (and the values) to files readable by the worker
alone, in a private temporary directory removed when the call returns; neither is logged.
Failures become ``KubeTransientError`` (the cluster or the chart repository is unreachable
or busy: retry) or ``KubePermanentError`` (helm refused: a person must act), with helm's
own last words.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from worker.kube import KubePermanentError, KubeTransientError

logger = logging.getLogger(__name__)
TIMEOUT_SECONDS = 300.0
# helm's wording when the API server or the chart repository cannot be reached, or another operation holds the release.
_TRANSIENT = (
    "connection refused",
    "connection reset",
    "i/o timeout",
    "tls handshake timeout",
    "context deadline exceeded",
    "no such host",
    "timed out",
    "timeout",
    "service unavailable",
    "the server is currently unable",
    "too many requests",
    "eof",
    "another operation (install/upgrade/rollback) is in progress",
    "internal error",
    "bad gateway",
)


def _write_private(path: Path, text: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return path


def _last_words(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.lower().startswith("error")]
    return ((errors or lines or ["no output"])[-1])[:500]


def run(
    args: list[str],
    *,
    kubeconfig: dict[str, Any] | None,
    values: dict[str, Any] | None = None,
    what: str,
    timeout: float = TIMEOUT_SECONDS,
) -> subprocess.CompletedProcess[str]:
    """``helm <args>`` against the cluster in ``kubeconfig`` (None: helm's in-cluster identity); raises on failure."""
    binary = settings.BERTH_HELM_BINARY
    with tempfile.TemporaryDirectory(prefix="berth-helm-") as tmp:  # mode 0700
        extra: list[str] = []
        if kubeconfig is not None:
            extra += ["--kubeconfig", str(_write_private(Path(tmp) / "kubeconfig", yaml.safe_dump(kubeconfig)))]
        if values is not None:
            extra += ["--values", str(_write_private(Path(tmp) / "values.yaml", json.dumps(values)))]
        env = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
        logger.info("helm %s", what)
        try:
            proc = subprocess.run(
                [binary, *args, *extra], capture_output=True, text=True, timeout=timeout, env=env, check=False
            )
        except FileNotFoundError:
            raise KubePermanentError(
                f"helm {what}: the helm executable {binary!r} was not found; install helm on the worker "
                "or set BERTH_HELM_BINARY."
            ) from None
        except PermissionError:
            raise KubePermanentError(f"helm {what}: {binary!r} is not executable.") from None
        except subprocess.TimeoutExpired:
            raise KubeTransientError(f"helm {what}: no answer within {timeout:.0f}s.") from None
    if proc.returncode != 0:
        words = _last_words(proc.stderr)
        error = KubeTransientError if any(marker in words.lower() for marker in _TRANSIENT) else KubePermanentError
        raise error(f"helm {what}: {words}", status=proc.returncode, reason="helm")
    return proc


def upgrade_install(
    *,
    release: str,
    namespace: str,
    repo: str,
    chart: str,
    version: str,
    values: dict[str, Any],
    kubeconfig: dict[str, Any] | None,
) -> None:
    """Install or upgrade ``release`` from ``repo`` (an https chart repository, an oci:// registry path, or a
    file:// directory holding ``<chart>-<version>.tgz``), pinned to ``version``."""
    if repo.startswith("file://"):
        # A packaged chart carries its version in its name (helm package names it so); helm ignores --version here.
        source = [f"{repo.removeprefix('file://')}/{chart}-{version}.tgz"]
    elif repo.startswith("oci://"):
        source = [f"{repo}/{chart}", "--version", version]
    else:
        source = [chart, "--repo", repo, "--version", version]
    command = ["upgrade", "--install", release, *source, "--namespace", namespace, "--history-max", "5"]
    what = f"upgrade --install {release} in {namespace}"
    try:
        run(command, kubeconfig=kubeconfig, values=values, what=what)
    except KubeTransientError as busy:
        if BUSY not in str(busy).lower():
            raise
        try:
            unlocked = _unlock_stale(release=release, namespace=namespace, kubeconfig=kubeconfig)
        except (KubeTransientError, KubePermanentError):
            raise busy from None  # the release stays as it was; the next pass looks again
        if not unlocked:
            raise
        run(command, kubeconfig=kubeconfig, values=values, what=what)


BUSY = "another operation (install/upgrade/rollback) is in progress"
# helm here never waits for the release's pods (no --wait): an install or upgrade is over in seconds. One still
# pending after this long was cut off (the worker or helm killed mid-way) and would block the release for ever.
STALE_PENDING_SECONDS = 60.0


def _unlock_stale(*, release: str, namespace: str, kubeconfig: dict[str, Any] | None) -> bool:
    """Undo a release's last operation if it was left pending (install, upgrade or rollback cut off): roll back to
    the last deployed revision, or uninstall a release that never was deployed. True when it did; the caller
    holds the tenant's lock, so no operation of Berth's own can be running."""
    listed = run(
        ["history", release, "--namespace", namespace, "--output", "json", "--max", "10"],
        kubeconfig=kubeconfig,
        what=f"history {release} in {namespace}",
    )
    history = json.loads(listed.stdout or "[]")
    if not history or not str(history[-1].get("status", "")).startswith("pending-"):
        return False
    last = history[-1]
    updated = _parse_time(str(last.get("updated", "")))
    if updated is None or (dt.datetime.now(dt.UTC) - updated).total_seconds() < STALE_PENDING_SECONDS:
        return False  # perhaps still running: the next pass looks again
    deployed = [entry["revision"] for entry in history if entry.get("status") in ("deployed", "superseded")]
    logger.warning(
        "helm %s in %s: revision %s was left %s; undoing it", release, namespace, last["revision"], last["status"]
    )
    if deployed:
        run(
            ["rollback", release, str(deployed[-1]), "--namespace", namespace],
            kubeconfig=kubeconfig,
            what=f"rollback {release} in {namespace}",
        )
    else:
        uninstall(release=release, namespace=namespace, kubeconfig=kubeconfig)
    return True


_HELM_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)$")


def _parse_time(text: str) -> dt.datetime | None:
    """helm's timestamps (RFC 3339, nanoseconds, an offset or Z), as an aware datetime; None if unreadable."""
    match = _HELM_TIME.match(text.strip())
    if match is None:
        return None
    return dt.datetime.fromisoformat(match[1] + ("+00:00" if match[2] == "Z" else match[2]))


def uninstall(*, release: str, namespace: str, kubeconfig: dict[str, Any] | None) -> bool:
    """Uninstall ``release``; False when there was no such release."""
    try:
        run(
            ["uninstall", release, "--namespace", namespace],
            kubeconfig=kubeconfig,
            what=f"uninstall {release} in {namespace}",
        )
    except KubePermanentError as exc:
        if "release: not found" in str(exc).lower():
            return False
        raise
    return True
