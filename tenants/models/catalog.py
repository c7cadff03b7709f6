"""What a tenant is made from: its kind, the tiers, the clusters and their prices."""

from __future__ import annotations

from dataclasses import dataclass

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q

from tenants.models.people import User
from tenants.validation import ingress_domain_template_errors, validate_egress_rules


class TenantKind(models.TextChoices):
    NAMESPACE = "namespace", "Namespace"
    VCLUSTER = "vcluster", "Virtual cluster (vcluster)"
    VIRTUALCLUSTER = "virtualcluster", "VirtualCluster (Cluster API Provider Nested)"
    HYPERSHIFT = "hypershift", "Hosted control plane (HyperShift)"
    KCP = "kcp", "kcp workspace"


# What a requester should know about each kind; shown next to the choice in the UI and the API.
KIND_NOTES: dict[str, str] = {
    TenantKind.NAMESPACE: "A namespace on a shared cluster: quotas, network policies and namespaced admin rights.",
    TenantKind.VCLUSTER: "Your own Kubernetes API inside an isolated host namespace: "
    "CRDs, ClusterRoles and operators are yours.",
    TenantKind.VIRTUALCLUSTER: "The upstream multi-tenancy VirtualCluster project is archived and unmaintained; "
    "prefer vcluster.",
    TenantKind.HYPERSHIFT: "A hosted control plane with its own worker nodes from a NodePool (OpenShift / HyperShift).",
    TenantKind.KCP: "A kcp workspace: a Kubernetes-like API for CRDs and controllers. kcp runs no pods.",
}


class SleepBudget(models.TextChoices):
    """How a sleeping tenant counts against its team's CPU and memory budget (storage and the tenant count
    always count: its volumes and its name stay)."""

    FULL = "full", "Fully, as when awake"
    NONE = "none", "Not at all for CPU and memory"


class Tier(models.Model):
    class PodSecurity(models.TextChoices):
        RESTRICTED = "restricted", "Restricted"
        BASELINE = "baseline", "Baseline"
        PRIVILEGED = "privileged", "Privileged"

    class NetworkProfile(models.TextChoices):
        ISOLATED = "isolated", "Isolated: deny all, allow DNS and same namespace"
        INGRESS = "ingress", "Isolated, plus ingress from the cluster's ingress namespace"
        OPEN_EGRESS = "open-egress", "Ingress-isolated, egress anywhere"

    class ApiFairness(models.TextChoices):
        NONE = "", "Cluster default"
        LOW = "workload-low", "Low (workload-low)"
        HIGH = "workload-high", "High (workload-high)"

    name = models.SlugField(max_length=30, unique=True)
    display_name = models.CharField(max_length=60)
    description = models.TextField(blank=True)
    order = models.PositiveSmallIntegerField(default=0)
    # ResourceQuota hard limits.
    cpu_request_millis = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    cpu_limit_millis = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    memory_request_mib = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    memory_limit_mib = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    storage_gib = models.PositiveIntegerField(default=0)
    max_pods = models.PositiveIntegerField(default=20)
    max_services = models.PositiveIntegerField(default=10)
    max_load_balancers = models.PositiveIntegerField(default=0)
    max_pvcs = models.PositiveIntegerField(default=5)
    max_configmaps = models.PositiveIntegerField(default=50)
    max_secrets = models.PositiveIntegerField(default=50)
    # LimitRange defaults for containers that declare nothing.
    default_cpu_request_millis = models.PositiveIntegerField(default=100)
    default_cpu_limit_millis = models.PositiveIntegerField(default=500)
    default_memory_request_mib = models.PositiveIntegerField(default=128)
    default_memory_limit_mib = models.PositiveIntegerField(default=512)
    # Isolation.
    pod_security_level = models.CharField(max_length=12, choices=PodSecurity.choices, default=PodSecurity.RESTRICTED)
    network_profile = models.CharField(max_length=12, choices=NetworkProfile.choices, default=NetworkProfile.ISOLATED)
    egress_allow = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_egress_rules],
        help_text='Egress also allowed to these networks, e.g. a proxy or a database subnet: [{"cidr": "10.20.0.0/16", '
        '"ports": [{"protocol": "TCP", "port": 5432}]}]; no ports: every port.',
    )
    node_selector = models.JSONField(default=dict, blank=True, help_text='Node pool, e.g. {"pool": "dedicated"}.')
    tolerations = models.JSONField(default=list, blank=True)
    allowed_priority_classes = models.JSONField(default=list, blank=True, help_text="Empty: none allowed.")
    allowed_storage_classes = models.JSONField(default=list, blank=True, help_text="Empty: any storage class.")
    api_fairness = models.CharField(max_length=20, choices=ApiFairness.choices, default=ApiFairness.NONE, blank=True)
    # Escape classes the cluster-wide guards close (worker/guards.py); a tier may open one where a platform allows it.
    allow_external_ips = models.BooleanField(
        default=False, help_text="Allow Services with externalIPs (CVE-2020-8554: they can intercept traffic)."
    )
    allow_external_name = models.BooleanField(
        default=False, help_text="Allow ExternalName Services (CVE-2021-25740: they can point at other namespaces)."
    )
    allow_manual_endpoints = models.BooleanField(
        default=False, help_text="Let tenants write Endpoints and EndpointSlices themselves (CVE-2021-25740)."
    )
    allow_any_ingress_host = models.BooleanField(
        default=False,
        help_text="Allow Ingress hosts outside the tenant's domains on the cluster (first come, first served).",
    )
    # Lifecycle.
    max_credential_lifetime_seconds = models.PositiveIntegerField(default=3600, validators=[MinValueValidator(600)])
    default_expiry_days = models.PositiveIntegerField(default=30, validators=[MinValueValidator(1)])
    max_expiry_days = models.PositiveIntegerField(default=90, validators=[MinValueValidator(1)])
    auto_approve = models.BooleanField(default=False)
    auto_approve_downgrades = models.BooleanField(
        default=False,
        help_text="Approve a move from this tier to a smaller one that grants nothing more (right-sizing) "
        "without an approver.",
    )
    # Sleep (tenants.services.sleep): workloads scaled to zero while nobody needs them.
    sleep_allowed = models.BooleanField(
        default=False, help_text="Owners may put tenants to sleep, and schedules and the idle period apply."
    )
    sleep_budget = models.CharField(
        max_length=8,
        choices=SleepBudget.choices,
        default=SleepBudget.FULL,
        help_text="How a sleeping tenant counts against its team's CPU and memory budget.",
    )
    sleep_after_idle_hours = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Put a tenant to sleep after this many hours without activity Berth can see; empty: never.",
    )
    viewers_read_logs = models.BooleanField(
        default=False,
        db_default=False,  # the previous release inserts tiers without it
        help_text="Team viewers may read pod logs (the viewer Role gets pods/log); owners and members always may.",
    )
    is_active = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["order", "name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(cpu_limit_millis__gte=models.F("cpu_request_millis")), name="tier_cpu_limit_gte_request"
            ),
            models.CheckConstraint(
                condition=Q(memory_limit_mib__gte=models.F("memory_request_mib")), name="tier_memory_limit_gte_request"
            ),
            models.CheckConstraint(
                condition=Q(max_credential_lifetime_seconds__gte=600), name="tier_credential_lifetime_floor"
            ),
            models.CheckConstraint(condition=Q(sleep_budget__in=["full", "none"]), name="tier_sleep_budget_valid"),
        ]

    def __str__(self) -> str:
        return self.display_name


@dataclass(frozen=True)
class Allocation:
    """What tenants take from a team's budget: their tiers' limits, summed."""

    cpu_millis: int = 0
    memory_mib: int = 0
    storage_gib: int = 0
    tenants: int = 0

    @classmethod
    def of(cls, tier: Tier, count: int = 1) -> Allocation:
        return cls(tier.cpu_limit_millis * count, tier.memory_limit_mib * count, tier.storage_gib * count, count)

    def astuple(self) -> tuple[int, int, int, int]:
        return (self.cpu_millis, self.memory_mib, self.storage_gib, self.tenants)

    def __add__(self, other: Allocation) -> Allocation:
        return Allocation(*(a + b for a, b in zip(self.astuple(), other.astuple(), strict=True)))

    def __sub__(self, other: Allocation) -> Allocation:
        return Allocation(*(a - b for a, b in zip(self.astuple(), other.astuple(), strict=True)))


class Cluster(models.Model):
    class AccessMode(models.TextChoices):
        TOKEN = "token", "Short-lived ServiceAccount tokens"
        OIDC = "oidc", "OpenID Connect (kubelogin)"

    name = models.SlugField(max_length=40, unique=True)
    display_name = models.CharField(max_length=100)
    api_url = models.URLField(help_text="How the portal's worker reaches the API server.")
    ca_pem = models.TextField(blank=True, help_text="PEM CA bundle of the API server (public).")
    credential_ref = models.CharField(
        max_length=500,
        help_text="Where the worker finds its credential: 'kubeconfig:/path', 'env:VAR' (a kubeconfig in an env var) "
        "or 'incluster'.",
    )
    public_endpoint = models.URLField(help_text="The API URL handed to tenants in their kubeconfig.")
    namespace_prefix = models.CharField(
        max_length=20, blank=True, help_text="Prefix added to tenant names on this cluster."
    )
    access_mode = models.CharField(max_length=5, choices=AccessMode.choices, default=AccessMode.TOKEN)
    oidc_issuer_url = models.URLField(blank=True)
    oidc_client_id = models.CharField(max_length=200, blank=True)
    oidc_groups_prefix = models.CharField(
        max_length=40, blank=True, help_text="The API server's OIDC groups prefix, e.g. 'oidc:'."
    )
    oidc_extra_scopes = models.CharField(
        max_length=200, blank=True, default="groups", help_text="Scopes kubelogin asks for besides openid."
    )
    ingress_namespace = models.CharField(max_length=63, blank=True)
    ingress_domains = models.JSONField(
        default=list,
        blank=True,
        help_text='DNS suffixes a tenant\'s Ingress hosts must lie under, e.g. ["{namespace}.apps.example.com"]; '
        "{namespace} keeps each tenant's apart. Empty: tenants get no Ingress hosts unless their tier allows any.",
    )
    monitoring_links = models.JSONField(
        default=list,
        blank=True,
        help_text='List of {"name": ..., "url": ...}; the url may use {namespace}, {tenant}, {team}, {cluster}.',
    )
    prometheus = models.CharField(
        max_length=63,
        blank=True,
        # A default in the database too: web processes of the previous release insert clusters without it.
        default="",
        db_default="",
        help_text="Which Prometheus holds this cluster's metrics: a name in the deployment's BERTH_PROMETHEUS "
        "(see docs/monitoring.md). Empty: tenants here get no metrics.",
    )
    kinds = models.JSONField(default=list, help_text='Tenancy kinds offered, e.g. ["namespace", "vcluster"].')
    virtual_config = models.JSONField(
        default=dict,
        blank=True,
        help_text="Settings per virtual-cluster kind, keyed by kind (see docs/virtual-clusters.md), "
        'e.g. {"vcluster": {"installer": "helm", "chart_version": "0.30.1"}}.',
    )
    tiers = models.ManyToManyField(Tier, related_name="clusters", blank=True)
    # Which physical API server this record points at (its kube-system namespace's UID), read when the cluster
    # is saved or first used: records that point at one server share one namespace space.
    physical_id = models.CharField(max_length=100, blank=True, editable=False)
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(access_mode__in=["token", "oidc"]), name="cluster_access_mode_valid"),
        ]

    def __str__(self) -> str:
        return self.display_name

    def clean(self) -> None:
        """Refuse kinds and virtual-cluster settings the worker could not use (the admin form shows why)."""
        from django.conf import settings
        from django.core.exceptions import ValidationError

        from tenants import hooks

        if not isinstance(self.kinds, list) or not all(isinstance(k, str) for k in self.kinds):
            raise ValidationError({"kinds": 'A list of kinds, e.g. ["namespace", "vcluster"].'})
        unknown = sorted(set(self.kinds) - set(TenantKind.values))
        if unknown:
            raise ValidationError(
                {"kinds": f"Unknown kind(s) {', '.join(unknown)}; choose from {', '.join(TenantKind.values)}."}
            )
        domain_errors = ingress_domain_template_errors(self.ingress_domains)
        if domain_errors:
            raise ValidationError({"ingress_domains": domain_errors})
        if self.prometheus and self.prometheus not in settings.BERTH_PROMETHEUS:
            named = ", ".join(sorted(settings.BERTH_PROMETHEUS)) or "none"
            raise ValidationError(
                {"prometheus": f"No Prometheus named {self.prometheus!r} in BERTH_PROMETHEUS (it names: {named})."}
            )
        worker = hooks.installed()
        errors = worker.cluster_config_errors(self) if worker else {}
        if errors:
            raise ValidationError(
                {"virtual_config": [f"{kind}: {message}" for kind, message in sorted(errors.items())]}
            )


def _platform_currency() -> str:
    from django.conf import settings

    return str(settings.BERTH_CURRENCY)


class ClusterPrice(models.Model):
    """What one cluster's resources cost from ``effective_from`` (00:00 UTC that day) until the next price.

    Prices are never rewritten once in effect: a change is a new row, so past months keep the prices they
    had (tenants.costs.prices). Storage is priced per GiB-month, a month being 730 hours (8760 / 12);
    showback (tenants.costs.showback) reads these.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="prices")
    effective_from = models.DateField(help_text="The UTC day from whose start (00:00 UTC) these prices apply.")
    currency = models.CharField(max_length=3, default=_platform_currency, help_text="ISO 4217 code, e.g. EUR.")
    cpu_core_hour = models.DecimalField(
        max_digits=14, decimal_places=6, validators=[MinValueValidator(0)], help_text="Per CPU core (request) hour."
    )
    memory_gib_hour = models.DecimalField(
        max_digits=14, decimal_places=6, validators=[MinValueValidator(0)], help_text="Per GiB of memory hour."
    )
    storage_gib_month = models.DecimalField(
        max_digits=14,
        decimal_places=6,
        validators=[MinValueValidator(0)],
        help_text="Per GiB of storage month (730 hours).",
    )
    created_by = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster", "effective_from"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "effective_from"], name="cluster_price_one_per_day"),
            models.CheckConstraint(
                condition=Q(cpu_core_hour__gte=0) & Q(memory_gib_hour__gte=0) & Q(storage_gib_month__gte=0),
                name="cluster_price_not_negative",
            ),
            models.CheckConstraint(condition=Q(currency__regex=r"^[A-Z]{3}$"), name="cluster_price_currency_code"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id} from {self.effective_from}: {self.currency}"
