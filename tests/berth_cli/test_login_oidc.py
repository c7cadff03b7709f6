"""`berth login --oidc`: authorization code with PKCE on a loopback port, against the run's real OIDC provider.

The test plays the browser: it reads the sign-in URL the CLI prints, signs in at the provider's pages, and
follows the redirect to the CLI's loopback callback. The portal then accepts the CLI's access token.
"""

from __future__ import annotations

import re
import stat
import subprocess
import time
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
import yaml

from devcluster.oidc import API_RESOURCE, OidcProvider
from tests.plugins.oidc import complete_sign_in, token_request
from tests.plugins.portal import Berth

pytestmark = pytest.mark.django_db(transaction=True)

_URL = re.compile(r"^\s+(https://\S+)$", re.MULTILINE)


def start_login(berth: Berth, provider: OidcProvider) -> tuple[subprocess.Popen[str], str]:
    """Start `berth login --oidc`; returns the process and the authorization URL it printed."""
    process = berth.start(
        "login",
        "--oidc",
        "--issuer",
        provider.issuer,
        "--oidc-ca-file",
        str(provider.ca_file),
        "--resource",
        API_RESOURCE,
        "--no-browser",
        "--timeout",
        "60",
    )
    assert process.stderr is not None
    printed = ""
    deadline = time.monotonic() + 30
    while not _URL.search(printed):
        assert time.monotonic() < deadline and process.poll() is None, printed
        printed += process.stderr.readline()
    match = _URL.search(printed)
    assert match is not None
    return process, match.group(1)


def test_alice_signs_in_with_pkce_and_the_api_knows_her(berth: Berth, oidc_provider: OidcProvider) -> None:
    process, url = start_login(berth, oidc_provider)
    query = {key: values[0] for key, values in parse_qs(urlsplit(url).query).items()}
    assert query["client_id"] == "berth-cli"
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
    redirect_uri = query["redirect_uri"]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/callback", redirect_uri)

    # A page that plants its own code (wrong state) is turned away; the CLI keeps waiting for the real one.
    planted = requests.get(redirect_uri, params={"code": "attacker-code", "state": "guess"}, timeout=10)
    assert planted.status_code == 400 and process.poll() is None

    callback = complete_sign_in(oidc_provider, url, "alice", redirect_uri=redirect_uri)
    answer = requests.get(callback, timeout=10)
    assert answer.status_code == 200 and "Signed in" in answer.text
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert "as alice" in stderr

    assert stat.S_IMODE(berth.config_path.stat().st_mode) == 0o600
    saved = yaml.safe_load(berth.config_path.read_text())
    assert saved["url"] == berth.portal.url
    assert saved["oidc"]["issuer"] == oidc_provider.issuer and saved["oidc"]["client_id"] == "berth-cli"
    assert saved["oidc"]["refresh_token"] and "id_token" not in saved["oidc"]

    me = berth("whoami", "-o", "json", env={"BERTH_URL": ""})  # the URL comes from the config now
    assert me.code == 0, me.stderr
    assert me.json()["username"] == "alice"

    # An access token about to expire is refreshed with the refresh token, and the new one is kept.
    saved["oidc"]["expires_at"] = 0
    berth.config_path.write_text(yaml.safe_dump(saved))
    berth.config_path.chmod(0o600)
    again = berth("whoami", "-o", "json")
    assert again.code == 0, again.stderr
    refreshed = yaml.safe_load(berth.config_path.read_text())["oidc"]
    assert refreshed["access_token"] != saved["oidc"]["access_token"]
    assert refreshed["expires_at"] > time.time()

    logged_out = berth("logout")
    assert logged_out.code == 0 and "did not confirm" not in logged_out.stderr
    assert berth("whoami").code == 3
    # The refresh token was revoked at the provider: a copy of the old config is worth nothing.
    stolen = token_request(
        oidc_provider,
        {"grant_type": "refresh_token", "refresh_token": refreshed["refresh_token"]},
        client_id="berth-cli",
        client_secret=None,
    )
    assert stolen.status_code == 400 and stolen.json()["error"] == "invalid_grant"


def test_a_wrong_password_never_reaches_the_cli(berth: Berth, oidc_provider: OidcProvider) -> None:
    process, url = start_login(berth, oidc_provider)
    redirect_uri = parse_qs(urlsplit(url).query)["redirect_uri"][0]
    with pytest.raises(AssertionError, match="refused alice's password"):
        complete_sign_in(oidc_provider, url, "alice", password="wrong", redirect_uri=redirect_uri)
    process.kill()
    process.communicate(timeout=10)
    assert not berth.config_path.exists()


def test_a_config_file_others_can_read_is_refused(berth: Berth, api_token, alice) -> None:
    berth.config_path.parent.mkdir(parents=True)
    berth.config_path.write_text(yaml.safe_dump({"url": berth.portal.url, "token": api_token(alice)}))
    berth.config_path.chmod(0o644)
    refused = berth("whoami")
    assert refused.code == 3
    assert "chmod 600" in refused.stderr
    berth.config_path.chmod(0o600)
    assert berth("whoami").code == 0


def test_login_with_a_token_from_stdin_keeps_it_private(berth: Berth, api_token, alice) -> None:
    token = api_token(alice)
    result = berth("login", "--token-stdin", input=token + "\n")
    assert result.code == 0, result.stderr
    assert token not in result.stdout + result.stderr
    assert stat.S_IMODE(berth.config_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(berth.config_path.parent.stat().st_mode) == 0o700
    assert berth("whoami", "-o", "json").json()["username"] == "alice"
    assert berth("login", "--token-stdin", input="brt_00000000_" + "x" * 40 + "\n").code == 3
    assert berth("whoami", "-o", "json").json()["username"] == "alice"  # a refused token is not saved
