"""Reads, always scoped to the caller. Another team's objects are simply absent (404)."""

from __future__ import annotations

import re
from urllib.parse import quote

from django.conf import settings
from django.db.models import (
    Case,
    Count,
    Exists,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce

from tenants.models import (
    LIVE_STATUSES,
    Allocation,
    ApiToken,
    AuditEvent,
    Cluster,
    Membership,
    OrphanNamespace,
    Team,
    Tenant,
    TenantAlert,
    TenantRequest,
    TenantStatus,
    Tier,
    User,
    WebhookDelivery,
    WebhookEndpoint,
)


def _sees_every_team(user: User) -> bool:
    """Platform admins and approvers read every team's teams, tenants and requests."""
    return user.is_platform_admin or user.is_approver


def team_ids_of(*, user: User | OuterRef) -> QuerySet[Membership, int]:
    """The user's teams, as a subquery (of a statement about users: ``user=OuterRef(...)``)."""
    return Membership.objects.filter(user=user).order_by().values_list("team_id", flat=True)


def teams_visible_to(*, user: User) -> QuerySet[Team]:
    qs = Team.objects.all()
    return qs if _sees_every_team(user) else qs.filter(memberships__user=user)


def teams_where_can_request(*, user: User) -> QuerySet[Team]:
    if user.is_platform_admin:
        return Team.objects.all()
    return Team.objects.filter(memberships__user=user, memberships__role__in=["owner", "member"])


def team_members(*, team: Team) -> QuerySet[Membership]:
    """A team's people, owners first; for a team the caller may see (``teams_visible_to``)."""
    order = Case(
        *(When(role=r, then=Value(i)) for i, r in enumerate(Membership.Role.values)), output_field=IntegerField()
    )
    return Membership.objects.filter(team=team).select_related("user").order_by(order, "user__username")


def memberships_of(*, user: User) -> QuerySet[Membership]:
    return Membership.objects.filter(user=user).select_related("team").order_by("team__slug")


def tenants_visible_to(*, user: User) -> QuerySet[Tenant]:
    qs = Tenant.objects.select_related("team", "tier", "cluster", "created_by")
    return qs if _sees_every_team(user) else qs.filter(team_id__in=team_ids_of(user=user))


def requests_visible_to(*, user: User) -> QuerySet[TenantRequest]:
    """The requests of the user's teams, and the transfers offered to them."""
    qs = TenantRequest.objects.select_related(
        "team", "tier", "cluster", "tenant", "requested_by", "decided_by", "target_team", "accepted_by"
    )
    if _sees_every_team(user):
        return qs
    teams = team_ids_of(user=user)
    return qs.filter(Q(team_id__in=teams) | Q(target_team_id__in=teams))


def requests_awaiting_decision(*, user: User) -> QuerySet[TenantRequest]:
    """The approval queue: pending requests the user may decide (never their own)."""
    if not user.can_decide:
        return TenantRequest.objects.none()
    return (
        requests_visible_to(user=user)
        .filter(status=TenantRequest.Status.PENDING)
        .exclude(requested_by=user)
        # A transfer reaches approvers once the receiving team has accepted it, and not the one who accepted.
        .exclude(action=TenantRequest.Action.TRANSFER, accepted_at__isnull=True)
        .exclude(accepted_by=user)
        .order_by("created_at")
    )


def transfers_awaiting_acceptance(*, user: User) -> QuerySet[TenantRequest]:
    """Transfers offered to teams the user owns (every team for platform admins) that nobody accepted yet."""
    qs = requests_visible_to(user=user).filter(
        action=TenantRequest.Action.TRANSFER, status=TenantRequest.Status.PENDING, accepted_at__isnull=True
    )
    if not user.is_platform_admin:
        owned = Membership.objects.filter(user=user, role=Membership.Role.OWNER).values("team_id")
        qs = qs.filter(target_team_id__in=owned)
    return qs.order_by("created_at")


def transfer_targets(*, tenant: Tenant) -> QuerySet[Team]:
    """The teams a tenant can be offered to: every team but its own (the receiving team's owners decide)."""
    return Team.objects.exclude(pk=tenant.team_id).order_by("slug")


def audit_events_visible_to(*, user: User) -> QuerySet[AuditEvent]:
    """Admins read the whole trail; approvers every team's history and their own acts (not others' sign-ins);
    members their teams' history and their own acts."""
    qs = AuditEvent.objects.select_related("team")
    if user.is_platform_admin:
        return qs
    if user.is_approver:
        return qs.filter(Q(team__isnull=False) | Q(actor=user))
    # The teams as values, known before the page's statement is planned: PostgreSQL then reads the trail of a member
    # whose teams have few events from the (team, actor) and actor indexes together (a BitmapOr), where with a
    # subquery (or an array read by one) it walks the whole trail by time, finding nothing. An API token's
    # authentication reads them with the token, which saves a round trip to the database on every page.
    team_ids = user.credential_team_ids
    if team_ids is None:
        team_ids = list(team_ids_of(user=user))
    return qs.filter(Q(team_id__in=team_ids) | Q(actor=user))


def tiers_available() -> QuerySet[Tier]:
    return Tier.objects.filter(is_active=True).prefetch_related("clusters")


def clusters_available() -> QuerySet[Cluster]:
    return Cluster.objects.filter(is_active=True).prefetch_related("tiers")


def api_tokens_of(*, user: User) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user).select_related("team")


def namespace_taken(*, cluster: Cluster, namespace: str) -> bool:
    """Whether a live tenant holds ``namespace`` on ``cluster`` or on another record of the same API server."""
    same_server = Q(cluster=cluster)
    if cluster.physical_id:
        same_server |= Q(cluster_identity=cluster.physical_id)
    return Tenant.objects.filter(same_server, namespace=namespace, status__in=LIVE_STATUSES).exists()


# A sleeping tenant whose tier says so (Tier.sleep_budget "none") takes no CPU or memory from its team's budget.
_SLEEP_FREE = Q(sleeping=True, tier__sleep_budget="none")


def _awake_sum(field: str) -> Sum:
    return Sum(Case(When(_SLEEP_FREE, then=Value(0)), default=F(field), output_field=IntegerField()))


def team_allocation(*, team: Team) -> Allocation:
    """The sum of the tier allocations of the team's live tenants (sleeping ones as their tier says)."""
    totals = Tenant.objects.filter(team=team, status__in=LIVE_STATUSES).aggregate(
        cpu=_awake_sum("tier__cpu_limit_millis"),
        memory=_awake_sum("tier__memory_limit_mib"),
        storage=Sum("tier__storage_gib"),
        count=Count("pk"),
    )
    return Allocation(totals["cpu"] or 0, totals["memory"] or 0, totals["storage"] or 0, totals["count"])


_ALLOCATION_SUMS = {
    "used_cpu_millis": _awake_sum("tier__cpu_limit_millis"),
    "used_memory_mib": _awake_sum("tier__memory_limit_mib"),
    "used_storage_gib": Sum("tier__storage_gib"),
    "used_tenants": Count("pk"),
}


def with_allocation(teams: QuerySet[Team]) -> QuerySet[Team]:
    """``teams`` annotated with what their live tenants use, so a list of budgets costs one query."""
    live = Tenant.objects.filter(team=OuterRef("pk"), status__in=LIVE_STATUSES).order_by().values("team")
    return teams.annotate(
        **{
            name: Coalesce(Subquery(live.annotate(total=agg).values("total"), output_field=IntegerField()), 0)
            for name, agg in _ALLOCATION_SUMS.items()
        }
    )


def team_budget(*, team: Team) -> dict:
    """Used, total and remaining budget, for the request form and the API."""
    if hasattr(team, "used_tenants"):  # annotated by with_allocation
        used = Allocation(*(getattr(team, name) for name in _ALLOCATION_SUMS))
    else:
        used = team_allocation(team=team)
    rows = [
        ("cpu_millis", used.cpu_millis, team.budget_cpu_millis),
        ("memory_mib", used.memory_mib, team.budget_memory_mib),
        ("storage_gib", used.storage_gib, team.budget_storage_gib),
        ("tenants", used.tenants, team.budget_tenants),
    ]
    return {key: {"used": u, "total": t, "remaining": max(t - u, 0)} for key, u, t in rows}


def _not_resent_since(moment, field: str = "resent_at") -> Q:
    """Not re-sent by the sweep since ``moment`` (Tenant.resent_at, or sleep_resent_at for sleep jobs): each
    tenant's job is re-sent at most once per window."""
    return Q(**{f"{field}__isnull": True}) | Q(**{f"{field}__lt": moment})


def tenants_stuck(*, statuses: list[str], older_than) -> QuerySet[Tenant]:
    """Tenants in one of ``statuses`` whose status changed before ``older_than`` and whom the sweep has not re-sent
    since."""
    return Tenant.objects.filter(_not_resent_since(older_than), status__in=statuses, status_changed_at__lt=older_than)


def tenants_change_unapplied(*, older_than) -> QuerySet[Tenant]:
    """Ready tenants with a change the worker has not applied (a tier change whose job was lost while the broker
    was down), no request decided for them since ``older_than`` (whose own job may still be on the way), and not
    re-sent by the sweep since."""
    recent = TenantRequest.objects.filter(tenant=OuterRef("pk"), decided_at__gte=older_than)
    return Tenant.objects.filter(
        _not_resent_since(older_than), status=TenantStatus.READY, generation__gt=F("applied_generation")
    ).exclude(Exists(recent))


def tenants_sleep_unapplied(*, older_than) -> QuerySet[Tenant]:
    """Ready tenants whose sleep or wake the worker has not applied, though asked before ``older_than``, and not
    re-sent by the sweep since."""
    changed = Q(asleep_since__lt=older_than) | Q(sleeping=False, last_activity_at__lt=older_than)
    return Tenant.objects.filter(
        changed, _not_resent_since(older_than, "sleep_resent_at"), status=TenantStatus.READY, sleep_applied=False
    )


def tenants_ready_for_reconcile() -> QuerySet[Tenant]:
    """Tenants whose clusters get a reconcile pass: ready ones, and diverged ones (the pass keeps the cluster's
    list of orphan namespaces current while an admin decides)."""
    return Tenant.objects.filter(status__in=[TenantStatus.READY, TenantStatus.DIVERGED])


def orphan_namespaces() -> QuerySet[OrphanNamespace]:
    """Every cluster's orphan namespaces, for platform admins (the page checks who asks)."""
    return OrphanNamespace.objects.select_related("cluster").order_by("cluster__name", "name")


def approver_emails() -> list[str]:
    return list(
        User.objects.filter(Q(is_approver=True) | Q(is_platform_admin=True), is_active=True)
        .exclude(email="")
        .values_list("email", flat=True)
    )


def platform_admin_emails() -> list[str]:
    return list(
        User.objects.filter(is_platform_admin=True, is_active=True).exclude(email="").values_list("email", flat=True)
    )


def team_emails(*, team: Team) -> list[str]:
    emails = list(
        Membership.objects.filter(team=team, role__in=["owner", "member"])
        .exclude(user__email="")
        .values_list("user__email", flat=True)
    )
    if team.contact_email:
        emails.append(team.contact_email)
    return sorted(set(emails))


def team_owner_emails(*, team: Team) -> list[str]:
    emails = list(
        Membership.objects.filter(team=team, role="owner").exclude(user__email="").values_list("user__email", flat=True)
    )
    return sorted(set(emails + ([team.contact_email] if team.contact_email else [])))


# Only these four placeholders are filled in; anything else in braces is left as written. Not str.format:
# an admin's typo ("{", "{0}") must not break every tenant page, and "{namespace.__class__}" must not evaluate.
_LINK_PLACEHOLDER = re.compile(r"\{(namespace|tenant|team|cluster)\}")


def metrics_data_source(*, tenant: Tenant) -> str | None:
    """The tenant's own Prometheus data source (tenants/api/prometheus.py), when its cluster has a Prometheus."""
    from tenants import prometheus

    if not prometheus.holds_namespace(tenant) or prometheus.upstream_for(tenant.cluster.prometheus) is None:
        return None
    return f"{settings.BERTH_PUBLIC_URL}/api/v1/tenants/{tenant.pk}/prometheus"


def monitoring_links(*, tenant: Tenant) -> list[dict]:
    """The tenant's metrics (graphs and its Prometheus data source) when its cluster has a Prometheus, then the
    cluster's monitoring URL templates filled in for this tenant (http/https only), e.g. an external Grafana."""
    links = []
    source = metrics_data_source(tenant=tenant)
    if source is not None:
        links.append({"name": "Graphs", "url": f"{settings.BERTH_PUBLIC_URL}/tenants/{tenant.pk}/?tab=metrics"})
        links.append({"name": "Prometheus data source", "url": source})
    templates = tenant.cluster.monitoring_links
    if not templates:
        return links
    values = {
        "namespace": quote(tenant.namespace),
        "tenant": quote(tenant.name),
        "team": quote(tenant.team.slug),
        "cluster": quote(tenant.cluster.name),
    }
    for entry in templates if isinstance(templates, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
            continue
        url = _LINK_PLACEHOLDER.sub(lambda m: values[m.group(1)], entry["url"])
        if url.startswith(("https://", "http://")):
            links.append({"name": str(entry.get("name") or "Monitoring"), "url": url})
    return links


# --- Reads for the browser pages ---------------------------------------------------


def team_role_of(*, user: User, team: Team) -> str | None:
    """The user's role in ``team`` (owner, member, viewer), or None."""
    return Membership.objects.filter(user=user, team=team).values_list("role", flat=True).first()


def teams_where_owner(*, user: User) -> QuerySet[Team]:
    """Teams the user may create automation API tokens for."""
    if user.is_platform_admin:
        return Team.objects.all()
    return Team.objects.filter(memberships__user=user, memberships__role=Membership.Role.OWNER)


def tenants_expiring(*, before) -> QuerySet[Tenant]:
    """Ready tenants that expire before ``before`` and whose owners were not reminded yet."""
    return Tenant.objects.filter(
        status=TenantStatus.READY, expires_at__lt=before, expiry_reminded_at__isnull=True
    ).select_related("team", "cluster")


def tenants_expired(*, now) -> QuerySet[Tenant]:
    return Tenant.objects.filter(
        status__in=[TenantStatus.READY, TenantStatus.FAILED], expires_at__lt=now
    ).select_related("team", "tier", "cluster")


# --- Team webhooks ------------------------------------------------------------------------------


def webhook_teams_of(*, user: User) -> QuerySet[Team]:
    """Teams whose webhook endpoints the user may see: their own (any role), every team for platform admins.
    Approvers read every team's tenants, but not where another team's notifications go."""
    return Team.objects.all() if user.is_platform_admin else Team.objects.filter(memberships__user=user)


def webhook_endpoints_of(*, team: Team) -> QuerySet[WebhookEndpoint]:
    """A team's own endpoints (never the global ones), with how their latest delivery went."""
    latest = WebhookDelivery.objects.filter(endpoint=OuterRef("pk")).order_by("-created_at")
    return (
        WebhookEndpoint.objects.filter(team=team)
        .select_related("team", "created_by")
        .annotate(
            last_delivery_status=Subquery(latest.values("status")[:1]),
            last_delivery_at=Subquery(latest.values("created_at")[:1]),
        )
        .order_by("name", "pk")
    )


def webhook_deliveries_of(*, endpoint: WebhookEndpoint) -> QuerySet[WebhookDelivery]:
    """An endpoint's deliveries, newest first; never their bodies (``payload`` is deferred and never shown)."""
    return WebhookDelivery.objects.filter(endpoint=endpoint).defer("payload").order_by("-created_at", "-pk")


# At most this many alerts of each kind on a tenant's page and in its API.
ALERTS_FIRING_SHOWN = 100
ALERTS_RESOLVED_SHOWN = 20


def tenant_alerts(*, tenant: Tenant) -> dict[str, list[TenantAlert]]:
    """A tenant's firing alerts (newest first) and its most recently resolved ones; the caller already may see it."""
    rows = TenantAlert.objects.filter(tenant=tenant)
    return {
        "firing": list(
            rows.filter(status=TenantAlert.Status.FIRING).order_by("-starts_at", "-id")[:ALERTS_FIRING_SHOWN]
        ),
        "resolved": list(
            rows.filter(status=TenantAlert.Status.RESOLVED).order_by("-ends_at", "-id")[:ALERTS_RESOLVED_SHOWN]
        ),
    }
