"""Berth's domain: teams, clusters, tiers, requests, tenants, API tokens and the audit trail.

Models hold data and invariants the database can enforce; every state change
goes through ``tenants.services``.
"""
from __future__ import annotations

import uuid

import pgtrigger
from django.contrib.auth.models import AbstractUser
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q


class User(AbstractUser):
    """A person signed in through OIDC; platform roles are mirrored from groups on each login."""

    oidc_subject = models.CharField(max_length=255, unique=True, null=True, blank=True)
    display_name = models.CharField(max_length=255, blank=True)
    is_platform_admin = models.BooleanField(default=False)
    is_approver = models.BooleanField(default=False)

    @property
    def can_decide(self) -> bool:
        return self.is_platform_admin or self.is_approver

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
KIND_NOTES = {
    TenantKind.NAMESPACE: "A namespace on a shared cluster: quotas, network policies and namespaced admin rights.",
    TenantKind.VCLUSTER: "Your own Kubernetes API inside an isolated host namespace: CRDs, ClusterRoles and operators are yours.",
    TenantKind.VIRTUALCLUSTER: "The upstream multi-tenancy VirtualCluster project is archived and unmaintained; prefer vcluster.",
    TenantKind.HYPERSHIFT: "A hosted control plane with its own worker nodes from a NodePool (OpenShift / HyperShift).",
    TenantKind.KCP: "A kcp workspace: a Kubernetes-like API for CRDs and controllers. kcp runs no pods.",
}


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
    # Lifecycle.
    max_credential_lifetime_seconds = models.PositiveIntegerField(default=3600, validators=[MinValueValidator(600)])
    default_expiry_days = models.PositiveIntegerField(default=30, validators=[MinValueValidator(1)])
    max_expiry_days = models.PositiveIntegerField(default=90, validators=[MinValueValidator(1)])
    auto_approve = models.BooleanField(default=False)
    is_active = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["order", "name"]
        constraints = [
            models.CheckConstraint(condition=Q(cpu_limit_millis__gte=models.F("cpu_request_millis")), name="tier_cpu_limit_gte_request"),
            models.CheckConstraint(condition=Q(memory_limit_mib__gte=models.F("memory_request_mib")), name="tier_memory_limit_gte_request"),
            models.CheckConstraint(condition=Q(max_credential_lifetime_seconds__gte=600), name="tier_credential_lifetime_floor"),
        ]

    def __str__(self) -> str:
        return self.display_name


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
        help_text="Where the worker finds its credential: 'kubeconfig:/path', 'env:VAR' (a kubeconfig in an env var) or 'incluster'.",
    )
    public_endpoint = models.URLField(help_text="The API URL handed to tenants in their kubeconfig.")
    namespace_prefix = models.CharField(max_length=20, blank=True, help_text="Prefix added to tenant names on this cluster.")
    access_mode = models.CharField(max_length=5, choices=AccessMode.choices, default=AccessMode.TOKEN)
    oidc_issuer_url = models.URLField(blank=True)
    oidc_client_id = models.CharField(max_length=200, blank=True)
    oidc_groups_prefix = models.CharField(max_length=40, blank=True, help_text="The API server's OIDC groups prefix, e.g. 'oidc:'.")
    oidc_extra_scopes = models.CharField(max_length=200, blank=True, default="groups", help_text="Scopes kubelogin asks for besides openid.")
    ingress_namespace = models.CharField(max_length=63, blank=True)
    monitoring_links = models.JSONField(
        default=list,
        blank=True,
        help_text='List of {"name": ..., "url": ...}; the url may use {namespace}, {tenant}, {team}, {cluster}.',
    )
    kinds = models.JSONField(default=list, help_text='Tenancy kinds offered, e.g. ["namespace", "vcluster"].')
    virtual_config = models.JSONField(
        default=dict, blank=True,
        help_text="Settings per virtual-cluster kind, keyed by kind (see docs/virtual-clusters.md), "
                  'e.g. {"vcluster": {"installer": "helm", "chart_version": "0.30.1"}}.',
    )
    tiers = models.ManyToManyField(Tier, related_name="clusters", blank=True)
    is_active = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(access_mode__in=["token", "oidc"]), name="cluster_access_mode_valid"),
        ]

    def clean(self) -> None:
        """Refuse kinds and virtual-cluster settings the worker could not use (the admin form shows why)."""
        from django.core.exceptions import ValidationError

        from tenants import hooks

        if not isinstance(self.kinds, list) or not all(isinstance(k, str) for k in self.kinds):
            raise ValidationError({"kinds": 'A list of kinds, e.g. ["namespace", "vcluster"].'})
        unknown = sorted(set(self.kinds) - set(TenantKind.values))
        if unknown:
            raise ValidationError({"kinds": f"Unknown kind(s) {', '.join(unknown)}; choose from {', '.join(TenantKind.values)}."})
        errors = hooks.cluster_config_errors(self)
        if errors:
            raise ValidationError({"virtual_config": [f"{kind}: {message}" for kind, message in sorted(errors.items())]})

    def __str__(self) -> str:
        return self.display_name


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
    isolation_report = models.JSONField(default=dict, blank=True)
    isolation_report_at = models.DateTimeField(null=True, blank=True)
    generation = models.PositiveIntegerField(default=1, help_text="Bumped when what should exist on the cluster changes.")
    applied_generation = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=TenantStatus.values), name="tenant_status_valid"),
            models.CheckConstraint(condition=Q(kind__in=TenantKind.values), name="tenant_kind_valid"),
            models.UniqueConstraint(
                fields=["cluster", "namespace"],
                condition=Q(status__in=[s.value for s in LIVE_STATUSES]),
                name="tenant_namespace_unique_live_per_cluster",
            ),
        ]
        indexes = [models.Index(fields=["status", "status_changed_at"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.cluster.name})"


class Request(models.Model):
    class Action(models.TextChoices):
        CREATE = "create", "Create"
        CHANGE_TIER = "change_tier", "Change tier"
        EXTEND = "extend", "Extend expiry"
        DELETE = "delete", "Delete"

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        CANCELLED = "cancelled", "Cancelled"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    action = models.CharField(max_length=12, choices=Action.choices)
    kind = models.CharField(max_length=20, choices=TenantKind.choices, default=TenantKind.NAMESPACE)
    name = models.CharField(max_length=63)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="requests")
    tier = models.ForeignKey(Tier, on_delete=models.PROTECT, related_name="requests")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="requests")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="requests")
    purpose = models.TextField(blank=True)
    requested_expiry = models.DateField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    requested_by = models.ForeignKey(User, on_delete=models.PROTECT, related_name="requests_made")
    created_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(User, on_delete=models.PROTECT, null=True, blank=True, related_name="requests_decided")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_comment = models.TextField(blank=True)
    auto_approved = models.BooleanField(default=False)
    idempotency_key = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=["pending", "approved", "rejected", "cancelled"]), name="request_status_valid"),
            models.CheckConstraint(condition=Q(action__in=["create", "change_tier", "extend", "delete"]), name="request_action_valid"),
            # At most one open request per tenant: two approvals can never race on one tenant.
            models.UniqueConstraint(fields=["tenant"], condition=Q(status="pending"), name="request_one_pending_per_tenant"),
            models.UniqueConstraint(
                fields=["requested_by", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="request_idempotency_key_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_action_display()} {self.name}"


class ApiToken(models.Model):
    """A portal API token: only its SHA-256 is stored; the plaintext is shown once."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, null=True, blank=True, related_name="api_tokens",
                             help_text="Set for automation tokens that act for one team only.")
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


@pgtrigger.register(
    pgtrigger.Protect(name="audit_append_only", operation=pgtrigger.Update | pgtrigger.Delete),
)
class AuditEvent(models.Model):
    """Append-only: the database refuses UPDATE and DELETE on this table."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(User, on_delete=models.DO_NOTHING, null=True, blank=True, db_constraint=False, related_name="+")
    actor_name = models.CharField(max_length=255)
    team = models.ForeignKey(Team, on_delete=models.DO_NOTHING, null=True, blank=True, db_constraint=False, related_name="+")
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
        indexes = [models.Index(fields=["object_type", "object_id"]), models.Index(fields=["team", "-at"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action}"
