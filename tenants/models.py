"""Berth's domain: teams, clusters, tiers, requests, tenants, API tokens and the audit trail.

Models hold data and invariants the database can enforce; every state change
goes through ``tenants.services``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pgtrigger
from django.contrib.auth.models import AbstractUser
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from tenants.validation import ingress_domain_template_errors, validate_time_zone


class User(AbstractUser):
    """A person signed in through OIDC; platform roles are mirrored from groups on each login."""

    oidc_subject = models.CharField(max_length=255, unique=True, null=True, blank=True)
    display_name = models.CharField(max_length=255, blank=True)
    is_platform_admin = models.BooleanField(default=False)
    is_approver = models.BooleanField(default=False)
    # When the provider last confirmed who this person is and which groups they are in (a sign-in, a
    # bearer token with groups, or a re-check with the refresh token); API tokens need it to be recent.
    identity_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The provider's refresh token, sealed (tenants.sealing): how Berth re-checks groups without the person.
    idp_refresh_token = models.TextField(blank=True, editable=False)

    @property
    def can_decide(self) -> bool:
        return self.is_platform_admin or self.is_approver

    @property
    def platform_roles(self) -> list[str]:
        return [role for role, has in (("admin", self.is_platform_admin), ("approver", self.is_approver)) if has]

    def __str__(self) -> str:
        return self.display_name or self.username


class Team(models.Model):
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=100)
    oidc_group = models.CharField(max_length=255, unique=True, help_text="The groups-claim value that makes a member.")
    contact_email = models.EmailField(blank=True)
    # The team's budget: the sum of its live tenants' tier allocations may not exceed it.
    budget_cpu_millis = models.PositiveIntegerField(default=16000, help_text="CPU limit budget in millicores.")
    budget_memory_mib = models.PositiveIntegerField(default=32768, help_text="Memory limit budget in MiB.")
    budget_storage_gib = models.PositiveIntegerField(default=500)
    budget_tenants = models.PositiveIntegerField(default=10)
    # Where the team works: sleep schedules ("nights and weekends") are read in this IANA time zone.
    time_zone = models.CharField(max_length=64, default="UTC", validators=[validate_time_zone])
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        MEMBER = "member", "Member"
        VIEWER = "viewer", "Viewer"

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="membership_unique_user_team"),
            models.CheckConstraint(condition=Q(role__in=["owner", "member", "viewer"]), name="membership_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


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
    had (tenants.services.prices). Storage is priced per GiB-month, a month being 730 hours (8760 / 12);
    showback (tenants.showback) reads these.
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


class TenantStatus(models.TextChoices):
    REQUESTED = "requested", "Requested"
    APPROVED = "approved", "Approved"
    PROVISIONING = "provisioning", "Provisioning"
    READY = "ready", "Ready"
    DECOMMISSIONING = "decommissioning", "Decommissioning"
    DELETED = "deleted", "Deleted"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"


# A tenant in one of these holds its name on its cluster and counts against the team budget.
LIVE_STATUSES = (
    TenantStatus.REQUESTED,
    TenantStatus.APPROVED,
    TenantStatus.PROVISIONING,
    TenantStatus.READY,
    TenantStatus.DECOMMISSIONING,
    TenantStatus.FAILED,
)


class Tenant(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=63)
    namespace = models.CharField(max_length=63, help_text="The host namespace: the cluster prefix plus the name.")
    kind = models.CharField(max_length=20, choices=TenantKind.choices, default=TenantKind.NAMESPACE)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="tenants")
    tier = models.ForeignKey(Tier, on_delete=models.PROTECT, related_name="tenants")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="tenants")
    status = models.CharField(max_length=16, choices=TenantStatus.choices, default=TenantStatus.REQUESTED)
    status_reason = models.TextField(blank=True)
    purpose = models.TextField(blank=True)
    created_by = models.ForeignKey(User, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    status_changed_at = models.DateTimeField(auto_now_add=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    expiry_reminded_at = models.DateTimeField(null=True, blank=True)
    decommission_requested_at = models.DateTimeField(null=True, blank=True)
    # Read back from the cluster by the worker; never fetched while rendering a page.
    quota_usage = models.JSONField(default=dict, blank=True)
    quota_usage_at = models.DateTimeField(null=True, blank=True)
    # When the last reading went into the usage history (TenantUsageDay): the next one covers the time since.
    usage_sampled_at = models.DateTimeField(null=True, blank=True, editable=False)
    # A right-sizing suggestion an owner dismissed: {"direction", "tier", "until" (ISO date)}; {} when none.
    rightsizing_dismissed = models.JSONField(default=dict, blank=True, editable=False)
    isolation_report = models.JSONField(default=dict, blank=True)
    isolation_report_at = models.DateTimeField(null=True, blank=True)
    generation = models.PositiveIntegerField(
        default=1, help_text="Bumped when what should exist on the cluster changes."
    )
    applied_generation = models.PositiveIntegerField(default=0)
    # Bumped when every credential issued so far must stop working (a transfer to another team): the worker
    # deletes and recreates the tenant's ServiceAccounts made for an earlier epoch, and the tokens bound to them
    # fail from then on.
    credential_epoch = models.PositiveIntegerField(default=1, editable=False)
    # The epoch the tenant's ServiceAccounts on the cluster were made for (the worker records it).
    applied_credential_epoch = models.PositiveIntegerField(default=1, editable=False)
    # The cluster's physical_id when the tenant was placed: one namespace, one tenant, per physical API server.
    cluster_identity = models.CharField(max_length=100, blank=True, editable=False)
    # What Berth created for the tenant ("Kind/namespace/name" → UID): decommission deletes only these.
    owned_uids = models.JSONField(default=dict, blank=True, editable=False)
    # The number of the tenant's last event sent to webhooks: taken under the row's lock, so per tenant the
    # numbers follow the order in which the changes committed (receivers may rely on it).
    event_sequence = models.PositiveBigIntegerField(default=0, editable=False)
    # Sleep (tenants.services.sleep). ``sleeping`` is what Berth wants; ``sleep_applied`` says the worker has
    # made the cluster match it (scaled down, or restored); ``asleep_since``/``sleep_reason`` describe the
    # open TenantSleepPeriod.
    sleeping = models.BooleanField(default=False, editable=False)
    sleep_applied = models.BooleanField(default=True, editable=False)
    sleep_reason = models.CharField(max_length=10, blank=True, editable=False)
    asleep_since = models.DateTimeField(null=True, blank=True, editable=False)
    sleep_note = models.CharField(max_length=500, blank=True, editable=False)
    # The last activity Berth can see (a kubeconfig issued, a wake, quota usage that changed): the idle clock.
    last_activity_at = models.DateTimeField(null=True, blank=True, editable=False)
    # A weekly schedule in the team's time zone: asleep every night from start to end (end before start wraps
    # past midnight), and all weekend when ``sleep_weekends``. Empty start and end: no nightly sleep.
    sleep_schedule_start = models.TimeField(null=True, blank=True)
    sleep_schedule_end = models.TimeField(null=True, blank=True)
    sleep_weekends = models.BooleanField(default=False)
    # The start of the scheduled sleep window the sweep last put the tenant to sleep for: an owner who wakes it
    # inside that window keeps it awake until the next window begins.
    schedule_window_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        # The id breaks ties (tenants made in one bulk share a created_at): a page's rows, and so offset paging,
        # must not depend on the plan PostgreSQL picks.
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=TenantStatus.values), name="tenant_status_valid"),
            models.CheckConstraint(
                condition=(Q(sleep_schedule_start__isnull=True) & Q(sleep_schedule_end__isnull=True))
                | (
                    Q(sleep_schedule_start__isnull=False)
                    & Q(sleep_schedule_end__isnull=False)
                    & ~Q(sleep_schedule_start=models.F("sleep_schedule_end"))
                ),
                name="tenant_sleep_schedule_both_or_neither",
            ),
            models.CheckConstraint(condition=Q(kind__in=TenantKind.values), name="tenant_kind_valid"),
            models.UniqueConstraint(
                fields=["cluster", "namespace"],
                condition=Q(status__in=[s.value for s in LIVE_STATUSES]),
                name="tenant_namespace_unique_live_per_cluster",
            ),
            models.UniqueConstraint(
                fields=["cluster_identity", "namespace"],
                condition=Q(status__in=[s.value for s in LIVE_STATUSES]) & ~Q(cluster_identity=""),
                name="tenant_namespace_unique_live_per_physical_cluster",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "status_changed_at"]),
            # A team's page of the API list: newest first, read from the index without sorting the team's rows.
            models.Index(fields=["team", "-created_at", "-id"], name="tenant_team_page"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.cluster.name})"


class TenantSleepPeriod(models.Model):
    """One stretch during which a tenant slept (its workloads scaled to zero); open (no end) while it sleeps.

    What showback and the tenant's history read: a tenant's sleep is the union of its periods.
    """

    class Reason(models.TextChoices):
        OWNER = "owner", "Owner"
        SCHEDULE = "schedule", "Schedule"
        IDLE = "idle", "Idle"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="sleep_periods")
    reason = models.CharField(max_length=10, choices=Reason.choices)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["tenant", "started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant"], condition=Q(ended_at__isnull=True), name="tenant_sleep_one_open_period"
            ),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=models.F("started_at")),
                name="tenant_sleep_ends_after_it_starts",
            ),
            models.CheckConstraint(condition=Q(reason__in=["owner", "schedule", "idle"]), name="tenant_sleep_reason"),
        ]
        indexes = [models.Index(fields=["tenant", "started_at"])]

    def __str__(self) -> str:
        return f"{self.tenant_id} asleep {self.started_at:%Y-%m-%d %H:%M}–{self.ended_at or ''}"


class TenantUsageDay(models.Model):
    """One UTC day of a tenant's quota usage in a few numbers: the compact history right-sizing and usage-based
    showback read (tenants.services.usage writes it from each reading the worker takes).

    ``usage`` maps each quota resource (``requests.cpu``, ``limits.memory``, ``requests.storage``, ``pods``…)
    to ``{"used_seconds": Σ used × seconds, "max": the highest reading, "hard": the quota at the last
    reading}``, in base units (cores, bytes, counts). ``seconds`` is how much of the day the readings cover,
    so ``used_seconds / seconds`` is the day's time-weighted average. ``team`` and ``tier`` are the tenant's
    at the day's last reading (a transfer or tier change mid-day counts from the next reading on).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="usage_days")
    day = models.DateField()
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+")
    tier = models.ForeignKey(Tier, on_delete=models.PROTECT, related_name="+")
    seconds = models.FloatField(default=0.0)
    samples = models.PositiveIntegerField(default=0)
    usage = models.JSONField(default=dict)

    class Meta:
        ordering = ["tenant", "day"]
        constraints = [models.UniqueConstraint(fields=["tenant", "day"], name="tenant_usage_one_row_per_day")]
        indexes = [models.Index(fields=["team", "day"])]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.day}"

    def average(self, resource: str) -> float | None:
        """The day's time-weighted average of ``resource``; None when no reading covered any time."""
        entry = self.usage.get(resource)
        if not entry or self.seconds <= 0:
            return None
        return float(entry["used_seconds"]) / self.seconds


class TenantRequest(models.Model):
    """A team's ask to create, change, extend or delete a tenant; decided by an approver or a tier's auto-approval."""

    # Audit rows and pages have always called these "request"; the model's new name does not change that.
    audit_object_type = "request"

    class Action(models.TextChoices):
        CREATE = "create", "Create"
        CHANGE_TIER = "change_tier", "Change tier"
        EXTEND = "extend", "Extend expiry"
        DELETE = "delete", "Delete"
        TRANSFER = "transfer", "Transfer to another team"

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        CANCELLED = "cancelled", "Cancelled"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    action = models.CharField(max_length=12, choices=Action.choices)
    kind = models.CharField(max_length=20, choices=TenantKind.choices, default=TenantKind.NAMESPACE)
    name = models.CharField(max_length=63)
    # request_team_target leads with the team
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="requests", db_index=False)
    tier = models.ForeignKey(Tier, on_delete=models.PROTECT, related_name="requests")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="requests")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="requests")
    purpose = models.TextField(blank=True)
    requested_expiry = models.DateField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    requested_by = models.ForeignKey(User, on_delete=models.PROTECT, related_name="requests_made")
    created_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(
        User, on_delete=models.PROTECT, null=True, blank=True, related_name="requests_decided"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_comment = models.TextField(blank=True)
    auto_approved = models.BooleanField(default=False)
    idempotency_key = models.CharField(max_length=64, blank=True)
    # A key means one request per (person, credential, team): a CI token's keys never answer for a browser's.
    idempotency_scope = models.CharField(max_length=40, blank=True)
    idempotency_digest = models.CharField(max_length=64, blank=True, help_text="SHA-256 of what the key first asked.")
    # A transfer (tenants.services.transfers): the team that is to receive the tenant; an owner of it accepts
    # (or declines) first, then an approver decides where the receiving team's budget or the tier asks for one.
    target_team = models.ForeignKey(
        Team, on_delete=models.PROTECT, null=True, blank=True, related_name="incoming_transfers"
    )
    accepted_by = models.ForeignKey(User, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    accepted_at = models.DateTimeField(null=True, blank=True)
    # Why an accepted transfer waits for an approver (over the receiving team's budget, the tier not automatic).
    approval_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]  # the id breaks ties, as for tenants
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "approved", "rejected", "cancelled"]), name="request_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(action__in=["create", "change_tier", "extend", "delete", "transfer"]),
                name="request_action_valid",
            ),
            # A transfer names the receiving team, and only a transfer does.
            models.CheckConstraint(
                condition=Q(action="transfer", target_team__isnull=False)
                | (~Q(action="transfer") & Q(target_team__isnull=True)),
                name="request_transfer_has_target",
            ),
            # At most one open request per tenant: two approvals can never race on one tenant.
            models.UniqueConstraint(
                fields=["tenant"], condition=Q(status="pending"), name="request_one_pending_per_tenant"
            ),
            models.UniqueConstraint(
                fields=["requested_by", "idempotency_scope", "team", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="request_idempotency_key_unique_per_scope",
            ),
        ]
        # A team's page of the API list: newest first, read from the index without sorting the team's rows.
        indexes = [
            models.Index(fields=["team", "-created_at", "-id"], name="request_team_page"),
            # The page's COUNT for a member, read from the index alone: which requests a member sees depends on the
            # receiving team too (requests_visible_to), which the team's own index (replaced by this one) left
            # PostgreSQL to read from the table.
            models.Index(fields=["team", "target_team"], name="request_team_target"),
        ]

    def __str__(self) -> str:
        return f"{self.get_action_display()} {self.name}"


class ApiToken(models.Model):
    """A portal API token: only its SHA-256 is stored; the plaintext is shown once."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    team = models.ForeignKey(
        Team,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="api_tokens",
        help_text="Set for automation tokens that act for one team only.",
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, unique=True)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class EventType(models.TextChoices):
    """What people hear about (tenants.notifications): by email, and by webhook to the endpoints that subscribed."""

    REQUEST_SUBMITTED = "request.submitted", "A request waits for a decision"
    REQUEST_DECIDED = "request.decided", "A request was approved, rejected or cancelled"
    TENANT_READY = "tenant.ready", "A tenant is ready"
    TENANT_FAILED = "tenant.failed", "A tenant failed"
    TENANT_EXPIRING = "tenant.expiring", "A tenant expires soon"
    TENANT_DECOMMISSIONED = "tenant.decommissioned", "A tenant was decommissioned"
    TENANT_DRIFT_REPAIRED = "tenant.drift_repaired", "Drift was repaired on a tenant"
    TENANT_ISOLATION_FAILED = "tenant.isolation_failed", "A tenant's isolation report failed"
    TENANT_SLEPT = "tenant.slept", "A tenant was put to sleep"
    TENANT_WOKE = "tenant.woke", "A tenant was woken"
    TRANSFER_ASKED = "transfer.asked", "A tenant is offered to another team"
    TENANT_TRANSFERRED = "tenant.transferred", "A tenant moved to another team"
    PING = "ping", "A test event sent by a platform admin"


class WebhookEndpoint(models.Model):
    """Where Berth posts signed events: for one team's tenants, or for every team's when ``team`` is empty.

    The URL and the signing secret are sealed (tenants.sealing): a Slack webhook URL is a credential by itself.
    """

    class Format(models.TextChoices):
        JSON = "json", "Berth JSON (versioned, signed)"
        SLACK = "slack", "Slack incoming webhook"

    name = models.CharField(max_length=100)
    team = models.ForeignKey(
        Team,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="webhook_endpoints",
        help_text="Empty: events of every team.",
    )
    url_sealed = models.TextField(editable=False)
    # scheme://host[:port] only: lists, logs and the audit trail never show the path, which may hold a secret.
    url_origin = models.CharField(max_length=300, editable=False)
    format = models.CharField(max_length=10, choices=Format.choices, default=Format.JSON)
    events = models.JSONField(default=list, help_text='Event types to send, e.g. ["tenant.ready"].')
    secret_sealed = models.TextField(editable=False)
    allow_private_network = models.BooleanField(
        default=False,
        help_text="Allow private addresses (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) for this URL. "
        "Loopback, link-local (cloud metadata) and multicast stay refused.",
    )
    is_active = models.BooleanField(default=True)
    created_by = models.ForeignKey(User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(format__in=["json", "slack"]), name="webhook_format_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.url_origin})"


class WebhookDelivery(models.Model):
    """One event for one endpoint, and how sending it went. Sent in ``sequence`` order per endpoint and tenant."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed (given up)"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    event_id = models.UUIDField(help_text="The same for every endpoint and every attempt (webhook-id).")
    event = models.CharField(max_length=40, choices=EventType.choices)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    sequence = models.PositiveBigIntegerField(default=0, help_text="The tenant's event number; grows with each event.")
    payload = models.JSONField(help_text="The body, rendered for the endpoint's format when the event happened.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    response_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True, help_text="How long the last attempt took.")
    created_at = models.DateTimeField(auto_now_add=True)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "delivered", "failed"]), name="webhook_delivery_status_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["endpoint", "tenant", "status", "sequence"], name="webhook_delivery_queue"),
            models.Index(fields=["status", "next_attempt_at"], name="webhook_delivery_due"),
        ]

    def __str__(self) -> str:
        return f"{self.event} to {self.endpoint_id} ({self.status})"


@pgtrigger.register(
    pgtrigger.Protect(name="audit_append_only", operation=pgtrigger.Update | pgtrigger.Delete),
)
class AuditEvent(models.Model):
    """Append-only: the database refuses UPDATE and DELETE on this table."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        User, on_delete=models.DO_NOTHING, null=True, blank=True, db_constraint=False, related_name="+"
    )
    actor_name = models.CharField(max_length=255)
    team = models.ForeignKey(
        Team,
        on_delete=models.DO_NOTHING,
        null=True,
        blank=True,
        db_constraint=False,
        related_name="+",
        db_index=False,  # audit_team_actor leads with the team
    )
    object_type = models.CharField(max_length=40)
    object_id = models.CharField(max_length=64, blank=True)
    action = models.CharField(max_length=60, db_index=True)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    source_ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=400, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["object_type", "object_id"]),
            # A team's page of the API list in its exact order; with the actor in it, the page's visibility test
            # (the caller's teams, or the caller's own actions) is read from the index.
            models.Index(fields=["team", "-at", "-id"], include=["actor"], name="audit_team_newest"),
            # A team's COUNT (the audit page's paginator; the API pages by cursor and does not count), read from the
            # index alone: a team's 10,000 events counted in 0.96 ms where the team's own index (which this one
            # replaces) had PostgreSQL read them from the table, 2.7 ms, as the visibility test needs the actor too
            # (measured 2026-11-23, after VACUUM).
            models.Index(fields=["team", "actor"], name="audit_team_actor"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action}"
