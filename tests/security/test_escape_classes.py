"""Known tenant escapes, played with the tenant's own kubeconfig: each is refused and leaves nothing behind.

Every manifest here is otherwise admissible (restricted Pod Security, within quota), so it is the guard
under test that refuses it; test_guard_removal.py shows the isolation report notices when one is gone.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.plugins.kube import read_or_none

from .conftest import Attacker, refused

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker]

RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def pod(name: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "busybox", "securityContext": RESTRICTED}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [container], **spec}}


def service(name: str, **spec: Any) -> dict[str, Any]:
    body = {"selector": {"app": "x"}, "ports": [{"port": 80}], **spec}
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": body}


def ingress(name: str, host: str | None) -> dict[str, Any]:
    backend = {"service": {"name": "web", "port": {"number": 80}}}
    rule: dict[str, Any] = {"http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}
    if host is not None:
        rule["host"] = host
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name},
        "spec": {"rules": [rule]},
    }


def test_a_service_with_external_ips_cannot_intercept_traffic_cve_2020_8554(attacker: Attacker, kube_admin):
    result = attacker.apply(service("mitm", externalIPs=["203.0.113.10"]))
    assert refused(result), result.stderr
    assert "CVE-2020-8554" in result.stderr
    core = client.CoreV1Api(kube_admin)
    assert read_or_none(lambda: core.read_namespaced_service("mitm", attacker.tenant.namespace)) is None


def test_an_external_name_service_cannot_point_at_the_api_server_cve_2021_25740(attacker: Attacker, kube_admin):
    result = attacker.apply(service("api", type="ExternalName", externalName="kubernetes.default.svc.cluster.local"))
    assert refused(result), result.stderr
    core = client.CoreV1Api(kube_admin)
    assert read_or_none(lambda: core.read_namespaced_service("api", attacker.tenant.namespace)) is None


def test_hand_written_endpoints_and_slices_cannot_send_traffic_elsewhere_cve_2021_25740(
    attacker: Attacker, victim, kube_admin
):
    endpoints = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": "web"},
        "subsets": [{"addresses": [{"ip": "10.96.0.1"}], "ports": [{"port": 443}]}],
    }
    endpoint_slice = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "web", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.96.0.1"]}],
        "ports": [{"port": 443, "protocol": "TCP"}],
    }
    for obj in (endpoints, endpoint_slice):
        result = attacker.apply(obj)
        assert refused(result), (obj["kind"], result.stderr)
    assert attacker.kubectl("auth", "can-i", "create", "endpoints").stdout.strip() == "no"
    core = client.CoreV1Api(kube_admin)
    assert read_or_none(lambda: core.read_namespaced_endpoints("web", attacker.tenant.namespace)) is None


def test_an_ingress_cannot_claim_another_teams_host_or_every_host(attacker: Attacker, victim, kube_admin):
    theirs = f"{victim.namespace}.apps.berth.test"
    for name, host in (("steal", theirs), ("sub", f"login.{theirs}"), ("anything", "bank.example.com"), ("all", None)):
        result = attacker.apply(ingress(name, host))
        assert refused(result), (host, result.stderr)
    mine = attacker.apply(ingress("mine", f"www.{attacker.tenant.namespace}.apps.berth.test"))
    assert mine.returncode == 0, mine.stderr
    net = client.NetworkingV1Api(kube_admin)
    names = {i.metadata.name for i in net.list_namespaced_ingress(attacker.tenant.namespace).items}
    assert names == {"mine"}


def test_a_pod_cannot_mint_itself_a_year_long_token(attacker: Attacker, kube_admin):
    source = {"serviceAccountToken": {"path": "token", "expirationSeconds": 31536000}}
    result = attacker.apply(pod("exfil", volumes=[{"name": "t", "projected": {"sources": [source]}}]))
    assert refused(result), result.stderr
    core = client.CoreV1Api(kube_admin)
    assert read_or_none(lambda: core.read_namespaced_pod("exfil", attacker.tenant.namespace)) is None


def test_a_pod_cannot_run_as_berths_tenant_service_account(attacker: Attacker, kube_admin):
    result = attacker.apply(pod("borrow", serviceAccountName="berth-tenant"))
    assert refused(result), result.stderr
    core = client.CoreV1Api(kube_admin)
    assert read_or_none(lambda: core.read_namespaced_pod("borrow", attacker.tenant.namespace)) is None


def test_a_medium_tier_pod_cannot_tolerate_the_dedicated_pool(attacker: Attacker, kube_admin):
    dedicated = {"key": "berth.dev/pool", "operator": "Equal", "value": "dedicated", "effect": "NoSchedule"}
    for toleration in (dedicated, {"operator": "Exists"}):
        result = attacker.apply(pod("squat", tolerations=[toleration]))
        assert refused(result), (toleration, result.stderr)
    core = client.CoreV1Api(kube_admin)
    assert read_or_none(lambda: core.read_namespaced_pod("squat", attacker.tenant.namespace)) is None


def test_a_long_lived_token_secret_is_refused(attacker: Attacker):
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "forever", "annotations": {"kubernetes.io/service-account.name": "berth-tenant"}},
    }
    assert refused(attacker.apply(secret))


def test_the_attackers_ordinary_work_still_goes_through(attacker: Attacker):
    """The guards refuse escapes, not work: a plain Service and a restricted pod are admitted."""
    assert attacker.apply(service("web")).returncode == 0
    made = attacker.apply(pod("worker"))
    assert made.returncode == 0, made.stderr
