"""Sleep and wake from a tenant's page: two buttons and the weekly schedule (tenants.services.sleep)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from tenants import selectors, services
from tenants.errors import InvalidTransition
from tenants.forms import SleepScheduleForm
from tenants.models import Membership, Tenant
from tenants.views.common import AuthedRequest, call, tenant_action, visible_tenant


def sleep_context(request: AuthedRequest, tenant: Tenant, form: SleepScheduleForm | None = None) -> dict:
    """What the tenant page's Sleep card shows; the services decide again when a button is pressed."""
    user = request.user
    owner = user.is_platform_admin or selectors.team_role_of(user=user, team=tenant.team) == Membership.Role.OWNER
    refusal = services.sleep_refusal(tenant)
    schedule = services.schedule_json(tenant)
    state = services.sleep_state(tenant)
    return {
        "sleep_state": state,
        "sleep_moving": state in ("falling_asleep", "waking") and tenant.status == "ready",
        "sleep_refusal": refusal,
        "sleep_schedule": schedule,
        "can_sleep": owner and not refusal and not tenant.sleeping,
        "can_wake": owner and tenant.sleeping,
        "can_schedule": owner and tenant.tier.sleep_allowed,
        "sleep_form": form
        or SleepScheduleForm(
            initial={
                "start": tenant.sleep_schedule_start,
                "end": tenant.sleep_schedule_end,
                "weekends": tenant.sleep_weekends,
            }
        ),
    }


@login_required
@require_GET
def tenant_sleep_card(request: AuthedRequest, pk) -> HttpResponse:
    """The Sleep card alone: polled while the worker scales the tenant down or back up."""
    tenant = visible_tenant(request, pk)
    return render(request, "includes/tenant_sleep.html", {"tenant": tenant, **sleep_context(request, tenant)})


@login_required
@require_POST
def tenant_sleep(request: AuthedRequest, pk) -> HttpResponse:
    return tenant_action(
        request,
        pk,
        services.tenant_sleep,
        lambda tenant: f"{tenant.name} is going to sleep: its workloads are being scaled to zero.",
    )


@login_required
@require_POST
def tenant_wake(request: AuthedRequest, pk) -> HttpResponse:
    return tenant_action(
        request,
        pk,
        services.tenant_wake,
        lambda tenant: f"{tenant.name} is waking up: its workloads are being restored.",
    )


@login_required
@require_POST
def tenant_sleep_schedule(request: AuthedRequest, pk) -> HttpResponse:
    tenant = visible_tenant(request, pk)
    form = SleepScheduleForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            call(
                request,
                services.tenant_set_sleep_schedule,
                tenant=tenant,
                actor=request.user,
                start=data["start"],
                end=data["end"],
                weekends=data["weekends"],
            )
        except ValidationError as exc:
            messages.error(request, "Schedule not saved: " + " ".join(exc.messages))
        except InvalidTransition as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, "Sleep schedule saved.")
    else:
        messages.error(request, "Schedule not saved: times are HH:MM, e.g. 19:00.")
    return redirect("tenant-detail", pk=tenant.pk)
