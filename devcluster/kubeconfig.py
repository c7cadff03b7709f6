"""Kubeconfig files for the dev control plane, with the CA and credentials embedded."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml


def _b64(pem: str) -> str:
    return base64.b64encode(pem.encode()).decode()


def kubeconfig(
    *,
    server: str,
    ca_pem: str,
    user: str,
    token: str | None = None,
    client_cert_pem: str | None = None,
    client_key_pem: str | None = None,
    namespace: str | None = None,
    cluster_name: str = "berth-devcluster",
) -> dict:
    """A single-context kubeconfig; give either a bearer token or a client cert and key."""
    if (token is None) == (client_cert_pem is None):
        raise ValueError("give exactly one of token or client_cert_pem")
    credentials: dict[str, str] = (
        {"token": token}
        if token is not None
        else {
            "client-certificate-data": _b64(client_cert_pem or ""),
            "client-key-data": _b64(client_key_pem or ""),
        }
    )
    context: dict[str, str] = {"cluster": cluster_name, "user": user}
    if namespace:
        context["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": context}],
        "current-context": user,
        "preferences": {},
    }


def write_private(path: Path, text: str) -> Path:
    """Write a file only the current user can read: it holds keys or tokens."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return path


def write_kubeconfig(path: Path, config: dict) -> Path:
    return write_private(path, yaml.safe_dump(config, sort_keys=False))
