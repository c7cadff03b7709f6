"""The real vcluster chart (vendored, third_party/upstream/vcluster-chart-0.30.0) rendered by the real helm with
Berth's values for every tier, distro and exposure: its values schema accepts them, and what it renders fits a
host namespace under restricted Pod Security and a quota on requests and limits, with nothing cluster-scoped.

The API server's own verdict on these objects is in test_vcluster_tenants.py (one combination per installer);
this covers the rest of the matrix without a cluster.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.worker.backends.conftest import VCLUSTER_CHART
from tests.worker.backends.test_vcluster_values import _values

pytestmark = pytest.mark.django_db

NAMESPACED = {"ServiceAccount", "Secret", "ConfigMap", "Service", "StatefulSet", "Deployment", "Role", "RoleBinding"}
NAMESPACED |= {"ResourceQuota", "LimitRange", "Ingress", "NetworkPolicy", "PersistentVolumeClaim"}


def _render(helm: Path, values: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    done = subprocess.run(
        [str(helm), "template", "web", str(VCLUSTER_CHART), "--namespace", "dev-web", "--values", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.mark.parametrize(
    ("tier_name", "expose"),
    [("small", "ClusterIP"), ("small", "ingress"), ("medium", "LoadBalancer"), ("large", "LoadBalancer")],
)
@pytest.mark.parametrize("distro", ["k8s", "k3s"])
def test_the_chart_renders_berths_values_into_a_restricted_quota_bound_namespace(
    helm_bin, tmp_path, tier_name, expose, distro
):
    values, tier = _values(tier_name, expose=expose, distro=distro, ingress_class="nginx")
    objs = _render(helm_bin, values, tmp_path)
    kinds = {o["kind"] for o in objs}
    assert kinds <= NAMESPACED, kinds - NAMESPACED  # no ClusterRole, ClusterRoleBinding or other cluster object
    assert all(o["metadata"]["namespace"] == "dev-web" for o in objs)
    (sts,) = [o for o in objs if o["kind"] == "StatefulSet"]
    pod = sts["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        resources, security = container.get("resources") or {}, container.get("securityContext") or {}
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources.get(kind) or {}), (container["name"], kind)
        assert security.get("allowPrivilegeEscalation") is False, container["name"]
        assert security.get("capabilities") == {"drop": ["ALL"]}, container["name"]
    services = [o for o in objs if o["kind"] == "Service"]
    assert not any(p.get("nodePort") for s in services for p in s["spec"]["ports"])
    (service,) = [s for s in services if s["metadata"]["name"] == "web"]
    assert service["spec"]["type"] == ("ClusterIP" if expose == "ingress" else expose)
    # The chart's own quota and LimitRange are exactly the tier's: none of the chart's other defaults remain.
    (quota,) = [o for o in objs if o["kind"] == "ResourceQuota"]
    wanted = {k: v for k, v in values["policies"]["resourceQuota"]["quota"].items() if v is not None}
    assert quota["spec"]["hard"] == wanted and quota["spec"]["hard"]["limits.cpu"] == f"{tier.cpu_limit_millis}m"
    ((limits,),) = [o["spec"]["limits"] for o in objs if o["kind"] == "LimitRange"]
    assert set(limits["default"]) == set(limits["defaultRequest"]) == {"cpu", "memory"}
    assert ("Ingress" in kinds) is (expose == "ingress")
