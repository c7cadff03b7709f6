"""Platform admins edit tiers in the Django admin; an edit is audited and re-applies every live tenant on the tier."""

from __future__ import annotations

import pytest

from tenants import dispatch
from tenants.models import AuditEvent, Tier


def test_editing_a_tier_in_the_admin_reapplies_its_live_tenants(
    client, dave, ready_tenant, dispatched, django_capture_on_commit_callbacks
):
    tenant = ready_tenant(name="web")
    dispatched.clear()
    client.force_login(dave)
    tier = Tier.objects.get(pk=tenant.tier_id)
    page = client.get(f"/admin/tenants/tier/{tier.pk}/change/")
    assert page.status_code == 200
    form = {k: v for k, v in page.context["adminform"].form.initial.items() if v is not None}
    form.update(
        {
            "max_pods": 77,
            "node_selector": "{}",
            "tolerations": "[]",
            "allowed_priority_classes": "[]",
            "allowed_storage_classes": "[]",
            "_save": "Save",
        }
    )
    for key in ("auto_approve", "is_active"):
        if not form.get(key):
            form.pop(key, None)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/admin/tenants/tier/{tier.pk}/change/", form)
    assert response.status_code == 302, getattr(response, "context", {}) and response.context["adminform"].form.errors
    tier.refresh_from_db()
    tenant.refresh_from_db()
    assert tier.max_pods == 77 and tenant.generation == 2
    assert dispatched == [(dispatch.PROVISION, (str(tenant.pk),))]
    event = AuditEvent.objects.get(action="tier.update")
    assert event.actor == dave and event.after == {"max_pods": 77}


def test_people_who_are_not_platform_admins_cannot_open_the_admin(client, alice, carol):
    for user in (alice, carol):
        client.force_login(user)
        assert client.get("/admin/tenants/tier/").status_code == 302  # to the admin login: not staff


def test_a_cluster_with_unusable_kinds_or_settings_is_refused_with_the_reason(cluster):
    from django.core.exceptions import ValidationError

    cluster.kinds = ["namespace", "openstack"]
    with pytest.raises(ValidationError) as unknown:
        cluster.full_clean()
    assert "openstack" in str(unknown.value.message_dict["kinds"])
    cluster.kinds = ["namespace", "vcluster"]
    cluster.virtual_config = {
        "vcluster": {"installer": "kustomize", "public_host_template": "{namespace}.vc.example.test"}
    }
    with pytest.raises(ValidationError) as bad:
        cluster.full_clean()
    message = " ".join(bad.value.message_dict["virtual_config"])
    assert message.startswith("vcluster:") and "installer" in message
    cluster.virtual_config = {"vcluster": {"installer": "flux", "public_host_template": "{namespace}.vc.example.test"}}
    cluster.full_clean()


def test_the_admin_form_shows_a_bad_virtual_config_next_to_the_field(client, dave, cluster):
    client.force_login(dave)
    page = client.get(f"/admin/tenants/cluster/{cluster.pk}/change/")
    form = {k: v for k, v in page.context["adminform"].form.initial.items() if v is not None}
    form.update(
        {
            "kinds": '["namespace", "kcp"]',
            "virtual_config": '{"kcp": {}}',
            "monitoring_links": "[]",
            "tiers": [t.pk for t in cluster.tiers.all()],
            "_save": "Save",
        }
    )
    response = client.post(f"/admin/tenants/cluster/{cluster.pk}/change/", form)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "parent_workspace" in str(errors["virtual_config"])
    cluster.refresh_from_db()
    assert cluster.kinds == ["namespace", "vcluster"]
