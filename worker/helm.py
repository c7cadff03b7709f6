"""A thin runner of the ``helm`` binary (settings.BERTH_HELM_BINARY, found on PATH by default).

Each call writes the host kubeconfig (and the values) to files readable by the worker
alone, in a private temporary directory removed when the call returns; neither is logged.
Failures become ``KubeTransientError`` (the cluster or the chart repository is unreachable
or busy: retry) or ``KubePermanentError`` (helm refused: a person must act), with helm's
own last words.
"""

from __future__ import annotations

import json
import logging
import os
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
    run(
        [
            "upgrade",
            "--install",
            release,
            *source,
            "--namespace",
            namespace,
            "--history-max",
            "5",
        ],
        kubeconfig=kubeconfig,
        values=values,
        what=f"upgrade --install {release} in {namespace}",
    )


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
