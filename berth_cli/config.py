"""Where the CLI keeps its settings and credentials: one YAML file, mode 0600, written atomically.

Path: ``$BERTH_CONFIG``, else ``$XDG_CONFIG_HOME/berth/config.yaml`` (``~/.config/berth/config.yaml``).
A file that others may read is refused when it holds a secret, as ssh refuses a readable private key.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from berth_cli.errors import CliError, Exit
from berth_cli.files import write_private

DEFAULT_CLIENT_ID = "berth-cli"
DEFAULT_SCOPES = "openid profile email groups"


def default_path() -> Path:
    if os.environ.get("BERTH_CONFIG"):
        return Path(os.environ["BERTH_CONFIG"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "berth" / "config.yaml"


@dataclass
class OidcSettings:
    """How `berth login --oidc` reaches the provider, and what it got back."""

    issuer: str
    client_id: str = DEFAULT_CLIENT_ID
    ca_file: str = ""
    scopes: str = DEFAULT_SCOPES
    resource: str = ""
    access_token: str = ""
    refresh_token: str = ""
    expires_at: float = 0.0


@dataclass
class Config:
    path: Path
    url: str = ""
    ca_file: str = ""
    token: str = ""
    oidc: OidcSettings | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {**self.extra}
        for key in ("url", "ca_file", "token"):
            if getattr(self, key):
                data[key] = getattr(self, key)
        if self.oidc is not None:
            data["oidc"] = {k: v for k, v in vars(self.oidc).items() if v not in ("", 0.0)}
        return data


def _check_private(path: Path, data: dict[str, Any]) -> None:
    holds_secret = bool(data.get("token")) or bool((data.get("oidc") or {}).get("refresh_token"))
    mode = path.stat().st_mode
    if holds_secret and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CliError(
            f"{path} holds credentials but others may read it (mode {stat.S_IMODE(mode):o}); run: chmod 600 {path}",
            Exit.AUTH,
        )


def load(path: Path | None = None) -> Config:
    """The config at ``path`` (default: ``default_path()``); an empty one when the file does not exist."""
    path = path or default_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return Config(path=path)
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise CliError(f"{path} is not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise CliError(f"{path} must be a YAML mapping")
    _check_private(path, data)
    oidc = data.pop("oidc", None)
    config = Config(
        path=path,
        url=str(data.pop("url", "") or ""),
        ca_file=str(data.pop("ca_file", "") or ""),
        token=str(data.pop("token", "") or ""),
        extra=data,
    )
    if isinstance(oidc, dict) and oidc.get("issuer"):
        known = set(OidcSettings.__dataclass_fields__)
        config.oidc = OidcSettings(**{k: v for k, v in oidc.items() if k in known})
    return config


def save(config: Config) -> None:
    """Write the config with mode 0600, replacing the old file in one step."""
    write_private(config.path, yaml.safe_dump(config.to_dict(), sort_keys=False))
