"""Webhook endpoints and the deliveries of events to them."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from tenants.models.people import Team, User
from tenants.models.tenants import Tenant


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
    TENANT_ALERT_FIRING = "tenant.alert_firing", "An alert about a tenant's workloads fired"
    TENANT_ALERT_RESOLVED = "tenant.alert_resolved", "An alert about a tenant's workloads resolved"
    TRANSFER_ASKED = "transfer.asked", "A tenant is offered to another team"
    TENANT_TRANSFERRED = "tenant.transferred", "A tenant moved to another team"
    PING = "ping", "A test event sent by a platform admin or a team owner"


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
    # Deliveries given up in a row; BERTH_WEBHOOK_DISABLE_AFTER_FAILURES of them turn the endpoint off.
    consecutive_failures = models.PositiveIntegerField(default=0, db_default=0, editable=False)
    disabled_reason = models.CharField(
        max_length=300,
        blank=True,
        default="",
        db_default="",
        editable=False,
        help_text="Why Berth turned the endpoint off by itself (empty: it did not); cleared when it is turned on.",
    )
    disabled_at = models.DateTimeField(null=True, blank=True, editable=False)
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
            # An endpoint's latest deliveries (the team page, GET …/webhooks/{id}/deliveries/).
            models.Index(fields=["endpoint", "-created_at"], name="webhook_delivery_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.event} to {self.endpoint_id} ({self.status})"
