"""The CLI's pure helpers: time windows, safe table cells, error lines, ids in paths, kubeconfig merging, the config."""

from __future__ import annotations

import datetime as dt
import io
import stat
from pathlib import Path

import pytest
import yaml

from berth_cli import config as configuration
from berth_cli.client import Credential, field_errors, object_path
from berth_cli.errors import CliError, Exit
from berth_cli.kubeconfig import merge_into
from berth_cli.main import parse_since
from berth_cli.output import printable, table

NOW = dt.datetime(2030, 5, 17, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("30m", "2030-05-17T11:30:00Z"),
        ("2h", "2030-05-17T10:00:00Z"),
        ("7d", "2030-05-10T12:00:00Z"),
        ("1w", "2030-05-10T12:00:00Z"),
        ("2030-05-01", "2030-05-01T00:00:00Z"),
        ("2030-05-01T08:15:00+02:00", "2030-05-01T06:15:00Z"),
    ],
)
def test_since_accepts_durations_and_iso_moments(given: str, expected: str) -> None:
    assert parse_since(given, NOW) == expected


def test_since_refuses_anything_else() -> None:
    with pytest.raises(CliError) as raised:
        parse_since("yesterday", NOW)
    assert raised.value.code == Exit.USAGE


def test_cells_escape_control_characters_and_keep_the_rest() -> None:
    assert printable("ok\x1b[31mred\x07\r\n") == "ok\\x1b[31mred\\x07\\r\\n"
    assert printable("Zürich 東京") == "Zürich 東京"
    out = io.StringIO()
    table([{"a": "x" * 100, "b": None}], [("A", lambda r: r["a"]), ("B", lambda r: r["b"])], out)
    header, row = out.getvalue().splitlines()
    assert header.startswith("A ") and row.endswith("…") and len(row) == 60


def test_field_errors_become_lines() -> None:
    body = {"name": ["Too long.", "Reserved."], "non_field_errors": ["Over budget."], "x": {"y": ["Bad."]}}
    assert field_errors(body) == ["name: Too long.", "name: Reserved.", "Over budget.", "x.y: Bad."]
    assert field_errors({"detail": "Not found."}) == ["Not found."]


def test_ids_in_paths_must_be_uuids() -> None:
    assert object_path("requests", "6F9619FF-8B86-D011-B42D-00C04FC964FF", "approve") == (
        "/api/v1/requests/6f9619ff-8b86-d011-b42d-00c04fc964ff/approve/"
    )
    for hostile in ("../../admin", "6f9619ff-8b86-d011-b42d-00c04fc964ff/../x", "", "?x=1"):
        with pytest.raises(CliError):
            object_path("tenants", hostile)


KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: dev/t-web, cluster: {server: "https://new"}}]
users: [{name: dev/t-web-edit, user: {token: fresh}}]
contexts: [{name: dev/t-web, context: {cluster: dev/t-web, user: dev/t-web-edit, namespace: t-web}}]
current-context: dev/t-web
"""


def test_merge_replaces_the_tenants_entries_and_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "config"
    existing = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {"colors": True},
        "clusters": [{"name": "prod", "cluster": {"server": "https://prod"}}, {"name": "dev/t-web", "cluster": {}}],
        "users": [{"name": "dev/t-web-edit", "user": {"token": "expired"}}],
        "contexts": [{"name": "prod", "context": {"cluster": "prod", "user": "me"}}],
        "current-context": "prod",
    }
    path.write_text(yaml.safe_dump(existing))
    assert merge_into(path, KUBECONFIG, set_current=False) == "dev/t-web"
    merged = yaml.safe_load(path.read_text())
    assert [c["name"] for c in merged["clusters"]] == ["prod", "dev/t-web"]
    assert merged["users"] == [{"name": "dev/t-web-edit", "user": {"token": "fresh"}}]
    assert merged["current-context"] == "prod" and merged["preferences"] == {"colors": True}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    merge_into(path, KUBECONFIG, set_current=True)
    assert yaml.safe_load(path.read_text())["current-context"] == "dev/t-web"


def test_merge_refuses_a_file_that_is_not_a_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("clusters: not-a-list\n")
    with pytest.raises(CliError):
        merge_into(path, KUBECONFIG, set_current=False)
    assert path.read_text() == "clusters: not-a-list\n"


def test_the_config_is_written_0600_in_a_0700_directory(tmp_path: Path) -> None:
    path = tmp_path / "berth" / "config.yaml"
    config = configuration.Config(path=path, url="https://berth.test", token="brt_secret")
    configuration.save(config)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert configuration.load(path).token == "brt_secret"
    assert not list(path.parent.glob(".*.tmp"))


def test_the_environment_token_wins_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = configuration.Config(path=tmp_path / "c.yaml", token="from-file")
    monkeypatch.setenv("BERTH_TOKEN", "from-env")
    assert Credential.resolve(config).header() == "Token from-env"
    monkeypatch.delenv("BERTH_TOKEN")
    assert Credential.resolve(config).header() == "Token from-file"
    with pytest.raises(CliError) as raised:
        Credential.resolve(configuration.Config(path=tmp_path / "none.yaml"))
    assert raised.value.code == Exit.AUTH
