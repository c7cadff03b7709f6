"""The alert rules about tenants' workloads (tenants/alert_rules.py, and the chart's copy in _alerts.tpl), checked
by the real promtool: valid, each firing on its condition and not before, and the chart's group equal to Berth's."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from tenants.alert_rules import GROUP, Thresholds, rule_group
from tenants.metric_sources import Sources
from tests.deploy.chart import RELEASE, named, render
from tests.deploy.test_monitoring import TRIAL

RULE_TESTS = Path(__file__).with_name("tenant_alerts_test.yaml")
TENANT_ALERTS = {"BerthTenantQuotaNearlyFull", "BerthTenantCrashLooping", "BerthTenantOOMKilled"}


def _groups(helm_bin: Path, *sets: str) -> list[dict]:
    configmap = named(render(helm_bin, TRIAL, *sets), "ConfigMap", f"{RELEASE}-alerts")
    return yaml.safe_load(configmap["data"]["berth-alerts.yaml"])["groups"]


def _promtool(promtool_bin: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool_bin), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_the_charts_tenant_group_is_the_one_berth_renders(helm_bin):
    (group,) = [g for g in _groups(helm_bin) if g["name"] == GROUP]
    assert group == rule_group()
    assert {rule["alert"] for rule in group["rules"]} == TENANT_ALERTS


def test_thresholds_come_from_the_values_and_the_group_can_be_left_out(helm_bin):
    sets = (
        "json:monitoring.tenantAlerts.quotaRatio=0.8",
        "monitoring.tenantAlerts.quotaFor=1h",
        "monitoring.tenantAlerts.restarts=5",
        "monitoring.tenantAlerts.restartWindow=30m",
        "monitoring.tenantAlerts.crashLoopFor=1m",
        "monitoring.tenantAlerts.oomWindow=1h",
    )
    (group,) = [g for g in _groups(helm_bin, *sets) if g["name"] == GROUP]
    assert group == rule_group(
        Thresholds(
            quota_ratio=0.8, quota_for="1h", restarts=5, restart_window="30m", crash_loop_for="1m", oom_window="1h"
        )
    )
    assert [g["name"] for g in _groups(helm_bin, "monitoring.tenantAlerts.enabled=false")] == ["berth"]


def test_each_tenant_alert_fires_on_its_condition_and_not_before(helm_bin, promtool_bin, tmp_path):
    groups = _groups(helm_bin)
    (tmp_path / "berth-alerts.yaml").write_text(yaml.safe_dump({"groups": groups}))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    done = _promtool(promtool_bin, "test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    tested = {
        t["alertname"] for case in yaml.safe_load(RULE_TESTS.read_text())["tests"] for t in case["alert_rule_test"]
    }
    assert tested == TENANT_ALERTS


def test_the_short_thresholds_of_the_test_bed_are_valid_rules(promtool_bin, tmp_path):
    """What the dev cluster's Prometheus loads in tests (seconds, not minutes) is still a valid rule file."""
    short = Thresholds(quota_for="20s", restarts=2, restart_window="3m", crash_loop_for="0s", oom_window="3m")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [rule_group(short)]}))
    done = _promtool(promtool_bin, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 3 rules found" in done.stdout


def test_every_tenant_alert_is_labelled_for_routing_and_names_its_namespace():
    for rule in rule_group()["rules"]:
        assert rule["labels"]["berth"] == "tenant"
        assert "by (namespace," in rule["expr"]


def test_the_receivers_token_is_mounted_from_its_secret_only_when_named(helm_bin):
    def web(*sets: str) -> tuple[dict[str, str], list[dict]]:
        deployment = named(render(helm_bin, TRIAL, *sets), "Deployment", f"{RELEASE}-web")["spec"]["template"]["spec"]
        env = {e["name"]: e.get("value", "") for e in deployment["containers"][0]["env"]}
        return env, [source["secret"] for source in deployment["volumes"][0]["projected"]["sources"]]

    env, secrets = web("monitoring.tenantAlerts.receiver.existingSecret=berth-alertmanager")
    assert env["BERTH_ALERTMANAGER_TOKEN_FILE"] == "/run/secrets/berth/alertmanager_token"
    assert {"name": "berth-alertmanager", "items": [{"key": "token", "path": "alertmanager_token"}]} in secrets
    env, secrets = web()
    assert "BERTH_ALERTMANAGER_TOKEN_FILE" not in env
    assert not any(item["path"] == "alertmanager_token" for source in secrets for item in source["items"])


def test_the_trusted_sources_come_from_the_values(helm_bin):
    """The jobs and endpoints a namespace label is believed from: the chart's values render the group Berth renders
    with the same Sources (and Berth's job is the web Service's name unless set)."""
    sets = (
        "monitoring.sources.kubeletJob=kubelet|node-.*",
        "monitoring.sources.cadvisorPath=/metrics/cadvisor2",
        "monitoring.sources.resourcePath=/metrics/resource2",
        "monitoring.sources.berthJob=portal",
    )
    (group,) = [g for g in _groups(helm_bin, *sets) if g["name"] == GROUP]
    expected = Sources(
        kubelet_job="kubelet|node-.*",
        cadvisor_path="/metrics/cadvisor2",
        resource_path="/metrics/resource2",
        berth_job="portal",
    )
    assert group == rule_group(sources=expected)
    (default,) = [g for g in _groups(helm_bin) if g["name"] == GROUP]
    assert 'berth_tenant_quota_used{job=~"berth-web"}' in default["rules"][0]["expr"]  # Service berth-web
