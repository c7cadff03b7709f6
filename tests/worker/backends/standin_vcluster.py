"""TEST STAND-INS for vcluster's installers and its control plane. Nothing in the product imports this module.

These machines cannot run vcluster's syncer pods, so each stand-in does, at the interface
Berth talks to, what the real thing does, and a second real dev control plane
(``virtual_plane``) plays the virtual API server:

- ``tests/worker/backends/fake_helm/helm`` (first on PATH in tests) plays the helm binary: it records
  its arguments and applies what the chart's templates would create (the control plane
  StatefulSet and Services, the release's storage Secret), or removes them on uninstall.
- ``VClusterStandIn`` plays, in a background thread polling the host, the parts that come
  after the installer: Flux's helm-controller (sees the HelmRelease, installs, reports
  Ready, uninstalls behind its finalizer), Cluster API with cluster-api-provider-vcluster
  (sees Cluster and VCluster, installs, sets their status, cleans up behind finalizers),
  and for every installer the control plane pod coming up: the StatefulSet reports a ready
  replica and the virtual API server's admin kubeconfig appears in the Secret vcluster
  (or Cluster API) writes, with the server the chart values export.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import kubernetes
import yaml
from kubernetes import client

from tests.worker.backends.conftest import PollingStandIn, as_object, write_kubeconfig_secret

ROOT = Path(__file__).resolve().parents[3]
FAKE_HELM_DIR = Path(__file__).resolve().parent / "fake_helm"
HELM_RECORDS = ROOT / "test-output" / "fake-helm"
FINALIZER = "standin.berth.test/cleanup"
FLUX_FINALIZER = "finalizers.fluxcd.io"  # the finalizer Flux's helm-controller puts on a HelmRelease
MERGE_PATCH = "application/merge-patch+json"


def put_fake_helm_first_on_path() -> None:
    """The fake helm first, then this interpreter's bin directory (its shebang runs ``python3`` from PATH).

    Must run before the test Celery worker starts: it inherits PATH then.
    """
    first = [str(FAKE_HELM_DIR), str(Path(sys.executable).parent)]
    rest = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in first]
    os.environ["PATH"] = os.pathsep.join([*first, *rest])


# --- what the chart's templates create (the part Berth and the tests look at) ----------------------------


def chart_objects(*, release: str, namespace: str, values: dict, chart_version: str) -> list[dict]:
    """The control plane objects the vcluster chart renders for ``values``, reduced to what matters here."""
    cp = values.get("controlPlane") or {}
    sts = cp.get("statefulSet") or {}
    security = sts.get("security") or {}
    selector = {"app": "vcluster", "release": release}
    base = {"app": "vcluster", "chart": f"vcluster-{chart_version}", "release": release, "heritage": "Helm"}
    service_spec = {**((cp.get("service") or {}).get("spec") or {"type": "ClusterIP"})}
    service_spec.update(
        {
            "selector": selector,
            "ports": [
                {"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"},
                {"name": "kubelet", "port": 10250, "targetPort": 8443, "protocol": "TCP"},
            ],
        }
    )
    container = {
        "name": "syncer",
        "image": f"ghcr.io/loft-sh/vcluster-pro:{chart_version}",
        "ports": [{"containerPort": 8443, "name": "https"}],
        "resources": sts.get("resources") or {},
        "securityContext": security.get("containerSecurityContext") or {},
    }
    objs: list[dict] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": f"vc-{release}", "namespace": namespace, "labels": base},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": release, "namespace": namespace, "labels": base},
            "spec": service_spec,
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": f"{release}-headless", "namespace": namespace, "labels": base},
            "spec": {
                "clusterIP": "None",
                "selector": selector,
                "ports": [{"name": "https", "port": 443, "targetPort": 8443}],
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": release, "namespace": namespace, "labels": {**base, **(sts.get("labels") or {})}},
            "spec": {
                "serviceName": f"{release}-headless",
                "replicas": 1,
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": {**selector, **((sts.get("pods") or {}).get("labels") or {})}},
                    "spec": {
                        "serviceAccountName": f"vc-{release}",
                        "securityContext": security.get("podSecurityContext") or {},
                        "nodeSelector": (sts.get("scheduling") or {}).get("nodeSelector") or {},
                        "containers": [container],
                    },
                },
            },
        },
    ]
    policies = values.get("policies") or {}
    quota, limits = policies.get("resourceQuota") or {}, policies.get("limitRange") or {}
    if quota.get("enabled") is True:
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": f"vc-{release}", "namespace": namespace, "labels": base},
                "spec": {"hard": quota.get("quota") or {}},
            }
        )
    if limits.get("enabled") is True:
        limit = {
            "type": "Container",
            **{k: limits[k] for k in ("default", "defaultRequest", "max", "min") if limits.get(k)},
        }
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "LimitRange",
                "metadata": {"name": f"vc-{release}", "namespace": namespace, "labels": base},
                "spec": {"limits": [limit]},
            }
        )
    ingress = cp.get("ingress") or {}
    if ingress.get("enabled"):
        objs.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": {"name": release, "namespace": namespace, "labels": base},
                "spec": {
                    **(ingress.get("spec") or {}),
                    "rules": [
                        {
                            "host": ingress["host"],
                            "http": {
                                "paths": [
                                    {
                                        "path": "/",
                                        "pathType": "ImplementationSpecific",
                                        "backend": {"service": {"name": release, "port": {"number": 443}}},
                                    }
                                ]
                            },
                        }
                    ],
                },
            }
        )
    return objs


_PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Service": "/api/v1/namespaces/{ns}/services",
    "Secret": "/api/v1/namespaces/{ns}/secrets",
    "ResourceQuota": "/api/v1/namespaces/{ns}/resourcequotas",
    "LimitRange": "/api/v1/namespaces/{ns}/limitranges",
    "StatefulSet": "/apis/apps/v1/namespaces/{ns}/statefulsets",
    "Ingress": "/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses",
}


def _call(
    api: client.ApiClient,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
    query: list | None = None,
) -> None:
    method, url, headers, body, _ = api.param_serialize(
        method,
        path,
        query_params=query or [],
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    resp = api.call_api(method, url, header_params=headers, body=body, _request_timeout=15)
    resp.read()
    if not 200 <= resp.status < 300:
        raise client.ApiException(
            status=resp.status, reason=resp.reason, body=(resp.data or b"").decode(errors="replace")
        )


def apply_objects(api: client.ApiClient, objs: list[dict], *, manager: str) -> None:
    """Server-side apply, as helm 3.19 and helm-controller do; an admission refusal raises ApiException."""
    for obj in objs:
        meta = obj["metadata"]
        path = f"{_PATHS[obj['kind']].format(ns=meta['namespace'])}/{meta['name']}"
        _call(
            api,
            "PATCH",
            path,
            json.dumps(obj),
            "application/apply-patch+yaml",
            [("fieldManager", manager), ("force", "true")],
        )


def delete_objects(api: client.ApiClient, objs: list[dict]) -> None:
    for obj in objs:
        meta = obj["metadata"]
        try:
            _call(api, "DELETE", f"{_PATHS[obj['kind']].format(ns=meta['namespace'])}/{meta['name']}")
        except client.ApiException as exc:
            if exc.status != 404:
                raise


def release_secrets(api: client.ApiClient, *, release: str, namespace: str) -> list[Any]:
    """helm's release storage: Secrets labelled owner=helm, name=<release>."""
    return client.CoreV1Api(api).list_namespaced_secret(namespace, label_selector=f"owner=helm,name={release}").items


def store_release(api: client.ApiClient, *, release: str, namespace: str, chart_version: str, values: dict) -> int:
    """A new revision in helm's storage (the real payload is a gzipped release; a JSON summary stands in here)."""
    core = client.CoreV1Api(api)
    previous = release_secrets(api, release=release, namespace=namespace)
    revision = 1 + max((int(s.metadata.labels.get("version", "0")) for s in previous), default=0)
    for old in previous:
        core.patch_namespaced_secret(old.metadata.name, namespace, {"metadata": {"labels": {"status": "superseded"}}})
    payload = json.dumps({"name": release, "chart": f"vcluster-{chart_version}", "version": revision, "config": values})
    core.create_namespaced_secret(
        namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(
                name=f"sh.helm.release.v1.{release}.v{revision}",
                labels={"owner": "helm", "name": release, "status": "deployed", "version": str(revision)},
            ),
            type="helm.sh/release.v1",
            data={"release": base64.b64encode(payload.encode()).decode()},
        ),
    )
    return revision


def install_chart(
    api: client.ApiClient, *, release: str, namespace: str, chart_version: str, values: dict, manager: str
) -> int:
    apply_objects(
        api,
        chart_objects(release=release, namespace=namespace, values=values, chart_version=chart_version),
        manager=manager,
    )
    return store_release(api, release=release, namespace=namespace, chart_version=chart_version, values=values)


def uninstall_chart(api: client.ApiClient, *, release: str, namespace: str) -> bool:
    """What ``helm uninstall`` removes; False when there was no release."""
    stored = release_secrets(api, release=release, namespace=namespace)
    if not stored:
        return False
    everything = {
        "controlPlane": {"ingress": {"enabled": True, "host": "x"}},
        "policies": {"resourceQuota": {"enabled": True}, "limitRange": {"enabled": True}},
    }
    delete_objects(api, chart_objects(release=release, namespace=namespace, values=everything, chart_version="0"))
    core = client.CoreV1Api(api)
    for secret in stored:
        core.delete_namespaced_secret(secret.metadata.name, namespace)
    return True


# --- the fake helm's record of its calls -------------------------------------------------------------------


def helm_record_file(namespace: str) -> Path:
    return HELM_RECORDS / f"{namespace}.jsonl"


def helm_calls(namespace: str) -> list[dict]:
    """Every call the fake helm recorded for ``namespace``, oldest first."""
    path = helm_record_file(namespace)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --- the control plane coming up, and the operators behind Flux and Cluster API ----------------------------


def virtual_admin_kubeconfig(virtual_kubeconfig_path: Path, server: str) -> dict:
    """The virtual API server's admin kubeconfig, pointing at ``server`` (what the operator exports)."""
    config = yaml.safe_load(Path(virtual_kubeconfig_path).read_text())
    for entry in config["clusters"]:
        entry["cluster"]["server"] = server
    return config


class VClusterStandIn(PollingStandIn):
    """One tenant's vcluster coming up and going away, for ``installer`` helm, flux or capi (see the module
    docstring)."""

    HELM_RELEASE = ("helm.toolkit.fluxcd.io", "v2", "helmreleases")
    HELM_REPOSITORY = ("source.toolkit.fluxcd.io", "v1", "helmrepositories")
    CAPI_CLUSTER = ("cluster.x-k8s.io", "v1beta1", "clusters")
    VCLUSTER = ("infrastructure.cluster.x-k8s.io", "v1alpha1", "vclusters")

    def __init__(
        self,
        *,
        host_kubeconfig: Path,
        virtual_kubeconfig: Path,
        namespace: str,
        release: str,
        installer: str,
        interval: float = 0.2,
    ):
        self.api = kubernetes.config.new_client_from_config(config_file=str(host_kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.virtual_kubeconfig = virtual_kubeconfig
        self.namespace, self.release, self.installer = namespace, release, installer
        self.interval = interval
        self.errors: list[str] = []
        self.events: list[
            str
        ] = []  # what it did, in order: "installed", "ready", "uninstalled", "finalizer removed: ..."
        self._prepare_thread(f"vcluster-standin-{installer}")

    def _run(self) -> None:
        step = {"helm": self._helm, "flux": self._flux, "capi": self._capi}[self.installer]
        while not self._stop.is_set():
            try:
                step()
            except client.ApiException as exc:
                if exc.status not in (404, 409):  # raced with a deletion or an update: the next pass sees it
                    self._error(f"{exc.status} {exc.reason}: {exc.body}")
            except Exception as exc:
                self._error(f"{type(exc).__name__}: {exc}")
            self._stop.wait(self.interval)

    def _error(self, message: str) -> None:
        if message not in self.errors:
            self.errors.append(message)

    def _note(self, event: str) -> None:
        if event not in self.events:
            self.events.append(event)

    # --- the control plane pod --------------------------------------------------------------------------
    def _control_plane_up(self, *, server: str, secret: str, key: str) -> None:
        """The StatefulSet's pod is ready and has written its admin kubeconfig (once)."""
        sts = self.apps.read_namespaced_stateful_set(self.release, self.namespace)
        if not (sts.status and sts.status.ready_replicas):
            self.apps.patch_namespaced_stateful_set_status(
                self.release,
                self.namespace,
                {
                    "status": {
                        "replicas": 1,
                        "readyReplicas": 1,
                        "availableReplicas": 1,
                        "currentReplicas": 1,
                        "updatedReplicas": 1,
                        "observedGeneration": sts.metadata.generation,
                    }
                },
            )
        write_kubeconfig_secret(
            self.api,
            namespace=self.namespace,
            name=secret,
            key=key,
            kubeconfig=virtual_admin_kubeconfig(self.virtual_kubeconfig, server),
        )
        self._note("ready")

    def _ready_already(self, secret: str) -> bool:
        try:
            self.core.read_namespaced_secret(secret, self.namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # --- helm: the fake binary installed the chart; the pod comes up -------------------------------------
    def _helm(self) -> None:
        installs = [c for c in helm_calls(self.namespace) if c["command"] == "upgrade" and c["release"] == self.release]
        if not installs or not release_secrets(self.api, release=self.release, namespace=self.namespace):
            return
        if not self._ready_already(f"vc-{self.release}"):
            self._control_plane_up(
                server=installs[-1]["values"]["exportKubeConfig"]["server"], secret=f"vc-{self.release}", key="config"
            )

    # --- Flux's helm-controller ---------------------------------------------------------------------------
    def _get(self, resource: tuple[str, str, str], name: str) -> dict[str, Any] | None:
        try:
            return as_object(self.custom.get_namespaced_custom_object(*resource[:2], self.namespace, resource[2], name))
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _patch(self, resource: tuple[str, str, str], name: str, body: dict, *, status: bool = False) -> None:
        call = (
            self.custom.patch_namespaced_custom_object_status if status else self.custom.patch_namespaced_custom_object
        )
        call(*resource[:2], self.namespace, resource[2], name, body, _content_type=MERGE_PATCH)

    def _drop_finalizer(self, resource: tuple[str, str, str], obj: dict, finalizer: str) -> None:
        finalizers = obj["metadata"].get("finalizers") or []
        if finalizer in finalizers:
            self._patch(
                resource,
                obj["metadata"]["name"],
                {"metadata": {"finalizers": [f for f in finalizers if f != finalizer]}},
            )
            self._note(f"finalizer removed: {resource[2]}/{obj['metadata']['name']}")

    def _add_finalizer(self, resource: tuple[str, str, str], obj: dict, finalizer: str) -> bool:
        finalizers = obj["metadata"].get("finalizers") or []
        if finalizer in finalizers:
            return False
        self._patch(resource, obj["metadata"]["name"], {"metadata": {"finalizers": [*finalizers, finalizer]}})
        return True

    def _flux(self) -> None:
        release = self._get(self.HELM_RELEASE, self.release)
        if release is None:
            return
        if release["metadata"].get("deletionTimestamp"):
            if uninstall_chart(self.api, release=self.release, namespace=self.namespace):
                self._note("uninstalled")
            self._drop_finalizer(self.HELM_RELEASE, release, FLUX_FINALIZER)
            return
        if self._add_finalizer(self.HELM_RELEASE, release, FLUX_FINALIZER):
            return
        if self._ready_already(f"vc-{self.release}"):
            return
        chart = release["spec"]["chart"]["spec"]
        source = chart["sourceRef"]
        repository = as_object(
            self.custom.get_namespaced_custom_object(
                *self.HELM_REPOSITORY[:2],
                source.get("namespace", self.namespace),
                self.HELM_REPOSITORY[2],
                source["name"],
            )
        )
        values = release["spec"].get("values") or {}
        install_chart(
            self.api,
            release=release["spec"].get("releaseName", self.release),
            namespace=self.namespace,
            chart_version=chart["version"],
            values=values,
            manager="helm-controller",
        )
        self._note(f"installed {chart['chart']} {chart['version']} from {repository['spec']['url']}")
        self._patch(
            self.HELM_RELEASE,
            self.release,
            {
                "status": {
                    "observedGeneration": release["metadata"]["generation"],
                    "lastAttemptedRevision": chart["version"],
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "InstallSucceeded",
                            "message": f"Helm install succeeded for release {self.namespace}/{self.release}",
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        }
                    ],
                }
            },
            status=True,
        )
        self._control_plane_up(server=values["exportKubeConfig"]["server"], secret=f"vc-{self.release}", key="config")

    # --- Cluster API with cluster-api-provider-vcluster -----------------------------------------------------
    def _capi(self) -> None:
        cluster = self._get(self.CAPI_CLUSTER, self.release)
        vcluster = self._get(self.VCLUSTER, self.release)
        if (
            cluster is not None
            and cluster["metadata"].get("deletionTimestamp")
            and vcluster is not None
            and not vcluster["metadata"].get("deletionTimestamp")
        ):
            # Cluster API deletes the control plane and infrastructure of a Cluster being deleted.
            self.custom.delete_namespaced_custom_object(
                *self.VCLUSTER[:2], self.namespace, self.VCLUSTER[2], self.release
            )
            return
        if vcluster is not None and vcluster["metadata"].get("deletionTimestamp"):
            if uninstall_chart(self.api, release=self.release, namespace=self.namespace):
                self._note("uninstalled")
            delete_objects(
                self.api,
                [{"kind": "Secret", "metadata": {"name": f"{self.release}-kubeconfig", "namespace": self.namespace}}],
            )
            self._drop_finalizer(self.VCLUSTER, vcluster, FINALIZER)
            return
        if cluster is not None and cluster["metadata"].get("deletionTimestamp"):
            if vcluster is None:
                self._drop_finalizer(self.CAPI_CLUSTER, cluster, FINALIZER)
            return
        if cluster is None or vcluster is None:
            return
        if self._add_finalizer(self.CAPI_CLUSTER, cluster, FINALIZER) | self._add_finalizer(
            self.VCLUSTER, vcluster, FINALIZER
        ):
            return
        if (vcluster.get("status") or {}).get("ready"):
            return
        spec = vcluster["spec"]
        values = yaml.safe_load(spec["helmRelease"]["values"])
        install_chart(
            self.api,
            release=self.release,
            namespace=self.namespace,
            chart_version=spec["helmRelease"]["chart"]["version"],
            values=values,
            manager="cluster-api-provider-vcluster",
        )
        self._note(
            f"installed vcluster {spec['helmRelease']['chart']['version']} from {spec['helmRelease']['chart']['repo']}"
        )
        endpoint = spec["controlPlaneEndpoint"]
        self._control_plane_up(
            server=f"https://{endpoint['host']}:{endpoint['port']}", secret=f"{self.release}-kubeconfig", key="value"
        )
        self._patch(
            self.VCLUSTER,
            self.release,
            {"status": {"ready": True, "initialized": True, "phase": "Deployed"}},
            status=True,
        )
        self._patch(
            self.CAPI_CLUSTER,
            self.release,
            {"status": {"phase": "Provisioned", "controlPlaneReady": True, "infrastructureReady": True}},
            status=True,
        )
