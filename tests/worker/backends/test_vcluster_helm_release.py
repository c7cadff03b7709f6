"""A vcluster release left pending (the worker or helm killed mid-install or mid-upgrade) does not block it for ever.

The real helm and the vendored chart against the dev control plane: the release's last revision is made to look
as a killed helm leaves it (status pending-*, from more than a minute ago, as helm records it in its storage
Secret), and ``worker.helm.upgrade_install`` must undo it and install.
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.worker.backends.standin_vcluster import CHART_VERSION, release_secrets
from worker import helm
from worker.kube import KubeTransientError

pytestmark = [pytest.mark.cluster]

VALUES = {"controlPlane": {"statefulSet": {"resources": {"requests": {"cpu": "10m"}}}}, "telemetry": {"enabled": False}}


def _install(namespace: str, repo: str, kubeconfig: dict[str, Any]) -> None:
    helm.upgrade_install(
        release="web",
        namespace=namespace,
        repo=repo,
        chart="vcluster",
        version=CHART_VERSION,
        values=VALUES,
        kubeconfig=kubeconfig,
    )


def _cut_off(api: client.ApiClient, namespace: str, status: str, *, ago: dt.timedelta) -> None:
    """Make the release's newest revision what a killed helm leaves: ``status`` (pending-install, -upgrade)."""
    core = client.CoreV1Api(api)
    newest = max(
        release_secrets(api, release="web", namespace=namespace), key=lambda s: int(s.metadata.labels["version"])
    )
    release = json.loads(gzip.decompress(base64.b64decode(base64.b64decode(newest.data["release"]))))
    release["info"]["status"] = status
    release["info"]["last_deployed"] = (dt.datetime.now(dt.UTC) - ago).isoformat().replace("+00:00", "Z")
    stored = base64.b64encode(gzip.compress(json.dumps(release).encode())).decode()
    core.patch_namespaced_secret(
        newest.metadata.name,
        namespace,
        {"metadata": {"labels": {"status": status}}, "data": {"release": base64.b64encode(stored.encode()).decode()}},
    )


def _newest_status(api: client.ApiClient, namespace: str) -> str:
    revisions = release_secrets(api, release="web", namespace=namespace)
    return str(max(revisions, key=lambda s: int(s.metadata.labels["version"])).metadata.labels["status"])


def test_a_release_left_pending_is_undone_and_installed_again(
    control_plane, kube_admin, make_namespace, helm_bin, vcluster_chart_repo
):
    namespace = make_namespace("helm")
    kubeconfig = yaml.safe_load(Path(control_plane.kubeconfig_path).read_text())
    _install(namespace, vcluster_chart_repo, kubeconfig)
    _install(namespace, vcluster_chart_repo, kubeconfig)  # revision 2

    # An upgrade cut off a moment ago may still be running: left alone, and said to be busy.
    _cut_off(kube_admin, namespace, "pending-upgrade", ago=dt.timedelta(seconds=5))
    with pytest.raises(KubeTransientError, match="another operation"):
        _install(namespace, vcluster_chart_repo, kubeconfig)

    # One cut off minutes ago is rolled back to the last deployed revision, then upgraded.
    _cut_off(kube_admin, namespace, "pending-upgrade", ago=dt.timedelta(minutes=5))
    _install(namespace, vcluster_chart_repo, kubeconfig)
    assert _newest_status(kube_admin, namespace) == "deployed"
    _install(namespace, vcluster_chart_repo, kubeconfig)  # and nothing blocks the next one

    # A first install cut off (nothing ever deployed) is uninstalled, then installed anew.
    for secret in release_secrets(kube_admin, release="web", namespace=namespace):
        client.CoreV1Api(kube_admin).delete_namespaced_secret(secret.metadata.name, namespace)
    _install(namespace, vcluster_chart_repo, kubeconfig)
    _cut_off(kube_admin, namespace, "pending-install", ago=dt.timedelta(minutes=5))
    _install(namespace, vcluster_chart_repo, kubeconfig)
    revisions = release_secrets(kube_admin, release="web", namespace=namespace)
    assert [s.metadata.labels["status"] for s in revisions] == ["deployed"]
