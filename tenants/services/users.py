"""Users: OIDC claims mirrored into users, teams and platform roles, and the sign-in trail."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.text import slugify

from tenants import audit, identity
from tenants.audit import SYSTEM, AuditContext
from tenants.errors import SignInRequired
from tenants.models import ApiToken, Membership, Team, User
from tenants.sealing import seal, unseal

logger = logging.getLogger(__name__)
SLUG_MAX = Team._meta.get_field("slug").max_length or 50
GROUP_MAX = Team._meta.get_field("oidc_group").max_length or 255
SUBJECT_MAX = User._meta.get_field("oidc_subject").max_length or 255


def _team_and_role(group: str) -> tuple[str, str] | None:
    prefix = settings.BERTH_TEAM_GROUP_PREFIX
    team_group, _, role = group.partition(":")
    if not team_group.startswith(prefix):
        return None
    if len(team_group) > GROUP_MAX:
        raise ValidationError({"groups": f"The group {team_group[:40]!r}… is longer than {GROUP_MAX} characters."})
    role = role or Membership.Role.MEMBER
    if role not in Membership.Role.values:
        return None
    return team_group, role


_ROLE_RANK: dict[str, int] = {Membership.Role.OWNER: 3, Membership.Role.MEMBER: 2, Membership.Role.VIEWER: 1}


@transaction.atomic
def user_sync_from_claims(
    *, claims: dict[str, Any], ctx: AuditContext = SYSTEM, issued_at: dt.datetime | None = None
) -> User:
    """Create or update a user from OIDC claims; teams and platform roles mirror the groups claim.

    ``issued_at`` is for claims that may be older than what Berth knows (an access token's ``iat``); None means
    the provider has just given them (a sign-in, a re-check). Claims issued before the provider ended the user's
    session are refused (SignInRequired). Claims issued before the last identity check change nothing: an older
    token never puts back what a newer check took away.
    """
    subject = str(claims.get("sub") or "")
    if not subject:
        raise ValidationError({"sub": "The identity provider sent no subject."})
    if len(subject) > SUBJECT_MAX:
        raise ValidationError({"sub": f"The identity provider sent a subject longer than {SUBJECT_MAX} characters."})
    username = str(claims.get("preferred_username") or claims.get("email") or subject)[:150]
    user = _user_for(subject=subject, username=username)
    if issued_at is not None:
        if user.idp_session_ended_at is not None and issued_at <= user.idp_session_ended_at:
            raise SignInRequired(
                "Your session at the identity provider ended after this token was issued: sign in again."
            )
        if user.identity_checked_at is not None and issued_at < user.identity_checked_at:
            return user
    if claims.get("email"):
        user.email = str(claims["email"])[:254]
    user.display_name = str(claims.get("name") or user.display_name or username)[:255]
    if "groups" not in claims:
        # Some tokens (e.g. access tokens) carry no groups: leave roles as the last sign-in set them.
        user.save()
        return user
    raw_groups = claims.get("groups") or []
    if isinstance(raw_groups, str):
        raw_groups = [raw_groups]  # some providers send a single group as a plain string
    groups = [g for g in raw_groups if isinstance(g, str)]
    roles_before = user.platform_roles
    user.identity_checked_at = issued_at or timezone.now()  # when the provider said who this is and which groups
    user.is_platform_admin = any(g in settings.BERTH_ADMIN_GROUPS for g in groups)
    user.is_approver = any(g in settings.BERTH_APPROVER_GROUPS for g in groups)
    user.is_staff = user.is_platform_admin
    user.is_superuser = user.is_platform_admin
    user.save()
    if user.platform_roles != roles_before:
        audit.record(
            actor=user,
            action="user.platform_roles",
            obj=user,
            before={"roles": roles_before},
            after={"roles": user.platform_roles},
            ctx=ctx,
        )
    wanted: dict[str, str] = {}
    for group in groups:
        parsed = _team_and_role(group)
        if parsed and _ROLE_RANK[parsed[1]] > _ROLE_RANK.get(wanted.get(parsed[0], ""), 0):
            wanted[parsed[0]] = parsed[1]
    _sync_memberships(user=user, wanted=wanted, ctx=ctx)
    return user


def _user_for(*, subject: str, username: str) -> User:
    """The user with this subject, locked for this sign-in; created on the first one.

    Two first sign-ins of one person at once (two tabs, a CLI and a browser) both try to create the
    user: the loser's insert waits for the winner, fails on the unique subject, and finds the winner's row.
    """
    for _ in range(5):
        user = User.objects.select_for_update(no_key=True).filter(oidc_subject=subject).first()
        if user is not None:
            return user
        candidate, n = username, 1
        while User.objects.filter(username=candidate).exists():
            n += 1
            candidate = f"{username}-{n}"[:150]
        try:
            with transaction.atomic():
                return User.objects.create(oidc_subject=subject, username=candidate)
        except IntegrityError:
            continue  # the same person signed in at the same moment, or someone else took the name
    raise ValidationError({"sub": "Could not create the user for this sign-in; try again."})


def team_slug(group: str) -> str:
    """The team slug for an OIDC group: the group itself when it is a short slug, else a slug made unique by a hash."""
    slug = slugify(group)
    if slug == group and len(slug) <= SLUG_MAX:
        return slug
    digest = hashlib.sha256(group.encode()).hexdigest()[:8]
    return f"{slug[: SLUG_MAX - len(digest) - 1].rstrip('-') or 'team'}-{digest}"


def _team_for(group: str) -> Team:
    team = Team.objects.filter(oidc_group=group).first()
    if team is not None:
        return team
    slug = team_slug(group)
    holder = Team.objects.filter(slug=slug).values_list("oidc_group", flat=True).first()
    if holder is not None:
        raise ValidationError(
            {
                "groups": f"The group {group!r} cannot become a team: its slug {slug!r} belongs to the group "
                f"{holder!r}. A platform admin must rename one of the teams."
            }
        )
    name = group.removeprefix(settings.BERTH_TEAM_GROUP_PREFIX).replace("-", " ").title()[:100]
    try:
        with transaction.atomic():
            return Team.objects.create(oidc_group=group, slug=slug, name=name)
    except IntegrityError:  # a concurrent first sign-in of another member made it first
        return Team.objects.get(oidc_group=group)


def _sync_memberships(*, user: User, wanted: dict[str, str], ctx: AuditContext) -> None:
    current = {m.team.oidc_group: m for m in Membership.objects.filter(user=user).select_related("team")}
    for group, membership in current.items():
        if group not in wanted:
            membership.delete()
            # The team's automation tokens this person made stop with their membership.
            _revoke_tokens(user=user, team=membership.team, reason=f"left {membership.team.slug}", ctx=ctx)
            audit.record(
                actor=user,
                action="membership.remove",
                obj=membership.team,
                team=membership.team,
                before={"user": user.username, "role": membership.role},
                ctx=ctx,
            )
    for group, role in wanted.items():
        team = _team_for(group)
        existing = current.get(group)
        if existing is None:
            Membership.objects.create(user=user, team=team, role=role)
            audit.record(
                actor=user,
                action="membership.add",
                obj=team,
                team=team,
                after={"user": user.username, "role": role},
                ctx=ctx,
            )
        elif existing.role != role:
            before = existing.role
            Membership.objects.filter(pk=existing.pk).update(role=role)
            audit.record(
                actor=user,
                action="membership.change",
                obj=team,
                team=team,
                before={"role": before},
                after={"user": user.username, "role": role},
                ctx=ctx,
            )


@transaction.atomic
def auth_record(
    *, user: User | None, action: str, ctx: AuditContext, detail: dict[str, Any] | None = None, actor_name: str = ""
) -> None:
    """Sign-in, sign-out, failed sign-in and refused authorization."""
    audit.record(actor=user, action=action, object_type="session", after=detail or {}, ctx=ctx, actor_name=actor_name)


# --- Re-checking identities with the provider ----------------------------------------------------------


@transaction.atomic
def user_record_idp_session(*, user: User, refresh_token: str) -> None:
    """Keep the provider's refresh token (sealed) so groups can be re-checked without the person."""
    User.objects.filter(pk=user.pk).update(idp_refresh_token=seal(refresh_token))


def identity_is_fresh(*, user: User) -> bool:
    """Whether the provider confirmed this user within BERTH_IDENTITY_MAX_AGE_MINUTES, and since it last ended
    their session."""
    checked, ended = user.identity_checked_at, user.idp_session_ended_at
    oldest = timezone.now() - dt.timedelta(minutes=settings.BERTH_IDENTITY_MAX_AGE_MINUTES)
    return checked is not None and checked >= oldest and (ended is None or checked > ended)


def user_recheck(*, user: User, ctx: AuditContext = SYSTEM) -> str:
    """Ask the provider who ``user`` is now; returns "confirmed", "deactivated", "session ended", "unreachable" or
    "no session".

    Groups and roles follow the answer. A refused refresh token ends the session (user_session_end), not the
    person. A user the provider says is disabled or unknown, or who had teams or platform roles and now has
    none, is deactivated and their API tokens revoked.
    """
    sealed = user.idp_refresh_token
    refresh_token = unseal(sealed)
    if refresh_token is None:
        return "no session"
    try:
        refreshed = identity.refresh(refresh_token)
    except identity.IdentityGone as exc:
        user_deactivate(user=user, reason=f"the identity provider refused the session and said: {exc}", ctx=ctx)
        return "deactivated"
    except identity.SessionEnded as exc:
        reason = f"the identity provider no longer honours this session ({exc})"
        ended = user_session_end(user=user, sealed_refresh_token=sealed, reason=reason, ctx=ctx)
        return "session ended" if ended else "no session"
    except identity.IdentityUnreachable as exc:
        logger.warning("re-checking %s with the identity provider failed: %s", user.username, exc)
        return "unreachable"
    with transaction.atomic():
        had_access = user.platform_roles or Membership.objects.filter(user=user).exists()
        if str(refreshed.claims.get("sub")) != user.oidc_subject:
            user_deactivate(user=user, reason="the identity provider answered for another subject", ctx=ctx)
            return "deactivated"
        user = user_sync_from_claims(claims={"groups": [], **refreshed.claims}, ctx=ctx)
        User.objects.filter(pk=user.pk).update(idp_refresh_token=seal(refreshed.refresh_token))
        if had_access and not (user.platform_roles or Membership.objects.filter(user=user).exists()):
            user_deactivate(
                user=user, reason="the identity provider no longer puts this user in any Berth group", ctx=ctx
            )
            return "deactivated"
    return "confirmed"


@transaction.atomic
def user_session_end(*, user: User, sealed_refresh_token: str, reason: str, ctx: AuditContext = SYSTEM) -> bool:
    """The provider refused the refresh token kept for ``user``: their session there is over, not the person.

    The token is dropped and the end recorded. Portal sessions, API tokens and access tokens from before it are
    not honoured until the person signs in again, which re-reads their groups. False when a newer sign-in has
    replaced the token meanwhile (that session is not over).
    """
    now = timezone.now()
    ending = User.objects.filter(pk=user.pk, is_active=True, idp_refresh_token=sealed_refresh_token)
    if ending.update(idp_refresh_token="", idp_session_ended_at=now) != 1:
        return False
    user.idp_refresh_token, user.idp_session_ended_at = "", now
    paused = ApiToken.objects.filter(user=user, revoked_at__isnull=True, expires_at__gt=now).count()
    audit.record(
        actor=None,
        action="user.session_ended",
        obj=user,
        after={"reason": reason[:300], "api_tokens_paused": paused},
        ctx=ctx,
    )
    return True


@transaction.atomic
def user_deactivate(*, user: User, reason: str, ctx: AuditContext = SYSTEM) -> None:
    """Sign the user out of Berth for good (until an admin reactivates them) and revoke their API tokens."""
    if User.objects.filter(pk=user.pk, is_active=True).update(is_active=False, idp_refresh_token="") != 1:
        return
    user.is_active = False
    revoked = _revoke_tokens(user=user, team=None, reason=reason, ctx=ctx)
    audit.record(
        actor=None,
        action="user.deactivated",
        obj=user,
        after={"reason": reason[:300], "tokens_revoked": revoked},
        ctx=ctx,
    )


def users_recheck_due() -> dict[str, int]:
    """Re-check every active user with a provider session whose last check is older than the re-check period."""
    due = timezone.now() - dt.timedelta(minutes=settings.BERTH_IDENTITY_RECHECK_MINUTES)
    users = User.objects.filter(is_active=True).exclude(idp_refresh_token="")
    counts: dict[str, int] = {}
    for user in users.filter(Q(identity_checked_at__lt=due) | Q(identity_checked_at__isnull=True)).iterator():
        outcome = user_recheck(user=user)
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def _revoke_tokens(*, user: User, team: Team | None, reason: str, ctx: AuditContext) -> int:
    """Revoke ``user``'s live API tokens (only those for ``team`` when given); each revocation is audited."""
    live = ApiToken.objects.filter(user=user, revoked_at__isnull=True)
    if team is not None:
        live = live.filter(team=team)
    tokens = list(live)
    for token in tokens:
        if ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()) == 1:
            audit.record(
                actor=None,
                action="api_token.revoke",
                obj=token,
                team=token.team,
                after={"prefix": token.prefix, "reason": reason[:200]},
                ctx=ctx,
            )
    return len(tokens)
