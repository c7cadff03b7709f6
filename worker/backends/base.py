"""The interface every tenancy backend implements: render, apply, ready?, credentials, teardown.

``host`` is always the portal's admin client for the tenant's registered cluster. Only ``apply`` and
``teardown`` change anything on a cluster; ``is_ready`` and ``usage`` only read, so a check can run any
number of times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from worker.isolation import ReportCheck
from worker.kube import Kube, Manifest
from worker.ownership import TopLevel


@dataclass(frozen=True)
class Access:
    """What a kubeconfig needs for one tenant: where to connect, whom to trust, as whom, and where."""

    server: str
    ca_pem: str
    user: dict[str, Any]
    namespace: str
    expires: str  # an RFC 3339 timestamp, or "oidc" for an exec plugin


class NotReadyYet(Exception):
    """``apply`` cannot go further until the cluster catches up (e.g. a grant it just wrote takes effect).

    Not an error: provisioning comes back a little later, like it does for a tenant that is not ready yet; ``after``
    (seconds) when the wait is known to be short, as for a grant the API server's authorizer has yet to see.
    """

    def __init__(self, message: str, *, after: float | None = None) -> None:
        super().__init__(message)
        self.after = after


class Backend(Protocol):
    """One kind of tenant (``tenant`` is a ``tenants.models.Tenant``, ``tier`` a ``Tier``)."""

    @property
    def kind(self) -> str: ...

    @property
    def applied_in_one_step(self) -> bool:
        """Whether one ``apply`` puts everything in place, so a step that only waits for readiness need not
        apply again. False where ``apply`` can finish only once the cluster has come up (a virtual cluster's
        own identities are set up inside it once its control plane answers)."""
        ...

    def check_cluster(self, cluster: Any) -> None:
        """Raise ClusterConfigError naming what is wrong with ``cluster``'s settings for this kind."""
        ...

    def preview(self, tenant: Any, tier: Any) -> list[Manifest]:
        """What would be created, without cluster facts (for the approver's page)."""
        ...

    def render(self, tenant: Any, host: Kube) -> list[Manifest]:
        """What ``apply`` puts on the host, with the cluster's facts (storage and priority classes)."""
        ...

    def apply(self, tenant: Any, host: Kube, *, detect_drift: bool) -> list[str]:
        """Make the cluster match; returns what drift was repaired (empty when not looking)."""
        ...

    def is_ready(self, tenant: Any, host: Kube) -> bool:
        """Whether everything ``apply`` made is up and enforced; reads only."""
        ...

    def top_level(self, tenant: Any) -> list[TopLevel]:
        """The objects that make the tenant's name taken on the cluster: never adopted, deleted by UID only."""
        ...

    def teardown(self, tenant: Any, host: Kube) -> bool:
        """Start removing everything; True once it is really gone."""
        ...

    def usage(self, tenant: Any, host: Kube) -> dict[str, Any]:
        """Quota hard limits and usage as the cluster reports them; reads only."""
        ...

    def access(self, tenant: Any, host: Kube, *, role: str, lifetime_seconds: int) -> Access:
        """A fresh short-lived credential for the tenant's team, with where to use it."""
        ...

    def isolation_client(self, tenant: Any, host: Kube) -> Kube:
        """A client holding the tenant's own credentials, for the isolation report."""
        ...

    def isolation_checks(self) -> Sequence[ReportCheck]: ...
