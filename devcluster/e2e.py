"""The upstream Kubernetes e2e suite against the dev cluster with nodes: proof from upstream's own tests.

    python -m devcluster.e2e netpol     # make e2e-netpol: every [sig-network] Netpol test that fits here
    python -m devcluster.e2e network    # make e2e-network: Services and DNS conformance tests that fit
    python -m devcluster.e2e subset     # make e2e-subset: four Netpol tests, a Services and a DNS test (2 minutes)

``e2e.test`` and ``agnhost`` come from ``k8s.io/kubernetes`` at the cluster's own pin (``build.sh e2e``);
agnhost, jessie-dnsutils, busybox and pause are local images under the names the suite asks for
(KUBE_TEST_REPO_LIST points its registries at berth.local, devcluster/images.py). Each run starts its own control
plane with two nodes, writes the suite's JUnit report under ``test-output/e2e-<suite>/`` and prints one line:
passed, failed, skipped, and the time.

Skipped on purpose (``SKIP``): SCTP (the suite's own feature gate; no SCTP module here), tests that need a cloud
load balancer, a NodePort reachable from outside the nodes or more than two nodes, ``[Serial]`` and
``[Disruptive]`` tests (they restart or taint nodes: not on a shared test machine). The ExternalName and pod
DNS-config tests stay in: they point ExternalName services at in-cluster names, ask only for the CNAME of
example.com names, or read /etc/resolv.conf, so they need nothing off this machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from devcluster.images import e2e_images, e2e_repo_list
from devcluster.launcher import ControlPlane, find_bin_dir

ROOT = Path(__file__).resolve().parent.parent
SKIP = "|".join(
    (
        r"\[Feature:SCTPConnectivity\]",
        r"SCTP",
        r"\[Serial\]",
        r"\[Disruptive\]",
        r"\[Slow\]",
        r"LoadBalancer",
        r"\[Feature:Networking-IPv6\]",
        r"\[Feature:IPv6DualStack\]",
        r"\[Feature:ServiceCIDRs\]",
    )
)


@dataclass(frozen=True)
class Suite:
    focus: str
    what: str


SUITES = {
    "netpol": Suite(r"\[sig-network\] Netpol ", "[sig-network] Netpol (NetworkPolicy), every test that fits"),
    "network": Suite(
        r"\[sig-network\] (Services|DNS) .*\[Conformance\]", "Services and DNS conformance tests that fit"
    ),
    # A few minutes: default deny, a namespace selector, egress to one port, and Service traffic through
    # kube-proxy and CoreDNS. Each exercises a different part of the engine, kube-proxy or the DNS.
    "subset": Suite(
        "|".join(
            (
                r"Netpol NetworkPolicy between server and client should support a 'default-deny-ingress' policy",
                r"Netpol NetworkPolicy between server and client should enforce policy based on NamespaceSelector "
                r"with MatchExpressions",
                r"Netpol NetworkPolicy between server and client should enforce egress policy allowing traffic to a "
                r"server in a different namespace based on PodSelector and NamespaceSelector",
                r"\[sig-network\] Services should serve a basic endpoint from pods",
                r"\[sig-network\] DNS should provide DNS for services",
            )
        ),
        "the representative subset",
    ),
}


@dataclass(frozen=True)
class Result:
    passed: int
    failed: int
    skipped: int
    seconds: float
    failures: tuple[str, ...]
    report: Path

    def line(self, suite: str) -> str:
        return (
            f"e2e {suite}: {self.passed} passed, {self.failed} failed, {self.skipped} skipped "
            f"in {self.seconds:.0f}s (JUnit: {self.report})"
        )


def read_junit(path: Path, seconds: float) -> Result:
    """Counts from ginkgo's JUnit report; a spec ginkgo did not run (focus) counts as skipped, as ginkgo says.
    The suite's own nodes ([SynchronizedBeforeSuite], [ReportAfterSuite]...) are cases there too: they count
    only when they fail, so the passed count is the specs'."""
    root = ET.parse(path).getroot()
    passed = failed = skipped = 0
    failures = []
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            failures.append(name)
        elif not name.startswith("[It]"):
            continue
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    return Result(passed, failed, skipped, seconds, tuple(failures), path)


def run(suite: str, *, out: Path | None = None, parallel: int = 1) -> Result:
    chosen = SUITES[suite]
    bin_dir = find_bin_dir("e2e")
    specs = e2e_images((bin_dir / "image-manifest.go").read_text())
    out = out or ROOT / "test-output" / f"e2e-{suite}"
    out.mkdir(parents=True, exist_ok=True)
    with ControlPlane(name=f"berth-e2e-{suite}", nodes=2, extra_images=specs) as plane:
        repo_list = out / "repo-list.yaml"
        repo_list.write_text(e2e_repo_list())
        argv = [
            str(bin_dir / "e2e.test"),
            f"--kubeconfig={plane.kubeconfig_path}",
            "--provider=skeleton",
            f"--report-dir={out}",
            f"--ginkgo.focus={chosen.focus}",
            f"--ginkgo.skip={SKIP}",
            "--ginkgo.no-color",
            "--ginkgo.timeout=3h",
            f"--ginkgo.junit-report={out / 'junit.xml'}",
            "--allowed-not-ready-nodes=0",
            "--num-nodes=2",
            # The framework otherwise looks for a kubectl on PATH.
            f"--kubectl-path={plane.kubectl}",
        ]
        env = {**os.environ, "KUBE_TEST_REPO_LIST": str(repo_list)}
        began = time.monotonic()
        with (out / "e2e.log").open("w") as log:
            subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
        seconds = time.monotonic() - began
    return read_junit(out / "junit.xml", seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.e2e", description=__doc__.split("\n")[0])
    parser.add_argument("suite", choices=sorted(SUITES), help="which tests to run")
    args = parser.parse_args(argv)
    print(f"e2e {args.suite}: {SUITES[args.suite].what}", file=sys.stderr, flush=True)
    result = run(args.suite)
    print(result.line(args.suite))
    for name in result.failures:
        print(f"  failed: {name}")
    return 1 if result.failed or not result.passed else 0


if __name__ == "__main__":
    sys.exit(main())
