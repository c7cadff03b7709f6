"""devcluster/e2e.py: reading the suite's JUnit report. No cluster."""

from __future__ import annotations

from pathlib import Path

from devcluster.e2e import read_junit

JUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="6" disabled="0" errors="0" failures="1" time="250">
  <testsuite name="Kubernetes e2e suite" tests="6" skipped="1" failures="1">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1"></testcase>
    <testcase name="[It] [sig-network] DNS should provide DNS for services [Conformance]" status="passed"></testcase>
    <testcase name="[It] [sig-network] Services should serve a basic endpoint from pods [Conformance]"
      status="failed"><failure message="service is not reachable" type="failed"></failure></testcase>
    <testcase name="[It] [sig-storage] CSI mock volume" status="skipped"><skipped message="x"></skipped></testcase>
    <testcase name="[SynchronizedAfterSuite]" classname="Kubernetes e2e suite" status="passed" time="1"></testcase>
    <testcase name="[ReportAfterSuite] Kubernetes e2e suite report" status="passed" time="0"></testcase>
  </testsuite>
</testsuites>
"""


def test_the_counts_are_the_specs_not_ginkgos_suite_nodes(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(JUNIT)
    result = read_junit(report, 250.0)
    assert (result.passed, result.failed, result.skipped) == (1, 1, 1)
    assert result.failures == ("[It] [sig-network] Services should serve a basic endpoint from pods [Conformance]",)


def test_a_failed_suite_node_counts_as_a_failure(tmp_path: Path) -> None:
    passed_setup = (
        '<testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1">'
    )
    failed_setup = '<testcase name="[SynchronizedBeforeSuite]" status="failed"><failure message="no nodes"></failure>'
    report = tmp_path / "junit.xml"
    report.write_text(JUNIT.replace(passed_setup, failed_setup))
    result = read_junit(report, 1.0)
    assert result.failed == 2 and result.failures[0] == "[SynchronizedBeforeSuite]"
