"""The cluster-wide guards against the real API server: what each admits and refuses, per tier option.

These exercise the CEL of every policy with server-side dry runs in namespaces labelled as Berth's
(admission policies bind every identity, cluster-admin included). The attacks themselves, played with
a tenant's own kubeconfig against a provisioned tenant, are in tests/security/.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.plugins.kube import wait_for
from worker import guards
from worker.kube import Kube, KubeForbidden, KubePermanentError

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def admin(control_plane) -> Kube:
    return Kube.from_kubeconfig_dict(yaml.safe_load(control_plane.kubeconfig_path.read_text()))


@pytest.fixture(scope="module")
def guarded(admin: Kube) -> Kube:
    admin.apply(guards.cluster_guards())
    return admin


@pytest.fixture
def berth_namespace(guarded: Kube, make_ns_name) -> Callable[..., str]:
    """berth_namespace(labels=..., annotations=...) -> a namespace labelled as Berth's, guards in force."""

    def make(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> str:
        name = make_ns_name("g")
        guarded.create(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": name,
                    "labels": {"app.kubernetes.io/managed-by": "berth", **(labels or {})},
                    "annotations": annotations or {},
                },
            }
        )
        # Admission policies take a moment to be in force after they are created.
        wait_for(lambda: _refused(guarded, _token_secret(name)), timeout=30, what="the guards to be enforced")
        return name

    return make


def _refused(k: Kube, obj: dict[str, Any]) -> bool:
    try:
        k.create(obj, dry_run=True)
    except (KubeForbidden, KubePermanentError) as exc:
        if exc.status in (400, 403, 422):
            return True
        raise
    return False


def _service(ns: str, **spec: Any) -> dict[str, Any]:
    body = {"ports": [{"port": 80}], "selector": {"app": "x"}, **spec}
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": ns}, "spec": body}


def _token_secret(ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "t", "namespace": ns, "annotations": {"kubernetes.io/service-account.name": "default"}},
    }


def _ingress(ns: str, *hosts: str, tls: list[str] | None = None, default_backend: bool = False) -> dict[str, Any]:
    backend = {"service": {"name": "s", "port": {"number": 80}}}
    spec: dict[str, Any] = {
        "rules": [
            {"host": h, "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}
            if h
            else {"http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}
            for h in hosts
        ]
    }
    if tls is not None:
        spec["tls"] = [{"hosts": tls}]
    if default_backend:
        spec = {"defaultBackend": backend}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "i", "namespace": ns},
        "spec": spec,
    }


def _pod(ns: str, **spec: Any) -> dict[str, Any]:
    body = {"containers": [{"name": "c", "image": "busybox"}], **spec}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns}, "spec": body}


def _token_volume(name: str, seconds: int) -> dict[str, Any]:
    return {
        "name": name,
        "projected": {"sources": [{"serviceAccountToken": {"path": "t", "expirationSeconds": seconds}}]},
    }


def test_services_with_external_ips_or_external_name_are_refused_unless_the_tier_allows_them(berth_namespace, guarded):
    ns = berth_namespace()
    assert _refused(guarded, _service(ns, externalIPs=["203.0.113.9"]))
    assert _refused(guarded, _service(ns, type="ExternalName", externalName="kubernetes.default.svc"))
    assert not _refused(guarded, _service(ns))
    opened = berth_namespace(labels={"berth.dev/allow-external-ips": "true", "berth.dev/allow-external-name": "true"})
    assert not _refused(guarded, _service(opened, externalIPs=["203.0.113.9"]))
    assert not _refused(guarded, _service(opened, type="ExternalName", externalName="example.com"))


def test_hand_written_endpoints_and_slices_are_refused(berth_namespace, guarded):
    ns = berth_namespace()
    endpoints = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": "s", "namespace": ns},
        "subsets": [{"addresses": [{"ip": "10.96.0.1"}], "ports": [{"port": 443}]}],
    }
    assert _refused(guarded, endpoints)
    opened = berth_namespace(labels={"berth.dev/allow-manual-endpoints": "true"})
    assert not _refused(guarded, {**endpoints, "metadata": {"name": "s", "namespace": opened}})


def test_ingress_hosts_must_lie_under_the_tenants_domains(berth_namespace, guarded):
    ns = berth_namespace(annotations={"berth.dev/ingress-domains": "web.apps.example.test,web.example.org"})
    assert not _refused(
        guarded, _ingress(ns, "web.apps.example.test", "shop.web.example.org", tls=["web.apps.example.test"])
    )
    assert not _refused(guarded, _ingress(ns, "*.web.apps.example.test"))
    for hosts in (("shop.apps.example.test",), ("evil-web.apps.example.test",), ("",), ("*.apps.example.test",)):
        assert _refused(guarded, _ingress(ns, *hosts)), hosts
    assert _refused(guarded, _ingress(ns, "web.apps.example.test", tls=["bank.example.com"]))
    assert _refused(guarded, _ingress(ns, default_backend=True))
    nowhere = berth_namespace()  # a cluster without Ingress domains gives its tenants none
    assert _refused(guarded, _ingress(nowhere, "anything.example.test"))
    anywhere = berth_namespace(labels={"berth.dev/allow-any-ingress-host": "true"})
    assert not _refused(guarded, _ingress(anywhere, "anything.example.test"))


def test_projected_tokens_may_not_outlive_the_tiers_credential_lifetime(berth_namespace, guarded):
    ns = berth_namespace(annotations={"berth.dev/max-token-seconds": "3600"})
    assert _refused(guarded, _pod(ns, volumes=[_token_volume("t", 31536000)]))
    assert _refused(guarded, _pod(ns, volumes=[_token_volume("kube-api-access-x", 86400)]))
    assert not _refused(guarded, _pod(ns, volumes=[_token_volume("t", 3600)]))
    # The token the ServiceAccount admission plugin mounts into every pod is let through.
    assert not _refused(guarded, _pod(ns, volumes=[_token_volume("kube-api-access-abcde", 3607)]))
    assert not _refused(guarded, _pod(ns))


def test_pods_cannot_run_as_berths_own_service_accounts(berth_namespace, guarded):
    ns = berth_namespace()
    for account in ("berth-tenant", "berth-viewer"):
        guarded.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": ns}})
        assert _refused(guarded, _pod(ns, serviceAccountName=account)), account
    guarded.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "app", "namespace": ns}})
    assert not _refused(guarded, _pod(ns, serviceAccountName="app"))


def test_pods_tolerate_only_their_tiers_pool(berth_namespace, guarded):
    dedicated = {"key": "berth.dev/pool", "operator": "Equal", "value": "dedicated", "effect": "NoSchedule"}
    shared = berth_namespace()
    assert _refused(guarded, _pod(shared, tolerations=[dedicated]))
    assert _refused(guarded, _pod(shared, tolerations=[{"operator": "Exists"}]))
    assert _refused(
        guarded, _pod(shared, tolerations=[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}])
    )
    assert not _refused(guarded, _pod(shared))  # the not-ready/unreachable defaults are added and pass
    large = berth_namespace(annotations={"berth.dev/tolerations": "berth.dev/pool=dedicated"})
    assert not _refused(guarded, _pod(large, tolerations=[dedicated]))
    assert _refused(guarded, _pod(large, tolerations=[{**dedicated, "value": "gpu"}]))
    assert _refused(guarded, _pod(large, tolerations=[{"key": "berth.dev/pool", "operator": "Exists"}]))


def test_long_lived_token_secrets_are_refused(berth_namespace, guarded):
    ns = berth_namespace()
    secret = _token_secret(ns)
    assert _refused(guarded, secret)
    assert not _refused(guarded, {**secret, "type": "Opaque", "metadata": {"name": "t", "namespace": ns}})


def test_namespaces_that_are_not_berths_are_left_alone(guarded, make_namespace):
    ns = make_namespace("plain")
    assert not _refused(guarded, _service(ns, externalIPs=["203.0.113.9"]))


_CLASSES = "berth.dev/storage-classes"


def _claim(ns: str, storage_class: str | None, name: str = "c") -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def test_claims_may_use_only_the_tiers_storage_classes(berth_namespace, guarded):
    ns = berth_namespace(annotations={"berth.dev/storage-classes": "fast,standard"})
    assert not _refused(guarded, _claim(ns, "standard"))
    assert not _refused(guarded, _claim(ns, "fast"))
    # Any other class, existing or not (one created after the tenant was provisioned), the class-less "", and no
    # class at all where the cluster has no default class to fill in.
    for other in ("slow", "standard-2", "berth-created-later", "", None):
        assert _refused(guarded, _claim(ns, other)), other
    nothing_listed = berth_namespace()  # fail closed: no annotation allows no class
    assert _refused(guarded, _claim(nothing_listed, "standard"))
    anywhere = berth_namespace(labels={"berth.dev/allow-any-storage-class": "true"})
    assert not _refused(guarded, _claim(anywhere, "slow"))
    assert not _refused(guarded, _claim(anywhere, None))


def test_claims_from_before_a_tier_was_narrowed_stay_changeable_and_deletable(berth_namespace, guarded):
    ns = berth_namespace(labels={"berth.dev/allow-any-storage-class": "true"})
    guarded.create(_claim(ns, "slow", name="old"))
    guarded.create(_claim(ns, None, name="classless"))  # waits for a default class
    narrowed = {"labels": {"berth.dev/allow-any-storage-class": None}, "annotations": {_CLASSES: "standard"}}
    guarded.patch("Namespace", ns, {"metadata": narrowed})
    wait_for(lambda: _refused(guarded, _claim(ns, "slow", name="new")), timeout=30, what="the narrowed tier")
    guarded.patch("PersistentVolumeClaim", "old", {"metadata": {"labels": {"touched": "yes"}}}, namespace=ns)
    guarded.patch("PersistentVolumeClaim", "classless", {"metadata": {"labels": {"touched": "yes"}}}, namespace=ns)
    # The class a class-less claim gets later (the retroactive default) must be an allowed one.
    with pytest.raises(KubePermanentError, match="berth-storage-classes"):
        guarded.patch("PersistentVolumeClaim", "classless", {"spec": {"storageClassName": "slow"}}, namespace=ns)
    guarded.patch("PersistentVolumeClaim", "classless", {"spec": {"storageClassName": "standard"}}, namespace=ns)
    assert guarded.delete("PersistentVolumeClaim", "old", namespace=ns)
