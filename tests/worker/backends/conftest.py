"""Test stand-ins for virtual-cluster operators: a second real control plane plays the virtual API server.

Nothing in the product depends on this folder. A stand-in does at the operator's interface what the real
operator would do: it sees the installer's output on the host, sets the status the operator would set, and
writes the virtual API server's admin kubeconfig into the Secret the operator would write.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from devcluster.launcher import ControlPlane

CRDS = Path(__file__).parent / "crds"


def pytest_configure(config: pytest.Config) -> None:
    """The fake helm goes first on PATH before any test runs: the test Celery worker inherits PATH when it starts."""
    from tests.worker.backends.standin_vcluster import put_fake_helm_first_on_path

    put_fake_helm_first_on_path()


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
    api: client.ApiClient, *, namespace: str, name: str, key: str, kubeconfig: dict[str, Any]
) -> None:
    """What the operator does when the control plane is up: its admin kubeconfig in a Secret on the host."""
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace),
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
    """Minimal CRDs written for the tests (tests/worker/backends/crds/<name>.yaml), applied server-side and waited
    for."""
    ext = client.ApiextensionsV1Api(api)
    for name in names:
        for doc in yaml.safe_load_all((CRDS / f"{name}.yaml").read_text()):
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
