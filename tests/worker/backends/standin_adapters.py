"""TEST STAND-INS for the VirtualCluster (vc-manager), HyperShift and kcp operators, plus the tests' shared helpers.

Nothing in the product imports this module. Each stand-in does, at the operator's
interface, what the real operator does: a background thread polls the host (a
reconcile loop, with the admin client) for its custom resources, adds its own
finalizer, uses the second real dev control plane (``virtual_plane``) as the
tenant's API server, sets the status the operator would set and writes that API
server's admin kubeconfig into the Secret the operator would write. On deletion
it cleans up what it made and removes its finalizer, so Berth's teardown really
has to wait for it. Only objects of the test's own cluster prefix are touched.

The CRDs are the upstream ones (third_party/upstream/crds/), and every write is made with
``fieldValidation=Strict``: a stand-in reads and writes only fields those CRDs define, and its
statuses have the upstream shapes (HyperShift's conditions and ``status.kubeconfig`` Secret
reference, vc-manager's ``phase``/``clusterNamespace``, kcp's ``spec.URL`` and ``phase``).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kubernetes
from kubernetes import client

from devcluster.launcher import ControlPlane
from tenants import services
from tenants.models import Cluster, Tenant, TenantRequest
from tests.worker.backends.conftest import PollingStandIn, admin_kubeconfig_dict, as_object, write_kubeconfig_secret

FINALIZER = "standin.berth.test/cleanup"
MERGE_PATCH = "application/merge-patch+json"
# Every write is checked against the real CRD: a field it does not define is refused, never silently dropped.
STRICT = "Strict"


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    namespaced: bool
    # Whether the CRD has a status subresource; without one (VirtualCluster) the operator writes status with the
    # object itself, as vc-manager does.
    status_subresource: bool = True


VIRTUAL_CLUSTER = Resource("tenancy.x-k8s.io", "v1alpha1", "virtualclusters", True, status_subresource=False)
CLUSTER_VERSION = Resource("tenancy.x-k8s.io", "v1alpha1", "clusterversions", False, status_subresource=False)
HOSTED_CLUSTER = Resource("hypershift.openshift.io", "v1beta1", "hostedclusters", True)
NODE_POOL = Resource("hypershift.openshift.io", "v1beta1", "nodepools", True)
WORKSPACE = Resource("tenancy.kcp.io", "v1alpha1", "workspaces", False)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class OperatorStandIn(PollingStandIn):
    """The reconcile loop every stand-in shares: finalizer in, ``reconcile`` until done, ``cleanup`` and finalizer
    out."""

    resources: tuple[Resource, ...] = ()

    def __init__(self, *, host: ControlPlane, virtual: ControlPlane, prefix: str, interval: float = 0.2):
        self.api = kubernetes.config.new_client_from_config(config_file=str(host.kubeconfig_path))
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)
        self.virtual = virtual
        self.prefix = prefix
        self.interval = interval
        self.errors: list[str] = []
        self.cleaned: list[str] = []  # "<plural>/<name>" of every object whose finalizer it removed
        self._prepare_thread(type(self).__name__)

    # --- lifecycle ---------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            for res in self.resources:
                try:
                    self._reconcile_all(res)
                except client.ApiException as exc:
                    if exc.status not in (404, 409):  # raced with a deletion or an update: the next pass sees it
                        self._error(f"{res.plural}: {exc.status} {exc.reason}: {exc.body}")
                except Exception as exc:
                    self._error(f"{res.plural}: {type(exc).__name__}: {exc}")
            self._stop.wait(self.interval)

    def _error(self, message: str) -> None:
        if message not in self.errors:
            self.errors.append(message)

    # --- the loop ----------------------------------------------------------------------------------
    def _ours(self, res: Resource, obj: dict) -> bool:
        meta = obj["metadata"]
        return (meta.get("namespace") if res.namespaced else meta["name"]).startswith(self.prefix)

    def _reconcile_all(self, res: Resource) -> None:
        for obj in as_object(self.custom.list_cluster_custom_object(res.group, res.version, res.plural))["items"]:
            if not self._ours(res, obj):
                continue
            finalizers = obj["metadata"].get("finalizers") or []
            if obj["metadata"].get("deletionTimestamp"):
                if FINALIZER in finalizers:
                    self.cleanup(res, obj)
                    self.patch(res, obj, {"metadata": {"finalizers": [f for f in finalizers if f != FINALIZER]}})
                    self.cleaned.append(f"{res.plural}/{obj['metadata']['name']}")
            elif FINALIZER not in finalizers:
                self.patch(res, obj, {"metadata": {"finalizers": [*finalizers, FINALIZER]}})
            else:
                self.reconcile(res, obj)

    def patch(self, res: Resource, obj: dict, body: dict, *, status: bool = False) -> None:
        meta = obj["metadata"]
        if res.namespaced:
            patch_namespaced = (
                self.custom.patch_namespaced_custom_object_status
                if status
                else self.custom.patch_namespaced_custom_object
            )
            patch_namespaced(
                res.group,
                res.version,
                meta["namespace"],
                res.plural,
                meta["name"],
                body,
                _content_type=MERGE_PATCH,
                field_validation=STRICT,
            )
        else:
            patch_cluster = (
                self.custom.patch_cluster_custom_object_status if status else self.custom.patch_cluster_custom_object
            )
            patch_cluster(
                res.group,
                res.version,
                res.plural,
                meta["name"],
                body,
                _content_type=MERGE_PATCH,
                field_validation=STRICT,
            )

    def set_status(self, res: Resource, obj: dict, status: dict) -> None:
        self.patch(res, obj, {"status": status}, status=res.status_subresource)

    def secret_exists(self, namespace: str, name: str) -> bool:
        try:
            self.core.read_namespaced_secret(name, namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def virtual_admin_kubeconfig(self, server: str | None = None) -> dict:
        config = admin_kubeconfig_dict(self.virtual)
        for entry in config["clusters"]:
            entry["cluster"]["server"] = server or self.virtual.api_url
        return config

    # --- what each operator does -------------------------------------------------------------------
    def reconcile(self, res: Resource, obj: dict) -> None:
        raise NotImplementedError

    def cleanup(self, res: Resource, obj: dict) -> None:
        """Undo what reconcile made, before the finalizer goes."""


class VirtualClusterStandIn(OperatorStandIn):
    """vc-manager: a VirtualCluster gets a control plane in its own namespace, the Secret admin-kubeconfig there,
    phase Running.

    ``advertised_server`` is the server vc-manager writes into the kubeconfig: by default the virtual plane's
    URL; pass an in-cluster address (e.g. "https://apiserver-svc.{cluster_namespace}:6443") to prove the
    portal rewrites it.
    """

    resources = (VIRTUAL_CLUSTER,)

    def __init__(self, *, advertised_server: str = "", **kwargs: Any):
        super().__init__(**kwargs)
        self.advertised_server = advertised_server

    def reconcile(self, res: Resource, obj: dict) -> None:
        meta, status = obj["metadata"], obj.get("status") or {}
        if status.get("phase") in ("Running", "Error"):
            return
        if not status.get("phase"):
            self.set_status(
                res, obj, {"phase": "Pending", "reason": "Provisioning", "message": "creating the control plane"}
            )
            return
        version = obj["spec"]["clusterVersionName"]
        try:
            self.custom.get_cluster_custom_object(
                CLUSTER_VERSION.group, CLUSTER_VERSION.version, CLUSTER_VERSION.plural, version
            )
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            self.set_status(
                res,
                obj,
                {
                    "phase": "Error",
                    "reason": "ClusterVersionNotFound",
                    "message": f"clusterversion {version} not found",
                },
            )
            return
        # Upstream names it "<namespace>-<6 characters of the uid>-<name>" (default-b41df0-vc-sample-1).
        cluster_namespace = f"{meta['namespace']}-{meta['uid'][:6]}-{meta['name']}"[:63].rstrip("-")
        try:
            self.core.create_namespace(
                client.V1Namespace(
                    metadata=client.V1ObjectMeta(
                        name=cluster_namespace, labels={"tenancy.x-k8s.io/vcname": meta["name"]}
                    )
                )
            )
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        server = self.advertised_server.format(cluster_namespace=cluster_namespace) if self.advertised_server else ""
        write_kubeconfig_secret(
            self.api,
            namespace=cluster_namespace,
            name="admin-kubeconfig",
            key="admin-kubeconfig",
            kubeconfig=self.virtual_admin_kubeconfig(server),
        )
        self.set_status(
            res,
            obj,
            {
                "phase": "Running",
                "clusterNamespace": cluster_namespace,
                "reason": "ClusterRunning",
                "message": "the virtual cluster is running",
            },
        )

    def cleanup(self, res: Resource, obj: dict) -> None:
        cluster_namespace = (obj.get("status") or {}).get("clusterNamespace")
        if cluster_namespace:
            try:
                self.core.delete_namespace(cluster_namespace)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise


class HyperShiftStandIn(OperatorStandIn):
    """The HyperShift operator: a HostedCluster becomes Available with "<name>-admin-kubeconfig"; NodePools report
    their replicas.

    Like HyperShift it refuses to go on (ValidConfiguration False) while the referenced pull secret is missing.
    """

    resources = (HOSTED_CLUSTER, NODE_POOL)

    def reconcile(self, res: Resource, obj: dict) -> None:
        if res is NODE_POOL:
            self._node_pool(obj)
        else:
            self._hosted_cluster(obj)

    def _node_pool(self, obj: dict) -> None:
        replicas = obj["spec"].get("replicas", 0)
        if (obj.get("status") or {}).get("replicas") != replicas:
            self.set_status(
                NODE_POOL,
                obj,
                {
                    "replicas": replicas,
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "AsExpected",
                            "message": "",
                            "lastTransitionTime": now(),
                        }
                    ],
                },
            )

    def _hosted_cluster(self, obj: dict) -> None:
        meta, spec = obj["metadata"], obj["spec"]
        conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        if conditions.get("Available", {}).get("status") == "True":
            return
        generation = meta.get("generation", 1)

        def cond(type_: str, status: str, reason: str, message: str = "") -> dict:
            return {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": now(),
                "observedGeneration": generation,
            }

        pull_secret = spec["pullSecret"]["name"]
        if not self.secret_exists(meta["namespace"], pull_secret):
            self.set_status(
                HOSTED_CLUSTER,
                obj,
                {
                    "conditions": [
                        cond("ValidReleaseImage", "True", "AsExpected"),
                        cond(
                            "ValidConfiguration",
                            "False",
                            "InvalidConfiguration",
                            f"failed to get pull secret {pull_secret}: not found",
                        ),
                        cond("Available", "False", "NotAvailable", "waiting for a valid configuration"),
                    ]
                },
            )
            return
        secret = f"{meta['name']}-admin-kubeconfig"
        write_kubeconfig_secret(
            self.api,
            namespace=meta["namespace"],
            name=secret,
            key="kubeconfig",
            kubeconfig=self.virtual_admin_kubeconfig(),
        )
        self.set_status(
            HOSTED_CLUSTER,
            obj,
            {
                "kubeconfig": {"name": secret},
                "conditions": [
                    cond("ValidReleaseImage", "True", "AsExpected"),
                    cond("ValidConfiguration", "True", "AsExpected"),
                    cond("Available", "True", "AsExpected", "The hosted control plane is available"),
                ],
            },
        )

    def cleanup(self, res: Resource, obj: dict) -> None:
        if res is HOSTED_CLUSTER:
            try:
                self.core.delete_namespaced_secret(
                    f"{obj['metadata']['name']}-admin-kubeconfig", obj["metadata"]["namespace"]
                )
            except client.ApiException as exc:
                if exc.status != 404:
                    raise


class KcpStandIn(OperatorStandIn):
    """kcp's workspace controllers: a Workspace is scheduled (spec.URL, spec.cluster), initialized, then Ready.

    The "workspace" is the virtual plane; it shares the host's CA, so the credential registered for the
    parent is accepted there too, as kcp accepts it in every workspace.
    """

    resources = (WORKSPACE,)

    def reconcile(self, res: Resource, obj: dict) -> None:
        phase = (obj.get("status") or {}).get("phase")
        if phase == "Ready":
            return
        if not obj["spec"].get("URL"):
            self.patch(res, obj, {"spec": {"URL": self.virtual.api_url, "cluster": secrets.token_hex(8)}})
            self.set_status(res, obj, {"phase": "Scheduling"})
        elif phase == "Scheduling":
            self.set_status(res, obj, {"phase": "Initializing"})
        else:
            self.set_status(res, obj, {"phase": "Ready"})


# --- helpers the adapter tests share ------------------------------------------------------------------


def register_cluster(control_plane: ControlPlane, *, kind: str, config: dict, tiers: list) -> Cluster:
    """A registered Cluster on the dev control plane offering ``kind``; the unique prefix keeps each test's objects
    apart."""
    prefix = f"a{secrets.token_hex(2)}-"
    cluster = Cluster.objects.create(
        name=f"{kind}-{prefix[:-1]}",
        display_name=f"Dev control plane ({kind})",
        api_url=control_plane.api_url,
        ca_pem=control_plane.ca_cert_pem,
        credential_ref=f"kubeconfig:{control_plane.kubeconfig_path}",
        public_endpoint=control_plane.api_url,
        namespace_prefix=prefix,
        kinds=[kind],
        virtual_config={kind: config},
    )
    cluster.tiers.set(tiers)
    return cluster


def delete_prefixed_namespaces(api: client.ApiClient, prefix: str) -> None:
    core = client.CoreV1Api(api)
    for ns in core.list_namespace().items:
        name = str(ns.metadata.name)
        if name.startswith(prefix) and not ns.metadata.deletion_timestamp:
            core.delete_namespace(name)


def approved(*, kind: str, alice: Any, carol: Any, team: Any, tier: Any, cluster: Cluster, name: str = "web") -> Tenant:
    req = services.request_submit(
        actor=alice,
        action=TenantRequest.Action.CREATE,
        kind=kind,
        team=team,
        tier=tier,
        cluster=cluster,
        name=name,
        purpose="adapter test",
    )
    tenant = req.tenant
    if tenant.status == "requested":
        services.request_approve(tenant_request=req, actor=carol, comment="ok")
    return tenant


def existing_object(api: client.ApiClient, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
    """The custom object, which must exist."""
    found = custom_object(api, res, name, namespace)
    assert found is not None, f"{res.plural}/{name} does not exist"
    return found


def custom_object(
    api: client.ApiClient, res: Resource, name: str, namespace: str | None = None
) -> dict[str, Any] | None:
    custom = client.CustomObjectsApi(api)
    try:
        if res.namespaced:
            assert namespace is not None
            return as_object(custom.get_namespaced_custom_object(res.group, res.version, namespace, res.plural, name))
        return as_object(custom.get_cluster_custom_object(res.group, res.version, res.plural, name))
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def assert_admin_inside_and_refused_by_host(
    kubectl: Any, path: str, *, virtual: ControlPlane, host: ControlPlane, tag: str
) -> None:
    """The handed-back kubeconfig is cluster-admin on the virtual API server, and its token means nothing to the
    host."""
    assert kubectl("auth", "can-i", "*", "*", kubeconfig=path).stdout.strip() == "yes"
    made = kubectl("create", "configmap", tag, "-n", "default", "--from-literal=made-by=tenant", kubeconfig=path)
    assert made.returncode == 0, made.stderr
    with (
        kubernetes.config.new_client_from_config(config_file=str(virtual.kubeconfig_path)) as api_virtual,
        kubernetes.config.new_client_from_config(config_file=str(host.kubeconfig_path)) as api_host,
    ):
        assert client.CoreV1Api(api_virtual).read_namespaced_config_map(tag, "default").data == {"made-by": "tenant"}
        try:
            client.CoreV1Api(api_host).read_namespaced_config_map(tag, "default")
            raise AssertionError(f"configmap {tag} reached the host cluster")
        except client.ApiException as exc:
            assert exc.status == 404
    refused = kubectl("--server", host.api_url, "get", "namespaces", kubeconfig=path)
    assert refused.returncode != 0 and "You must be logged in to the server" in refused.stderr, refused.stderr  # 401
    assert kubectl("delete", "configmap", tag, "-n", "default", kubeconfig=path).returncode == 0
