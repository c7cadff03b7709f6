"""Tenants, their sleep periods and their daily usage."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from tenants.models.catalog import Cluster, TenantKind, Tier
from tenants.models.people import Team, User


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
    # The database believes the tenant ready, but the namespace Berth recorded for it is gone from the cluster or
    # is another object (another UID): typically after Berth's database was restored from an older dump. Nothing is
    # recreated or deleted until a platform admin decides (tenants.services.divergence).
    DIVERGED = "diverged", "Diverged"


# A tenant in one of these holds its name on its cluster and counts against the team budget.
LIVE_STATUSES = (
    TenantStatus.REQUESTED,
    TenantStatus.APPROVED,
    TenantStatus.PROVISIONING,
    TenantStatus.READY,
    TenantStatus.DECOMMISSIONING,
    TenantStatus.FAILED,
    TenantStatus.DIVERGED,
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
    # When the sweep (worker.tasks.sweep) last re-sent the tenant's provision or decommission job, and its sleep job
    # (a tenant may owe both a tier change and a sleep): it re-sends each at most once per window, so that a tenant
    # waiting in a long queue gets no duplicate every minute. Bookkeeping, not a state.
    resent_at = models.DateTimeField(null=True, blank=True, editable=False)
    sleep_resent_at = models.DateTimeField(null=True, blank=True, editable=False)

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
            # The tenants list's default page (live tenants by name, either way) read from the index, and its count
            # from the index alone: neither sorts nor reads the whole fleet.
            models.Index(
                fields=["name", "id"],
                condition=Q(status__in=[s.value for s in LIVE_STATUSES]),
                name="tenant_live_by_name",
            ),
            # The dashboard's counts of live, failed and expiring tenants from the index alone (fleet_summary),
            # without reading the table's rows, which carry the reports and usage (kilobytes each).
            models.Index(
                fields=["status", "expires_at", "id"],
                condition=Q(status__in=[s.value for s in LIVE_STATUSES]),
                name="tenant_live_summary",
            ),
            # The live tenants whose last isolation report failed, by name: the dashboard counts them and the
            # "Failing isolation" filter lists them without reading every live tenant's report (a JSON document of
            # some kilobytes each). PostgreSQL uses it for a query whose conditions include both of these.
            models.Index(
                fields=["name", "id"],
                condition=Q(status__in=[s.value for s in LIVE_STATUSES]) & Q(isolation_report__passed=False),
                name="tenant_live_isolation_failing",
            ),
            # The API's list for those who see every team (tenant_team_page starts with the team): newest first,
            # every status, read from the index without sorting the fleet.
            models.Index(fields=["-created_at", "-id"], name="tenant_newest_first"),
            # A team's budget in use (selectors.team_allocation, with_allocation): its live tenants' tiers and sleep,
            # read from the index alone. Every submission and approval sums them under the team's row lock, so
            # reading the team's rows (kilobytes each: reports, usage) would grow with the team and hold the lock.
            models.Index(
                fields=["team", "tier", "sleeping", "id"],
                condition=Q(status__in=[s.value for s in LIVE_STATUSES]),
                name="tenant_team_allocation",
            ),
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
    Measured usage (``measured.cpu``, ``measured.memory``: what the containers used, by Prometheus) has the same
    keys plus its own ``seconds``, the part of the day measured readings covered (tenants.services.usage).
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
        covered = float(entry.get("seconds", self.seconds)) if entry else 0.0
        if not entry or covered <= 0:
            return None
        return float(entry["used_seconds"]) / covered


class OrphanNamespace(models.Model):
    """A namespace on a cluster that carries Berth's labels and a tenant id no live tenant has: what a restore of
    Berth's database from an older dump leaves behind (tenants created since). The reconcile pass records what it
    lists and never deletes one; a platform admin re-attaches it to a team or has it decommissioned
    (tenants.services.divergence)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="orphan_namespaces")
    name = models.CharField(max_length=63)
    uid = models.CharField(max_length=64)
    tenant_id = models.CharField(max_length=64, help_text="The berth.dev/tenant-id label.")
    labels = models.JSONField(default=dict)
    created_at = models.DateTimeField(null=True, blank=True, help_text="When the namespace was created.")
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField()
    # Set once an admin asked for its deletion; the row goes when a pass no longer finds the namespace.
    decommission_requested_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="orphan_namespace_one_per_name")]

    def __str__(self) -> str:
        return f"{self.name} ({self.cluster.name})"
