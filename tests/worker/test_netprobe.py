"""The pure parts of the packet checks (worker/netprobe.py, worker/isolation.py's NetworkChecks): what the probe
script says, how its output is read, and what the tier expects. The packets themselves are sent in
tests/security/test_network_isolation.py on real nodes."""

from __future__ import annotations

import shutil
import subprocess
from types import SimpleNamespace

import pytest

from worker import isolation, netprobe

ISOLATED = SimpleNamespace(name="small", network_profile="isolated", egress_allow=[])
INGRESS = SimpleNamespace(name="medium", network_profile="ingress", egress_allow=[])
OPEN = SimpleNamespace(name="open", network_profile="open-egress", egress_allow=[])
PROXY = SimpleNamespace(
    name="proxied", network_profile="isolated", egress_allow=[{"cidr": "10.243.7.0/24", "ports": [{"port": 3128}]}]
)


def _tenant(tier: SimpleNamespace, ingress_namespace: str = "") -> SimpleNamespace:
    return SimpleNamespace(tier=tier, cluster=SimpleNamespace(ingress_namespace=ingress_namespace))


def _run(**seen: str) -> netprobe.ProbeRun:
    targets = {
        "api-server": netprobe.Target("api-server", "10.96.0.1", 443, policy_ip="10.243.7.1", policy_port=6443),
        "node-shared-1": netprobe.Target("node-shared-1", "10.243.7.11", 10250),
    }
    return netprobe.ProbeRun(seen={k.replace("_", "-"): v for k, v in seen.items()}, targets=targets)


ISOLATED_SEEN = {
    "same_namespace": "open",
    "egress_to_other_team": "closed",
    "ingress_from_other_team": "closed",
    "dns": "resolved",
    "api_server": "closed",
    "node_shared_1": "closed",
}


@pytest.mark.skipif(shutil.which("busybox") is None, reason="busybox-static is a make deps package")
def test_the_client_script_runs_in_busybox_sh_and_reports_every_connection(tmp_path):
    # 127.0.0.1:9 and :7 have no listener here: refused at once, no packet leaves the machine.
    targets = [netprobe.Target("nobody", "127.0.0.1", 9), netprobe.Target("nobody-else", "127.0.0.1", 7)]
    out = subprocess.run(["busybox", "sh", "-c", netprobe.client_script(targets)], capture_output=True, text=True)
    assert netprobe.parse(out.stdout) == {"nobody": "closed", "nobody-else": "closed"}
    assert out.stdout.rstrip().endswith("done")  # after every attempt has reported


def test_parse_keeps_only_result_lines():
    assert netprobe.parse("same-namespace open\nnoise\ndns resolved\ndone\nx maybe\n") == {
        "same-namespace": "open",
        "dns": "resolved",
    }


def test_egress_follows_the_tier():
    assert not netprobe.egress_allowed(ISOLATED, "10.243.7.1", 6443)
    assert netprobe.egress_allowed(OPEN, "10.243.7.1", 6443)
    assert netprobe.egress_allowed(PROXY, "10.243.7.200", 3128)
    assert not netprobe.egress_allowed(PROXY, "10.243.7.200", 3129)
    assert not netprobe.egress_allowed(PROXY, "10.243.8.200", 3128)


def _outcome(check_id: str, run: netprobe.ProbeRun, tier=ISOLATED, ingress_namespace: str = ""):
    return isolation._network_outcome(check_id, run, _tenant(tier, ingress_namespace))


def test_an_isolated_tenant_passes_when_the_packets_say_so():
    run = _run(**ISOLATED_SEEN)
    for check_id in (
        "MTB-PL1-CC-NET-1",
        "berth-net-same-namespace",
        "berth-net-dns",
        "berth-net-api-server-egress",
        "berth-net-node-egress",
    ):
        outcome = _outcome(check_id, run)
        assert outcome.passed and outcome.proven, (check_id, outcome)


def test_a_connection_from_another_team_fails_default_deny_and_names_the_missing_engine():
    run = _run(**{**ISOLATED_SEEN, "ingress_from_other_team": "open"})
    outcome = _outcome("MTB-PL1-CC-NET-1", run)
    assert not outcome.passed and outcome.proven
    assert "OPEN" in outcome.detail and "enforcing engine" in outcome.detail


def test_everything_dropped_proves_nothing_about_default_deny():
    run = _run(**{**ISOLATED_SEEN, "same_namespace": "closed"})
    deny = _outcome("MTB-PL1-CC-NET-1", run)
    assert (deny.passed, deny.proven) == (False, False)
    same = _outcome("berth-net-same-namespace", run)
    assert (same.passed, same.proven) == (False, True)


def test_egress_to_the_api_server_is_judged_where_the_policy_sees_it():
    # Open under open-egress, closed otherwise; judged at the Service's endpoint, not its ClusterIP.
    assert not _outcome("berth-net-api-server-egress", _run(**ISOLATED_SEEN), tier=OPEN).passed
    opened = _run(**{**ISOLATED_SEEN, "api_server": "open", "node_shared_1": "open"})
    assert _outcome("berth-net-api-server-egress", opened, tier=OPEN).passed
    assert _outcome("berth-net-node-egress", opened, tier=OPEN).passed
    assert not _outcome("berth-net-api-server-egress", opened, tier=ISOLATED).passed


def test_the_ingress_controller_follows_the_network_profile():
    opened = _run(**{**ISOLATED_SEEN, "ingress_controller": "open"})
    closed = _run(**{**ISOLATED_SEEN, "ingress_controller": "closed"})
    assert _outcome("berth-net-ingress-controller", opened, tier=INGRESS, ingress_namespace="ingress").passed
    assert _outcome("berth-net-ingress-controller", closed, tier=ISOLATED, ingress_namespace="ingress").passed
    assert not _outcome("berth-net-ingress-controller", opened, tier=ISOLATED, ingress_namespace="ingress").passed


def test_a_run_that_could_not_prove_anything_is_never_a_pass():
    run = netprobe.ProbeRun(not_proven="the cluster has no Ready node to run probe pods on")
    for check_id in ("MTB-PL1-CC-NET-1", "berth-net-dns", "berth-net-node-egress"):
        outcome = _outcome(check_id, run)
        assert (outcome.passed, outcome.proven) == (False, False)
        assert outcome.detail.startswith("not proven: the cluster has no Ready node")
    missing = _outcome("berth-net-dns", _run(**{k: v for k, v in ISOLATED_SEEN.items() if k != "dns"}))
    assert (missing.passed, missing.proven) == (False, False)
