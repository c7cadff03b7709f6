"""Test stand-ins for virtual-cluster operators: a second real control plane plays the virtual API server.

Nothing in the product depends on this folder. A stand-in does at the operator's interface what the real
operator would do: it sees the installer's output on the host, sets the status the operator would set, and
writes the virtual API server's admin kubeconfig into the Secret the operator would write.

The upstream artifacts are real: the seed systems' CRDs and the vcluster chart, vendored unchanged in
third_party/upstream/, and the real ``helm`` (devcluster/build.sh helm) as the worker's helm.
"""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devcluster.launcher import ControlPlane, ControlPlaneError, helm_binary

ROOT = Path(__file__).resolve().parents[3]
# The upstream artifacts, vendored unchanged (third_party/README.md).
UPSTREAM = ROOT / "third_party" / "upstream"
VCLUSTER_CHART = UPSTREAM / "vcluster-chart-0.30.0"
# The real CRDs of the seed systems, by the name the tests use for them.
UPSTREAM_CRDS = {
    "clusterversion": "capn/tenancy.x-k8s.io_clusterversions.yaml",
    "virtualcluster": "capn/tenancy.x-k8s.io_virtualclusters.yaml",
    "hostedcluster": "hypershift/hostedclusters-Hypershift-Default.crd.yaml",
    "nodepool": "hypershift/nodepools-Default.crd.yaml",
    "workspace": "kcp/tenancy.kcp.io_workspaces.yaml",
    "workspacetype": "kcp/tenancy.kcp.io_workspacetypes.yaml",
    "helmrepository": "flux/source.toolkit.fluxcd.io_helmrepositories.yaml",
    "helmrelease": "flux/helm.toolkit.fluxcd.io_helmreleases.yaml",
    "capi-cluster": "capi/cluster.x-k8s.io_clusters.yaml",
    "vcluster": "capi-vcluster/infrastructure.cluster.x-k8s.io_vclusters.yaml",
}


def pytest_collection_finish(session: pytest.Session) -> None:
    """The real helm is the worker's helm: BERTH_HELM_BINARY names it before any test runs, since the test Celery
    worker takes its environment when it starts (perhaps for a test elsewhere).

    A failed build is left to the ``helm_bin`` fixture, which errors the tests that need it with the reason.
    """
    from django.conf import settings

    if not any("vcluster_chart_repo" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    try:
        helm = str(helm_binary())
    except ControlPlaneError:
        return
    os.environ["BERTH_HELM_BINARY"] = helm
    settings.BERTH_HELM_BINARY = helm


@pytest.fixture(scope="session")
def vcluster_chart_repo(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A ``file://`` chart directory holding the vendored vcluster chart, packaged by the real helm as upstream
    releases it (``vcluster-0.30.0.tgz``): the ``chart_repo`` of the test clusters."""
    from django.conf import settings

    from tests.worker.backends.standin_vcluster import package_chart

    assert settings.BERTH_HELM_BINARY == str(helm_bin), "the worker must run the real helm"
    directory = tmp_path_factory.mktemp("charts")
    package_chart(helm_bin, directory)
    return f"file://{directory}"


@pytest.fixture(scope="session")
def virtual_plane(control_plane) -> Iterator[ControlPlane]:
    """A second dev control plane, the "virtual" API server; it shares the host's CA (as kcp shards share trust)."""
    with ControlPlane(ca=control_plane.ca, name="berth-virtual") as plane:
        yield plane


def admin_kubeconfig_dict(plane: ControlPlane) -> dict:
    return yaml.safe_load(Path(plane.kubeconfig_path).read_text())


def as_object(found: object) -> dict[str, Any]:
    """A custom object as the client returns it (typed ``object``): a dict."""
    assert isinstance(found, dict), found
    return found


def write_kubeconfig_secret(
    api: client.ApiClient,
    *,
    namespace: str,
    name: str,
    key: str,
    kubeconfig: dict[str, Any],
    labels: dict[str, str] | None = None,
) -> None:
    """What the operator does when the control plane is up: its admin kubeconfig in a Secret on the host."""
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, labels=labels),
        data={key: base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()},
    )
    core = client.CoreV1Api(api)
    try:
        core.create_namespaced_secret(namespace, body)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_secret(name, namespace, body)


def install_crds(api: client.ApiClient, *names: str) -> None:
    """The seed systems' real CRDs (``UPSTREAM_CRDS``, from third_party/upstream/crds/), created and waited for,
    so the API server checks every object against the upstream schema."""
    ext = client.ApiextensionsV1Api(api)
    for name in names:
        for doc in yaml.safe_load_all((UPSTREAM / "crds" / UPSTREAM_CRDS[name]).read_text()):
            if not doc:
                continue
            try:
                ext.create_custom_resource_definition(doc)
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
            _wait_established(ext, doc["metadata"]["name"])


def _wait_established(ext: client.ApiextensionsV1Api, name: str) -> None:
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        crd = ext.read_custom_resource_definition(name)
        if any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or [])):
            return
        time.sleep(0.2)
    raise AssertionError(f"CRD {name} not established")


class PollingStandIn:
    """A stand-in operator: ``_run`` polls the host in a background thread from ``with`` entry to exit."""

    api: client.ApiClient

    def _prepare_thread(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.api.close()


def approved_vcluster(*, alice, carol, team, tier, cluster, name: str = "web") -> Any:
    """A vcluster tenant requested by ``alice`` and approved by ``carol`` (unless its tier approves it itself)."""
    from tenants import services
    from tenants.models import TenantRequest

    req = services.request_submit(
        actor=alice,
        action=TenantRequest.Action.CREATE,
        kind="vcluster",
        team=team,
        tier=tier,
        cluster=cluster,
        name=name,
        purpose="needs its own cluster",
    )
    if req.tenant.status == "requested":
        services.request_approve(tenant_request=req, actor=carol, comment="ok")
    return req.tenant
