"""Berth's domain: teams, clusters, tiers, requests, tenants, API tokens and the audit trail, one module per noun,
all importable from ``tenants.models`` (the app label and the tables are the app's, whatever the module).

Models hold data and invariants the database can enforce; every state change goes through ``tenants.services``.
"""

from tenants.models.alerts import TenantAlert
from tenants.models.audit import AuditEvent
from tenants.models.catalog import (
    KIND_NOTES,
    Allocation,
    Cluster,
    ClusterPrice,
    SleepBudget,
    TenantKind,
    Tier,
)
from tenants.models.catalog import _platform_currency as _platform_currency  # named by migration 0009
from tenants.models.people import Membership, Team, User
from tenants.models.requests import TenantRequest
from tenants.models.tenants import (
    LIVE_STATUSES,
    OrphanNamespace,
    Tenant,
    TenantSleepPeriod,
    TenantStatus,
    TenantUsageDay,
)
from tenants.models.tokens import ApiToken
from tenants.models.webhooks import EventType, WebhookDelivery, WebhookEndpoint

__all__ = [
    "Allocation",
    "ApiToken",
    "AuditEvent",
    "Cluster",
    "ClusterPrice",
    "EventType",
    "KIND_NOTES",
    "LIVE_STATUSES",
    "Membership",
    "OrphanNamespace",
    "SleepBudget",
    "Team",
    "Tenant",
    "TenantAlert",
    "TenantKind",
    "TenantRequest",
    "TenantSleepPeriod",
    "TenantStatus",
    "TenantUsageDay",
    "Tier",
    "User",
    "WebhookDelivery",
    "WebhookEndpoint",
]
