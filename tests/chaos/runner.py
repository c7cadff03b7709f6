"""One scenario: a burst, a fault injected once half of its tenants were asked for, then convergence and the checks."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import requests
from kubernetes.client import CoreV1Api

from devcluster.process import Component
from tests.chaos.bed import Bed
from tests.chaos.burst import Burst
from tests.chaos.results import ScenarioResult, record

# Every approved tenant is as its lane asked within this long of the broken part being back. In a bed the sweep
# re-sends lost work within STUCK_AFTER + SWEEP = 20 s, and a namespace tenant takes a few seconds to provision on
# this machine; deployed, add BERTH_STUCK_AFTER_SECONDS + BERTH_SWEEP_SECONDS (150 s by default).
BOUND_SECONDS = 120.0

Inject = Callable[[Bed, Burst], None]


def run(bed: Bed, scenario: str, inject: Inject, *, bound: float = BOUND_SECONDS, burst: Burst | None = None) -> Burst:
    burst = burst or Burst(bed)
    burst.start()
    assert burst.half.wait(180), "half of the burst was not even submitted within 3 minutes"
    in_flight = bed.tenant_statuses()
    began = time.monotonic()
    inject(bed, burst)
    back = time.monotonic()
    deadline = back + bound
    converged_at = None
    while time.monotonic() < deadline:
        if burst.converged():
            converged_at = time.monotonic()
            break
        time.sleep(1.0)
    burst.join(timeout=5)
    problems = burst.check()
    if converged_at is None:
        problems.insert(0, f"not converged within {bound:.0f} s of recovery")
    broken = bed.plane.failed_component()
    if broken is not None:
        problems.append(f"the control plane lost a component: {broken}")
    record(
        ScenarioResult(
            scenario=scenario,
            in_flight=in_flight,
            fault_seconds=round(back - began, 1),
            converge_seconds=None if converged_at is None else round(converged_at - back, 1),
            bound_seconds=bound,
            answers={str(status): count for status, count in sorted(burst.statuses().items())},
            outcome="FAILED" if problems else "ok",
            notes="; ".join(note[:160] for note in [*bed.notes, *problems[:3]]),
        )
    )
    assert not problems, "\n".join(problems)
    return burst


def wait_api_server(bed: Bed, timeout: float = 120.0) -> None:
    core = CoreV1Api(bed.kube)
    deadline = time.monotonic() + timeout
    while True:
        try:
            core.list_namespace(limit=1, _request_timeout=5)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def restart(component: Component, bed: Bed, suffix: str) -> None:
    """Start a stopped component again as it was (same argv, ports, data); its new log beside the old one."""
    assert component.log_path is not None
    component.log_path = component.log_path.with_name(f"{component.log_path.stem}.{suffix}.log")
    component.start()


def sigkill(component: Component) -> None:
    assert component.pid is not None
    os.killpg(component.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while component.exited() is None and time.monotonic() < deadline:
        time.sleep(0.1)


def database_away_answers(bed: Bed) -> list[str]:
    """What the portal answers while its database is away, for the API and for a signed-in browser: problems."""
    problems = []
    api = requests.get(
        f"{bed.portal.url}/api/v1/tenants/",
        headers={"Authorization": f"Token {bed.cast['approver_token']}"},
        timeout=30,
    )
    if api.status_code != 503 or "database" not in api.json().get("detail", ""):
        problems.append(f"API while the database is away: {api.status_code} {api.text[:300]}")
    elif not api.headers.get("Retry-After"):
        problems.append("API 503 without Retry-After")
    page = requests.get(f"{bed.portal.url}/", cookies={"sessionid": bed.cast["approver_session"]}, timeout=30)
    if page.status_code != 503 or "briefly unavailable" not in page.text or "Traceback" in page.text:
        problems.append(f"page while the database is away: {page.status_code} {page.text[:300]}")
    return problems
