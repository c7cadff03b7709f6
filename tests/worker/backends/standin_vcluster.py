"""TEST STAND-INS for what runs after vcluster's Flux and Cluster API installers. Nothing in the product
imports this module.

Installer ``helm`` is not played: tests/worker/backends/test_vcluster_real.py runs real vclusters on the dev
nodes. Flux's helm-controller and Cluster API with cluster-api-provider-vcluster cannot run here, so for
``flux`` and ``capi`` these stand-ins play them: they embed helm as upstream does and install the real chart
(third_party/upstream/vcluster-chart-0.30.0, packaged by the real ``helm``; the chart repository cannot be
reached here), so the API server admits what the chart renders into the tenant's host namespace under the tier
(quota, LimitRange, Pod Security). The host of these tests (``control_plane``) runs no kubelet and no
StatefulSet controller, so ``VClusterStandIn`` also plays, in a background thread polling the host, the parts
after the chart is installed:

- the StatefulSet controller: it creates the claim and the pod ``<release>-0`` from the chart's StatefulSet
  exactly as that controller would, so admission judges the chart's real pod; the pod stays Pending;
- the control plane coming up: the StatefulSet reports a ready replica, and the admin kubeconfig of a second
  real dev control plane (``virtual_plane``, the virtual API server) appears in the Secret vcluster writes;
- Flux's helm-controller (sees the HelmRelease, installs, reports Ready, uninstalls behind its finalizer) and
  Cluster API with cluster-api-provider-vcluster (sees Cluster and VCluster, installs, sets their status,
  writes ``<name>-kubeconfig`` (key ``value``), cleans up behind finalizers).

Every write to a custom resource uses ``fieldValidation=Strict`` against the upstream CRDs.
"""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes
import yaml
from kubernetes import client

from tests.worker.backends.conftest import VCLUSTER_CHART, PollingStandIn, as_object, write_kubeconfig_secret

FINALIZER = "standin.berth.test/cleanup"
FLUX_FINALIZER = "finalizers.fluxcd.io"  # the finalizer Flux's helm-controller puts on a HelmRelease
MERGE_PATCH = "application/merge-patch+json"
STRICT = "Strict"
CHART_VERSION = "0.30.0"  # what the vendored chart is (its Chart.yaml says 0.0.1 until upstream's release sets it)


def package_chart(helm: Path, directory: Path) -> Path:
    """``helm package`` the vendored chart as upstream's release does (version and appVersion set), into
    ``directory``; returns the packaged chart, ``vcluster-0.30.0.tgz``."""
    subprocess.run(
        [
            str(helm),
            "package",
            str(VCLUSTER_CHART),
            "--version",
            CHART_VERSION,
            "--app-version",
            CHART_VERSION,
            "--destination",
            str(directory),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return directory / f"vcluster-{CHART_VERSION}.tgz"


def release_secrets(api: client.ApiClient, *, release: str, namespace: str) -> list[Any]:
    """helm's release storage: Secrets labelled owner=helm, name=<release>."""
    return client.CoreV1Api(api).list_namespaced_secret(namespace, label_selector=f"owner=helm,name={release}").items


def deployed_release(api: client.ApiClient, *, release: str, namespace: str) -> dict[str, Any] | None:
    """The deployed revision as helm stored it (base64 of gzipped JSON inside the Secret): chart, config, ..."""
    deployed = [
        s
        for s in release_secrets(api, release=release, namespace=namespace)
        if s.metadata.labels["status"] == "deployed"
    ]
    if not deployed:
        return None
    payload = base64.b64decode(base64.b64decode(deployed[0].data["release"]))
    return dict(json.loads(gzip.decompress(payload)))


def virtual_admin_kubeconfig(virtual_kubeconfig_path: Path, server: str) -> dict:
    """The virtual API server's admin kubeconfig, pointing at ``server`` (what the operator exports)."""
    config = yaml.safe_load(Path(virtual_kubeconfig_path).read_text())
    for entry in config["clusters"]:
        entry["cluster"]["server"] = server
    return config


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class VClusterStandIn(PollingStandIn):
    """One tenant's vcluster coming up and going away, for ``installer`` helm, flux or capi (see the module
    docstring)."""

    HELM_RELEASE = ("helm.toolkit.fluxcd.io", "v2", "helmreleases")
    HELM_REPOSITORY = ("source.toolkit.fluxcd.io", "v1", "helmrepositories")
    CAPI_CLUSTER = ("cluster.x-k8s.io", "v1beta2", "clusters")
    VCLUSTER = ("infrastructure.cluster.x-k8s.io", "v1alpha1", "vclusters")

    def __init__(
        self,
        *,
        host_kubeconfig: Path,
        virtual_kubeconfig: Path,
        namespace: str,
        release: str,
        installer: str,
        helm: Path,
        chart: Path,
        interval: float = 0.2,
    ):
        self.api = kubernetes.config.new_client_from_config(config_file=str(host_kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.host_kubeconfig = host_kubeconfig
        self.virtual_kubeconfig = virtual_kubeconfig
        self.namespace, self.release, self.installer = namespace, release, installer
        self.helm, self.chart = helm, chart
        self.interval = interval
        self.errors: list[str] = []
        # What it did, in order: "pod admitted: web-0", "ready", "uninstalled", "finalizer removed: ...", ...
        self.events: list[str] = []
        self.helm_installs = 0  # installs its helm-controller or Cluster API provider made
        self._prepare_thread(f"vcluster-standin-{installer}")

    def _run(self) -> None:
        step = {"flux": self._flux, "capi": self._capi}[self.installer]
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

    # --- helm, as the operators embed it --------------------------------------------------------------------
    def _run_helm(self, *args: str, values: dict | None = None) -> None:
        with tempfile.TemporaryDirectory(prefix="standin-helm-") as tmp:
            extra = ["--kubeconfig", str(self.host_kubeconfig)]
            if values is not None:
                path = Path(tmp) / "values.yaml"
                path.write_text(json.dumps(values))
                extra += ["--values", str(path)]
            done = subprocess.run(
                [str(self.helm), *args, "--namespace", self.namespace, *extra],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        if done.returncode != 0:
            raise RuntimeError(f"helm {args[0]}: {done.stderr.strip()}")

    def _install(self, *, release: str, values: dict, by: str) -> None:
        self._run_helm("upgrade", "--install", release, str(self.chart), values=values)
        self.helm_installs += 1
        self._note(f"installed by {by}")

    def _uninstall(self) -> None:
        if release_secrets(self.api, release=self.release, namespace=self.namespace):
            self._run_helm("uninstall", self.release)
            self._note("uninstalled")

    # --- the StatefulSet controller, the pod coming up, and vcluster writing its kubeconfig ---------------
    def _statefulset(self) -> dict[str, Any] | None:
        try:
            return dict(
                self.api.sanitize_for_serialization(
                    self.apps.read_namespaced_stateful_set(self.release, self.namespace)
                )
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _run_statefulset(self, sts: dict[str, Any]) -> None:
        """What the StatefulSet controller does for replica 0: its claims, then its pod, owned by the StatefulSet."""
        name = f"{self.release}-0"
        owner = {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": self.release,
            "uid": sts["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        spec, template = sts["spec"], sts["spec"]["template"]
        volumes = list(template["spec"].get("volumes") or [])
        for claim in spec.get("volumeClaimTemplates") or []:
            claim_name = f"{claim['metadata']['name']}-{name}"
            body = {
                "metadata": {
                    "name": claim_name,
                    "labels": {**spec["selector"]["matchLabels"], **(claim["metadata"].get("labels") or {})},
                },
                "spec": claim["spec"],
            }
            self._create(self.core.create_namespaced_persistent_volume_claim, body)
            # No pod runs, so the pvc-protection controller (not run here) would let the claim go when deleted.
            self.core.patch_namespaced_persistent_volume_claim(
                claim_name, self.namespace, {"metadata": {"finalizers": None}}
            )
            volumes.append({"name": claim["metadata"]["name"], "persistentVolumeClaim": {"claimName": claim_name}})
        labels = {
            **(template["metadata"].get("labels") or {}),
            "statefulset.kubernetes.io/pod-name": name,
            "apps.kubernetes.io/pod-index": "0",
        }
        pod = {
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": template["metadata"].get("annotations") or {},
                "ownerReferences": [owner],
            },
            "spec": {**template["spec"], "volumes": volumes, "hostname": name, "subdomain": spec["serviceName"]},
        }
        try:
            self._create(self.core.create_namespaced_pod, pod)
        except client.ApiException as exc:
            # The tier's admission refused the chart's pod: the test must fail with the API server's reason.
            raise RuntimeError(
                f"pod {name} refused: {json.loads(exc.body or '{}').get('message', exc.reason)}"
            ) from None
        self._note(f"pod admitted: {name}")

    def _create(self, create: Any, body: dict) -> None:
        try:
            create(self.namespace, body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise

    def _control_plane_up(self, *, server: str, secret: str, key: str, labels: dict | None = None) -> bool:
        """The chart's StatefulSet runs, its pod is ready and vcluster has written its admin kubeconfig (once).
        False while the chart's StatefulSet is not there yet."""
        sts = self._statefulset()
        if sts is None:
            return False
        if not (sts.get("status") or {}).get("readyReplicas"):
            self._run_statefulset(sts)
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
                        "observedGeneration": sts["metadata"]["generation"],
                    }
                },
                field_validation=STRICT,
            )
        write_kubeconfig_secret(
            self.api,
            namespace=self.namespace,
            name=secret,
            key=key,
            kubeconfig=virtual_admin_kubeconfig(self.virtual_kubeconfig, server),
            labels=labels,
        )
        self._note("ready")
        return True

    def _secret_exists(self, name: str) -> bool:
        try:
            self.core.read_namespaced_secret(name, self.namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def _exported_server(self) -> str:
        """The server the chart tells vcluster to export: exportKubeConfig.server in its config Secret."""
        data = self.core.read_namespaced_secret(f"vc-config-{self.release}", self.namespace).data or {}
        return str(yaml.safe_load(base64.b64decode(data["config.yaml"]))["exportKubeConfig"]["server"])

    # --- helm: the worker installed the chart; the control plane comes up ------------------------------------
    # --- Flux's helm-controller -------------------------------------------------------------------------------
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
        call(*resource[:2], self.namespace, resource[2], name, body, _content_type=MERGE_PATCH, field_validation=STRICT)

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
            self._uninstall()
            self._drop_finalizer(self.HELM_RELEASE, release, FLUX_FINALIZER)
            return
        if self._add_finalizer(self.HELM_RELEASE, release, FLUX_FINALIZER):
            return
        if self._secret_exists(f"vc-{self.release}"):
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
        if chart["chart"] != "vcluster" or chart["version"] != CHART_VERSION:
            raise RuntimeError(
                f"the stand-in has only vcluster {CHART_VERSION}, not {chart['chart']} {chart['version']}"
            )
        if deployed_release(self.api, release=self.release, namespace=self.namespace) is None:
            self._install(
                release=release["spec"].get("releaseName", self.release),
                values=release["spec"].get("values") or {},
                by=f"helm-controller from {repository['spec']['url']}",
            )
        if not self._control_plane_up(server=self._exported_server(), secret=f"vc-{self.release}", key="config"):
            return
        self._patch(
            self.HELM_RELEASE,
            self.release,
            {
                "status": {
                    "observedGeneration": release["metadata"]["generation"],
                    "lastAttemptedRevision": chart["version"],
                    "lastAttemptedReleaseAction": "install",
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "InstallSucceeded",
                            "message": f"Helm install succeeded for release {self.namespace}/{self.release}.v1 "
                            f"with chart vcluster@{chart['version']}",
                            "lastTransitionTime": _now(),
                        },
                        {
                            "type": "Released",
                            "status": "True",
                            "reason": "InstallSucceeded",
                            "message": f"Helm install succeeded for release {self.namespace}/{self.release}.v1",
                            "lastTransitionTime": _now(),
                        },
                    ],
                }
            },
            status=True,
        )

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
            self._uninstall()
            try:
                self.core.delete_namespaced_secret(f"{self.release}-kubeconfig", self.namespace)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
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
        chart = spec["helmRelease"]["chart"]
        if chart["name"] != "vcluster" or chart["version"] != CHART_VERSION:
            raise RuntimeError(
                f"the stand-in has only vcluster {CHART_VERSION}, not {chart['name']} {chart['version']}"
            )
        if deployed_release(self.api, release=self.release, namespace=self.namespace) is None:
            self._install(
                release=self.release,
                values=yaml.safe_load(spec["helmRelease"]["values"]),
                by=f"cluster-api-provider-vcluster from {chart['repo']}",
            )
        endpoint = spec["controlPlaneEndpoint"]
        if not self._control_plane_up(
            server=f"https://{endpoint['host']}:{endpoint['port']}",
            secret=f"{self.release}-kubeconfig",
            key="value",
            labels={"cluster.x-k8s.io/cluster-name": self.release},
        ):
            return
        self._patch(
            self.VCLUSTER,
            self.release,
            {
                "status": {
                    "ready": True,
                    "initialized": True,
                    "phase": "Deployed",
                    "observedGeneration": vcluster["metadata"]["generation"],
                }
            },
            status=True,
        )

        def condition(type_: str) -> dict:
            return {"type": type_, "status": "True", "reason": type_, "message": "", "lastTransitionTime": _now()}

        self._patch(
            self.CAPI_CLUSTER,
            self.release,
            {
                "status": {
                    "phase": "Provisioned",
                    "initialization": {"infrastructureProvisioned": True, "controlPlaneInitialized": True},
                    "conditions": [condition("Available"), condition("ControlPlaneInitialized")],
                    "observedGeneration": cluster["metadata"]["generation"],
                }
            },
            status=True,
        )
