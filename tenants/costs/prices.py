"""Cluster prices for showback: platform admins set them; a price in effect is never rewritten.

A price takes effect at 00:00 UTC of its ``effective_from`` day and holds until the next one. Only today
or a later day can be given, so the figures of past days, and so of past months, keep the prices they had;
setting prices again for the same day replaces that day's (not yet past) row. Every change is audited
(``cluster.prices``) with the prices before and after.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from tenants import audit
from tenants.audit import SYSTEM, AuditContext
from tenants.models import Cluster, ClusterPrice, User
from tenants.services.permissions import require_platform_admin

PRICE_FIELDS = ("cpu_core_hour", "memory_gib_hour", "storage_gib_month")
# ClusterPrice's columns: 14 digits, 6 after the point.
MAX_PRICE = Decimal("99999999.999999")
_CURRENCY = re.compile(r"[A-Z]{3}")


def today_utc() -> dt.date:
    return timezone.now().astimezone(dt.UTC).date()


def cluster_price_errors(
    *, effective_from: dt.date | None, currency: str, prices: Mapping[str, object]
) -> dict[str, str]:
    """What is wrong with a price change, by field (empty when nothing is)."""
    errors: dict[str, str] = {}
    if effective_from is None:
        errors["effective_from"] = "Give the day the prices take effect."
    elif effective_from < today_utc():
        errors["effective_from"] = "Prices take effect today or later: past days keep the prices they had."
    if not _CURRENCY.fullmatch(currency or ""):
        errors["currency"] = "A three-letter ISO 4217 code in capitals, e.g. EUR."
    for name in PRICE_FIELDS:
        try:
            value = Decimal(str(prices.get(name)))
        except (InvalidOperation, ValueError):
            errors[name] = "A number, e.g. 0.031."
            continue
        if not value.is_finite() or value < 0 or value > MAX_PRICE:
            errors[name] = f"A number from 0 to {MAX_PRICE}."
        elif value != value.quantize(Decimal("0.000001")):
            errors[name] = "At most 6 digits after the point."
    return errors


def _snapshot(price: ClusterPrice | None) -> dict[str, str]:
    if price is None:
        return {}
    return {
        "effective_from": price.effective_from.isoformat(),
        "currency": price.currency,
        **{name: str(getattr(price, name)) for name in PRICE_FIELDS},
    }


@transaction.atomic
def cluster_set_prices(
    *,
    cluster: Cluster,
    actor: User,
    effective_from: dt.date,
    cpu_core_hour: Decimal,
    memory_gib_hour: Decimal,
    storage_gib_month: Decimal,
    currency: str = "",
    ctx: AuditContext = SYSTEM,
) -> ClusterPrice:
    """Set ``cluster``'s prices from ``effective_from`` (today or later) on; audited with before and after."""
    require_platform_admin(actor=actor, doing="set cluster prices")
    currency = currency or settings.BERTH_CURRENCY
    prices = {
        "cpu_core_hour": cpu_core_hour,
        "memory_gib_hour": memory_gib_hour,
        "storage_gib_month": storage_gib_month,
    }
    errors = cluster_price_errors(effective_from=effective_from, currency=currency, prices=prices)
    if errors:
        raise ValidationError(errors)
    Cluster.objects.select_for_update(no_key=True).filter(
        pk=cluster.pk
    ).first()  # one price change per cluster at a time
    same_day = ClusterPrice.objects.filter(cluster=cluster, effective_from=effective_from).first()
    previous = same_day or (
        ClusterPrice.objects.filter(cluster=cluster, effective_from__lt=effective_from)
        .order_by("-effective_from")
        .first()
    )
    before = _snapshot(previous)
    price = same_day or ClusterPrice(cluster=cluster, effective_from=effective_from, created_by=actor)
    price.currency = currency
    for name, value in prices.items():
        setattr(price, name, Decimal(str(value)))
    price.save()
    audit.record(actor=actor, action="cluster.prices", obj=cluster, before=before, after=_snapshot(price), ctx=ctx)
    return price
