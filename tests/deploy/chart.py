"""Rendering deploy/helm/berth with the real helm, and reading what it renders.

Every documented values combination is a file in deploy/helm/berth/ci/ (the chart-testing convention); the tests
render each one. Nothing here needs a cluster.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.helpers import ROOT

CHART = ROOT / "deploy" / "helm" / "berth"
VALUES_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
RELEASE = "berth"
NAMESPACE = "berth-system"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job")

Obj = dict[str, Any]


def helm(helm_bin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm_bin), *args], capture_output=True, text=True, timeout=120, check=False)


def template_args(values: Path | None, *sets: str, release: str = RELEASE, namespace: str = NAMESPACE) -> list[str]:
    args = ["template", release, str(CHART), "--namespace", namespace]
    if values is not None:
        args += ["--values", str(values)]
    for item in sets:
        # "json:key=<json>" for values --set would read as strings (floats, for one).
        args += ["--set-json", item.removeprefix("json:")] if item.startswith("json:") else ["--set", item]
    return args


@cache
def _render(helm_bin: Path, values: Path | None, sets: tuple[str, ...], release: str, namespace: str) -> str:
    done = helm(helm_bin, *template_args(values, *sets, release=release, namespace=namespace))
    assert done.returncode == 0, f"helm template {values} {sets} failed:\n{done.stderr}"
    return done.stdout


def render(
    helm_bin: Path, values: Path | None, *sets: str, release: str = RELEASE, namespace: str = NAMESPACE
) -> list[Obj]:
    """Every object `helm template` renders (hooks included), as dicts."""
    text = _render(helm_bin, values, sets, release, namespace)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def rendered_text(
    helm_bin: Path, values: Path | None, *sets: str, release: str = RELEASE, namespace: str = NAMESPACE
) -> str:
    return _render(helm_bin, values, sets, release, namespace)


def by_kind(objs: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind]


def named(objs: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: found {len(found)}"
    return found[0]


def pod_specs(objs: list[Obj]) -> Iterator[tuple[str, Obj]]:
    """(Kind/name, pod spec) of every workload."""
    for obj in objs:
        if obj["kind"] in WORKLOAD_KINDS:
            yield f"{obj['kind']}/{obj['metadata']['name']}", obj["spec"]["template"]["spec"]


def containers(objs: list[Obj]) -> Iterator[tuple[str, Obj, Obj]]:
    """(Kind/name, pod spec, container) of every container, init containers too."""
    for where, spec in pod_specs(objs):
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            yield f"{where}/{container['name']}", spec, container


def portal_containers(objs: list[Obj]) -> dict[str, Obj]:
    """The containers that run Berth itself (web, workers, beat, migrations), by Kind/name/container."""
    return {where: c for where, _, c in containers(objs) if any(e["name"] == "DJANGO_DEBUG" for e in c.get("env", []))}


def env_of(container: Obj) -> dict[str, Obj]:
    """Each variable's definition (``value`` or ``valueFrom``), by name."""
    return {e["name"]: e for e in container.get("env", [])}


def mounted_paths(spec: Obj, container: Obj) -> dict[str, tuple[str, str]]:
    """In-container path → (Secret or ConfigMap name, key) of every file the container gets from one."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    paths: dict[str, tuple[str, str]] = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        sources = volume.get("projected", {}).get("sources", [])
        if "secret" in volume:
            sources = [{"secret": {"name": volume["secret"]["secretName"], "items": volume["secret"].get("items", [])}}]
        if "configMap" in volume:
            sources = [{"configMap": volume["configMap"]}]
        for source in sources:
            ref = source.get("secret") or source.get("configMap") or {}
            for item in ref.get("items", []):
                paths[f"{mount['mountPath']}/{item['path']}"] = (ref["name"], item["key"])
    return paths


def load_values(path: Path) -> Obj:
    return yaml.safe_load(path.read_text()) or {}
