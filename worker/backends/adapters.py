"""What the operator adapters (VirtualCluster, HyperShift, kcp) share.

Each adapter reads its section of ``Cluster.virtual_config`` through ``Settings``,
whose errors name the cluster, the key and what a valid value looks like: they
become the failed tenant's reason, so an admin can fix the cluster record
without reading logs. The custom resources are created through
``apply_custom_resources``, which explains a missing CRD as a missing operator.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from worker.kube import Kube, KubePermanentError

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class Settings:
    """One kind's section of ``Cluster.virtual_config``; unknown keys are refused so typos do not pass silently."""

    def __init__(self, cluster: Any, kind: str, *, known: Iterable[str]):
        self.cluster_name = cluster.name
        self.kind = kind
        section = (cluster.virtual_config or {}).get(kind, {})
        if not isinstance(section, dict):
            raise self.error(f"virtual_config.{kind} must be an object of settings, not {type(section).__name__}")
        unknown = sorted(set(section) - set(known))
        if unknown:
            raise self.error(
                f"unknown setting {', '.join(unknown)} in virtual_config.{kind} (known: {', '.join(sorted(known))})"
            )
        self.values = section

    def error(self, message: str) -> KubePermanentError:
        return KubePermanentError(f"Cluster {self.cluster_name}: {message}.")

    def where(self, key: str) -> str:
        return f"virtual_config.{self.kind}.{key}"

    def text(
        self,
        key: str,
        *,
        required: bool = False,
        default: str = "",
        pattern: re.Pattern | None = None,
        choices: Iterable[str] = (),
        example: str = "",
    ) -> str:
        value = self.values.get(key, default)
        hint = f" (e.g. {example})" if example else ""
        if not isinstance(value, str):
            raise self.error(f"{self.where(key)} must be a string{hint}")
        value = value.strip()
        if not value:
            if required:
                raise self.error(f"{self.where(key)} is required{hint}")
            return value
        allowed = list(choices)
        if allowed and value not in allowed:
            raise self.error(f"{self.where(key)} is {value!r}; choose one of {', '.join(allowed)}")
        if pattern is not None and not pattern.fullmatch(value):
            raise self.error(f"{self.where(key)} {value!r} is not valid{hint}")
        return value

    def counts(self, key: str, *, maximum: int) -> dict[str, int]:
        """A mapping of names to whole numbers between 1 and ``maximum``."""
        value = self.values.get(key, {})
        if not isinstance(value, dict):
            raise self.error(f'{self.where(key)} must map tier names to numbers, e.g. {{"small": 1, "medium": 2}}')
        for name, count in value.items():
            if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= maximum:
                raise self.error(f"{self.where(key)}.{name} must be a whole number from 1 to {maximum}, not {count!r}")
        return dict(value)


def apply_custom_resources(host: Kube, objs: list[dict], *, operator: str) -> list[dict]:
    """Server-side apply operator-owned custom resources; a 404 means the CRD (so the operator) is not installed."""
    try:
        return host.apply(objs)
    except KubePermanentError as exc:
        if exc.status == 404:
            kinds = ", ".join(sorted({o["kind"] for o in objs}))
            raise KubePermanentError(
                f"The cluster does not serve {kinds}: the host admin must install {operator} first ({exc})",
                status=404,
            ) from None
        raise


def condition(obj: dict | None, type_: str) -> dict:
    """The status condition of ``type_``, or {} when the operator has not reported it yet."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return {}


def delete_until_gone(host: Kube, refs: Iterable[tuple[str, str, str | None]]) -> bool:
    """Ask for deletion of each (kind, name, namespace); True once none exists (their finalizers have run)."""
    gone = True
    for kind, name, namespace in refs:
        live = host.get(kind, name, namespace=namespace)  # None also when the CRD itself is gone
        if live is None:
            continue
        gone = False
        if not live["metadata"].get("deletionTimestamp"):
            host.delete(kind, name, namespace=namespace)
    return gone
