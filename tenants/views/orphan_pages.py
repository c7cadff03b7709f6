"""Platform admins' page of orphan namespaces (Berth's labels, a tenant id no live tenant has: what a restore of the
database from an older dump leaves), and the decisions on them and on diverged tenants (services.divergence)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from tenants import selectors, services
from tenants.forms import BerthForm
from tenants.models import OrphanNamespace, Team, Tier
from tenants.views.common import AuthedRequest, call, deny, tenant_action

TEAM_LABEL, TIER_LABEL = "berth.dev/team", "berth.dev/tier"


class ReattachForm(BerthForm):
    team = forms.ModelChoiceField(queryset=Team.objects.order_by("slug"), to_field_name="slug")
    tier = forms.ModelChoiceField(queryset=Tier.objects.none(), to_field_name="name")

    def __init__(self, data: Any = None, *, orphan: OrphanNamespace) -> None:
        labels = orphan.labels or {}
        initial = {"team": labels.get(TEAM_LABEL), "tier": labels.get(TIER_LABEL)}
        super().__init__(data, initial=initial, prefix=f"orphan-{orphan.pk}")
        tiers = orphan.cluster.tiers.filter(is_active=True).order_by("order", "name")
        self.model_choices("tier").queryset = tiers


class OrphanDecommissionForm(BerthForm):
    confirm_name = forms.CharField(
        label="Type the namespace's name to confirm",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )

    def __init__(self, data: Any = None, *, orphan: OrphanNamespace) -> None:
        super().__init__(data, prefix=f"orphan-{orphan.pk}")
        self.namespace = orphan.name

    def clean_confirm_name(self) -> str:
        value = self.cleaned_data["confirm_name"].strip()
        if value != self.namespace:
            raise ValidationError(f"Type {self.namespace} exactly.")
        return value


def _admin_only(request: AuthedRequest) -> None:
    if not request.user.is_platform_admin:
        raise deny(request, "Only platform admins can see and decide on orphan namespaces.")


@login_required
@require_GET
def orphans(request: AuthedRequest) -> HttpResponse:
    _admin_only(request)
    rows = [
        (orphan, ReattachForm(orphan=orphan), OrphanDecommissionForm(orphan=orphan))
        for orphan in selectors.orphan_namespaces()
    ]
    return render(request, "pages/orphans.html", {"rows": rows})


@login_required
@require_POST
def orphan_reattach(request: AuthedRequest, pk: int) -> HttpResponse:
    _admin_only(request)
    orphan = get_object_or_404(selectors.orphan_namespaces(), pk=pk)
    form = ReattachForm(request.POST, orphan=orphan)
    if not form.is_valid():
        messages.error(request, f"Choose a team and a tier for {orphan.name}.")
        return redirect("orphans")
    try:
        tenant = call(
            request,
            services.orphan_reattach,
            orphan=orphan,
            team=form.cleaned_data["team"],
            tier=form.cleaned_data["tier"],
            actor=request.user,
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("orphans")
    messages.success(request, f"{orphan.name} is re-attached to {tenant.team.slug}; the worker applies its tier.")
    return redirect("tenant-detail", pk=tenant.pk)


@login_required
@require_POST
def orphan_decommission(request: AuthedRequest, pk: int) -> HttpResponse:
    _admin_only(request)
    orphan = get_object_or_404(selectors.orphan_namespaces(), pk=pk)
    form = OrphanDecommissionForm(request.POST, orphan=orphan)
    if not form.is_valid():
        messages.error(request, f"Type {orphan.name} exactly to decommission it.")
        return redirect("orphans")
    try:
        call(request, services.orphan_decommission, orphan=orphan, actor=request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"{orphan.name} is being deleted (only that very namespace, by its UID).")
    return redirect("orphans")


@login_required
@require_POST
def tenant_recreate(request: AuthedRequest, pk) -> HttpResponse:
    return tenant_action(
        request, pk, services.tenant_recreate, lambda tenant: f"{tenant.name} is provisioned again in a new namespace."
    )


@login_required
@require_POST
def tenant_forget(request: AuthedRequest, pk) -> HttpResponse:
    return tenant_action(
        request,
        pk,
        services.tenant_forget,
        lambda tenant: f"{tenant.name} is forgotten: only what Berth recorded as its own is deleted.",
    )
