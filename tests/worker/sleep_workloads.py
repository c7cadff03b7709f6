"""Workloads for the sleep tests: Deployments, StatefulSets and CronJobs a tenant makes with its own kubeconfig,
Pod-Security-restricted so the tenant's namespace admits their pods; and reading them back as the admin."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from tests.plugins.kube import wait_for
from worker.sleep import REPLICAS_ANNOTATION, SUSPEND_ANNOTATION

RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _pod_template(app: str, *, image: str = "busybox", command: list[str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "c",
        "image": image,
        "command": command or ["sleep", "1d"],
        "securityContext": RESTRICTED_CONTAINER,
    }
    if image != "busybox":
        container["imagePullPolicy"] = "Never"  # the dev nodes' images are imported, never pulled
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {"securityContext": RESTRICTED_POD, "terminationGracePeriodSeconds": 5, "containers": [container]},
    }


def deployment(
    name: str,
    replicas: int,
    *,
    annotations: dict[str, str] | None = None,
    image: str = "busybox",
    command: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": _pod_template(name, image=image, command=command),
        },
    }


def statefulset(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": _pod_template(name),
        },
    }


def cronjob(name: str, *, suspend: bool) -> dict[str, Any]:
    template = _pod_template(name)
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {"schedule": "0 3 * * *", "suspend": suspend, "jobTemplate": {"spec": {"template": template}}},
    }


def apply_as(kubectl, kubeconfig: str, *objs: dict[str, Any]) -> None:
    """Apply ``objs`` into the kubeconfig's namespace, as its holder (the tenant)."""
    for obj in objs:
        done = kubectl("apply", "-f", "-", kubeconfig=kubeconfig, input=json.dumps(obj))
        assert done.returncode == 0, done.stderr


def state(api: client.ApiClient, namespace: str) -> dict[str, tuple[Any, str | None]]:
    """Each workload in ``namespace``: "Kind/name" → (replicas or suspend, Berth's annotation or None)."""
    apps, batch = client.AppsV1Api(api), client.BatchV1Api(api)
    found: dict[str, tuple[Any, str | None]] = {}
    for kind, items in (
        ("Deployment", apps.list_namespaced_deployment(namespace).items),
        ("StatefulSet", apps.list_namespaced_stateful_set(namespace).items),
    ):
        for obj in items:
            note = (obj.metadata.annotations or {}).get(REPLICAS_ANNOTATION)
            found[f"{kind}/{obj.metadata.name}"] = (obj.spec.replicas, note)
    for cron in batch.list_namespaced_cron_job(namespace).items:
        note = (cron.metadata.annotations or {}).get(SUSPEND_ANNOTATION)
        found[f"CronJob/{cron.metadata.name}"] = (bool(cron.spec.suspend), note)
    return found


def pods_of(api: client.ApiClient, namespace: str, app: str) -> list[client.V1Pod]:
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"app={app}").items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def wait_pods(api: client.ApiClient, namespace: str, app: str, count: int, timeout: float = 60.0) -> None:
    wait_for(
        lambda: len(pods_of(api, namespace, app)) == count or None,
        timeout=timeout,
        what=f"{count} pods app={app} in {namespace}",
    )


def wait_settled(api: client.ApiClient, namespace: str, timeout: float = 60.0) -> None:
    """Until the deployment controller has nothing left to write: every Deployment's status is of its generation
    and counts no replica (a status write changes the resourceVersion a guarded patch names)."""

    def settled() -> bool:
        items = client.AppsV1Api(api).list_namespaced_deployment(namespace).items
        return all(d.status.observed_generation == d.metadata.generation and not d.status.replicas for d in items)

    wait_for(lambda: settled() or None, timeout=timeout, what=f"the Deployments in {namespace} to settle at zero")
