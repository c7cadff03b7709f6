"""Shared helpers of the deployment tests: paths, the compose parser, the settings' required variables.

Nothing here needs a container engine, a database or Django's test database.
"""

from __future__ import annotations

import ast
import email
import email.message
import os
import re
import shutil
import socketserver
import subprocess
import sys
import threading
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
SETTINGS_FILE = ROOT / "portal" / "settings.py"
REALM_FILE = ROOT / "deploy" / "keycloak" / "berth-realm.json"
SECRETS_DIR = ROOT / "deploy" / "secrets"
PORTAL_SERVICES = ("web", "worker", "worker-reconcile", "watcher", "beat")
COMPOSE_PACKAGE = "docker-compose"  # Debian package: compose v1, whose `config` needs no engine

# Settings that have a default, but one that is wrong inside a container (loopback hosts, a
# console mailer, DEBUG-only fallbacks). Production needs them set explicitly.
PRODUCTION_SETTINGS = (
    "DJANGO_DEBUG",
    "DJANGO_ALLOWED_HOSTS",
    "DJANGO_CSRF_TRUSTED_ORIGINS",
    "BERTH_PUBLIC_URL",
    "DJANGO_SECURE_SSL_REDIRECT",
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "EMAIL_URL",
    "OIDC_RP_CLIENT_ID",
    "OIDC_OP_ISSUER",
    "OIDC_OP_AUTHORIZATION_ENDPOINT",
    "OIDC_OP_TOKEN_ENDPOINT",
    "OIDC_OP_USER_ENDPOINT",
    "OIDC_OP_JWKS_ENDPOINT",
    "OIDC_OP_LOGOUT_ENDPOINT",
)


# --- portal/settings.py: what it requires --------------------------------------------------------

_CAST_FIRST = {"__call__", "list", "tuple", "dict"}


def _settings_calls() -> tuple[set[str], set[str]]:
    """(env.*("NAME") calls without default=, secret("NAME") calls) in portal/settings.py."""
    tree = ast.parse(SETTINGS_FILE.read_text(), filename=str(SETTINGS_FILE))
    plain: set[str] = set()
    secrets: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        first = node.args[0]
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            continue  # env.str(name) inside secret() itself, f-strings: not a setting name
        func = node.func
        if isinstance(func, ast.Name) and func.id == "secret":
            secrets.add(first.value)
        elif (
            isinstance(func, ast.Name)
            and func.id == "env"
            or (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "env")
        ):
            method = func.attr if isinstance(func, ast.Attribute) else "__call__"
            if method.startswith("read_env"):
                continue
            # environ.Env: env(var, cast, default), env.list/tuple/dict(var, cast, default);
            # every other reader is env.<type>(var, default, ...).
            default_position = 2 if method in _CAST_FIRST else 1
            has_default = any(k.arg == "default" for k in node.keywords) or len(node.args) > default_position
            if not has_default:
                plain.add(first.value)
    return plain, secrets


def required_plain_settings() -> set[str]:
    """Variables read with env.*() and no default: the settings fail without them."""
    return _settings_calls()[0]


# Secrets read with secret() that only a feature someone turns on needs, in the processes that serve it: the /metrics
# token (web only, with monitoring.metrics.enabled; tests/deploy/test_monitoring.py checks it is a mounted file then),
# and the Alertmanager receiver's token (with monitoring.tenantAlerts.receiver; tests/deploy/test_tenant_alerts.py).
FEATURE_SECRETS = {"BERTH_METRICS_TOKEN", "BERTH_ALERTMANAGER_TOKEN"}


def required_secret_settings() -> set[str]:
    """Secrets read with secret(): required outside DEBUG, as NAME or as NAME_FILE."""
    return _settings_calls()[1] - FEATURE_SECRETS


# --- The compose file, through a real compose implementation -------------------------------------


@lru_cache(maxsize=1)
def compose_command() -> tuple[str, ...] | None:
    docker = shutil.which("docker")
    if docker:
        try:
            probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            probe = None
        if probe is not None and probe.returncode == 0:
            return (docker, "compose")
    legacy = shutil.which("docker-compose")
    if legacy:
        return (legacy,)
    return None


def compose_config(*overlays: Path, env: dict[str, str] | None = None) -> dict:
    """`docker compose config` (or docker-compose v1) of docker-compose.yml [+ overlays], as a dict."""
    command = compose_command()
    if command is None:
        pytest.fail(
            "No compose implementation to parse docker-compose.yml: neither the `docker compose` plugin nor "
            f"`docker-compose` is installed. Install the Debian package `{COMPOSE_PACKAGE}` (it belongs in the "
            "Makefile's APT_PACKAGES, so `make test` installs it); its `config` command needs no container engine.",
            pytrace=False,
        )
    files: list[str] = []
    for path in (COMPOSE_FILE, *overlays):
        files += ["-f", str(path)]
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "BERTH_", "DOCKER_"))}
    run_env.update(env or {})
    done = subprocess.run(
        [*command, "--project-directory", str(ROOT), *files, "config"],
        cwd=ROOT,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{' '.join(command)} config failed:\n{done.stderr}"
    return yaml.safe_load(done.stdout)


def service_env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def service_depends_on(service: dict) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def service_ports(service: dict) -> list[tuple[str, int | None, int]]:
    """(host ip, published port or None, container port) of every published port."""
    ports = []
    for port in service.get("ports") or []:
        if isinstance(port, dict):  # compose v2: long syntax
            published = port.get("published")
            ports.append(
                (
                    port.get("host_ip") or "",
                    int(published) if published not in (None, "") else None,
                    int(port["target"]),
                )
            )
            continue
        spec = str(port).split("/", 1)[0]
        parts = spec.rsplit(":", 2)
        if len(parts) == 3:
            ip, published, target = parts
        elif len(parts) == 2:
            ip, (published, target) = "", parts
        else:
            ip, published, target = "", "", parts[0]
        ports.append((ip.strip("[]"), int(published) if published else None, int(target)))
    return ports


def service_mounts(service: dict) -> list[tuple[str, str, bool]]:
    """(source, target, read_only) of every volume or bind mount."""
    mounts = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            mounts.append((str(volume.get("source", "")), volume["target"], bool(volume.get("read_only"))))
            continue
        parts = str(volume).split(":")
        mode = parts[2] if len(parts) > 2 else "rw"
        mounts.append((parts[0], parts[1], "ro" in mode.split(",")))
    return mounts


def service_secret_targets(service: dict) -> dict[str, str]:
    """In-container path → secret name, for every secret the service gets."""
    targets = {}
    for secret in service.get("secrets") or []:
        if isinstance(secret, str):
            secret = {"source": secret}
        target = secret.get("target") or secret["source"]
        if not target.startswith("/"):
            target = f"/run/secrets/{target}"
        targets[target] = secret["source"]
    return targets


def command_of(service: dict) -> list[str]:
    command = service.get("command") or []
    return command.split() if isinstance(command, str) else [str(c) for c in command]


def url_host_port(url: str) -> tuple[str, int | None]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.port


# --- Running manage.py / Python with a clean, production-like environment -----------------------


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    """A minimal environment: nothing from this test run's settings leaks into the child."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT") if k in os.environ}
    env["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def run_python(args: list[str], env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def compose_env_on_this_machine(service: dict) -> dict[str, str]:
    """A portal service's compose environment, with /run/secrets/* replaced by the shipped examples."""
    env = service_env(service)
    targets = service_secret_targets(service)
    for key, value in list(env.items()):
        if key.endswith("_FILE") and value in targets:
            env[key] = str(SECRETS_DIR / f"{targets[value]}.example")
    return env


HEX64 = re.compile(r"[0-9a-f]{64}")


# --- The compose services as plain processes on 127.0.0.1 ---------------------------------------------

# The image's ENV (Dockerfile, runtime stage) that the portal processes rely on; PATH is the venv's here.
IMAGE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "DJANGO_SETTINGS_MODULE": "portal.settings"}
ENTRYPOINT = ROOT / "deploy" / "entrypoint.sh"  # the image's ENTRYPOINT
# Where the containers see the source tree (the image's WORKDIR).
APP_DIR = "/app"
_HOST_PORT = re.compile(r"(?<![\w.-])([a-z0-9][a-z0-9.-]*):(\d+)\b")


def materialise_secrets(config: dict, directory: Path) -> dict[str, Path]:
    """The compose file's secrets as files in ``directory``, from the shipped ``*.example`` files (name → path)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in config.get("secrets") or {}:
        path = directory / name
        shutil.copyfile(SECRETS_DIR / f"{name}.example", path)
        path.chmod(0o600)
        paths[name] = path
    return paths


def loopback_env(
    service: dict, *, addresses: dict[str, str], secrets: dict[str, Path], mounts: dict[str, Path]
) -> dict[str, str]:
    """A service's compose environment for a process on this machine.

    ``addresses`` rewrites each ``host:port`` the containers use (a service name, or a published port on
    localhost) to where that service listens natively; ``/run/secrets/*`` become the materialised files, and
    paths under a mount's target (``mounts``: container path → host directory) move to its host directory.
    A ``host:port`` left unmapped fails: nothing may point at a container that is not there.
    """
    env = {}
    targets = service_secret_targets(service)
    for key, value in service_env(service).items():
        if value in targets:
            value = str(secrets[targets[value]])
        value = move_to_host(value, mounts)
        unmapped = {f"{host}:{port}" for host, port in _HOST_PORT.findall(value)} - set(addresses)
        assert not unmapped, f"{key}={value}: nothing runs natively at {sorted(unmapped)}"
        env[key] = _HOST_PORT.sub(lambda match: addresses[match.group(0)], value)
    return env


def move_to_host(value: str, mounts: dict[str, Path]) -> str:
    """``value`` with every container path under a mount's target moved to its host directory; the deepest mount
    wins (a tmpfs inside a bind mount), and each path is moved once."""
    if not mounts:
        return value
    targets = sorted(mounts, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w./-])(" + "|".join(map(re.escape, targets)) + r")(?![\w.-])")
    return pattern.sub(lambda match: str(mounts[match.group(1)]), value)


def native_command(service: dict, mounts: dict[str, Path]) -> list[str]:
    """A service's compose command, run through the image's entrypoint, with container paths moved to the host."""
    return [str(ENTRYPOINT), *(move_to_host(part, {APP_DIR: ROOT, **mounts}) for part in command_of(service))]


def native_process_env(env: dict[str, str]) -> dict[str, str]:
    """What a portal container's process sees: the image's ENV, the venv first on PATH, the compose environment."""
    venv_bin = str(Path(sys.executable).parent)
    base = clean_env({})
    base.pop("DJANGO_SETTINGS_MODULE")
    return {**base, **IMAGE_ENV, "PATH": f"{venv_bin}:{base.get('PATH', '/usr/bin:/bin')}", **env}


class SmtpSink:
    """A minimal SMTP server on 127.0.0.1 that keeps every message (Mailpit's part, without the UI)."""

    def __init__(self) -> None:
        self.messages: list[email.message.Message] = []
        sink = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                self.wfile.write(b"220 berth-test-sink ESMTP\r\n")
                while line := self.rfile.readline():
                    verb = line.decode(errors="replace").strip().split(" ", 1)[0].upper()
                    if verb == "DATA":
                        self.wfile.write(b"354 end with <CRLF>.<CRLF>\r\n")
                        data = b"".join(iter(self.rfile.readline, b".\r\n"))
                        sink.messages.append(email.message_from_bytes(data.replace(b"\r\n..", b"\r\n.")))
                        self.wfile.write(b"250 queued\r\n")
                    elif verb == "QUIT":
                        self.wfile.write(b"221 bye\r\n")
                        return
                    elif verb in ("EHLO", "HELO"):
                        self.wfile.write(b"250 berth-test-sink\r\n")
                    else:  # MAIL, RCPT, RSET, NOOP
                        self.wfile.write(b"250 ok\r\n")

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> SmtpSink:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
