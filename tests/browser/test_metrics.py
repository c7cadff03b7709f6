"""The tenant page's Metrics tab in a real browser, drawn from real series: the node cluster's Prometheus scrapes
the kubelets, prom-label-proxy holds each query to the tenant's namespace, and uPlot draws under the page's CSP."""

from __future__ import annotations

import functools
import json
import re
import time
import uuid

import pytest
from kubernetes import client
from playwright.sync_api import expect

from devcluster.images import WORKLOAD_IMAGE
from tests.browser.support import Portal, axe_violations, blocking, describe_violations, screenshot
from tests.browser.test_tenant_page import _ready_tenant
from tests.plugins.kube import manifest, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.nodes]


def _busy_pod(kube: client.ApiClient, namespace: str) -> str:
    """A pod that uses a little CPU and memory, so the graphs have something to show."""
    name = f"busy-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(kube).create_namespace(manifest({"metadata": {"name": namespace}}))
    client.CoreV1Api(kube).create_namespaced_pod(
        namespace,
        manifest(
            {
                "metadata": {"name": name},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": WORKLOAD_IMAGE,
                            "imagePullPolicy": "Never",
                            "command": ["sh", "-c", "while :; do :; done"],
                            "resources": {"limits": {"cpu": "20m", "memory": "16Mi"}},
                        }
                    ]
                },
            }
        ),
    )
    return name


def test_the_metrics_tab_draws_the_tenants_own_series(
    portal: Portal,
    live_node_cluster,
    node_control_plane,
    node_kube_admin,
    prometheus_label_proxy,
    settings,
    axe_installed,
):
    settings.BERTH_PROMETHEUS = {"nodes": prometheus_label_proxy}
    live_node_cluster.prometheus = "nodes"
    live_node_cluster.save()
    page = portal.page_as("alice", bypass_csp=False)  # signing in makes alice and her team
    tenant = _ready_tenant(live_node_cluster)
    pod = _busy_pod(node_kube_admin, tenant.namespace)
    # What the CPU graph asks (its containers, not the pod's own cgroup, whose series cAdvisor may report a scrape
    # earlier), answered for the tenant's namespace now: the page's newest point is now too.
    selector = (
        f'container_cpu_usage_seconds_total{{namespace="{tenant.namespace}", pod="{pod}", '
        'container!="", container!="POD"}'
    )
    rate = f"sum(rate({selector}[60s]))"
    wait_for(
        functools.partial(node_control_plane.prometheus.query, rate), timeout=120, what="the pod's CPU rate", interval=2
    )

    page.set_viewport_size({"width": 1440, "height": 900})
    began = time.monotonic()
    page.goto(portal.at(f"/tenants/{tenant.pk}/"))
    overview = time.monotonic() - began
    began = time.monotonic()
    page.goto(portal.at(f"/tenants/{tenant.pk}/?tab=metrics"))
    loaded = time.monotonic() - began
    for panel in ("cpu", "memory", "restarts"):
        expect(page.locator(f"#metric-{panel}")).to_have_class("metric metric--drawn", timeout=30_000)
    drawn = time.monotonic() - began
    print(f"overview {overview:.2f}s; metrics tab: page {loaded:.2f}s, graphs drawn {drawn:.2f}s")
    cpu = page.locator("#metric-cpu")
    expect(cpu.locator("canvas")).to_have_count(1)
    cpu.get_by_text("CPU used as a table").click()
    data = cpu.locator(".metric-data")
    rows = data.locator("tbody tr")
    assert rows.count() > 10
    # The tenant's quota is a flat line beside what it uses, in the legend and the table's head.
    expect(cpu.locator(".u-legend")).to_contain_text("requests quota")
    expect(data.locator("thead")).to_have_text(re.compile("Time \\(UTC\\).*used.*requested by pods.*requests quota"))
    # The newest row: what the busy pod uses (at most its 20m limit), then the flat lines: what pods request and the
    # quotas, as the tenant's recorded usage says when the page was drawn (the seeded reading, or a real one if a
    # reconcile pass of the session's worker has read the cluster since).
    newest = data.locator("tbody tr").first.locator("td").all_inner_texts()
    assert re.fullmatch(r"\d+m", newest[0]) and 0 < int(newest[0][:-1]) <= 25, newest
    config = json.loads(page.locator("#metrics-config").text_content() or "{}")
    lines = next(panel for panel in config["panels"] if panel["id"] == "cpu")["lines"]
    assert [line["label"] for line in lines] == ["requested by pods", "requests quota", "limits quota"]
    assert newest[1:] == [f"{round(v * 1000)}m" if v < 1 else f"{v:.2f}" for v in (line["value"] for line in lines)]
    expect(page.locator("code", has_text=f"/api/v1/tenants/{tenant.pk}/prometheus")).to_be_visible()
    screenshot(page, "tenant-metrics")

    # axe-core is injected as an inline script, which the page's CSP (kept above: uPlot draws under it) forbids.
    checked = portal.page_as("alice", bypass_csp=True)
    for width in (1440, 390):
        checked.set_viewport_size({"width": width, "height": 900})
        checked.goto(portal.at(f"/tenants/{tenant.pk}/?tab=metrics"))
        expect(checked.locator("#metric-cpu")).to_have_class("metric metric--drawn", timeout=30_000)
        checked.locator("#metric-cpu .metric-data summary").click()
        assert checked.evaluate("document.documentElement.scrollWidth") <= width, "the tab scrolls sideways"
        found = axe_violations(checked)
        assert not blocking(found), describe_violations(f"metrics tab at {width} px", found)

    # Another range is another set of points, asked afresh.
    page.get_by_role("navigation", name="Time range").get_by_role("link", name="24h").click()
    expect(page.get_by_role("link", name="24h")).to_have_attribute("aria-current", "page")
    expect(page.locator("#metric-cpu")).to_have_class("metric metric--drawn", timeout=30_000)
