"""Kubeconfigs handed to tenants, built from each backend's ``access``: short-lived tokens or an OIDC exec plugin."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import yaml

from tenants.hooks import KubeconfigGrant
from worker import kube
from worker.backends import backend_for


def kubeconfig(grants: Sequence[KubeconfigGrant]) -> str:
    """One kubeconfig with a context per grant, each with a fresh credential from the tenant's backend."""
    clusters: list[dict[str, Any]] = []
    users: list[dict[str, Any]] = []
    contexts: list[dict[str, Any]] = []
    comments: list[str] = []
    for grant in grants:
        tenant, role = grant.tenant, grant.role
        host = kube.for_cluster(tenant.cluster)
        access = backend_for(tenant).access(tenant, host, role=role, lifetime_seconds=grant.lifetime_seconds)
        name = f"{tenant.cluster.name}/{tenant.namespace}"
        cluster_name, user_name = f"{name}", f"{name}-{role}"
        clusters.append(
            {
                "name": cluster_name,
                "cluster": {
                    "server": access.server,
                    "certificate-authority-data": base64.b64encode(access.ca_pem.encode()).decode(),
                },
            }
        )
        users.append({"name": user_name, "user": access.user})
        contexts.append(
            {"name": name, "context": {"cluster": cluster_name, "user": user_name, "namespace": access.namespace}}
        )
        how = "OIDC sign-in via kubelogin" if access.expires == "oidc" else f"token expires {access.expires}"
        comments.append(f"# {name}: {role} access, {how}")
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": clusters,
        "users": users,
        "contexts": contexts,
        "current-context": contexts[0]["name"] if contexts else "",
    }
    return (
        "# Issued by Berth. Short-lived: fetch a fresh one when it expires.\n"
        + "\n".join(comments)
        + "\n"
        + yaml.safe_dump(config, sort_keys=False)
    )
