"""The interface every tenancy backend implements: render, apply, ready?, credentials, teardown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.kube import Kube
from worker.ownership import TopLevel


@dataclass(frozen=True)
class Access:
    """What a kubeconfig needs for one tenant: where to connect, whom to trust, as whom, and where."""

    server: str
    ca_pem: str
    user: dict
    namespace: str
    expires: str  # an RFC 3339 timestamp, or "oidc" for an exec plugin


class Backend:
    """One kind of tenant. ``host`` is the portal's admin client for the tenant's registered cluster."""

    kind: str = ""

    def check_cluster(self, cluster: Any) -> None:
        """Raise KubePermanentError naming what is wrong with ``cluster``'s settings for this kind."""

    def render(self, tenant: Any, host: Kube) -> list[dict]:
        raise NotImplementedError

    def apply(self, tenant: Any, host: Kube, *, detect_drift: bool) -> list[str]:
        """Make the cluster match; returns what drift was repaired (empty when not looking)."""
        raise NotImplementedError

    def is_ready(self, tenant: Any, host: Kube) -> bool:
        raise NotImplementedError

    def top_level(self, tenant: Any) -> list[TopLevel]:
        """The objects that make the tenant's name taken on the cluster: never adopted, deleted by UID only."""
        return [TopLevel("Namespace", tenant.namespace)]

    def teardown(self, tenant: Any, host: Kube) -> bool:
        """Start removing everything; True once it is really gone."""
        raise NotImplementedError

    def usage(self, tenant: Any, host: Kube) -> dict:
        return {}

    def access(self, tenant: Any, host: Kube, *, role: str, lifetime_seconds: int) -> Access:
        raise NotImplementedError

    def isolation_client(self, tenant: Any, host: Kube) -> Kube:
        """A client holding the tenant's own credentials, for the isolation report."""
        raise NotImplementedError

    def isolation_checks(self) -> list:
        raise NotImplementedError

    def preview(self, tenant: Any, tier: Any) -> list[dict]:
        """What would be created, without cluster facts (for the approver's page)."""
        raise NotImplementedError
