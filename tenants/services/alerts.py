"""Alerts about tenants' workloads, received from Alertmanager (tenants.alerts parses its webhook).

Only Berth's own rules are taken (tenants.alert_rules.ALERT_NAMES); any other alert is counted as
``unknown_rule`` and dropped, and what the team is told is Berth's own wording of the rule and its labels
(``alert_rules.summary``), never an annotation's text. Each alert belongs to the tenant whose namespace its
``namespace`` label names; alerts about namespaces Berth does not manage are counted and dropped. Fingerprint and
start time make one ``TenantAlert``, and an open (firing) row with the same fingerprint is the same alert whatever
start time Alertmanager gives now (the two replicas of an HA pair may differ): repeats (``repeat_interval``),
retries and the peer's copy change nothing and notify no one; each firing post marks the row seen
(``last_seen_at``). Two transitions are recorded, each with its audit event in the same transaction, and each told
to the owning team (tenants.notifications):

- **firing**: a new alert, or one that was suppressed and still fires now that the tenant is awake and ready;
- **resolved**: it stopped firing, or Alertmanager stopped posting it for BERTH_ALERT_EXPIRE_HOURS (``expired``,
  by ``alerts_sweep``: its resolution was lost). Told exactly when its firing was told, whatever the tenant's state
  now: a team that heard an alert fire hears it end, even when the tenant went to sleep in between.

While the tenant sleeps, or is not ready, a firing is recorded as suppressed and not sent: a sleeping tenant's
stopped pods are not news. ``alerts_sweep`` also deletes resolved alerts older than BERTH_ALERT_LOG_DAYS.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from tenants import alert_rules, audit, notifications
from tenants.alerts import Alert
from tenants.audit import SYSTEM, AuditContext
from tenants.errors import InvalidTransition
from tenants.models import Tenant, TenantAlert, TenantStatus

ACTOR_NAME = "alertmanager"
CLUSTER_LABEL = alert_rules.CLUSTER_LABEL
# Where an alert's namespace can belong to a tenant: a deleted tenant's namespace may be anyone's next.
_ALERTABLE = (TenantStatus.READY, TenantStatus.PROVISIONING, TenantStatus.FAILED, TenantStatus.DECOMMISSIONING)
Status = TenantAlert.Status


@dataclass(frozen=True)
class Received:
    """What one webhook post did, by outcome: ``fired``, ``resolved``, ``suppressed``, ``repeated``,
    ``unknown_rule`` (not one of Berth's rules), ``unknown_namespace`` (no tenant of Berth's, or more than one
    cluster's and no ``berth_cluster`` label to tell)."""

    counts: dict[str, int]


def suppression_reason(tenant: Tenant) -> str:
    """Why nothing is sent about this tenant's alerts now ('' when they are sent)."""
    if tenant.sleeping:
        return "asleep"
    if tenant.status != TenantStatus.READY:
        return f"not ready ({tenant.status})"
    return ""


def alerts_receive(*, alerts: list[Alert], ctx: AuditContext = SYSTEM) -> Received:
    """Record a post's alerts, each in its own transaction (one bad tenant never loses the others)."""
    counts: Counter[str] = Counter()
    ours = [alert for alert in alerts if alert.name in alert_rules.ALERT_NAMES]
    if len(ours) < len(alerts):
        counts["unknown_rule"] = len(alerts) - len(ours)
    tenants = _tenants_by_namespace({alert.namespace for alert in ours if alert.namespace})
    for alert in ours:
        tenant = _tenant_of(alert, tenants)
        if tenant is None:
            counts["unknown_namespace"] += 1
            continue
        counts[alert_record(tenant=tenant, alert=alert, ctx=ctx)] += 1
    return Received(counts=dict(counts))


def _tenants_by_namespace(namespaces: set[str]) -> dict[str, list[Tenant]]:
    found: dict[str, list[Tenant]] = {}
    rows = Tenant.objects.filter(namespace__in=namespaces, status__in=_ALERTABLE).select_related("team", "cluster")
    for tenant in rows.order_by():
        found.setdefault(tenant.namespace, []).append(tenant)
    return found


def _tenant_of(alert: Alert, tenants: dict[str, list[Tenant]]) -> Tenant | None:
    """The one tenant the alert's namespace names. A ``berth_cluster`` label, naming the cluster as Berth does,
    picks among clusters that reuse a namespace name; without it such an alert belongs to no one, and with a name
    that is not the tenant's cluster neither. The kubelet's alerts get it from an external label of each cluster's
    Prometheus (which scrapes that cluster's nodes); the quota alert from its rule, which copies the gauge's own
    ``cluster`` (a rule's label wins over an external label, so a Prometheus scraping Berth for every cluster does
    not stamp its own cluster on other clusters' tenants). (Not ``cluster`` itself: external labels by that name
    often name clusters otherwise.)"""
    candidates = tenants.get(alert.namespace, [])
    if CLUSTER_LABEL in alert.labels:
        candidates = [t for t in candidates if t.cluster.name == alert.labels[CLUSTER_LABEL]]
    return candidates[0] if len(candidates) == 1 else None


@transaction.atomic
def alert_record(*, tenant: Tenant, alert: Alert, ctx: AuditContext = SYSTEM) -> str:
    """Record one alert of ``tenant``; returns what happened (see ``Received``)."""
    row, created = _row(tenant=tenant, alert=alert)
    suppressed = suppression_reason(tenant)
    if created:
        return _transition(
            row, tenant, to=alert.status, ends_at=alert.ends_at, suppressed=suppressed, ctx=ctx, new=True
        )
    if row.status == Status.RESOLVED:
        return "repeated"  # final for this start: a late retry of its firing changes nothing
    if alert.status == Status.FIRING:
        TenantAlert.objects.filter(pk=row.pk).update(last_seen_at=timezone.now())
    if alert.status == Status.RESOLVED:
        return _transition(row, tenant, to=Status.RESOLVED, ends_at=alert.ends_at, suppressed=suppressed, ctx=ctx)
    if row.notified_at is None and not suppressed:
        # It fired while the tenant slept (or was not ready), and fires still: the team hears of it now.
        return _transition(row, tenant, to=Status.FIRING, ends_at=None, suppressed="", ctx=ctx)
    return "repeated"


def _row(*, tenant: Tenant, alert: Alert) -> tuple[TenantAlert, bool]:
    """The alert's row, locked; made (with nothing told yet) when this is the first post about it. An open row
    with its fingerprint is the alert too, whatever start Alertmanager now gives it (an HA pair's replicas may
    disagree, one moving it earlier)."""
    key = {"tenant": tenant, "fingerprint": alert.fingerprint, "starts_at": alert.starts_at}
    locked = TenantAlert.objects.select_for_update(no_key=True)
    existing = locked.filter(**key).first()
    if existing is not None:  # the common case: Alertmanager repeats what it sent
        return existing, False
    # Both peers of an HA pair may post at once with different starts: one at a time per alert from here.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"tenant-alert:{tenant.pk}:{alert.fingerprint}"]
        )
    existing = (
        locked.filter(**key).first()
        or locked.filter(tenant=tenant, fingerprint=alert.fingerprint, status=Status.FIRING)
        .order_by("starts_at")
        .first()
    )
    if existing is not None:
        return existing, False
    try:
        with transaction.atomic():
            row = TenantAlert.objects.create(
                **key,
                name=alert.name[:200],
                severity=alert.labels.get("severity", "")[:40],
                summary=alert_rules.summary(alert.name, alert.labels)[:500],
                labels=alert.labels,
                status=Status.FIRING,
                last_seen_at=timezone.now(),
            )
        return row, True
    except IntegrityError:  # a concurrent post (Alertmanager's retry, its HA peer) made it first
        return TenantAlert.objects.select_for_update(no_key=True).get(**key), False


def _transition(
    row: TenantAlert,
    tenant: Tenant,
    *,
    to: str,
    ends_at: dt.datetime | None,
    suppressed: str,
    ctx: AuditContext,
    new: bool = False,
    expired: bool = False,
) -> str:
    now = timezone.now()
    was_told = row.notified_at is not None
    # A resolution is told exactly when its firing was: the team that heard it fire hears it end, asleep or not.
    tell = was_told if to == Status.RESOLVED else not suppressed
    if to == Status.RESOLVED and was_told:
        suppressed = ""
    before = {} if new else {"status": row.status, "notified": was_told}
    fields: dict[str, object] = {"status": to, "suppressed_reason": suppressed if not tell else ""}
    if to == Status.RESOLVED:
        fields["ends_at"] = ends_at or now
    if tell:
        fields["notified_at"] = now
    updated = TenantAlert.objects.filter(pk=row.pk, status=row.status).update(**fields, updated_at=now)
    if updated != 1:  # the row is locked, so only a bug gets here
        raise InvalidTransition(f"Alert {row.pk} is no longer {row.status}.")
    row.refresh_from_db()
    audit.record(
        actor=None,
        actor_name=ACTOR_NAME,
        action=f"tenant.alert_{to}",
        obj=tenant,
        team=tenant.team,
        before=before,
        after={
            "alert": row.name,
            "fingerprint": row.fingerprint,
            "starts_at": row.starts_at.isoformat(),
            "summary": row.summary,
            "notified": tell,
            "suppressed": suppressed or None,
            **({"expired": True} if expired else {}),
        },
        ctx=ctx,
    )
    if tell:
        notifications.tenant_alert(tenant, row, expired=expired)
        return "resolved" if to == Status.RESOLVED else "fired"
    return "suppressed" if suppressed else ("resolved" if to == Status.RESOLVED else "fired")


def alerts_sweep(*, now: dt.datetime | None = None) -> dict[str, int]:
    """Resolve firing alerts Alertmanager stopped posting (not seen for BERTH_ALERT_EXPIRE_HOURS: their resolution
    was lost, or the rule or Alertmanager went away) as expired, told like any resolution; and delete resolved
    alerts that ended more than BERTH_ALERT_LOG_DAYS ago."""
    now = now or timezone.now()
    stale = TenantAlert.objects.filter(
        status=Status.FIRING, last_seen_at__lt=now - dt.timedelta(hours=settings.BERTH_ALERT_EXPIRE_HOURS)
    )
    expired = sum(_expire(pk) for pk in stale.values_list("pk", flat=True))
    pruned, _ = TenantAlert.objects.filter(
        status=Status.RESOLVED, ends_at__lt=now - dt.timedelta(days=settings.BERTH_ALERT_LOG_DAYS)
    ).delete()
    return {"expired": expired, "pruned": pruned}


@transaction.atomic
def _expire(pk: int) -> bool:
    row = TenantAlert.objects.select_for_update(no_key=True).filter(pk=pk, status=Status.FIRING).first()
    if row is None:  # resolved meanwhile
        return False
    tenant = Tenant.objects.select_related("team", "cluster").get(pk=row.tenant_id)
    _transition(row, tenant, to=Status.RESOLVED, ends_at=row.last_seen_at, suppressed="", ctx=SYSTEM, expired=True)
    return True
