"""The deliveries an event owes, written in the transaction of the change that caused it.

If that transaction rolls back, nothing is sent; if the broker is down when it commits, the rows wait
and the sweep (``tenants.services.webhooks_sweep``) sends them. Per tenant, events are numbered under the
tenant row's lock, so the numbers follow the order in which the changes committed; the worker sends them
in that order to each endpoint.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.db.models import F, Q

from tenants import dispatch
from tenants.models import Tenant, WebhookDelivery, WebhookEndpoint
from tenants.webhooks.payloads import Event, render


def subscribers(event: Event) -> list[WebhookEndpoint]:
    """Active endpoints that asked for this event: the event's team's, and the global ones."""
    scope = Q(team__isnull=True) | Q(team=event.team) if event.team else Q(team__isnull=True)
    return list(WebhookEndpoint.objects.filter(scope, is_active=True, events__contains=[event.type]))


def _next_sequence(tenant: Tenant) -> int:
    # The UPDATE takes the tenant row's lock until the caller's transaction ends: one number at a time.
    Tenant.objects.filter(pk=tenant.pk).update(event_sequence=F("event_sequence") + 1)
    return Tenant.objects.filter(pk=tenant.pk).values_list("event_sequence", flat=True).get()


@transaction.atomic
def publish(event: Event, *, endpoints: Iterable[WebhookEndpoint] | None = None) -> list[WebhookDelivery]:
    """One pending delivery per endpoint (default: every subscriber), each sent once the transaction commits."""
    targets = subscribers(event) if endpoints is None else list(endpoints)
    if not targets:
        return []
    sequence = _next_sequence(event.tenant) if event.tenant else 0
    deliveries = WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            endpoint=endpoint,
            event_id=event.id,
            event=event.type,
            tenant=event.tenant,
            sequence=sequence,
            payload=render(event, format=endpoint.format, sequence=sequence),
        )
        for endpoint in targets
    )
    for delivery in deliveries:
        dispatch.enqueue(dispatch.DELIVER_WEBHOOK, str(delivery.pk))
    return deliveries
