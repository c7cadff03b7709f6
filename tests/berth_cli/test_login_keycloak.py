"""`berth login --oidc` against Keycloak: the realm's public `berth-cli` client, PKCE on a free loopback port.

Keycloak needs no resource indicator: its access tokens carry the API's audience (the realm's `berth-api`
scope), and the portal accepts them from the clients in OIDC_API_CLIENTS.
"""

from __future__ import annotations

import re
import stat
import time
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
import yaml

from devcluster.keycloak import CLI_CLIENT_ID, Keycloak
from tests.plugins.keycloak import keycloak_browser, keycloak_token_request, walk_keycloak_login
from tests.plugins.portal import Berth

pytestmark = pytest.mark.django_db(transaction=True)

_URL = re.compile(r"^\s+(https://\S+)$", re.MULTILINE)


def test_alice_signs_in_at_keycloak_with_the_cli_and_the_api_knows_her(
    keycloak_berth: Berth, keycloak: Keycloak
) -> None:
    berth = keycloak_berth
    process = berth.start(
        "login", "--oidc", "--issuer", keycloak.issuer, "--oidc-ca-file", str(keycloak.ca_file),
        "--no-browser", "--timeout", "90",
    )  # fmt: skip
    assert process.stderr is not None
    printed, deadline = "", time.monotonic() + 60
    while not _URL.search(printed):
        assert time.monotonic() < deadline and process.poll() is None, printed
        printed += process.stderr.readline()
    url = _URL.search(printed).group(1)
    query = {key: values[0] for key, values in parse_qs(urlsplit(url).query).items()}
    assert query["client_id"] == CLI_CLIENT_ID and query["code_challenge_method"] == "S256"
    redirect_uri = query["redirect_uri"]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/callback", redirect_uri)

    session = keycloak_browser(keycloak)
    callback = walk_keycloak_login(session, session.get(url, allow_redirects=False), "alice", None, redirect_uri)
    answer = requests.get(callback, timeout=10)
    assert answer.status_code == 200 and "Signed in" in answer.text
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert "as alice" in stderr

    assert stat.S_IMODE(berth.config_path.stat().st_mode) == 0o600
    saved = yaml.safe_load(berth.config_path.read_text())
    assert saved["oidc"]["issuer"] == keycloak.issuer and saved["oidc"]["client_id"] == CLI_CLIENT_ID
    me = berth("whoami", "-o", "json")
    assert me.code == 0, me.stderr
    assert me.json()["username"] == "alice" and me.json()["teams"] == [{"team": "team-payments", "role": "owner"}]

    # Refreshed with Keycloak's refresh token when due.
    saved["oidc"]["expires_at"] = 0
    berth.config_path.write_text(yaml.safe_dump(saved))
    berth.config_path.chmod(0o600)
    again = berth("whoami", "-o", "json")
    assert again.code == 0, again.stderr
    refreshed = yaml.safe_load(berth.config_path.read_text())["oidc"]
    assert refreshed["access_token"] != saved["oidc"]["access_token"]

    assert berth("logout").code == 0
    assert berth("whoami").code == 3
    stolen = keycloak_token_request(
        keycloak,
        {"grant_type": "refresh_token", "refresh_token": refreshed["refresh_token"]},
        client_id=CLI_CLIENT_ID,
        client_secret=None,
    )
    assert stolen.status_code == 400 and stolen.json()["error"] == "invalid_grant"
