"""Webhooks: platform admins register endpoints for every team or for one; team owners manage their own team's;
the worker delivers each event to them, in order, with retries.

Endpoints are changed only here, each change audited without its secret or its URL's path (a Slack
webhook's path is a credential): the audit trail shows the URL's origin. Who may change one is decided in
one place (``_require_manager``): platform admins any endpoint, a team's owners their team's endpoints only.
Team owners never make a global endpoint, never move one to another team, never allow private addresses
(a platform admin's call: ``allow_private_network``), and have at most ``BERTH_TEAM_WEBHOOK_LIMIT`` endpoints
per team. Every URL goes through the same checks (``webhook_endpoint_validate``) whoever saves it, and the
worker checks its addresses again before each attempt.

Deliveries move only through ``webhook_deliver``: one attempt at the oldest pending delivery of an endpoint
and tenant, under a lock for that pair, so a receiver sees one tenant's events in the order they happened; a
failed attempt is retried with exponential backoff and jitter, and the next delivery of the pair waits until
this one is delivered or given up. At most ``BERTH_WEBHOOK_MAX_IN_FLIGHT`` attempts run at once in the whole
installation, so slow receivers can never occupy every worker process, and at most
``BERTH_WEBHOOK_MAX_IN_FLIGHT_PER_TEAM`` of them for one team's endpoints, so one team's slow receivers never
hold up another team's events (global endpoints, the platform admins', are held to the installation's cap
only). An endpoint whose last ``BERTH_WEBHOOK_DISABLE_AFTER_FAILURES`` deliveries were all given up is turned
off by the system (audited, the reason shown to its team) until an owner or a platform admin turns it on.

Every change to an endpoint re-reads it under its row lock (``_locked``) and writes only the columns it
changes: a caller's copy may be stale, and must never undo a rotation or revive a removed endpoint.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import random
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from tenants import audit, dispatch
from tenants.audit import SYSTEM, AuditContext
from tenants.errors import InvalidTransition, NoLongerExists
from tenants.models import EventType, Team, User, WebhookDelivery, WebhookEndpoint
from tenants.sealing import seal, unseal
from tenants.services.permissions import require_owner_or_admin, require_platform_admin
from tenants.webhooks import outbox, payloads, sender, signing, targets
from tenants.webhooks.targets import TargetRefused

logger = logging.getLogger(__name__)
Status = WebhookDelivery.Status
# Advisory lock classes (the two-key form, apart from the worker's per-tenant locks).
PAIR_LOCK, SLOT_LOCK, TEAM_SLOT_LOCK = 0x4254_0001, 0x4254_0002, 0x4254_0003
# A pending delivery due this long ago whose task was lost (broker restart) is sent again by the sweep.
SWEEP_GRACE = dt.timedelta(seconds=60)
SUBSCRIBABLE = [e for e in EventType.values if e != EventType.PING]
PRIVATE_ADMIN_ONLY = "Only platform admins can allow private addresses for a webhook."


# --- Endpoints (platform admins, and team owners for their team's) ------------------------------


def _locked(endpoint: WebhookEndpoint) -> WebhookEndpoint:
    """The endpoint as it is now, its row locked until the transaction ends; NoLongerExists (404) when it was
    removed since the caller read it."""
    current = (
        WebhookEndpoint.objects.select_for_update(no_key=True, of=("self",))
        .select_related("team")
        .filter(pk=endpoint.pk)
        .first()
    )
    if current is None:
        raise NoLongerExists("No such webhook endpoint: it was removed.")
    return current


def _require_manager(*, actor: User, team: Team | None, doing: str) -> None:
    """Global endpoints are platform admins'; a team's endpoints are also its owners'."""
    if team is None:
        require_platform_admin(actor=actor, doing=f"{doing} for every team")
    else:
        require_owner_or_admin(actor=actor, team=team, doing=doing)


def webhook_endpoint_validate(
    *,
    name: str,
    url: str,
    events: list[str],
    format: str,
    allow_private_network: bool,
    secret: str = "",
    detailed: bool = True,
) -> str:
    """ValidationError by field for anything an endpoint cannot be saved with; the URL's origin when all is fine.

    The URL is resolved now and every address checked (the worker checks again before each attempt). Only
    platform admins (``detailed``) are told which address a name resolved to: anyone else would use the
    server's resolver to map internal names."""
    errors: dict[str, str] = {}
    if not name.strip():
        errors["name"] = "Give the endpoint a name."
    unknown = sorted(set(events) - set(SUBSCRIBABLE))
    if not events:
        errors["events"] = "Choose at least one event."
    elif unknown:
        errors["events"] = f"Unknown event(s) {', '.join(unknown)}; choose from {', '.join(SUBSCRIBABLE)}."
    if format not in WebhookEndpoint.Format.values:
        errors["format"] = f"Choose one of: {', '.join(WebhookEndpoint.Format.values)}."
    if secret and signing.secret_error(secret):
        errors["secret"] = signing.secret_error(secret)
    origin = ""
    try:
        origin = targets.check(url, allow_private=allow_private_network).origin
    except TargetRefused as exc:
        errors["url"] = str(exc) if detailed else exc.undetailed
    if errors:
        raise ValidationError(errors)
    return origin


def _snapshot(endpoint: WebhookEndpoint) -> dict[str, Any]:
    """What the audit trail records of an endpoint: never its secret, and of its URL only the origin."""
    return {
        "name": endpoint.name,
        "team": endpoint.team.slug if endpoint.team else None,
        "url": endpoint.url_origin,
        "format": endpoint.format,
        "events": list(endpoint.events),
        "allow_private_network": endpoint.allow_private_network,
        "is_active": endpoint.is_active,
    }


def _check_team_room(*, actor: User, team: Team) -> None:
    """A team owner adds an endpoint only while the team has fewer than BERTH_TEAM_WEBHOOK_LIMIT; the team row's
    lock makes two owners adding at once count one after the other. Platform admins are not held to it."""
    if actor.is_platform_admin:
        return
    Team.objects.select_for_update(no_key=True).filter(pk=team.pk).first()
    limit = settings.BERTH_TEAM_WEBHOOK_LIMIT
    if WebhookEndpoint.objects.filter(team=team).count() >= limit:
        raise ValidationError(f"{team.slug} has {limit} webhook endpoints, the most a team may have; remove one first.")


@transaction.atomic
def webhook_endpoint_create(
    *,
    actor: User,
    name: str,
    url: str,
    events: list[str],
    team: Team | None = None,
    format: str = WebhookEndpoint.Format.JSON,
    allow_private_network: bool = False,
    secret: str = "",
    is_active: bool = True,
    ctx: AuditContext = SYSTEM,
) -> tuple[WebhookEndpoint, str]:
    """A new endpoint and its signing secret (generated unless given), which is shown only now."""
    _require_manager(actor=actor, team=team, doing="register webhooks")
    if allow_private_network and not actor.is_platform_admin:
        raise ValidationError({"allow_private_network": PRIVATE_ADMIN_ONLY})
    origin = webhook_endpoint_validate(
        name=name,
        url=url,
        events=events,
        format=format,
        allow_private_network=allow_private_network,
        secret=secret,
        detailed=actor.is_platform_admin,
    )
    if team is not None:
        _check_team_room(actor=actor, team=team)
    secret = secret or signing.new_secret()
    endpoint = WebhookEndpoint.objects.create(
        name=name.strip()[:100],
        team=team,
        url_sealed=seal(url),
        url_origin=origin,
        format=format,
        events=sorted(set(events)),
        secret_sealed=seal(secret),
        allow_private_network=allow_private_network,
        is_active=is_active,
        created_by=actor,
    )
    audit.record(actor=actor, action="webhook.create", obj=endpoint, team=team, after=_snapshot(endpoint), ctx=ctx)
    return endpoint, secret


def _private_allowance(*, endpoint: WebhookEndpoint, actor: User, asked: bool | None, new_url: bool) -> bool:
    """Whether the endpoint may reach private addresses after a change. A platform admin decides; anyone else
    keeps the allowance an admin gave for the stored URL (None: as it is), loses it with a new URL, and may
    never turn it on."""
    if actor.is_platform_admin:
        return endpoint.allow_private_network if asked is None else asked
    kept = endpoint.allow_private_network and not new_url
    if asked and not kept:
        raise ValidationError({"allow_private_network": PRIVATE_ADMIN_ONLY})
    return kept if asked is None else asked


@transaction.atomic
def webhook_endpoint_update(
    *,
    endpoint: WebhookEndpoint,
    actor: User,
    team: Team | None,
    name: str | None = None,
    events: list[str] | None = None,
    format: str | None = None,
    allow_private_network: bool | None = None,
    is_active: bool | None = None,
    url: str = "",
    ctx: AuditContext = SYSTEM,
) -> WebhookEndpoint:
    """Change an endpoint: what is None (``url`` empty) stays as it is now (whatever the caller's copy says); the
    URL kept is checked again against the allowance. ``team`` is where the endpoint belongs after the change: only
    platform admins move one. Turning on an endpoint the system turned off clears the reason and the count."""
    endpoint = _locked(endpoint)
    _require_manager(actor=actor, team=endpoint.team, doing="change webhooks")
    if team != endpoint.team:
        if not actor.is_platform_admin:
            raise ValidationError({"team": "Only platform admins can move a webhook to another team."})
        _require_manager(actor=actor, team=team, doing="change webhooks")
    before = _snapshot(endpoint)
    allow_private = _private_allowance(endpoint=endpoint, actor=actor, asked=allow_private_network, new_url=bool(url))
    checked_url = url or unseal(endpoint.url_sealed)
    if checked_url is None:
        raise ValidationError({"url": "The stored URL cannot be opened (the secrets key changed); enter it again."})
    name = endpoint.name if name is None else name
    events = list(endpoint.events) if events is None else events
    format = endpoint.format if format is None else format
    origin = webhook_endpoint_validate(
        name=name,
        url=checked_url,
        events=events,
        format=format,
        allow_private_network=allow_private,
        detailed=actor.is_platform_admin,
    )
    wanted: dict[str, Any] = {
        "name": name.strip()[:100],
        "team": team,
        "format": format,
        "events": sorted(set(events)),
        "allow_private_network": allow_private,
        "url_origin": origin,
    }
    if url:
        wanted["url_sealed"] = seal(url)
    if is_active is not None:
        wanted["is_active"] = is_active
    if is_active and not endpoint.is_active:
        wanted.update(consecutive_failures=0, disabled_reason="", disabled_at=None)
    changed = [field for field, value in wanted.items() if getattr(endpoint, field) != value]
    for field in changed:
        setattr(endpoint, field, wanted[field])
    if changed:
        endpoint.save(update_fields=[*changed, "updated_at"])
    after = _snapshot(endpoint)
    if url:
        after["url_changed"] = True
    audit.record(
        actor=actor, action="webhook.update", obj=endpoint, team=endpoint.team, before=before, after=after, ctx=ctx
    )
    return endpoint


@transaction.atomic
def webhook_endpoint_rotate_secret(*, endpoint: WebhookEndpoint, actor: User, ctx: AuditContext = SYSTEM) -> str:
    """A new signing secret, shown only now; deliveries signed from now on use it."""
    endpoint = _locked(endpoint)
    _require_manager(actor=actor, team=endpoint.team, doing="rotate webhook secrets")
    secret = signing.new_secret()
    endpoint.secret_sealed = seal(secret)
    endpoint.save(update_fields=["secret_sealed", "updated_at"])
    audit.record(actor=actor, action="webhook.rotate_secret", obj=endpoint, team=endpoint.team, ctx=ctx)
    return secret


@transaction.atomic
def webhook_endpoint_delete(*, endpoint: WebhookEndpoint, actor: User, ctx: AuditContext = SYSTEM) -> None:
    """Remove an endpoint and its delivery log (disable it instead to keep the log)."""
    endpoint = _locked(endpoint)
    _require_manager(actor=actor, team=endpoint.team, doing="delete webhooks")
    audit.record(
        actor=actor, action="webhook.delete", obj=endpoint, team=endpoint.team, before=_snapshot(endpoint), ctx=ctx
    )
    endpoint.delete()


@transaction.atomic
def webhook_endpoint_test(*, endpoint: WebhookEndpoint, actor: User, ctx: AuditContext = SYSTEM) -> WebhookDelivery:
    """Send a ``ping`` event to one endpoint, to check the URL, the secret and the receiver; refused (409) while
    an earlier one is still being sent, so test events cannot pile up behind a receiver that never answers."""
    endpoint = _locked(endpoint)
    _require_manager(actor=actor, team=endpoint.team, doing="send test webhooks")
    pending = endpoint.deliveries.filter(event=EventType.PING, status=Status.PENDING).order_by("created_at").first()
    if pending is not None:
        raise InvalidTransition(
            f"A test event for “{endpoint.name}” is still being sent (attempt {pending.attempts} of "
            f"{settings.BERTH_WEBHOOK_MAX_ATTEMPTS} done); send another once it is delivered or given up."
        )
    event = payloads.Event(
        type=EventType.PING,
        team=endpoint.team,
        tenant=None,
        summary=f"Test event from Berth, sent by {actor.username} to {endpoint.name}",
        link=settings.BERTH_PUBLIC_URL + "/",
        link_label="Open Berth",
        data={"endpoint": endpoint.name, "sent_by": actor.username},
    )
    (delivery,) = outbox.publish(event, endpoints=[endpoint])
    audit.record(actor=actor, action="webhook.test", obj=endpoint, team=endpoint.team, ctx=ctx)
    return delivery


# --- Deliveries (the worker) --------------------------------------------------------------------


@contextlib.contextmanager
def _try_lock(lock_class: int, key: int) -> Iterator[bool]:
    """A session-level advisory lock, or False at once when someone else holds it."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s, %s)", [lock_class, key])
        got = bool(cur.fetchone()[0])
    try:
        yield got
    finally:
        if got:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s, %s)", [lock_class, key])


def _first_free(stack: contextlib.ExitStack, lock_class: int, keys: Iterable[int]) -> bool:
    """Take the first of ``keys`` nobody holds (released when ``stack`` closes); False when all are held."""
    return any(stack.enter_context(_try_lock(lock_class, key)) for key in keys)


def _team_slot_keys(team_id: int) -> list[int]:
    per_team = max(settings.BERTH_WEBHOOK_MAX_IN_FLIGHT_PER_TEAM, 1)
    return [zlib.crc32(f"{team_id}:{slot}".encode()) - 2**31 for slot in range(per_team)]


@contextlib.contextmanager
def _in_flight_slot(team_id: int | None) -> Iterator[bool]:
    """One of the team's BERTH_WEBHOOK_MAX_IN_FLIGHT_PER_TEAM slots (global endpoints: none needed) and one of the
    installation's BERTH_WEBHOOK_MAX_IN_FLIGHT, all shared by every worker; False when either kind is all taken."""
    with contextlib.ExitStack() as stack:
        if team_id is not None and not _first_free(stack, TEAM_SLOT_LOCK, _team_slot_keys(team_id)):
            yield False
            return
        yield _first_free(stack, SLOT_LOCK, range(max(settings.BERTH_WEBHOOK_MAX_IN_FLIGHT, 1)))


def _pair_key(endpoint_id: int, tenant_id: uuid.UUID | None) -> int:
    return zlib.crc32(f"{endpoint_id}:{tenant_id}".encode()) - 2**31


def _head(endpoint_id: int, tenant_id: uuid.UUID | None) -> WebhookDelivery | None:
    """The pair's oldest pending delivery: the only one that may be attempted (tenant None: test events)."""
    pair = Q(tenant__isnull=True) if tenant_id is None else Q(tenant_id=tenant_id)
    return (
        WebhookDelivery.objects.filter(pair, endpoint_id=endpoint_id, status=Status.PENDING)
        .select_related("endpoint")
        .order_by("sequence", "created_at")
        .first()
    )


def retry_delay(attempts: int, retry_after: float | None = None) -> float:
    """Seconds before the next attempt: doubling from BERTH_WEBHOOK_RETRY_SECONDS, capped, half of it jitter;
    a receiver's Retry-After is honoured up to the cap."""
    cap = float(settings.BERTH_WEBHOOK_RETRY_MAX_SECONDS)
    delay = min(cap, settings.BERTH_WEBHOOK_RETRY_SECONDS * 2 ** max(attempts - 1, 0))
    delay = random.uniform(delay / 2, delay)
    return max(delay, min(retry_after, cap)) if retry_after else delay


def _count_failure(endpoint_id: int, error: str) -> None:
    """One more delivery given up in a row; the BERTH_WEBHOOK_DISABLE_AFTER_FAILURES-th turns the endpoint off."""
    endpoint = (
        WebhookEndpoint.objects.select_for_update(no_key=True, of=("self",))
        .select_related("team")
        .filter(pk=endpoint_id)
        .first()
    )
    if endpoint is None:
        return
    endpoint.consecutive_failures += 1
    limit = settings.BERTH_WEBHOOK_DISABLE_AFTER_FAILURES
    if not (limit > 0 and endpoint.is_active and endpoint.consecutive_failures >= limit):
        endpoint.save(update_fields=["consecutive_failures"])
        return
    before = _snapshot(endpoint)
    reason = f"Turned off by Berth: the last {endpoint.consecutive_failures} deliveries were all given up ({error})"
    endpoint.is_active, endpoint.disabled_reason, endpoint.disabled_at = False, reason[:300], timezone.now()
    endpoint.save(update_fields=["consecutive_failures", "is_active", "disabled_reason", "disabled_at", "updated_at"])
    after = {**_snapshot(endpoint), "reason": endpoint.disabled_reason}
    audit.record(actor=None, action="webhook.disable", obj=endpoint, team=endpoint.team, before=before, after=after)
    logger.warning("webhook endpoint %d at %s turned off: %s", endpoint.pk, endpoint.url_origin, reason)


@transaction.atomic
def _record(delivery: WebhookDelivery, outcome: sender.Outcome, *, counts: bool = True) -> str:
    """Write how the attempt went; a delivery given up counts against its endpoint (``counts``: unless it was
    given up because the endpoint is off), one delivered resets the count."""
    attempts = delivery.attempts + 1
    now = timezone.now()
    fields: dict[str, Any] = {
        "attempts": attempts,
        "response_code": outcome.status_code,
        "duration_ms": outcome.duration_ms,
        "last_attempt_at": now,
        "last_error": outcome.error[:300],
    }
    if outcome.delivered:
        result = "delivered"
        fields.update(status=Status.DELIVERED, finished_at=now)
    elif outcome.permanent or attempts >= settings.BERTH_WEBHOOK_MAX_ATTEMPTS:
        result = "failed"
        fields.update(status=Status.FAILED, finished_at=now)
    else:
        result = "retrying"
        fields["next_attempt_at"] = now + dt.timedelta(seconds=retry_delay(attempts, outcome.retry_after))
    recorded = WebhookDelivery.objects.filter(pk=delivery.pk, status=Status.PENDING).update(**fields)
    if recorded and result == "delivered":
        WebhookEndpoint.objects.filter(pk=delivery.endpoint_id, consecutive_failures__gt=0).update(
            consecutive_failures=0
        )
    elif recorded and result == "failed" and counts:
        _count_failure(delivery.endpoint_id, outcome.error)
    log = logger.info if outcome.delivered else logger.warning
    log(
        "webhook %s %s (sequence %d) to endpoint %d at %s, attempt %d: %s%s",
        delivery.pk,
        delivery.event,
        delivery.sequence,
        delivery.endpoint_id,
        delivery.endpoint.url_origin,
        attempts,
        result,
        f" ({outcome.error})" if outcome.error else "",
    )
    return result


def _attempt(delivery: WebhookDelivery) -> str:
    endpoint = delivery.endpoint
    url, secret = unseal(endpoint.url_sealed), unseal(endpoint.secret_sealed)
    if not endpoint.is_active:
        return _record(delivery, sender.Outcome(None, "the endpoint is disabled", 0, permanent=True), counts=False)
    if url is None or secret is None:
        reason = "the endpoint's URL or secret cannot be opened (the secrets key changed): save it again"
        return _record(delivery, sender.Outcome(None, reason, 0, permanent=True))
    body = payloads.body(delivery.payload)
    headers = signing.headers(
        secret=secret,
        message_id=str(delivery.event_id),
        timestamp=int(time.time()),
        body=body,
        event=delivery.event,
        delivery_id=str(delivery.pk),
        sequence=delivery.sequence,
    )
    outcome = sender.post(
        url=url,
        body=body,
        headers=headers,
        allow_private=endpoint.allow_private_network,
        timeout=settings.BERTH_WEBHOOK_TIMEOUT_SECONDS,
    )
    return _record(delivery, outcome)


def _send_next(endpoint_id: int, tenant_id: uuid.UUID | None) -> None:
    """Queue the pair's next delivery for when it is due (after a retry's backoff, or at once)."""
    head = _head(endpoint_id, tenant_id)
    if head is not None:
        countdown = max((head.next_attempt_at - timezone.now()).total_seconds(), 0.0)
        dispatch.send(dispatch.DELIVER_WEBHOOK, str(head.pk), countdown=countdown)


def webhook_deliver(*, delivery_id: str) -> str:
    """Attempt the oldest pending delivery of ``delivery_id``'s endpoint and tenant, then queue what follows.

    Returns what happened, for logs and tests: delivered, retrying, failed; busy (another worker holds the
    pair and queues what follows when it is done), waiting (the head's retry is scheduled; a later delivery
    never hurries it), throttled (every
    in-flight slot is taken: tried again in a moment), idle or gone.
    """
    row = WebhookDelivery.objects.filter(pk=delivery_id).values_list("endpoint_id", "tenant_id").first()
    if row is None:
        return "gone"
    endpoint_id, tenant_id = row
    with _try_lock(PAIR_LOCK, _pair_key(endpoint_id, tenant_id)) as got:
        if not got:
            return "busy"
        head = _head(endpoint_id, tenant_id)
        if head is None:
            return "idle"
        if head.next_attempt_at > timezone.now():
            if str(head.pk) == delivery_id:  # the head's own retry, come early (clocks): again when it is due
                countdown = (head.next_attempt_at - timezone.now()).total_seconds()
                dispatch.send(dispatch.DELIVER_WEBHOOK, delivery_id, countdown=countdown)
            return "waiting"
        with _in_flight_slot(head.endpoint.team_id) as slot:
            if slot:
                result = _attempt(head)
            else:
                result = "throttled"
                later = timezone.now() + dt.timedelta(seconds=random.uniform(0.5, 1.5))
                WebhookDelivery.objects.filter(pk=head.pk).update(next_attempt_at=later)
    # After the lock is released: a delivery committed while we held it was refused as "busy" and is ours to send.
    _send_next(endpoint_id, tenant_id)
    return result


def webhooks_sweep() -> dict[str, int]:
    """Send again pending deliveries whose task was lost, and drop finished ones past BERTH_WEBHOOK_LOG_DAYS."""
    now = timezone.now()
    overdue = (
        WebhookDelivery.objects.filter(status=Status.PENDING, next_attempt_at__lt=now - SWEEP_GRACE)
        .order_by("endpoint_id", "tenant_id", "sequence", "created_at")
        .distinct("endpoint_id", "tenant_id")
        .values_list("pk", flat=True)
    )
    resent = sum(dispatch.send(dispatch.DELIVER_WEBHOOK, str(pk)) for pk in overdue)
    finished_before = now - dt.timedelta(days=settings.BERTH_WEBHOOK_LOG_DAYS)
    pruned, _ = WebhookDelivery.objects.filter(
        status__in=[Status.DELIVERED, Status.FAILED], finished_at__lt=finished_before
    ).delete()
    return {"resent": resent, "pruned": pruned}
