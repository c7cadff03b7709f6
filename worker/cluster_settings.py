"""Reading a Cluster record's per-kind settings (``Cluster.virtual_config``), and what a mistake in them raises.

Each kind parses its section once into a frozen dataclass (e.g. ``CapnSettings.parse(cluster)``). A mistake
is a ``ClusterConfigError``, never a Kubernetes error: nothing was asked of a cluster, and an admin must fix
the record. Its message names the cluster, the key and what a valid value looks like, because it becomes the
failed tenant's reason and the admin form's error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class ClusterConfigError(Exception):
    """A Cluster record's settings are wrong for a kind (or for a tier on it); an admin must fix the record."""


class SettingsSection:
    """One kind's section of ``Cluster.virtual_config``; unknown keys are refused so typos do not pass silently."""

    def __init__(self, cluster: Any, kind: str, *, known: Iterable[str]) -> None:
        self.cluster_name = str(cluster.name)
        self.kind = kind
        section = (cluster.virtual_config or {}).get(kind, {})
        if not isinstance(section, dict):
            raise self.error(f"virtual_config.{kind} must be an object of settings, not {type(section).__name__}")
        unknown = sorted(set(section) - set(known))
        if unknown:
            raise self.error(
                f"unknown setting {', '.join(unknown)} in virtual_config.{kind} (known: {', '.join(sorted(known))})"
            )
        self.values: dict[str, Any] = section

    def error(self, message: str) -> ClusterConfigError:
        return ClusterConfigError(f"Cluster {self.cluster_name}: {message}.")

    def where(self, key: str) -> str:
        return f"virtual_config.{self.kind}.{key}"

    def text(
        self,
        key: str,
        *,
        required: bool = False,
        default: str = "",
        pattern: re.Pattern[str] | None = None,
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
