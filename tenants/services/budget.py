"""Team budgets: the sum of a team's live tenants' tier allocations may not exceed what the team was given."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from tenants import selectors
from tenants.models import Allocation, Team, Tenant, TenantRequest


def budget_check(*, team: Team, adding: Allocation, field: str = "tier") -> None:
    """Refuse (as a field error on ``field``) what would take ``team`` over its budget.

    Locks the team row: two concurrent submissions must not both fit into the last room in the budget.
    """
    team = Team.objects.select_for_update(no_key=True).get(pk=team.pk)
    used = selectors.team_allocation(team=team)
    total = used + adding
    limits = [
        ("CPU", total.cpu_millis, team.budget_cpu_millis, "m"),
        ("memory", total.memory_mib, team.budget_memory_mib, " MiB"),
        ("storage", total.storage_gib, team.budget_storage_gib, " GiB"),
        ("tenants", total.tenants, team.budget_tenants, ""),
    ]
    over = [f"{name} {want}{unit} of {have}{unit}" for name, want, have, unit in limits if want > have]
    if over:
        raise ValidationError({field: f"This would exceed the budget of team {team.slug}: " + ", ".join(over) + "."})


def approval_adds(*, tenant_request: TenantRequest, tenant: Tenant) -> Allocation | None:
    """What approving ``tenant_request`` adds to its team's budget; None when approving checks no budget.

    A requested tenant counts against the budget from its request on, so approving its creation adds nothing (it
    is checked again all the same: the budget may have shrunk since); a tier change adds the difference.
    """
    if tenant_request.action == TenantRequest.Action.CREATE:
        return Allocation()
    if tenant_request.action == TenantRequest.Action.CHANGE_TIER:
        return Allocation.of(tenant_request.tier) - Allocation.of(tenant.tier)
    return None
