"""Requests to create, change, extend, delete or transfer a tenant."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from tenants.models.catalog import Cluster, TenantKind, Tier
from tenants.models.people import Team, User
from tenants.models.tenants import Tenant


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
