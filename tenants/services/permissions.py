"""Who may act on a team's objects: every rule that is used twice lives here, once."""

from __future__ import annotations

from tenants.errors import Forbidden
from tenants.models import Membership, Team, Tenant, TenantRequest, User

WRITER_ROLES = frozenset({Membership.Role.OWNER, Membership.Role.MEMBER})


def role_of(*, user: User, team: Team) -> str | None:
    """The user's role in ``team`` ('owner', 'member', 'viewer'), or None."""
    return Membership.objects.filter(user=user, team=team).values_list("role", flat=True).first()


def is_owner_or_admin(*, user: User, team: Team) -> bool:
    return user.is_platform_admin or role_of(user=user, team=team) == Membership.Role.OWNER


def require_owner_or_admin(*, actor: User, team: Team, doing: str) -> None:
    """Team owners and platform admins only; ``doing`` completes "Only team owners and platform admins can …"."""
    if not is_owner_or_admin(user=actor, team=team):
        raise Forbidden(f"Only team owners and platform admins can {doing}.")


def require_platform_admin(*, actor: User, doing: str) -> None:
    """Platform admins only; ``doing`` completes "Only platform admins can …"."""
    if not actor.is_platform_admin:
        raise Forbidden(f"Only platform admins can {doing}.")


def is_writer(*, user: User, team: Team) -> bool:
    """Owners, members and platform admins ask for things for ``team``; viewers only look."""
    return user.is_platform_admin or role_of(user=user, team=team) in WRITER_ROLES


def require_writer(*, actor: User, team: Team) -> None:
    if not is_writer(user=actor, team=team):
        raise Forbidden(f"Only owners and members of {team.slug} can ask for this.")


def require_decider(*, tenant_request: TenantRequest, actor: User) -> None:
    """Approvers and platform admins decide, never on their own request."""
    if not actor.can_decide:
        raise Forbidden("Only approvers and platform admins decide requests.")
    if tenant_request.requested_by_id == actor.pk:
        raise Forbidden("You cannot decide your own request.")


def kubeconfig_role(*, tenant: Tenant, actor: User) -> str:
    """'edit' for owners, members and platform admins; 'view' for viewers; Forbidden otherwise."""
    role = role_of(user=actor, team=tenant.team)
    if role in WRITER_ROLES or actor.is_platform_admin:
        return "edit"
    if role == Membership.Role.VIEWER:
        return "view"
    raise Forbidden("Only the tenant's team can get credentials for it.")


def log_reader_role(*, tenant: Tenant, actor: User) -> str:
    """The identity whose token reads pod logs for ``actor``: the one of their kubeconfig. Viewers read logs only
    where the tier lets them (their ServiceAccount then holds ``pods/log``); Forbidden otherwise."""
    role = kubeconfig_role(tenant=tenant, actor=actor)
    if role == "view" and not tenant.tier.viewers_read_logs:
        raise Forbidden(f"Your tier ({tenant.tier.display_name}) does not let viewers read logs.")
    return role
