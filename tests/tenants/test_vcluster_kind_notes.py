"""What a requester should know about each kind of tenant is on the request form and the tenant's page."""

from __future__ import annotations

import html

import pytest
from django.urls import reverse

from tenants import services
from tenants.models import KIND_NOTES, TenantKind, TenantRequest

pytestmark = pytest.mark.django_db


def test_the_request_form_explains_each_kind_the_clusters_offer(client, alice, cluster):
    client.force_login(alice)
    page = html.unescape(client.get(reverse("request-new")).content.decode())
    assert "Kinds of tenant" in page
    assert KIND_NOTES[TenantKind.VCLUSTER] in page and KIND_NOTES[TenantKind.NAMESPACE] in page
    assert KIND_NOTES[TenantKind.KCP] not in page  # not offered by any cluster


def test_a_vcluster_tenants_page_says_what_a_virtual_cluster_gives(client, alice, cluster, medium):
    req = services.request_submit(
        actor=alice,
        action=TenantRequest.Action.CREATE,
        kind="vcluster",
        team=alice.memberships.get().team,
        tier=medium,
        cluster=cluster,
        name="crds",
        purpose="our operators",
    )
    client.force_login(alice)
    page = html.unescape(client.get(reverse("tenant-detail", args=[req.tenant.pk])).content.decode())
    assert KIND_NOTES[TenantKind.VCLUSTER] in page
