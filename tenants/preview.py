"""The manifest preview pages show before approval, rendered by whoever registered a renderer.

``tenants`` never imports ``worker``: the worker app registers its renderer when
Django starts. The registry itself is ``tenants.hooks`` (which the worker also uses
for kubeconfigs), so registering here or there is the same thing.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tenants import hooks

Renderer = Callable[..., str]


def register(fn: Renderer) -> None:
    """Install ``fn(tenant, *, tier=None) -> str`` (YAML of what provisioning would apply)."""
    hooks.register("manifest_preview", fn)


def manifest_preview(tenant: Any, *, tier: Any = None) -> str | None:
    """YAML of what would be applied for ``tenant`` (at ``tier`` if given), or None without a renderer."""
    return hooks.manifest_preview(tenant, tier=tier)
