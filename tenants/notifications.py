"""Email notifications, sent after the transaction commits; a mail failure never undoes an action."""
from __future__ import annotations

import logging

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse

from tenants import selectors
from tenants.models import Request, Tenant

logger = logging.getLogger(__name__)


def _send(subject: str, body: str, to: list[str]) -> None:
    if not to:
        return

    def deliver() -> None:
        try:
            send_mail(f"[Berth] {subject}", body, settings.DEFAULT_FROM_EMAIL, to)
        except Exception as exc:  # SMTP trouble must not break the portal
            logger.warning("could not send mail %r: %s", subject, exc)

    transaction.on_commit(deliver)


def _url(name: str, pk: object) -> str:
    return settings.BERTH_PUBLIC_URL + reverse(name, args=[pk])


def request_submitted(req: Request) -> None:
    _send(
        f"{req.requested_by} asks to {req.get_action_display().lower()} {req.name}",
        f"Team: {req.team.slug}\nTier: {req.tier.name}\nCluster: {req.cluster.name}\nPurpose: {req.purpose or '-'}\n\n"
        f"Review it: {_url('request-detail', req.pk)}\n",
        selectors.approver_emails(),
    )


def request_decided(req: Request) -> None:
    who = req.decided_by.username if req.decided_by else "automatic approval"
    _send(
        f"Your request for {req.name} was {req.status}",
        f"Decision by {who}.\nComment: {req.decision_comment or '-'}\n\n{_url('request-detail', req.pk)}\n",
        [req.requested_by.email] if req.requested_by.email else [],
    )


def tenant_status(tenant: Tenant) -> None:
    body = f"Tenant {tenant.name} on {tenant.cluster.name} is {tenant.status}.\n"
    if tenant.status_reason:
        body += f"Reason: {tenant.status_reason}\n"
    _send(f"{tenant.name} is {tenant.status}", body + f"\n{_url('tenant-detail', tenant.pk)}\n", selectors.team_emails(team=tenant.team))


def tenant_expiring(tenant: Tenant) -> None:
    _send(
        f"{tenant.name} expires on {tenant.expires_at:%Y-%m-%d}",
        f"Tenant {tenant.name} on {tenant.cluster.name} will be decommissioned on {tenant.expires_at:%Y-%m-%d %H:%M} UTC.\n"
        f"Ask for more time from its page: {_url('tenant-detail', tenant.pk)}\n",
        selectors.team_owner_emails(team=tenant.team),
    )
