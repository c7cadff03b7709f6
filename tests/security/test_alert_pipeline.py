"""Alerts end to end on the real test bed, attacked with the tenant's own kubeconfig: a crash-looping pod in a real
tenant namespace on the dev nodes → the real Prometheus evaluating Berth's rules (short thresholds, passed as
parameters) → the real Alertmanager (devcluster/alertmanager.py) → Berth's receiver in the live portal (gunicorn) →
a TenantAlert and one signed webhook, delivered by the real Celery worker to a receiver on loopback.

The attacking tenant labels its pod ``namespace: <the victim's namespace>`` (and ``team``, ``berth_cluster``): pod
labels never become the alert's ``namespace``, which the kubelet sets from where the pod runs, so the alert is the
attacker's own and the victim's team hears nothing. A sleeping tenant's alert is recorded, suppressed and not sent.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kubernetes import client
from kubernetes import config as kube_config

from devcluster.alertmanager import Timing
from devcluster.images import WORKLOAD_IMAGE
from devcluster.prometheus import SOURCES
from tenants import services
from tenants.alert_rules import Thresholds, rule_group
from tenants.models import Tenant, TenantAlert, WebhookDelivery
from tests.plugins.kube import manifest, wait_for
from tests.plugins.webhooks import documented_verifier
from tests.plugins.worker import fetch_kubeconfig

from .conftest import provision

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.cluster, pytest.mark.worker, pytest.mark.nodes]

# Two restarts within five minutes, at once: a pod that lives 15 s (so every run is scraped at least once, every
# 10 s) crosses it in about a minute. Alertmanager repeats every 5 s, which Berth must not tell again.
SHORT = Thresholds(quota_for="30s", restarts=2, restart_window="5m", crash_loop_for="0s", oom_window="5m")
FAST = Timing(group_wait="1s", group_interval="2s", repeat_interval="5s")
EVENTS = ["tenant.alert_firing", "tenant.alert_resolved"]


@pytest.fixture
def alert_pipeline(node_control_plane, live_portal):
    """The node cluster's Prometheus on the short rules, its Alertmanager posting to the live portal."""
    assert node_control_plane.prometheus is not None and node_control_plane.alertmanager is not None
    node_control_plane.prometheus.set_rules([rule_group(SHORT, SOURCES)])
    node_control_plane.alertmanager.route_to(
        f"{live_portal.url}/hooks/alertmanager/", token=live_portal.alertmanager_token, timing=FAST
    )
    yield node_control_plane
    node_control_plane.prometheus.set_rules([rule_group(sources=SOURCES)])


def _crash_loop(api: client.ApiClient, namespace: str, *, labels: dict[str, str]) -> str:
    name = f"crash-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespaced_pod(
        namespace,
        manifest(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "restartPolicy": "Always",
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 1000,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "app",
                            "image": WORKLOAD_IMAGE,
                            "imagePullPolicy": "Never",
                            "command": ["sh", "-c", "sleep 15; exit 1"],
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "16Mi"},
                                "limits": {"cpu": "50m", "memory": "32Mi"},
                            },
                            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                        }
                    ],
                },
            }
        ),
    )
    return name


def _as_tenant(user, tenant: Tenant, tmp_path) -> client.ApiClient:
    _, kubeconfig = fetch_kubeconfig(user, tenant, tmp_path)
    return kube_config.new_client_from_config_dict(kubeconfig)


def test_a_crash_loop_alerts_its_own_team_once_whatever_labels_the_pod_forges_and_sleep_suppresses(
    alert_pipeline, celery_worker, live_node_cluster, receiver, alice, bob, carol, dave, team_a, team_b, small, medium,
    tmp_path,
):  # fmt: skip
    medium.sleep_allowed = True
    medium.save()
    loud = provision(actor=alice, team=team_a, tier=small, cluster=live_node_cluster, approver=carol, name="loud")
    napping = provision(actor=alice, team=team_a, tier=medium, cluster=live_node_cluster, approver=carol, name="nap")
    victim = provision(actor=bob, team=team_b, tier=small, cluster=live_node_cluster, approver=carol, name="vault")
    hooks_a, hooks_b = receiver(), receiver()
    _, secret = services.webhook_endpoint_create(
        actor=dave, name="team-a alerts", url=hooks_a.url(), events=EVENTS, team=team_a
    )
    services.webhook_endpoint_create(actor=dave, name="team-b alerts", url=hooks_b.url(), events=EVENTS, team=team_b)
    services.tenant_sleep(tenant=napping, actor=alice)

    forged = {"namespace": victim.namespace, "team": team_b.slug, "berth_cluster": live_node_cluster.name}
    loud_pod = _crash_loop(_as_tenant(alice, loud, tmp_path), loud.namespace, labels=forged)
    # A bare pod: sleep scales Deployments, StatefulSets and CronJobs, so this one keeps crashing while asleep.
    _crash_loop(_as_tenant(alice, napping, tmp_path), napping.namespace, labels={"app": "nap"})

    (delivered,) = hooks_a.wait_for(1, timeout=300)
    verify = documented_verifier()
    event = verify(secret, delivered.headers, delivered.body)
    assert event["type"] == "tenant.alert_firing"
    assert event["data"]["alert"]["name"] == "BerthTenantCrashLooping"
    assert event["data"]["alert"]["labels"]["namespace"] == loud.namespace
    assert event["data"]["alert"]["labels"]["pod"] == loud_pod
    assert event["tenant"]["id"] == str(loud.pk)

    # In Prometheus itself the alert names the pod's real namespace, not the forged label.
    firing = [a for a in alert_pipeline.alertmanager.alerts() if a["labels"].get("pod") == loud_pod]
    assert firing and {a["labels"]["namespace"] for a in firing} == {loud.namespace}

    napped = wait_for(
        lambda: TenantAlert.objects.filter(tenant=napping).first(), timeout=240, what="the sleeping tenant's alert"
    )
    assert (napped.suppressed_reason, napped.notified_at) == ("asleep", None)

    # Alertmanager repeats both groups every 5 s (and Prometheus re-sends): nothing is told twice.
    time.sleep(20)
    (alert,) = TenantAlert.objects.filter(tenant=loud)
    assert alert.status == "firing" and alert.notified_at is not None
    assert len(hooks_a.received) == 1
    assert hooks_b.received == []
    assert not TenantAlert.objects.filter(tenant=victim).exists()
    assert not WebhookDelivery.objects.filter(tenant__in=[victim, napping]).exists()
