"""The dev cluster's Alertmanager (devcluster/alertmanager.py): the real server (build.sh alertmanager), with alerts
posted to its API as Prometheus posts them, delivering to a real HTTP receiver on loopback."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from devcluster.alertmanager import Alertmanager, Timing, config
from devcluster.launcher import find_bin_dir, free_port
from tenants import alerts
from tests.plugins.webhooks import Receiver

TOKEN = "dev-alertmanager-token-" + "x" * 20
FAST = Timing(group_wait="1s", group_interval="2s", repeat_interval="1h")


def test_the_config_routes_tenant_alerts_to_berth_with_a_token_file_and_the_rest_nowhere(tmp_path):
    document = config(url="http://127.0.0.1:1/hooks/alertmanager/", token_file=tmp_path / "t", timing=FAST)
    route = document["route"]
    assert route["receiver"] == "nowhere" and route["group_by"] == ["namespace", "alertname"]
    assert route["routes"] == [{"receiver": "berth", "matchers": ['berth="tenant"']}]
    (webhook,) = document["receivers"][1]["webhook_configs"]
    assert webhook["http_config"] == {"authorization": {"type": "Bearer", "credentials_file": str(tmp_path / "t")}}
    assert webhook["send_resolved"] is True and webhook["max_alerts"] == alerts.MAX_ALERTS
    assert "webhook_configs" not in config(url=None, token_file=tmp_path / "t")["receivers"][1]


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[Alertmanager]:
    server = Alertmanager(tmp_path / "am", find_bin_dir("alertmanager"), port=free_port())
    server.start(watched=[])
    try:
        yield server
    finally:
        server.stop()


def _fire(server: Alertmanager, *labels: dict[str, str], resolved: bool = False) -> None:
    now = dt.datetime.now(dt.UTC)
    body = [
        {
            "labels": {"alertname": "BerthTenantCrashLooping", **item},
            "annotations": {"summary": "restarts"},
            "startsAt": (now - dt.timedelta(minutes=1)).isoformat(),
            **({"endsAt": now.isoformat()} if resolved else {}),
        }
        for item in labels
    ]
    answer = requests.post(f"{server.url}/api/v2/alerts", json=body, timeout=10)
    assert answer.status_code == 200, answer.text


def test_tenant_alerts_reach_the_receiver_with_the_token_grouped_by_namespace_and_parse(alertmanager):
    receiver = Receiver().start()
    try:
        alertmanager.route_to(receiver.url("/hooks/alertmanager/"), token=TOKEN, timing=FAST)
        # Only the gossip-free single instance listens: no cluster port is open.
        assert "--cluster.listen-address=" in alertmanager.component.argv
        _fire(
            alertmanager,
            {"namespace": "team-a-web", "pod": "web-1", "berth": "tenant"},
            {"namespace": "team-b-api", "pod": "api-1", "berth": "tenant"},
            {"namespace": "kube-system", "pod": "x"},  # not a tenant alert: goes nowhere
        )
        posts = receiver.wait_for(2)
        assert {p.headers["authorization"] for p in posts} == {f"Bearer {TOKEN}"}
        namespaces = [{a.namespace for a in alerts.parse(p.body)} for p in posts]
        assert sorted(namespaces, key=sorted) == [{"team-a-web"}, {"team-b-api"}]
        assert all(json.loads(p.body)["version"] == "4" for p in posts)

        _fire(alertmanager, {"namespace": "team-a-web", "pod": "web-1", "berth": "tenant"}, resolved=True)
        resolved = receiver.wait_for(3)[2]
        assert [a.status for a in alerts.parse(resolved.body)] == ["resolved"]
    finally:
        receiver.stop()
