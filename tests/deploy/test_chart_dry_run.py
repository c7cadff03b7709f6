"""Every object the chart renders, for every documented values combination, accepted by the dev API server.

A server-side dry run (admission and validation run, nothing is stored) in a namespace that enforces the
restricted Pod Security level, with prometheus-operator's CRDs installed for the monitoring objects. The API
server also compiles the confinement policy's CEL here.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import pytest
import yaml
from kubernetes import client

from tests.deploy.chart import VALUES_FILES, render, rendered_text
from tests.plugins.kube import read_or_none, wait_for

pytestmark = pytest.mark.cluster

RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/warn": "restricted",
}


@pytest.fixture(scope="module")
def monitoring_crds(monitoring_crd_files, kube_admin, kubectl) -> Iterator[list[str]]:
    """PrometheusRule and ServiceMonitor, installed for the module and removed after it."""
    names = []
    for path in monitoring_crd_files:
        done = kubectl("apply", "--server-side", "-f", str(path))
        assert done.returncode == 0, done.stderr
        names.append(yaml.safe_load(path.read_text())["metadata"]["name"])
    extensions = client.ApiextensionsV1Api(kube_admin)

    def established(name: str) -> bool:
        status = extensions.read_custom_resource_definition(name).status
        return any(c.type == "Established" and c.status == "True" for c in (status and status.conditions) or [])

    for name in names:
        wait_for(partial(established, name), what=f"CRD {name} to be established")
    yield names
    for name in names:
        read_or_none(partial(extensions.delete_custom_resource_definition, name))


@pytest.mark.parametrize("values", VALUES_FILES, ids=[p.stem for p in VALUES_FILES])
def test_every_rendered_object_passes_a_server_side_dry_run(
    helm_bin, monitoring_crds, make_namespace, kubectl, values, tmp_path
):
    namespace = make_namespace("berth", labels=RESTRICTED)
    objs = render(helm_bin, values, namespace=namespace)
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(rendered_text(helm_bin, values, namespace=namespace))
    done = kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=helm", "-f", str(manifest))
    assert done.returncode == 0, done.stderr
    accepted = [line for line in done.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(accepted) == len(objs), done.stdout
    assert "would violate PodSecurity" not in done.stderr, done.stderr
    assert "Warning" not in done.stderr, done.stderr
