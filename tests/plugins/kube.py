"""pytest plugin: one real dev control plane per test run, and helpers for tests that use it.

Enabled by `pytest_plugins = ["tests.plugins.kube"]` in tests/conftest.py (or `-p tests.plugins.kube`).
Tests that touch the cluster are marked `@pytest.mark.cluster`; a test that uses one of
the fixtures below gets the marker automatically, so `-m "not cluster"` skips the start-up.

If the binaries cannot be built or the control plane cannot start, every cluster test
errors with the reason (and the failing component's log); nothing is skipped silently.
This module must not import Django: it also serves the devcluster tests.
"""

from __future__ import annotations

import functools
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import kubernetes
import pytest
from kubernetes.client import ApiClient, CoreV1Api, V1Namespace, V1ObjectMeta
from kubernetes.client.exceptions import ApiException

from devcluster.images import VCLUSTER_IMAGES
from devcluster.launcher import ControlPlane, find_bin_dir, free_port
from devcluster.prometheus import start_label_proxy

T = TypeVar("T")

CLUSTER_FIXTURES = {"control_plane", "kube_admin", "kubectl", "unique_ns_name", "make_ns_name", "make_namespace"}
# Fixtures of the control plane with real nodes (kubelet + containerd): slower, root only, so a marker of its own.
NODE_FIXTURES = {"node_control_plane", "node_kube_admin", "live_node_cluster", "prometheus_label_proxy"}

KubectlRunner = Callable[..., "subprocess.CompletedProcess[str]"]
_BIN_DIR = pytest.StashKey["Path | Exception"]()
# vcluster's images on the nodes (build.sh vcluster, kine, helm), or why they could not be built; unset when no
# collected test runs a real vcluster.
_VCLUSTER = pytest.StashKey["bool | Exception"]()


def pytest_configure(config: pytest.Config) -> None:
    # Also declared in pyproject.toml; repeated so the plugin works on its own.
    config.addinivalue_line(
        "markers", "cluster: needs the dev control plane (real kube-apiserver, controller-manager, etcd)"
    )
    config.addinivalue_line(
        "markers", "nodes: needs the dev control plane with real nodes (kubelet, containerd, runc; runs as root)"
    )
    config.addinivalue_line("markers", "vcluster: runs real vclusters on the dev nodes (heavy)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if NODE_FIXTURES & fixtures:
            item.add_marker(pytest.mark.nodes)
        if (CLUSTER_FIXTURES | NODE_FIXTURES) & fixtures:
            item.add_marker(pytest.mark.cluster)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build (or find) the binaries before any test runs, outside every test's timeout:
    a cold build takes minutes. A failure is kept and raised by the fixture."""
    if not any(item.get_closest_marker("cluster") for item in session.items):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("devcluster: checking binaries (devcluster/build.sh; a cold build takes ~10 minutes)")
    try:
        session.config.stash[_BIN_DIR] = find_bin_dir()
        if any(item.get_closest_marker("nodes") for item in session.items):
            for target in ("prometheus", "alertmanager", "prom-label-proxy", "metrics-server"):  # its monitoring
                find_bin_dir(target)
    except Exception as error:
        session.config.stash[_BIN_DIR] = error
    if any(item.get_closest_marker("vcluster") for item in session.items):
        try:
            for target in ("vcluster", "kine", "helm"):
                find_bin_dir(target)
            session.config.stash[_VCLUSTER] = True
        except Exception as error:
            session.config.stash[_VCLUSTER] = error


def manifest(body: dict[str, Any]) -> Any:
    """A plain-dict request body for the kubernetes client, which sends dicts as they are.

    (Its annotations name only its model classes, V1Namespace and the like.)
    """
    return body


def wait_for(check: Callable[[], T | None], *, timeout: float = 30.0, what: str, interval: float = 0.25) -> T:
    """Poll until `check()` returns something truthy and return it; fail the test at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def read_or_none(read: Callable[[], T]) -> T | None:
    """The object, or None while it does not exist (404)."""
    try:
        return read()
    except ApiException as error:
        if error.status == 404:
            return None
        raise


@pytest.fixture(scope="session")
def control_plane(pytestconfig: pytest.Config) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver + kube-controller-manager, shared by the whole run."""
    found = pytestconfig.stash.get(_BIN_DIR, None)
    if isinstance(found, Exception):
        raise found
    plane = ControlPlane(name="berth-test", bin_dir=found)
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def node_control_plane(pytestconfig: pytest.Config) -> Iterator[ControlPlane]:
    """A second control plane, with kube-scheduler and two real nodes: shared-1 (berth.dev/pool=shared) and
    dedicated-1 (berth.dev/pool=dedicated), each its own containerd, CNI bridge and /24, and Prometheus scraping
    both; with vcluster's images when a collected test is marked ``vcluster``."""
    found = pytestconfig.stash.get(_BIN_DIR, None)
    if isinstance(found, Exception):
        raise found
    vcluster = pytestconfig.stash.get(_VCLUSTER, False)
    if isinstance(vcluster, Exception):
        raise vcluster
    plane = ControlPlane(
        name="berth-nodes",
        bin_dir=found,
        nodes=2,
        extra_images=VCLUSTER_IMAGES if vcluster else (),
        prometheus=True,
    )
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def prometheus_label_proxy(node_control_plane: ControlPlane) -> Iterator[str]:
    """prom-label-proxy in front of the node cluster's Prometheus, as it runs beside the portal: its address."""
    from tenants.prometheus import HEADER, LABEL

    assert node_control_plane.prometheus is not None
    port = free_port()
    proxy = start_label_proxy(
        find_bin_dir("prom-label-proxy"),
        upstream=node_control_plane.prometheus.url,
        port=port,
        label=LABEL,
        header=HEADER,
        log_path=node_control_plane.prometheus.directory / "prom-label-proxy.log",
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proxy.stop()


@pytest.fixture(scope="session")
def node_kube_admin(node_control_plane: ControlPlane) -> Iterator[ApiClient]:
    """cluster-admin on the control plane with nodes."""
    client = kubernetes.config.new_client_from_config(config_file=str(node_control_plane.kubeconfig_path))
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def kube_admin(control_plane: ControlPlane) -> Iterator[ApiClient]:
    """A kubernetes ApiClient authenticated as cluster-admin (system:masters)."""
    client = kubernetes.config.new_client_from_config(config_file=str(control_plane.kubeconfig_path))
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def kubectl(control_plane: ControlPlane) -> KubectlRunner:
    """Runs the built kubectl: kubectl("get", "ns", kubeconfig=path) -> CompletedProcess (text).

    Defaults to the admin kubeconfig; never raises on a non-zero exit, so tests
    can assert refusals.
    """

    def run(
        *args: str, kubeconfig: Path | str | None = None, input: str | None = None, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        config = str(kubeconfig or control_plane.kubeconfig_path)
        return subprocess.run(
            [str(control_plane.kubectl), f"--kubeconfig={config}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run


@pytest.fixture
def make_ns_name(kube_admin: ApiClient) -> Iterator[Callable[[str], str]]:
    """make_ns_name("team-a") -> "team-a-1f2e3d4c"; every such namespace is deleted after the test.

    Deletion is not awaited: the namespace controller finishes it in the background.
    """
    names: list[str] = []

    def make(prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        names.append(name)
        return name

    yield make
    core = CoreV1Api(kube_admin)
    for name in names:
        read_or_none(functools.partial(core.delete_namespace, name))


@pytest.fixture
def unique_ns_name(make_ns_name: Callable[[str], str]) -> str:
    """One fresh namespace name (not created), deleted after the test if it was."""
    return make_ns_name("t")


@pytest.fixture
def make_namespace(kube_admin: ApiClient, make_ns_name: Callable[[str], str]) -> Callable[..., str]:
    """make_namespace(prefix="t", labels=None) -> name of a created namespace whose
    `default` ServiceAccount exists (admission refuses Pods until it does)."""
    core = CoreV1Api(kube_admin)

    def make(prefix: str = "t", labels: dict[str, str] | None = None) -> str:
        name = make_ns_name(prefix)
        core.create_namespace(V1Namespace(metadata=V1ObjectMeta(name=name, labels=labels or {})))
        wait_for(
            lambda: read_or_none(lambda: core.read_namespaced_service_account("default", name)),
            what=f"ServiceAccount {name}/default",
        )
        return name

    return make
