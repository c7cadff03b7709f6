"""The tenant metrics API's own answers, before any Prometheus is involved (tenants/api/prometheus.py).

The queries themselves, against real Prometheus and prom-label-proxy, are played in
tests/security/test_tenant_metrics.py.
"""

from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from tenants import prometheus
from tests.fixtures import TokenFactory

pytestmark = pytest.mark.django_db


def _client(token: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return api


def _path(tenant_id, endpoint: str = "query") -> str:
    return f"/api/v1/tenants/{tenant_id}/prometheus/api/v1/{endpoint}"


def test_a_cluster_without_prometheus_answers_404_saying_so(ready_tenant_row, api_token: TokenFactory, alice):
    tenant = ready_tenant_row("shop")
    answer = _client(api_token(alice)).get(_path(tenant.pk), {"query": "up"})
    assert answer.status_code == 404
    assert answer.json() == {"detail": "No Prometheus is set up for this tenant's cluster."}


def test_who_may_not_see_the_tenant_gets_404_and_no_credentials_401(
    ready_tenant_row, api_token: TokenFactory, bob, settings
):
    tenant = ready_tenant_row("shop")
    settings.BERTH_PROMETHEUS = {"p": "http://127.0.0.1:9"}
    tenant.cluster.prometheus = "p"
    tenant.cluster.save()
    bobs = _client(api_token(bob))
    for endpoint in ("query", "query_range", "series", "labels", "label/pod/values"):
        assert bobs.get(_path(tenant.pk, endpoint), {"query": "up"}).status_code == 404
        assert bobs.get(_path(uuid.uuid4(), endpoint)).status_code == 404
        assert APIClient().get(_path(tenant.pk, endpoint)).status_code == 401


def test_a_prometheus_that_does_not_answer_is_a_503_in_prometheus_words(
    ready_tenant_row, api_token: TokenFactory, alice, settings
):
    tenant = ready_tenant_row("shop")
    settings.BERTH_PROMETHEUS = {"p": "http://127.0.0.1:9"}  # the discard port: nothing listens
    tenant.cluster.prometheus = "p"
    tenant.cluster.save()
    answer = _client(api_token(alice)).get(_path(tenant.pk), {"query": "up"})
    assert answer.status_code == 503
    assert answer.json() == {
        "status": "error",
        "errorType": "unavailable",
        "error": "the cluster's Prometheus is not reachable",
    }


def test_bounds_are_checked_before_anything_is_sent(ready_tenant_row, api_token: TokenFactory, alice, settings):
    tenant = ready_tenant_row("shop")
    settings.BERTH_PROMETHEUS = {"p": "http://127.0.0.1:9"}
    tenant.cluster.prometheus = "p"
    tenant.cluster.save()
    alices = _client(api_token(alice))
    answer = alices.get(_path(tenant.pk, "query_range"), {"query": "up", "start": "0", "end": "1e9", "step": "60"})
    assert answer.status_code == 400 and answer.json()["errorType"] == "bad_data"
    assert alices.get(_path(tenant.pk, "label/9x/values")).json()["error"] == "invalid label name '9x'"
    # Label values are GET only, as in Prometheus.
    assert alices.post(_path(tenant.pk, "label/pod/values")).status_code == 405


def test_a_cluster_may_name_only_a_configured_prometheus(cluster, settings):
    from django.core.exceptions import ValidationError

    settings.BERTH_PROMETHEUS = {"dev": "http://127.0.0.1:9091"}
    cluster.prometheus = "prod"
    with pytest.raises(ValidationError, match="No Prometheus named 'prod' in BERTH_PROMETHEUS"):
        cluster.clean()
    cluster.prometheus = "dev"
    cluster.clean()
    assert prometheus.upstream_for("dev") == "http://127.0.0.1:9091"
    assert prometheus.upstream_for("") is None


def test_monitoring_links_lead_to_the_tenants_own_metrics_first(
    ready_tenant_row, api_token: TokenFactory, alice, settings
):
    tenant = ready_tenant_row("shop")
    tenant.cluster.monitoring_links = [{"name": "Grafana", "url": "https://grafana.example.test/d/ns?ns={namespace}"}]
    tenant.cluster.save()
    alices = _client(api_token(alice))
    before = alices.get(f"/api/v1/tenants/{tenant.pk}/").json()["monitoring_links"]
    assert [link["name"] for link in before] == ["Grafana"]

    settings.BERTH_PROMETHEUS = {"p": "http://127.0.0.1:9"}
    settings.BERTH_PUBLIC_URL = "https://berth.example.test"
    tenant.cluster.prometheus = "p"
    tenant.cluster.save()
    links = alices.get(f"/api/v1/tenants/{tenant.pk}/").json()["monitoring_links"]
    assert links == [
        {"name": "Graphs", "url": f"https://berth.example.test/tenants/{tenant.pk}/?tab=metrics"},
        {"name": "Prometheus data source", "url": f"https://berth.example.test/api/v1/tenants/{tenant.pk}/prometheus"},
        {"name": "Grafana", "url": f"https://grafana.example.test/d/ns?ns={tenant.namespace}"},
    ]
    # A name the deployment no longer configures gives no link to a data source that would answer 404.
    settings.BERTH_PROMETHEUS = {}
    assert [link["name"] for link in alices.get(f"/api/v1/tenants/{tenant.pk}/").json()["monitoring_links"]] == [
        "Grafana"
    ]


def test_a_tenant_that_no_longer_holds_its_namespace_has_no_metrics(ready_tenant_row, api_token, alice, settings):
    """Its name may since be another team's tenant's: the namespace's series are not its own."""
    tenant = ready_tenant_row("shop")
    settings.BERTH_PROMETHEUS = {"p": "http://127.0.0.1:9"}
    tenant.cluster.prometheus = "p"
    tenant.cluster.save()
    for status in ("cancelled", "rejected", "deleted"):
        type(tenant).objects.filter(pk=tenant.pk).update(status=status)
        answer = _client(api_token(alice)).get(_path(tenant.pk), {"query": "up"})
        assert answer.status_code == 404, status
        assert answer.json() == {"detail": "This tenant no longer holds a namespace, so it has no metrics."}
        tenant.refresh_from_db()
        from tenants import selectors

        assert selectors.metrics_data_source(tenant=tenant) is None


def test_one_person_has_at_most_two_queries_running_at_once(ready_tenant_row, api_token, alice, settings):
    from tenants import concurrency

    tenant = ready_tenant_row("shop")
    settings.BERTH_PROMETHEUS = {"p": "http://127.0.0.1:9"}
    settings.BERTH_READS_AT_ONCE = 1
    tenant.cluster.prometheus = "p"
    tenant.cluster.save()
    with concurrency.slot("prometheus", alice.pk):
        answer = _client(api_token(alice)).get(_path(tenant.pk), {"query": "up"})
        assert answer.status_code == 429 and "At most 1 of these at once" in answer.json()["detail"]
    assert _client(api_token(alice)).get(_path(tenant.pk), {"query": "up"}).status_code == 503  # nothing listens
