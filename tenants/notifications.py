"""What people hear about: one event, two channels.

Services call these functions inside their transaction when something happened that people should know
of. The event goes out by email to the people concerned (after the commit; a mail failure never undoes
the action) and as a signed webhook to every endpoint that subscribed to it (``tenants.webhooks.outbox``:
written in the same transaction, sent by the worker on the ``events`` queue after the commit).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse

from tenants import selectors
from tenants.models import EventType, Team, Tenant, TenantAlert, TenantRequest, WebhookEndpoint
from tenants.webhooks import outbox
from tenants.webhooks.payloads import Event

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Mail:
    subject: str
    body: str
    to: list[str]


def _send(mail: Mail) -> None:
    if not mail.to:
        return

    def deliver() -> None:
        try:
            send_mail(f"[Berth] {mail.subject}", mail.body, settings.DEFAULT_FROM_EMAIL, mail.to)
        except Exception as exc:  # SMTP trouble must not break the portal
            logger.warning("could not send mail %r: %s", mail.subject, exc)

    transaction.on_commit(deliver)


def _publish(event: Event, mail: Mail | None = None) -> None:
    if mail is not None:
        _send(mail)
    outbox.publish(event)


def _url(name: str, pk: object) -> str:
    return settings.BERTH_PUBLIC_URL + reverse(name, args=[pk])


# --- Requests ---------------------------------------------------------------------------------


def _request_json(req: TenantRequest) -> dict[str, Any]:
    return {
        "id": str(req.pk),
        "action": req.action,
        "status": req.status,
        "name": req.name,
        "kind": req.kind,
        "team": req.team.slug,
        "tier": req.tier.name,
        "cluster": req.cluster.name,
        "purpose": req.purpose,
        "requested_by": req.requested_by.username,
        "requested_expiry": req.requested_expiry.isoformat() if req.requested_expiry else None,
        "decided_by": req.decided_by.username if req.decided_by else None,
        "decision_comment": req.decision_comment,
        "auto_approved": req.auto_approved,
        "target_team": req.target_team.slug if req.target_team else None,
        "url": _url("request-detail", req.pk),
    }


def _request_details(req: TenantRequest) -> dict[str, str]:
    return {
        "Team": req.team.slug,
        "Kind": req.get_kind_display(),
        "Tier": req.tier.name,
        "Cluster": req.cluster.name,
        "Until": req.requested_expiry.isoformat() if req.requested_expiry else "-",
        "Purpose": req.purpose or "-",
    }


def request_submitted(req: TenantRequest) -> None:
    """A request waits for a decision: approvers hear of it, with a link to the approval page."""
    subject = f"{req.requested_by} asks to {req.get_action_display().lower()} {req.name}"
    link = _url("request-detail", req.pk)
    _publish(
        Event(
            type=EventType.REQUEST_SUBMITTED,
            team=req.team,
            tenant=req.tenant,
            summary=f"{subject} for {req.team.slug}",
            link=link,
            link_label="Review the request",
            data={"request": _request_json(req)},
            details=_request_details(req),
        ),
        Mail(
            subject,
            f"Team: {req.team.slug}\nTier: {req.tier.name}\nCluster: {req.cluster.name}\n"
            f"Purpose: {req.purpose or '-'}\n\nReview it: {link}\n",
            selectors.approver_emails(),
        ),
    )


def request_decided(req: TenantRequest) -> None:
    """Approved, rejected or cancelled; the requester hears of a decision someone else made."""
    who = req.decided_by.username if req.decided_by else "automatic approval"
    subject = f"Your request for {req.name} was {req.status}"
    link = _url("request-detail", req.pk)
    mail = None
    if req.status != TenantRequest.Status.CANCELLED and req.requested_by.email:
        mail = Mail(
            subject, f"Decision by {who}.\nComment: {req.decision_comment or '-'}\n\n{link}\n", [req.requested_by.email]
        )
    _publish(
        Event(
            type=EventType.REQUEST_DECIDED,
            team=req.team,
            tenant=req.tenant,
            summary=f"The request to {req.get_action_display().lower()} {req.name} for {req.team.slug} "
            f"was {req.status} by {who}",
            link=link,
            link_label="Open the request",
            data={"request": _request_json(req)},
            details={"Comment": req.decision_comment or "-"},
        ),
        mail,
    )


# --- Transfers ----------------------------------------------------------------------------------


def _both_teams(event_type: str, req: TenantRequest, summary: str, link: str, label: str, **data: Any) -> None:
    """One event, heard by the giving team's subscribers (and the global ones) and by the receiving team's."""
    event = Event(
        type=event_type,
        team=req.team,
        tenant=req.tenant,
        summary=summary,
        link=link,
        link_label=label,
        data={"request": _request_json(req), **data},
        details={"From": req.team.slug, "To": req.target_team.slug if req.target_team else "-"},
    )
    outbox.publish(event)
    receiving = WebhookEndpoint.objects.filter(team=req.target_team, is_active=True, events__contains=[event_type])
    outbox.publish(replace(event, team=req.target_team), endpoints=receiving)


def transfer_asked(req: TenantRequest) -> None:
    """A tenant is offered to another team: the receiving team's owners decide, the giving team's owners know."""
    assert req.target_team is not None
    link = _url("request-detail", req.pk)
    summary = f"{req.requested_by} asks to move {req.name} from {req.team.slug} to {req.target_team.slug}"
    _both_teams(EventType.TRANSFER_ASKED, req, summary, link, "Accept or decline")
    _send(
        Mail(
            f"{req.name} is offered to {req.target_team.slug}",
            f"{summary}.\nPurpose: {req.purpose or '-'}\n\nAn owner of {req.target_team.slug} accepts or declines: "
            f"{link}\n",
            sorted(set(selectors.team_owner_emails(team=req.target_team) + selectors.team_owner_emails(team=req.team))),
        )
    )


def tenant_transferred(tenant: Tenant, *, old_team: Team, req: TenantRequest) -> None:
    """The move is done: both teams hear of it (the old team's access ends now)."""
    summary = f"{tenant.name} on {tenant.cluster.name} moved from {old_team.slug} to {tenant.team.slug}"
    _both_teams(
        EventType.TENANT_TRANSFERRED,
        req,
        summary,
        _url("tenant-detail", tenant.pk),
        "Open the tenant",
        tenant=str(tenant.pk),
    )
    _send(
        Mail(
            f"{tenant.name} moved to {tenant.team.slug}",
            f"{summary}.\nMembers of {old_team.slug} no longer have access; kubeconfigs issued before the move stop "
            f"working once the cluster is updated.\n\n{_url('tenant-detail', tenant.pk)}\n",
            sorted(set(selectors.team_emails(team=tenant.team) + selectors.team_emails(team=old_team))),
        )
    )


# --- Tenants ----------------------------------------------------------------------------------

_STATUS_EVENTS = {
    "ready": EventType.TENANT_READY,
    "failed": EventType.TENANT_FAILED,
    "deleted": EventType.TENANT_DECOMMISSIONED,
}


def _tenant_event(tenant: Tenant, event_type: str, summary: str, **data: Any) -> Event:
    return Event(
        type=event_type,
        team=tenant.team,
        tenant=tenant,
        summary=summary,
        link=_url("tenant-detail", tenant.pk),
        link_label="Open the tenant",
        data=data,
        details={"Team": tenant.team.slug, "Cluster": tenant.cluster.name, "Tier": tenant.tier.name},
    )


def tenant_status(tenant: Tenant) -> None:
    """The tenant became ready, failed, or was decommissioned: its team hears of it."""
    body = f"Tenant {tenant.name} on {tenant.cluster.name} is {tenant.status}.\n"
    if tenant.status_reason:
        body += f"Reason: {tenant.status_reason}\n"
    link = _url("tenant-detail", tenant.pk)
    summary = f"{tenant.name} ({tenant.team.slug}) on {tenant.cluster.name} is {tenant.status}"
    _publish(
        _tenant_event(tenant, _STATUS_EVENTS[tenant.status], summary, reason=tenant.status_reason),
        Mail(f"{tenant.name} is {tenant.status}", body + f"\n{link}\n", selectors.team_emails(team=tenant.team)),
    )


def tenant_expiring(tenant: Tenant) -> None:
    expires = tenant.expires_at.isoformat() if tenant.expires_at else None
    _publish(
        _tenant_event(
            tenant,
            EventType.TENANT_EXPIRING,
            f"{tenant.name} ({tenant.team.slug}) expires on {tenant.expires_at:%Y-%m-%d}",
            expires_at=expires,
        ),
        Mail(
            f"{tenant.name} expires on {tenant.expires_at:%Y-%m-%d}",
            f"Tenant {tenant.name} on {tenant.cluster.name} will be decommissioned on "
            f"{tenant.expires_at:%Y-%m-%d %H:%M} UTC.\n"
            f"Ask for more time from its page: {_url('tenant-detail', tenant.pk)}\n",
            selectors.team_owner_emails(team=tenant.team),
        ),
    )


def tenant_drift_repaired(tenant: Tenant, *, repaired: list[str], generation: int) -> None:
    """Someone changed or removed what Berth created for the tenant, and the reconcile put it back."""
    _publish(
        _tenant_event(
            tenant,
            EventType.TENANT_DRIFT_REPAIRED,
            f"Berth repaired {len(repaired)} object(s) of {tenant.name} ({tenant.team.slug}) changed by hand",
            repaired=repaired,
            generation=generation,
        ),
        Mail(
            f"Berth repaired {tenant.name}",
            f"These objects of tenant {tenant.name} on {tenant.cluster.name} differed from what Berth applies and "
            "were put back:\n"
            + "".join(f"- {name}\n" for name in repaired)
            + f"\n{_url('tenant-detail', tenant.pk)}\n",
            selectors.team_owner_emails(team=tenant.team),
        ),
    )


def tenant_isolation_failed(tenant: Tenant, *, failed_checks: list[str]) -> None:
    """The isolation report found a way out: the team's owners and the platform admins hear of it."""
    _publish(
        _tenant_event(
            tenant,
            EventType.TENANT_ISOLATION_FAILED,
            f"The isolation report of {tenant.name} ({tenant.team.slug}) failed: {', '.join(failed_checks)}",
            failed_checks=failed_checks,
        ),
        Mail(
            f"Isolation report of {tenant.name} failed",
            f"Checks that failed for tenant {tenant.name} on {tenant.cluster.name}:\n"
            + "".join(f"- {check}\n" for check in failed_checks)
            + f"\n{_url('tenant-detail', tenant.pk)}\n",
            sorted(set(selectors.team_owner_emails(team=tenant.team) + selectors.platform_admin_emails())),
        ),
    )


# --- Sleep (tenants.services.sleep) -----------------------------------------------------------

_SLEEP_REASONS = {"owner": "by {actor}", "schedule": "by its schedule", "idle": "after its idle period"}


def _sleep_why(reason: str, actor: Any) -> str:
    return _SLEEP_REASONS.get(reason, reason).format(actor=actor or "Berth")


def tenant_slept(tenant: Tenant, *, reason: str, actor: Any) -> None:
    """The tenant was put to sleep (its workloads scale to zero): its team hears of it."""
    why = _sleep_why(reason, actor)
    _publish(
        _tenant_event(
            tenant, EventType.TENANT_SLEPT, f"{tenant.name} ({tenant.team.slug}) was put to sleep {why}", reason=reason
        ),
        Mail(
            f"{tenant.name} is going to sleep",
            f"Tenant {tenant.name} on {tenant.cluster.name} was put to sleep {why}: its Deployments and StatefulSets "
            "are scaled to zero and its CronJobs suspended until it is woken.\n"
            f"Wake it from its page: {_url('tenant-detail', tenant.pk)}\n",
            selectors.team_emails(team=tenant.team),
        ),
    )


def tenant_woke(tenant: Tenant, *, reason: str, actor: Any) -> None:
    """The tenant was woken (its workloads come back as they were): its team hears of it."""
    why = _sleep_why(reason, actor)
    _publish(
        _tenant_event(
            tenant, EventType.TENANT_WOKE, f"{tenant.name} ({tenant.team.slug}) was woken {why}", reason=reason
        ),
        Mail(
            f"{tenant.name} is waking up",
            f"Tenant {tenant.name} on {tenant.cluster.name} was woken {why}: its workloads are restored as they were "
            f"before it slept.\n{_url('tenant-detail', tenant.pk)}\n",
            selectors.team_emails(team=tenant.team),
        ),
    )


# --- Alerts (tenants.services.alerts) ---------------------------------------------------------


def tenant_alert(tenant: Tenant, alert: TenantAlert, *, expired: bool = False) -> None:
    """An alert about the tenant's workloads fired or resolved: its team hears of it, once per transition. An
    expired one is resolved because Alertmanager stopped sending it (tenants.services.alerts.alerts_sweep)."""
    firing = alert.status == TenantAlert.Status.FIRING
    what = "fires" if firing else ("expired" if expired else "resolved")
    about = ", ".join(f"{key}={alert.labels[key]}" for key in ("pod", "container", "resource") if key in alert.labels)
    summary = f"{alert.name} {what} on {tenant.name} ({tenant.team.slug})" + (
        f": {alert.summary}" if alert.summary else ""
    )
    event = _tenant_event(
        tenant,
        EventType.TENANT_ALERT_FIRING if firing else EventType.TENANT_ALERT_RESOLVED,
        summary,
        alert={
            "name": alert.name,
            "status": alert.status,
            "severity": alert.severity,
            "summary": alert.summary,
            "fingerprint": alert.fingerprint,
            "starts_at": alert.starts_at.isoformat(),
            "ends_at": alert.ends_at.isoformat() if alert.ends_at else None,
            "labels": alert.labels,
            "expired": expired,
        },
    )
    event = replace(event, details={**event.details, "Alert": alert.name, "About": about or "-"})
    _publish(
        event,
        Mail(
            f"{alert.name} {what} on {tenant.name}",
            f"Alert {alert.name} ({alert.severity or 'no severity'}) {what} on tenant {tenant.name} on "
            f"{tenant.cluster.name}.\n{alert.summary or ''}\n"
            + ("Alertmanager stopped reporting it; it is taken as resolved.\n" if expired else "")
            + (f"About: {about}\n" if about else "")
            + f"Since: {alert.starts_at:%Y-%m-%d %H:%M} UTC\n"
            + (f"Until: {alert.ends_at:%Y-%m-%d %H:%M} UTC\n" if alert.ends_at and not firing else "")
            + f"\n{_url('tenant-detail', tenant.pk)}\n",
            selectors.team_emails(team=tenant.team),
        ),
    )
