"""Every state change in Berth: one keyword-only function per action, each auditing in its own transaction.

One module per noun; callers import from here (``from tenants import services``):

- ``lifecycle``: the guarded status transitions of tenants and requests, and what the worker reports back;
- ``permissions``: who may act (the "owner or admin" rule, writers, deciders, kubeconfig roles);
- ``tenant_requests`` and ``budget``: asking, deciding, and the team budget;
- ``tenants`` and ``tiers``: what owners and admins do to tenants directly; tier edits;
- ``credentials``: kubeconfigs and their lifetime bounds;
- ``users`` and ``api_tokens``: sign-in mirroring and portal API tokens;
- ``usage``: the compact per-day history of each tenant's quota usage, from the worker's readings;
- ``rightsizing``: a tier suggestion from that history; an owner accepts it (a change_tier request) or dismisses it;
- ``prices`` (in tenants.costs): what each cluster's resources cost, for showback (never rewritten once in effect);
- ``sleep``: sleep and wake (owners, schedules in the team's time zone, idle periods), and what the worker reports;
- ``transfers``: moving a tenant to another team (ask, accept or decline, complete);
- ``divergence``: what a restore of the database from an older dump leaves (diverged tenants, orphan namespaces);
- ``alerts``: alerts about tenants' workloads from Alertmanager, recorded once and told to the owning team;
- ``webhooks``: endpoints platform admins and team owners register, and delivering events to them in order;
- ``workload``: a team's pods, events and pod logs, read with the team's own identity and bounded.
"""

from tenants.costs.prices import cluster_price_errors, cluster_set_prices
from tenants.errors import Forbidden, InvalidTransition
from tenants.services.alerts import alert_record, alerts_receive, alerts_sweep
from tenants.services.api_tokens import (
    TOKEN_PREFIX,
    api_token_create,
    api_token_digest,
    api_token_revoke,
    api_token_touch,
)
from tenants.services.auth_failures import auth_failure_record, auth_failure_wait
from tenants.services.budget import approval_adds, budget_check
from tenants.services.clusters import cluster_identify, cluster_record_identity
from tenants.services.credentials import (
    LIFETIME_FLOOR_SECONDS,
    credential_lifetime,
    credential_lifetime_default,
    tenant_issue_kubeconfig,
    user_issue_merged_kubeconfig,
)
from tenants.services.divergence import (
    orphan_decommission,
    orphan_namespaces_record,
    orphan_reattach,
    tenant_forget,
    tenant_mark_diverged,
    tenant_recreate,
)
from tenants.services.lifecycle import (
    TRANSITIONS,
    tenant_mark_deleted,
    tenant_mark_failed,
    tenant_mark_provisioning,
    tenant_mark_ready,
    tenant_note_progress,
    tenant_record_applied,
    tenant_record_identity,
    tenant_record_isolation_report,
    tenant_record_owned,
    tenant_record_usage,
    tenants_record_resent,
    tenants_record_usage,
    transition,
)
from tenants.services.permissions import is_owner_or_admin, is_writer, kubeconfig_role, require_platform_admin
from tenants.services.rightsizing import rightsizing_accept, rightsizing_assess, rightsizing_dismiss
from tenants.services.sleep import (
    schedule_json,
    sleep_refusal,
    sleep_state,
    tenant_note_sleep,
    tenant_record_sleep_applied,
    tenant_set_sleep_schedule,
    tenant_sleep,
    tenant_touch_activity,
    tenant_wake,
    tenants_sleep_sweep,
)
from tenants.services.tenant_requests import (
    expiry_check,
    expiry_end_of_day,
    request_approve,
    request_cancel,
    request_reject,
    request_submit,
)
from tenants.services.tenants import (
    tenant_decommission,
    tenant_expire,
    tenant_remind_expiry,
    tenant_request_isolation_check,
    tenant_retry,
)
from tenants.services.tiers import tier_reapply, tier_update
from tenants.services.transfers import (
    tenant_record_credentials_renewed,
    transfer_accept,
    transfer_ask,
    transfer_decline,
)
from tenants.services.usage import usage_record_readings
from tenants.services.users import (
    auth_record,
    identity_is_fresh,
    team_slug,
    user_deactivate,
    user_recheck,
    user_record_idp_session,
    user_session_end,
    user_sync_from_claims,
    users_recheck_due,
)
from tenants.services.webhooks import (
    webhook_deliver,
    webhook_endpoint_create,
    webhook_endpoint_delete,
    webhook_endpoint_rotate_secret,
    webhook_endpoint_test,
    webhook_endpoint_update,
    webhook_endpoint_validate,
    webhooks_sweep,
)
from tenants.services.workload import (
    CONTAINER_NAME_PATTERN,
    EVENTS_SHOWN,
    LOG_BYTES_MAX,
    LOG_LINES_DEFAULT,
    LOG_LINES_MAX,
    POD_NAME_PATTERN,
    RFC3339_PATTERN,
    tenant_read_pod_log,
    tenant_read_workload,
    workload_unavailable,
)

__all__ = [
    "CONTAINER_NAME_PATTERN",
    "EVENTS_SHOWN",
    "POD_NAME_PATTERN",
    "RFC3339_PATTERN",
    "LOG_BYTES_MAX",
    "LOG_LINES_DEFAULT",
    "LOG_LINES_MAX",
    "tenant_read_pod_log",
    "tenant_read_workload",
    "workload_unavailable",
    "LIFETIME_FLOOR_SECONDS",
    "TOKEN_PREFIX",
    "TRANSITIONS",
    "Forbidden",
    "alert_record",
    "alerts_receive",
    "alerts_sweep",
    "InvalidTransition",
    "api_token_create",
    "api_token_digest",
    "api_token_revoke",
    "api_token_touch",
    "auth_failure_record",
    "auth_failure_wait",
    "auth_record",
    "approval_adds",
    "budget_check",
    "cluster_identify",
    "cluster_price_errors",
    "cluster_set_prices",
    "cluster_record_identity",
    "credential_lifetime",
    "credential_lifetime_default",
    "expiry_check",
    "expiry_end_of_day",
    "is_owner_or_admin",
    "is_writer",
    "kubeconfig_role",
    "orphan_decommission",
    "orphan_namespaces_record",
    "orphan_reattach",
    "request_approve",
    "request_cancel",
    "request_reject",
    "request_submit",
    "tenant_decommission",
    "tenant_expire",
    "tenant_forget",
    "tenant_issue_kubeconfig",
    "tenant_mark_deleted",
    "tenant_mark_diverged",
    "tenant_mark_failed",
    "tenant_mark_provisioning",
    "tenant_mark_ready",
    "tenant_note_progress",
    "tenant_record_applied",
    "tenant_record_identity",
    "tenant_record_isolation_report",
    "tenant_record_owned",
    "tenant_record_usage",
    "tenant_recreate",
    "tenant_remind_expiry",
    "tenant_request_isolation_check",
    "tenant_retry",
    "tenants_record_resent",
    "tenants_record_usage",
    "tenant_record_credentials_renewed",
    "transfer_accept",
    "transfer_ask",
    "transfer_decline",
    "usage_record_readings",
    "team_slug",
    "tier_reapply",
    "tier_update",
    "transition",
    "identity_is_fresh",
    "user_deactivate",
    "user_issue_merged_kubeconfig",
    "user_recheck",
    "user_session_end",
    "user_record_idp_session",
    "user_sync_from_claims",
    "users_recheck_due",
    "require_platform_admin",
    "rightsizing_accept",
    "rightsizing_assess",
    "rightsizing_dismiss",
    "webhook_deliver",
    "webhook_endpoint_create",
    "webhook_endpoint_delete",
    "webhook_endpoint_rotate_secret",
    "webhook_endpoint_test",
    "webhook_endpoint_update",
    "webhook_endpoint_validate",
    "webhooks_sweep",
    # sleep
    "schedule_json",
    "sleep_refusal",
    "sleep_state",
    "tenant_note_sleep",
    "tenant_record_sleep_applied",
    "tenant_set_sleep_schedule",
    "tenant_sleep",
    "tenant_touch_activity",
    "tenant_wake",
    "tenants_sleep_sweep",
]
