"""The API tokens page in a real browser: what it tells people to send works, and the new token's ready-made
`curl` and `berth` lines do what they say when pasted into a shell."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from playwright.sync_api import expect

from tests.browser.support import Portal, axe_violations, blocking, describe_violations, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

VENV_BIN = Path(sys.executable).parent  # where `berth` is installed (make python-deps)


def _shell(line: str, home: Path) -> subprocess.CompletedProcess[str]:
    """``line`` as a person pastes it into bash: `berth` on the PATH, a home of its own (no saved sign-in)."""
    env = {
        "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
        "HOME": str(home),
        "BERTH_CONFIG": str(home / "berth.yaml"),
        "NO_PROXY": "127.0.0.1",
    }
    return subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, timeout=60)


def test_the_tokens_page_instructions_work_when_pasted(portal: Portal, tmp_path):
    page = portal.page_as("alice")
    page.goto(portal.at("/tokens/"))
    header = page.locator("#auth-header")
    expect(header).to_have_text("Authorization: Token <token>")

    page.get_by_label("Name", exact=True).fill("CI for payments")
    page.get_by_role("button", name="Create token").click()
    card = page.get_by_role("region", name="Copy your new token now")
    expect(card).to_be_visible()
    token = card.locator("#new-token").inner_text().strip()
    assert re.fullmatch(r"brt_[0-9a-f]{8}_[A-Za-z0-9_-]+", token)

    # The header as the page spells it, with the token in its place.
    name, value = header.inner_text().replace("<token>", token).split(": ", 1)
    answer = requests.get(portal.at("/api/v1/me/"), headers={name: value}, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["username"] == "alice"

    curl = card.locator("#new-token-curl").inner_text().strip()
    assert curl.startswith("curl ") and token in curl
    result = _shell(curl, tmp_path)
    assert result.returncode == 0, result.stderr
    assert '"username":"alice"' in result.stdout.replace(" ", "")

    cli = card.locator("#new-token-cli").inner_text().strip()
    assert "berth whoami" in cli and token in cli
    result = _shell(cli, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "alice" in result.stdout and "team-payments (owner)" in result.stdout

    # Each line has a Copy button.
    expect(card.get_by_role("button", name="Copy curl command")).to_be_visible()
    expect(card.get_by_role("button", name="Copy berth command")).to_be_visible()


@pytest.mark.parametrize("width", [1440, 390])
def test_the_tokens_page_with_a_new_token_is_accessible(portal: Portal, axe_installed, width):
    page = portal.page_as("alice", bypass_csp=True)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(portal.at("/tokens/"))
    page.get_by_label("Name", exact=True).fill("CI for payments")
    page.get_by_role("button", name="Create token").click()
    expect(page.get_by_role("region", name="Copy your new token now")).to_be_visible()
    if width == 1440:
        screenshot(page, "tokens-new")
    found = axe_violations(page)
    assert not blocking(found), describe_violations(f"tokens with a new token at {width} px", found)
