"""Kubeconfigs handed to tenants, built from each backend's ``access``: short-lived tokens or an OIDC exec plugin."""
from __future__ import annotations

import base64
from typing import Any

import yaml

from worker import kube
from worker.backends import backend_for


def _kubeconfig(entries: list[tuple[Any, str, int]]) -> str:
    clusters, users, contexts, comments = [], [], [], []
    for tenant, role, lifetime in entries:
        access = backend_for(tenant).access(tenant, kube.for_cluster(tenant.cluster), role=role, lifetime_seconds=lifetime)
        name = f"{tenant.cluster.name}/{tenant.namespace}"
        cluster_name, user_name = f"{name}", f"{name}-{role}"
        clusters.append({"name": cluster_name, "cluster": {
            "server": access.server, "certificate-authority-data": base64.b64encode(access.ca_pem.encode()).decode(),
        }})
        users.append({"name": user_name, "user": access.user})
        contexts.append({"name": name, "context": {"cluster": cluster_name, "user": user_name, "namespace": access.namespace}})
        how = "OIDC sign-in via kubelogin" if access.expires == "oidc" else f"token expires {access.expires}"
        comments.append(f"# {name}: {role} access, {how}")
    config = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": clusters, "users": users, "contexts": contexts,
        "current-context": contexts[0]["name"] if contexts else "",
    }
    return "# Issued by Berth. Short-lived: fetch a fresh one when it expires.\n" + "\n".join(comments) + "\n" + yaml.safe_dump(config, sort_keys=False)


def issue_kubeconfig(tenant: Any, *, role: str, lifetime_seconds: int) -> str:
    return _kubeconfig([(tenant, role, lifetime_seconds)])


def issue_merged_kubeconfig(grants: list[tuple[Any, str, int]]) -> str:
    return _kubeconfig(grants)
