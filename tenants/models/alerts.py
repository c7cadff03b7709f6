"""Alerts about a tenant's workloads, as Prometheus fired them and Alertmanager sent them to Berth."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from tenants.models.tenants import Tenant


class TenantAlert(models.Model):
    """One firing of one alert rule for one tenant (tenants.services.alerts).

    Alertmanager names an alert by its labels' ``fingerprint``; the same alert firing again after it resolved has a
    new ``starts_at``, so fingerprint and start together are one row: Alertmanager's repeats and retries of it
    update nothing and notify no one again.
    """

    class Status(models.TextChoices):
        FIRING = "firing", "Firing"
        RESOLVED = "resolved", "Resolved"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="alerts")
    fingerprint = models.CharField(max_length=64)
    starts_at = models.DateTimeField()
    name = models.CharField(max_length=200, help_text="The rule's alertname, e.g. BerthTenantQuotaNearlyFull.")
    severity = models.CharField(max_length=40, blank=True)
    summary = models.CharField(max_length=500, blank=True)
    # The alert's labels, bounded (tenants.alerts.parse): which pod, container or resource it is about.
    labels = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.FIRING)
    ends_at = models.DateTimeField(null=True, blank=True)
    received_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # When the team was last told (firing, then resolved); null: not yet, or only ever suppressed.
    notified_at = models.DateTimeField(null=True, blank=True)
    # Why the last transition was not sent: the tenant slept or was not ready ('' when it was sent).
    suppressed_reason = models.CharField(max_length=40, blank=True, db_default="", default="")
    # When Alertmanager last posted it (each repeat_interval while it fires): a firing alert not seen for
    # BERTH_ALERT_EXPIRE_HOURS is resolved as expired by the sweep (tenants.services.alerts.alerts_sweep).
    last_seen_at = models.DateTimeField(db_default=Now(), default=timezone.now)

    class Meta:
        ordering = ["-starts_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "fingerprint", "starts_at"], name="tenant_alert_one_firing"),
            models.CheckConstraint(condition=Q(status__in=["firing", "resolved"]), name="tenant_alert_status_valid"),
        ]
        indexes = [models.Index(fields=["tenant", "status", "-starts_at"], name="tenant_alert_by_status")]

    def __str__(self) -> str:
        return f"{self.name} on {self.tenant_id} ({self.status})"
