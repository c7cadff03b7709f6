"""pytest plugin: the real `helm` and `promtool` (devcluster/build.sh), and the monitoring CRDs.

    def test_chart_lints(helm_bin):
        subprocess.run([helm_bin, "lint", CHART], check=True)

Each is built once per machine (a cold build takes minutes on 2 cores; afterwards a stamp check), before any
test runs, outside every test's timeout. A failed build errors the tests that need it, with the reason; nothing
is skipped. Must not import Django.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from devcluster.launcher import helm_binary, monitoring_crds, promtool_binary

TOOLS: dict[str, Callable[[], object]] = {
    "helm_bin": helm_binary,
    "promtool_bin": promtool_binary,
    "monitoring_crd_files": monitoring_crds,
}
_BUILT = pytest.StashKey[dict[str, object]]()


def pytest_collection_finish(session: pytest.Session) -> None:
    wanted = {name for item in session.items for name in getattr(item, "fixturenames", ()) if name in TOOLS}
    if not wanted:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"devcluster: checking {', '.join(sorted(wanted))} (devcluster/build.sh)")
    built: dict[str, object] = {}
    for name in sorted(wanted):
        try:
            built[name] = TOOLS[name]()
        except Exception as error:  # raised by the fixture, in the tests that need it
            built[name] = error
    session.config.stash[_BUILT] = built


def _tool(config: pytest.Config, name: str) -> object:
    found = config.stash.get(_BUILT, {}).get(name)
    if found is None:
        found = TOOLS[name]()
    if isinstance(found, Exception):
        raise found
    return found


@pytest.fixture(scope="session")
def helm_bin(pytestconfig: pytest.Config) -> Path:
    """The real helm (helm.sh/helm/v3 at devcluster/gobuild-helm's pin)."""
    return Path(str(_tool(pytestconfig, "helm_bin")))


@pytest.fixture(scope="session")
def promtool_bin(pytestconfig: pytest.Config) -> Path:
    """The real promtool (Prometheus at devcluster/gobuild-prometheus's pin)."""
    return Path(str(_tool(pytestconfig, "promtool_bin")))


@pytest.fixture(scope="session")
def monitoring_crd_files(pytestconfig: pytest.Config) -> list[Path]:
    """prometheus-operator's PrometheusRule and ServiceMonitor CRD files."""
    found = _tool(pytestconfig, "monitoring_crd_files")
    assert isinstance(found, list) and found, "build.sh crds produced no CRD files"
    return found
