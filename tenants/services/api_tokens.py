"""Portal API tokens: only a SHA-256 digest is stored; the plaintext is shown once."""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from tenants import audit
from tenants.audit import SYSTEM, AuditContext
from tenants.errors import Forbidden, InvalidTransition
from tenants.models import ApiToken, Team, User
from tenants.services.permissions import is_owner_or_admin

TOKEN_PREFIX = "brt_"


def api_token_digest(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


@transaction.atomic
def api_token_create(
    *, actor: User, name: str, expires_in_days: int, team: Team | None = None, ctx: AuditContext = SYSTEM
) -> tuple[ApiToken, str]:
    """A new API token and its plaintext, which is never stored and shown only now."""
    errors: dict[str, str] = {}
    if not name.strip():
        errors["name"] = "Give the token a name."
    if not 1 <= expires_in_days <= 365:
        errors["expires_in_days"] = "Between 1 and 365 days."
    if errors:
        raise ValidationError(errors)
    if team is not None and not is_owner_or_admin(user=actor, team=team):
        raise Forbidden("Only team owners can create automation tokens for a team.")
    prefix = secrets.token_hex(4)
    plaintext = f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    token = ApiToken.objects.create(
        user=actor,
        team=team,
        name=name.strip()[:100],
        prefix=prefix,
        digest=api_token_digest(plaintext),
        expires_at=timezone.now() + dt.timedelta(days=expires_in_days),
    )
    audit.record(
        actor=actor,
        action="api_token.create",
        obj=token,
        team=team,
        after={"name": token.name, "prefix": prefix, "expires_at": token.expires_at.isoformat()},
        ctx=ctx,
    )
    return token, plaintext


@transaction.atomic
def api_token_revoke(*, token: ApiToken, actor: User, ctx: AuditContext = SYSTEM) -> ApiToken:
    if token.user_id != actor.pk and not actor.is_platform_admin:
        raise Forbidden("You can revoke only your own tokens.")
    if ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()) != 1:
        raise InvalidTransition("This token is already revoked.")
    token.refresh_from_db()
    audit.record(
        actor=actor, action="api_token.revoke", obj=token, team=token.team, after={"prefix": token.prefix}, ctx=ctx
    )
    return token


# How stale ``last_used_at`` may get: the token page says "3 minutes ago", and an UPDATE (a row version, WAL and a
# commit to wait for) on every read made each GET of the API a write.
TOUCH_EVERY = dt.timedelta(minutes=1)


def api_token_touch(*, token: ApiToken) -> None:
    """Mark ``token`` (as just read from the database) used now, at most once every TOUCH_EVERY."""
    now = timezone.now()
    if token.last_used_at is not None and token.last_used_at > now - TOUCH_EVERY:
        return
    # The same test in the UPDATE: of several workers seeing the same stale value at once, only one writes.
    ApiToken.objects.filter(pk=token.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - TOUCH_EVERY)
    ).update(last_used_at=now)
    token.last_used_at = now
