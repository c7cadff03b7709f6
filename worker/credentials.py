"""Kubeconfigs handed to tenants: short-lived TokenRequest tokens, or an OIDC exec plugin with no secret at all."""
from __future__ import annotations

import base64
from typing import Any

import yaml

from worker import kube, manifests

SERVICE_ACCOUNT = {"edit": manifests.TENANT_SA, "view": manifests.VIEWER_SA}


def _ca(tenant: Any) -> str:
    return tenant.cluster.ca_pem or kube.for_cluster(tenant.cluster).ca_pem()


def _names(tenant: Any, role: str) -> tuple[str, str, str]:
    cluster = tenant.cluster.name
    return cluster, f"{cluster}-{tenant.namespace}-{role}", f"{cluster}/{tenant.namespace}"


def _user(tenant: Any, role: str, lifetime_seconds: int) -> tuple[dict, str]:
    """A kubeconfig user entry and a note on how long it lasts."""
    cluster = tenant.cluster
    if cluster.access_mode == "oidc":
        scopes = [s for s in cluster.oidc_extra_scopes.split(",") if s.strip()] if cluster.oidc_extra_scopes else []
        args = ["oidc-login", "get-token", f"--oidc-issuer-url={cluster.oidc_issuer_url}", f"--oidc-client-id={cluster.oidc_client_id}"]
        args += [f"--oidc-extra-scope={s.strip()}" for s in scopes]
        return {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": "kubectl", "args": args,
            "interactiveMode": "IfAvailable", "provideClusterInfo": False,
            "installHint": "Install kubelogin (kubectl oidc-login): https://github.com/int128/kubelogin",
        }}, "oidc"
    token, expires = kube.for_cluster(cluster).request_token(
        namespace=tenant.namespace, service_account=SERVICE_ACCOUNT[role], lifetime_seconds=lifetime_seconds,
    )
    return {"token": token}, expires


def _kubeconfig(entries: list[tuple[Any, str, int]]) -> str:
    clusters: dict[str, dict] = {}
    users, contexts, comments = [], [], []
    for tenant, role, lifetime in entries:
        cluster_name, user_name, context_name = _names(tenant, role)
        clusters.setdefault(cluster_name, {"name": cluster_name, "cluster": {
            "server": tenant.cluster.public_endpoint,
            "certificate-authority-data": base64.b64encode(_ca(tenant).encode()).decode(),
        }})
        user, expires = _user(tenant, role, lifetime)
        users.append({"name": user_name, "user": user})
        contexts.append({"name": context_name, "context": {"cluster": cluster_name, "user": user_name, "namespace": tenant.namespace}})
        comments.append(f"# {context_name}: {role} access, " + ("OIDC sign-in via kubelogin" if expires == "oidc" else f"token expires {expires}"))
    config = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": list(clusters.values()), "users": users, "contexts": contexts,
        "current-context": contexts[0]["name"] if contexts else "",
    }
    return "# Issued by Berth. Short-lived: fetch a fresh one when it expires.\n" + "\n".join(comments) + "\n" + yaml.safe_dump(config, sort_keys=False)


def issue_kubeconfig(tenant: Any, *, role: str, lifetime_seconds: int) -> str:
    return _kubeconfig([(tenant, role, lifetime_seconds)])


def issue_merged_kubeconfig(grants: list[tuple[Any, str, int]]) -> str:
    return _kubeconfig(grants)
