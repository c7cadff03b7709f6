"""The chart's alert rules and Grafana dashboard, checked by the real promtool.

The rules are rendered by the real helm (so what ships is what is tested) and unit-tested with
`promtool test rules` against tests/deploy/alerts_test.yaml: each alert fires on its condition, with its labels
and text, and stays quiet just short of it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.chart import CHART, RELEASE, by_kind, helm, named, render, template_args

ALERTS_TEST = Path(__file__).with_name("alerts_test.yaml")
DASHBOARD = CHART / "files" / "grafana-dashboard.json"
TRIAL = CHART / "ci" / "trial-values.yaml"
PRODUCTION = CHART / "ci" / "production-values.yaml"
ALERTS = {
    "BerthProvisioningStuck",
    "BerthProvisioningFailing",
    "BerthQueueBacklog",
    "BerthReconcileRepairsSpiking",
    "BerthIsolationReportFailing",
    "BerthTenantsDiverged",
    "BerthOrphanNamespaces",
}


def _rules_file(helm_bin: Path, *sets: str) -> str:
    configmap = named(render(helm_bin, TRIAL, *sets), "ConfigMap", f"{RELEASE}-alerts")
    return configmap["data"]["berth-alerts.yaml"]


def _promtool(promtool_bin: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool_bin), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_rules_are_valid(helm_bin, promtool_bin, tmp_path):
    (tmp_path / "berth-alerts.yaml").write_text(_rules_file(helm_bin))
    done = _promtool(promtool_bin, "check", "rules", "berth-alerts.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    # And the three of the berth-tenants group (tests/deploy/test_tenant_alerts.py).
    assert f"SUCCESS: {len(ALERTS) + 3} rules found" in done.stdout


def test_each_alert_fires_on_its_condition_and_not_before(helm_bin, promtool_bin, tmp_path):
    (tmp_path / "berth-alerts.yaml").write_text(_rules_file(helm_bin))
    shutil.copy(ALERTS_TEST, tmp_path / ALERTS_TEST.name)
    done = _promtool(promtool_bin, "test", "rules", ALERTS_TEST.name, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    tested = {
        t["alertname"] for case in yaml.safe_load(ALERTS_TEST.read_text())["tests"] for t in case["alert_rule_test"]
    }
    assert tested == ALERTS


def test_the_rule_tests_can_fail(helm_bin, promtool_bin, tmp_path):
    """Guards the guard: a threshold out of reach makes promtool report the alert that no longer fires."""
    (tmp_path / "berth-alerts.yaml").write_text(_rules_file(helm_bin, "monitoring.alerts.queueBacklog=1000"))
    shutil.copy(ALERTS_TEST, tmp_path / ALERTS_TEST.name)
    done = _promtool(promtool_bin, "test", "rules", ALERTS_TEST.name, cwd=tmp_path)
    assert done.returncode != 0
    assert "BerthQueueBacklog" in done.stdout + done.stderr


def test_thresholds_and_labels_come_from_the_values(helm_bin):
    rules = yaml.safe_load(
        _rules_file(
            helm_bin,
            "monitoring.alerts.provisioningStuckSeconds=1800",
            "json:monitoring.alerts.failureRatio=0.5",
            "monitoring.alerts.queueBacklog=500",
            "monitoring.alerts.reconcileRepairsPerHour=7",
            "monitoring.alerts.isolationFailingFor=1h",
            "monitoring.alerts.labels.team=platform",
        )
    )["groups"][0]["rules"]
    by_name = {r["alert"]: r for r in rules}
    assert by_name["BerthProvisioningStuck"]["expr"].endswith("> 1800")
    assert by_name["BerthProvisioningFailing"]["expr"].endswith("> 0.5")
    assert by_name["BerthQueueBacklog"]["expr"].endswith("> 500")
    assert by_name["BerthReconcileRepairsSpiking"]["expr"].endswith("> 7")
    assert by_name["BerthIsolationReportFailing"]["for"] == "1h"
    assert all(r["labels"]["team"] == "platform" and r["labels"]["severity"] for r in rules)


def test_prometheus_rule_ships_the_same_rules(helm_bin):
    objs = render(helm_bin, PRODUCTION)
    rule = by_kind(objs, "PrometheusRule")[0]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    groups = rule["spec"]["groups"]
    assert {r["alert"] for r in groups[0]["rules"]} == ALERTS
    shipped = yaml.safe_load(_rules_file(helm_bin, "monitoring.alerts.labels.team=platform"))["groups"]
    assert groups == shipped


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _exprs(dashboard: dict) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets") or []]


def test_dashboard_is_well_formed():
    dashboard = _dashboard()
    assert dashboard["uid"] == "berth-portal" and dashboard["title"] == "Berth"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "cluster"}
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            assert panel["targets"], panel["title"]
    assert len(_exprs(dashboard)) >= 15


def test_every_dashboard_query_is_valid_promql(promtool_bin, tmp_path):
    """promtool parses each query (Grafana's variables replaced by what they stand for)."""
    substitutions = {"$__rate_interval": "5m", "$cluster": ".*"}
    rules = []
    for index, expr in enumerate(_exprs(_dashboard())):
        for variable, value in substitutions.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"unknown variable in {expr}"
        rules.append({"record": f"berth:dashboard_query_{index}", "expr": expr})
    (tmp_path / "queries.yaml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = _promtool(promtool_bin, "check", "rules", "queries.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dashboard_shows_what_each_alert_watches():
    queries = " ".join(_exprs(_dashboard()))
    for metric in (
        "berth_tenant_oldest_seconds",
        "berth_provision_runs_total",
        "berth_celery_queue_length",
        "berth_reconcile_repairs_total",
        "berth_tenant_isolation_passed",
        "berth_orphan_namespaces",
    ):
        assert re.search(rf"\b{metric}\b", queries), metric


def test_dashboard_configmap_carries_the_file_for_grafanas_sidecar(helm_bin):
    configmap = named(render(helm_bin, PRODUCTION), "ConfigMap", f"{RELEASE}-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["berth.json"]) == _dashboard()


@pytest.mark.parametrize("values", [TRIAL, PRODUCTION], ids=["trial", "production"])
def test_monitoring_objects_are_opt_in(helm_bin, values):
    objs = render(
        helm_bin,
        values,
        "monitoring.prometheusRule.enabled=false",
        "monitoring.rulesConfigMap.enabled=false",
        "monitoring.grafanaDashboard.enabled=false",
    )
    assert not by_kind(objs, "PrometheusRule") and not by_kind(objs, "ConfigMap")


# --- The rules, their tests and the dashboard read what Berth exports ---------------------------------------------
_NAME = re.compile(r"\bberth_[a-z_]+\b")
_SELECTOR = re.compile(r"\b(berth_[a-z_]+)\{([^}]*)\}")
_MATCHER = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)")
_BY = re.compile(r"\bby\s*\(([^)]*)\)")


def _check_reads_exported(expr: str, exported: dict[str, set[str]]) -> None:
    names = set(_NAME.findall(expr))
    assert names, expr
    for name in names:
        assert name in exported, f"{name} is not exported by Berth (tenants/metrics.py): {expr}"
    for name, matchers in _SELECTOR.findall(expr):
        for label in _MATCHER.findall(matchers):
            assert label in exported[name], f"{name} has no label {label}: {expr}"
    available = set().union(*(exported[name] for name in names))
    for clause in _BY.findall(expr):
        for label in filter(None, (part.strip() for part in clause.split(","))):
            assert label in available, f"no metric of {expr} has the label {label}"


def test_the_rules_their_tests_and_the_dashboard_read_the_metrics_berth_exports(helm_bin):
    """The names and labels come from the exporter itself, so a renamed metric or label fails here."""
    from tenants.metrics import exported_series

    exported = exported_series()
    rules = yaml.safe_load(_rules_file(helm_bin))["groups"][0]["rules"]
    for rule in rules:
        _check_reads_exported(rule["expr"], exported)
    for case in yaml.safe_load(ALERTS_TEST.read_text())["tests"]:
        for series in case["input_series"]:
            _check_reads_exported(series["series"], exported)
    for expr in _exprs(_dashboard()):
        _check_reads_exported(expr, exported)
    variable = _dashboard()["templating"]["list"][1]["definition"]
    assert variable == "label_values(berth_tenants, cluster)" and "cluster" in exported["berth_tenants"]


# --- Scraping ---------------------------------------------------------------------------------------------------
def _container(objs: list, name: str) -> dict:
    return named(objs, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_production_scrapes_the_web_with_its_token_and_each_worker_on_its_port(helm_bin):
    objs = render(helm_bin, PRODUCTION)
    web, worker = _container(objs, f"{RELEASE}-web"), _container(objs, f"{RELEASE}-worker-provision")
    for container in (web, worker):
        env = _env(container)
        # prometheus_client's multiprocess mode: a directory of the pod's own, in memory.
        assert env["PROMETHEUS_MULTIPROC_DIR"] == "/run/berth/metrics"
        assert {"name": "metrics", "mountPath": "/run/berth/metrics"} in container["volumeMounts"]
        assert env["BERTH_METRICS_TOKEN_FILE"] == "/run/secrets/berth/metrics_token"
        assert env["LOG_FORMAT"] == "json"
    assert _env(worker)["BERTH_WORKER_METRICS_PORT"] == "9808"
    assert {"name": "metrics", "containerPort": 9808} in worker["ports"]
    # Beat and the migrations record nothing, so they have no directory to find.
    assert "PROMETHEUS_MULTIPROC_DIR" not in _env(_container(objs, f"{RELEASE}-beat"))
    projected = named(objs, "Deployment", f"{RELEASE}-web")["spec"]["template"]["spec"]["volumes"][0]["projected"]
    assert {"name": "berth-metrics", "items": [{"key": "token", "path": "metrics_token"}]} in [
        source["secret"] for source in projected["sources"]
    ]

    monitors = {m["metadata"]["name"]: m for m in by_kind(objs, "ServiceMonitor")}
    assert set(monitors) == {f"{RELEASE}-web", f"{RELEASE}-workers", f"{RELEASE}-watcher"}
    (web_endpoint,) = monitors[f"{RELEASE}-web"]["spec"]["endpoints"]
    assert web_endpoint["port"] == "http" and web_endpoint["path"] == "/metrics" and web_endpoint["honorLabels"]
    assert web_endpoint["authorization"] == {"type": "Bearer", "credentials": {"name": "berth-metrics", "key": "token"}}
    (worker_endpoint,) = monitors[f"{RELEASE}-workers"]["spec"]["endpoints"]
    service = named(objs, "Service", f"{RELEASE}-worker-metrics")
    assert worker_endpoint["port"] == service["spec"]["ports"][0]["name"] == "metrics"
    selector = monitors[f"{RELEASE}-workers"]["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert all(m["metadata"]["labels"]["release"] == "kube-prometheus-stack" for m in monitors.values())

    # Only Prometheus's namespace reaches the workers' port; the web port also from it.
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    policy = named(objs, "NetworkPolicy", f"{RELEASE}-worker-metrics")["spec"]
    assert policy["ingress"] == [{"from": [monitoring], "ports": [{"port": 9808, "protocol": "TCP"}]}]
    web_policy = named(objs, "NetworkPolicy", f"{RELEASE}-web")["spec"]
    assert {"from": [monitoring], "ports": [{"port": 8000, "protocol": "TCP"}]} in web_policy["ingress"]

    # The watchers' own exporter: its port, its Service and ServiceMonitor, reachable from Prometheus only.
    watcher = _container(objs, f"{RELEASE}-watcher")
    assert _env(watcher)["BERTH_WATCHER_METRICS_PORT"] == "9809"
    assert {"name": "metrics", "containerPort": 9809} in watcher["ports"]
    assert "PROMETHEUS_MULTIPROC_DIR" not in _env(watcher)  # one process: its own registry
    watcher_service = named(objs, "Service", f"{RELEASE}-watcher-metrics")
    (watcher_endpoint,) = monitors[f"{RELEASE}-watcher"]["spec"]["endpoints"]
    assert watcher_endpoint["port"] == watcher_service["spec"]["ports"][0]["name"] == "metrics"
    assert monitors[f"{RELEASE}-watcher"]["spec"]["selector"]["matchLabels"].items() <= (
        watcher_service["metadata"]["labels"].items()
    )
    watcher_policy = named(objs, "NetworkPolicy", f"{RELEASE}-watcher-metrics")["spec"]
    assert watcher_policy["ingress"] == [{"from": [monitoring], "ports": [{"port": 9809, "protocol": "TCP"}]}]


def test_metrics_are_opt_in_and_need_a_token_secret(helm_bin):
    objs = render(helm_bin, TRIAL)
    assert not by_kind(objs, "ServiceMonitor")
    assert "PROMETHEUS_MULTIPROC_DIR" not in _env(_container(objs, f"{RELEASE}-web"))
    done = helm(helm_bin, *template_args(TRIAL, "monitoring.metrics.enabled=true"))
    assert done.returncode != 0 and "monitoring.metrics.existingSecret is required" in done.stderr
