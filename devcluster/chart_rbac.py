"""The Helm chart's RBAC on a dev control plane, and credentials of Berth's identities under it.

    release = chart_rbac.Release("berth-lp1", "berth-lp-1")
    chart_rbac.install(helm_binary(), cp, release)        # helm install, RBAC only (ci/rbac-only-values.yaml)
    paths = chart_rbac.kubeconfigs(cp, release, where)   # {"worker": ..., "web": ..., "watcher": ...}
    env = chart_rbac.process_env(release, CREDENTIAL_VARIABLE, paths["worker"])

One place knows what the chart gives Berth: its ServiceAccounts (named after the release), the namespace grants the
worker writes into each tenant namespace (BERTH_NAMESPACE_GRANTS, as the chart's ``berth.namespaceGrants`` renders
them), and a kubeconfig per identity holding nothing but a token of its ServiceAccount. Used by
tests/security/test_worker_least_privilege.py and bench/fleet.py. Must not import Django.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Protocol

CHART = Path(__file__).resolve().parents[1] / "deploy" / "helm" / "berth"
RBAC_ONLY_VALUES = CHART / "ci" / "rbac-only-values.yaml"
ROLES = ("worker", "web", "watcher")


class ControlPlaneLike(Protocol):
    """What this module needs of devcluster.launcher.ControlPlane."""

    @property
    def kubeconfig_path(self) -> Path: ...

    @property
    def kubectl(self) -> Path: ...

    def write_kubeconfig(self, path: Path, *, user: str, token: str | None = None) -> Path: ...


class Release:
    """The chart's RBAC, installed (or to be installed) with helm; the names it gives Berth's identities."""

    def __init__(self, name: str, namespace: str) -> None:
        self.name, self.namespace = name, namespace
        self.worker_sa, self.web_sa, self.watcher_sa = f"{name}-worker", f"{name}-web", f"{name}-watcher"
        self.worker_user = self.user("worker")
        # As the chart's berth.namespaceGrants renders BERTH_NAMESPACE_GRANTS: the worker's first.
        self.grants = (
            f"{name}-worker-namespace={namespace}/{self.worker_sa},{name}-web-namespace={namespace}/{self.web_sa}"
        )

    def service_account(self, role: str) -> str:
        """The ServiceAccount of ``role`` (worker, web or watcher)."""
        return {"worker": self.worker_sa, "web": self.web_sa, "watcher": self.watcher_sa}[role]

    def user(self, role: str) -> str:
        """The user name the API server knows ``role`` by (audit logs, RBAC subjects)."""
        return f"system:serviceaccount:{self.namespace}:{self.service_account(role)}"

    def users(self) -> dict[str, str]:
        """User name → role, for every identity."""
        return {self.user(role): role for role in ROLES}


def helm(helm_bin: Path, control_plane: ControlPlaneLike, *args: str) -> subprocess.CompletedProcess[str]:
    """``helm`` as the control plane's admin."""
    return subprocess.run(
        [str(helm_bin), "--kubeconfig", str(control_plane.kubeconfig_path), *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def install(helm_bin: Path, control_plane: ControlPlaneLike, release: Release) -> subprocess.CompletedProcess[str]:
    """``helm install`` of the chart with its RBAC-only values (ServiceAccounts, RBAC and the confinement policy),
    waiting for it; the completed process (the caller checks its return code)."""
    return helm(
        helm_bin,
        control_plane,
        "install",
        release.name,
        str(CHART),
        "--namespace",
        release.namespace,
        "--create-namespace",
        "--values",
        str(RBAC_ONLY_VALUES),
        "--wait",
    )


def uninstall(helm_bin: Path, control_plane: ControlPlaneLike, release: Release) -> subprocess.CompletedProcess[str]:
    return helm(helm_bin, control_plane, "uninstall", release.name, "--namespace", release.namespace, "--wait")


def token(control_plane: ControlPlaneLike, release: Release, role: str, seconds: int = 3600) -> str:
    """A token of ``role``'s ServiceAccount (a TokenRequest, as the admin; the dev control plane caps its life at
    a day)."""
    done = subprocess.run(
        [
            str(control_plane.kubectl),
            "--kubeconfig",
            str(control_plane.kubeconfig_path),
            "create",
            "token",
            release.service_account(role),
            "--namespace",
            release.namespace,
            f"--duration={seconds}s",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl create token {release.service_account(role)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def kubeconfigs(control_plane: ControlPlaneLike, release: Release, where: Path, seconds: int = 3600) -> dict[str, Path]:
    """A kubeconfig per identity (worker, web, watcher) in ``where``, each with nothing but its ServiceAccount's
    token."""
    return {
        role: control_plane.write_kubeconfig(
            where / f"{role}.kubeconfig",
            user=release.service_account(role),
            token=token(control_plane, release, role, seconds),
        )
        for role in ROLES
    }


def process_env(
    release: Release, credential_variable: str, kubeconfig: Path, *, watcher: bool | None = None
) -> dict[str, str]:
    """What the chart gives a worker or watcher process that bears on the cluster: the namespace grants, and, in
    ``credential_variable`` (a Cluster whose credential_ref is ``env:<credential_variable>``), the identity's
    kubeconfig; with ``watcher`` given, BERTH_WATCHER as the chart sets it from watcher.enabled."""
    env = {"BERTH_NAMESPACE_GRANTS": release.grants, credential_variable: Path(kubeconfig).read_text()}
    if watcher is not None:
        env["BERTH_WATCHER"] = "true" if watcher else "false"
    return env
