"""The fuzz stage: schemathesis against the portal under gunicorn, signed in with a real access token.

Every check, stateful links included (submit a request, then approve, cancel or reject it, decommission its
tenant or ask for a kubeconfig), with a fixed seed and a bounded number of examples per operation. Any
failure fails the test; the report is in test-output/fuzz-junit.xml, the portal's log in test-output/.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from devcluster.oidc import API_RESOURCE, OidcProvider
from tenants.models import Cluster, Team, Tenant, TenantRequest
from tests.plugins.portal import LivePortal, portal_server
from tests.plugins.worker import OUTPUT, ROOT, django_process_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.fuzz]

SEED = 11
EXAMPLES_PER_OPERATION = 30
# gunicorn's access log: '"POST /api/v1/requests/ HTTP/1.1" 500 ...'
_SERVER_ERROR = re.compile(r'" 5\d\d ')
_ACTION_CALL = re.compile(r'"POST /api/v1/(?:requests|tenants)/([0-9a-f-]{36})/([a-z-]+)/ HTTP/1\.1" (?!404)')
CONFIG = Path(__file__).with_name("schemathesis.toml")
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


@pytest.fixture
def fuzz_portal(oidc_provider: OidcProvider) -> Iterator[LivePortal]:
    """A portal of its own: the fuzzer's refused credentials must not lock its address out (429 for all)."""
    env = {
        **django_process_env(),
        **oidc_provider.portal_env(),
        "BERTH_WRITE_THROTTLE": "100000/min",
        "BERTH_AUTH_FAILURES_PER_MINUTE": "100000",
        "BERTH_AUTH_FAILURE_ROWS_PER_MINUTE": "100000",
    }
    with portal_server("fuzz-portal", env) as portal:
        yield portal


def narrowed_schema(schema: dict, *, teams: list[str], tiers: list[str], clusters: list[str]) -> dict:
    """The schema with lookups limited to what this deployment has, so that generated requests can succeed.

    The served schema cannot list teams, tiers and clusters (admins change them); the fuzzer would only ever
    send names that do not exist. Values outside these lists are still sent as negative data.
    """
    components = schema["components"]["schemas"]
    for name in ("RequestCreateRequest", "RequestCreateRequestForm"):
        lookups = components[name]["properties"]
        lookups["team"]["enum"], lookups["tier"]["enum"], lookups["cluster"]["enum"] = teams, tiers, clusters
    components["ApiTokenCreateRequest"]["properties"]["team"]["enum"] = [*teams, None]
    components["ApiTokenCreateRequestForm"]["properties"]["team"]["enum"] = teams
    components["TransferRequest"]["properties"]["target_team"]["enum"] = teams
    return schema


def test_the_api_keeps_its_contract_under_fuzzing(fuzz_portal, oidc_tokens, cluster: Cluster, tmp_path):
    # Room in the budget for what the fuzzer submits; alice's first sign-in makes her its owner.
    Team.objects.create(
        slug="team-payments",
        name="Payments",
        oidc_group="team-payments",
        budget_tenants=1000,
        budget_cpu_millis=10**8,
        budget_memory_mib=10**8,
        budget_storage_gib=10**6,
    )
    token = oidc_tokens("alice", resource=API_RESOURCE)["access_token"]
    auth = {"Authorization": f"Bearer {token}"}
    # A second team to offer tenants to (transfers).
    Team.objects.create(slug="team-search", name="Search", oidc_group="team-search")
    me = requests.get(f"{fuzz_portal.url}/api/v1/me/", headers=auth, timeout=30)
    assert me.status_code == 200 and {"team": "team-payments", "role": "owner"} in me.json()["teams"], me.text
    served = requests.get(f"{fuzz_portal.url}/api/schema/?format=json", headers=auth, timeout=30)
    assert served.status_code == 200, served.text
    schema = narrowed_schema(
        served.json(),
        teams=["team-payments", "team-search"],
        tiers=list(cluster.tiers.values_list("name", flat=True)),
        clusters=[cluster.name],
    )
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(schema))
    OUTPUT.mkdir(exist_ok=True)
    started = time.monotonic()
    run = subprocess.run(
        [
            str(SCHEMATHESIS),
            "--config-file",
            str(CONFIG),
            "--no-color",
            "run",
            str(schema_file),
            "--url",
            fuzz_portal.url,
            "--header",
            f"Authorization: Bearer {token}",
            "--checks",
            "all",
            "--seed",
            str(SEED),
            "--max-examples",
            str(EXAMPLES_PER_OPERATION),
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--report",
            "junit",
            "--report-junit-path",
            str(OUTPUT / "fuzz-junit.xml"),
            "--request-timeout",
            "30",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "SCHEMATHESIS_HOOKS": "tests.tenants.fuzz_hooks"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    (OUTPUT / "fuzz.log").write_text(run.stdout + run.stderr)
    print(f"schemathesis: exit {run.returncode} in {time.monotonic() - started:.0f} s")
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-5000:]
    served = fuzz_portal.log.read_text()
    assert [line for line in served.splitlines() if _SERVER_ERROR.search(line)] == []
    # The stateful phase got somewhere: requests were submitted, and the links led to acting on real ones
    # (only a link yields the id of a request or tenant that exists; the answer may still be 403 or 409).
    known = {str(pk) for pk in TenantRequest.objects.values_list("pk", flat=True)}
    known |= {str(pk) for pk in Tenant.objects.values_list("pk", flat=True)}
    assert TenantRequest.objects.filter(requested_by__username="alice").exists()
    reached = {action for id_, action in _ACTION_CALL.findall(served) if id_ in known}
    assert reached >= {"approve", "cancel", "decommission", "kubeconfig"}, reached
