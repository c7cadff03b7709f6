"""A real OpenID Connect provider for tests and the demo.

Runs panva's oidc-provider (pinned in devcluster/oidc/package.json) under Node,
over HTTPS on 127.0.0.1, in its own process group, killed with its parent:

    with OidcProvider() as provider:
        provider.issuer        # https://127.0.0.1:<port>
        provider.ca_file       # PEM bundle that verifies the provider's certificate
        provider.set_user_groups("amir", ["team-payments"])

Accounts live in a JSON users file that the provider reads on every sign-in
and token refresh, so a changed group shows on the next login. The client,
user and claim contract is in docs/oidc.md. Demo: `python -m devcluster.oidc`.
"""

from __future__ import annotations

import argparse
import copy
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from devcluster.kubeconfig import write_private
from devcluster.pki import CertificateAuthority
from devcluster.process import Component, Service, wait_until

PROVIDER_DIR = Path(__file__).with_name("oidc")
DEMO_USERS_FILE = PROVIDER_DIR / "users.example.json"
DEMO_CLIENTS: list[dict[str, Any]] = json.loads((PROVIDER_DIR / "clients.json").read_text())

PORTAL_CLIENT_ID = "berth-portal"
PORTAL_CLIENT_SECRET = next(c["client_secret"] for c in DEMO_CLIENTS if c["client_id"] == PORTAL_CLIENT_ID)
KUBECTL_CLIENT_ID = "kubectl"
# The `berth` command line: a public client, PKCE, callback on http://127.0.0.1:<any port>/callback.
CLI_CLIENT_ID = "berth-cli"
# A token request naming API_RESOURCE gets a JWT access token for the portal's
# API: aud = API_AUDIENCE, iss = the issuer, signed RS256 with a key in the JWKS.
API_RESOURCE = "urn:berth:api"
# The API's own audience, never a client id: an ID token (aud = its client) must not pass as an access token.
API_AUDIENCE = "berth-api"
API_SCOPE = "berth:api"
SCOPES = "openid profile email groups"

HOST = "127.0.0.1"
DEMO_PORT = 9443
_NPM_TIMEOUT_SECONDS = 600


class OidcProviderError(RuntimeError):
    """The provider could not be installed or started."""


def _pinned_version() -> str:
    return json.loads((PROVIDER_DIR / "package.json").read_text())["dependencies"]["oidc-provider"]


def _installed_version() -> str | None:
    manifest = PROVIDER_DIR / "node_modules" / "oidc-provider" / "package.json"
    try:
        return json.loads(manifest.read_text())["version"]
    except FileNotFoundError:
        return None


def ensure_node_modules() -> None:
    """Install the pinned provider with `npm ci` unless node_modules already has it."""
    if _installed_version() == _pinned_version():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise OidcProviderError("npm is needed to install the OIDC provider (Debian: apt-get install npm)")
    # pytest-xdist workers may all get here at once; one installs, the others wait.
    lock_name = hashlib.sha256(str(PROVIDER_DIR).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"berth-oidc-npm-{lock_name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _installed_version() == _pinned_version():
            return
        result = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=PROVIDER_DIR,
            capture_output=True,
            text=True,
            timeout=_NPM_TIMEOUT_SECONDS,
        )
    if result.returncode != 0:
        raise OidcProviderError(f"npm ci failed in {PROVIDER_DIR}:\n{result.stdout}\n{result.stderr}")


def _write_atomically(path: Path, text: str) -> None:
    # The provider reads the file at any moment; it must never see half of it.
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def portal_env(
    issuer: str,
    discovery: dict[str, Any],
    *,
    client_id: str,
    client_secret: str,
    api_audience: str,
    ca_file: Path | None = None,
    api_clients: list[str] | None = None,
) -> dict[str, str]:
    """The portal's environment variables (portal/settings.py) for signing in at a provider: its endpoints from
    its discovery document, the portal's client, the API's audience, and what verifies the provider's TLS."""
    env = {
        "OIDC_OP_ISSUER": issuer,
        "OIDC_OP_AUTHORIZATION_ENDPOINT": discovery["authorization_endpoint"],
        "OIDC_OP_TOKEN_ENDPOINT": discovery["token_endpoint"],
        "OIDC_OP_USER_ENDPOINT": discovery["userinfo_endpoint"],
        "OIDC_OP_JWKS_ENDPOINT": discovery["jwks_uri"],
        "OIDC_OP_LOGOUT_ENDPOINT": discovery["end_session_endpoint"],
        "OIDC_RP_CLIENT_ID": client_id,
        "OIDC_RP_CLIENT_SECRET": client_secret,
        "OIDC_API_AUDIENCE": api_audience,
    }
    if ca_file is not None:
        env["OIDC_CA_BUNDLE"] = str(ca_file)
    if api_clients:
        env["OIDC_API_CLIENTS"] = ",".join(api_clients)
    return env


class OidcProvider(Service):
    """One running provider. Use as a context manager, or call start() and stop().

    TLS: pass a serving certificate for 127.0.0.1 (cert_pem, key_pem) and the CA
    that issued it (ca_cert_pem), e.g. from the dev control plane's CA, so that
    kube-apiserver trusts the provider; or pass nothing, and a throwaway CA and
    serving certificate are made here. Either way `ca_file` verifies the provider.

    clients: oidc-provider client metadata; default DEMO_CLIENTS (berth-portal, kubectl, berth-cli).
    users_file: edited in place by set_user_groups; default a copy of the demo users.
    port: default any free port. data_dir: default a temporary directory,
    removed by stop(); holds config, keys, users, TLS files and provider.log.
    ttl: oidc-provider lifetimes in seconds to change, e.g. {"RefreshToken": 2} (see server.mjs's DEFAULT_TTL).
    """

    def __init__(
        self,
        *,
        cert_pem: str | None = None,
        key_pem: str | None = None,
        ca_cert_pem: str | None = None,
        clients: list[dict[str, Any]] | None = None,
        users_file: Path | str | None = None,
        port: int | None = None,
        data_dir: Path | str | None = None,
        startup_timeout: float = 30.0,
        ttl: dict[str, int] | None = None,
    ) -> None:
        if (cert_pem is None) != (key_pem is None):
            raise ValueError("give both cert_pem and key_pem, or neither")
        if cert_pem is None:
            ca = CertificateAuthority("berth-oidc-dev-ca")
            cert_pem, key_pem = ca.issue_serving_cert([HOST, "localhost"])
            ca_cert_pem = ca.cert_pem
        self._cert_pem = cert_pem
        self._key_pem = key_pem or ""
        # Without a CA, the serving certificate must be self-signed: it is its own trust anchor.
        self.ca_cert_pem: str = ca_cert_pem or cert_pem
        self.clients = copy.deepcopy(clients if clients is not None else DEMO_CLIENTS)
        self._users_file_given = Path(users_file) if users_file is not None else None
        self._port = port or 0
        self._data_dir_given = Path(data_dir) if data_dir is not None else None
        self._startup_timeout = startup_timeout
        self._ttl = dict(ttl or {})
        self._data_dir: Path | None = None
        self._issuer: str | None = None
        self._component: Component | None = None

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> None:
        node = shutil.which("node")
        if node is None:
            raise OidcProviderError("Node.js 20 or later is needed to run the OIDC provider")
        ensure_node_modules()
        data_dir = self._prepare_data_dir()
        ready_file = data_dir / "ready.json"
        ready_file.unlink(missing_ok=True)
        config_file = self._write_config(data_dir)
        self._component = Component(
            "oidc-provider", [node, str(PROVIDER_DIR / "server.mjs"), str(config_file)], data_dir / "provider.log"
        )
        self._component.start()
        wait_until(
            ready_file.exists,
            timeout=self._startup_timeout,
            watched=[self._component],
            what="the OIDC provider to listen",
        )
        self._issuer = json.loads(ready_file.read_text())["issuer"]
        wait_until(
            self._discovery_answers,
            timeout=self._startup_timeout,
            watched=[self._component],
            what="OIDC discovery to answer",
        )

    def restart(self) -> None:
        """Stop the provider and start it again on the same port with the same keys and users: what restarting
        `make demo` does. Sessions, grants and refresh tokens live in the provider's memory, so all are gone."""
        self._port = urlsplit(self.issuer).port or self._port
        if self._component is not None:
            self._component.stop()
            self._component = None
        self.start()

    def stop(self) -> None:
        if self._component is not None:
            self._component.stop()
            self._component = None
        self._issuer = None
        if self._data_dir is not None and self._data_dir_given is None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None

    @property
    def pid(self) -> int | None:
        return self._component.pid if self._component else None

    def running(self) -> bool:
        return self._component is not None and self._component.exited() is None

    # -- what clients need ---------------------------------------------------

    @property
    def issuer(self) -> str:
        if self._issuer is None:
            raise OidcProviderError("the OIDC provider is not running")
        return self._issuer

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            raise OidcProviderError("the OIDC provider has not been started")
        return self._data_dir

    @property
    def ca_file(self) -> Path:
        return self.data_dir / "ca.pem"

    @property
    def users_file(self) -> Path:
        return self._users_file_given or self.data_dir / "users.json"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "provider.log"

    def discovery(self) -> dict[str, Any]:
        response = requests.get(f"{self.issuer}/.well-known/openid-configuration", verify=str(self.ca_file), timeout=10)
        response.raise_for_status()
        return response.json()

    def portal_env(self) -> dict[str, str]:
        """The portal's environment variables (portal/settings.py) for signing in here."""
        return portal_env(
            self.issuer,
            self.discovery(),
            client_id=PORTAL_CLIENT_ID,
            client_secret=PORTAL_CLIENT_SECRET,
            api_audience=API_AUDIENCE,
            ca_file=self.ca_file,
        )

    # -- users ---------------------------------------------------------------

    def users(self) -> dict[str, dict[str, Any]]:
        return json.loads(self.users_file.read_text())["users"]

    def user_groups(self, username: str) -> list[str]:
        return list(self.users()[username].get("groups", []))

    def set_user_groups(self, username: str, groups: list[str]) -> None:
        """Replace a user's groups; the next sign-in or refresh carries the new ones."""
        document = json.loads(self.users_file.read_text())
        if username not in document["users"]:
            raise KeyError(f"no user {username!r} in {self.users_file}")
        document["users"][username]["groups"] = list(groups)
        _write_atomically(self.users_file, json.dumps(document, indent=2, ensure_ascii=False) + "\n")

    def remove_user(self, username: str) -> dict[str, Any]:
        """Delete a user at the provider (as an admin would); returns the entry so it can be put back."""
        document = json.loads(self.users_file.read_text())
        entry = document["users"].pop(username)
        _write_atomically(self.users_file, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        return dict(entry)

    def add_user(self, username: str, entry: dict[str, Any]) -> None:
        document = json.loads(self.users_file.read_text())
        document["users"][username] = entry
        _write_atomically(self.users_file, json.dumps(document, indent=2, ensure_ascii=False) + "\n")

    # -- internals -----------------------------------------------------------

    def _prepare_data_dir(self) -> Path:
        if self._data_dir_given is not None:
            self._data_dir_given.mkdir(parents=True, exist_ok=True)
            self._data_dir = self._data_dir_given
        elif self._data_dir is None:  # a restart keeps the directory it made
            self._data_dir = Path(tempfile.mkdtemp(prefix="berth-oidc-"))
        tls_dir = self._data_dir / "tls"
        tls_dir.mkdir(exist_ok=True)
        (tls_dir / "serving.crt").write_text(self._cert_pem)
        write_private(tls_dir / "serving.key", self._key_pem)
        self.ca_file.write_text(self.ca_cert_pem)
        # A demo restarted on the same data dir keeps users edited meanwhile.
        if self._users_file_given is None and not self.users_file.exists():
            shutil.copyfile(DEMO_USERS_FILE, self.users_file)
        return self._data_dir

    def _write_config(self, data_dir: Path) -> Path:
        config = {
            "host": HOST,
            "port": self._port,
            "dataDir": str(data_dir),
            "usersFile": str(self.users_file.resolve()),
            "tls": {
                "certFile": str(data_dir / "tls" / "serving.crt"),
                "keyFile": str(data_dir / "tls" / "serving.key"),
            },
            "clients": self.clients,
            "api": {"resource": API_RESOURCE, "audience": API_AUDIENCE, "scope": API_SCOPE},
            "ttl": self._ttl,
        }
        path = data_dir / "config.json"
        # Holds client secrets.
        write_private(path, json.dumps(config, indent=2))
        return path

    def _discovery_answers(self) -> bool:
        try:
            return self.discovery().get("issuer") == self._issuer
        except requests.RequestException:
            return False


# -- demo ----------------------------------------------------------------------


def _default_demo_dir() -> Path:
    return Path(os.environ.get("BERTH_CACHE", Path.home() / ".cache" / "berth")) / "oidc"


def _print_demo_banner(provider: OidcProvider) -> None:
    print(f"OIDC issuer:  {provider.issuer}")
    print(f"CA file:      {provider.ca_file}")
    print(f"Log:          {provider.log_path}")
    print(f"Users file:   {provider.users_file} (edits apply at the next sign-in)")
    print(
        f"Portal:       client_id={PORTAL_CLIENT_ID} client_secret={PORTAL_CLIENT_SECRET} "
        f"scope='{SCOPES}' redirect http://127.0.0.1:<any port>/oidc/callback/"
    )
    print(f"kubectl:      client_id={KUBECTL_CLIENT_ID} (public, PKCE) redirect http://localhost:8000 or :18000")
    print(f"berth CLI:    client_id={CLI_CLIENT_ID} (public, PKCE) redirect http://127.0.0.1:<any port>/callback")
    print(f"API tokens:   resource={API_RESOURCE} -> JWT with aud={API_AUDIENCE}")
    print("Sign-ins:")
    for username, user in provider.users().items():
        groups = ", ".join(user.get("groups", [])) or "(no groups)"
        print(f"  {username:<8} {user['password']:<12} {groups}")
    print("Portal environment:")
    for name, value in provider.portal_env().items():
        print(f"  export {name}={value}")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.oidc", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--port", type=int, default=DEMO_PORT, help=f"HTTPS port on {HOST} (default {DEMO_PORT}; 0 = any)"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=_default_demo_dir(),
        help="keys, users, TLS files and log (default $BERTH_CACHE/oidc)",
    )
    parser.add_argument("--users-file", type=Path, help="users JSON to use in place of the demo users")
    parser.add_argument("--cert", type=Path, help="serving certificate PEM (with --key and --ca)")
    parser.add_argument("--key", type=Path, help="serving key PEM")
    parser.add_argument("--ca", type=Path, help="CA certificate PEM that issued --cert")
    args = parser.parse_args(argv)
    if (args.cert is None) != (args.key is None):
        parser.error("--cert and --key go together")

    def read(path: Path | None) -> str | None:
        return path.read_text() if path else None

    provider = OidcProvider(
        cert_pem=read(args.cert),
        key_pem=read(args.key),
        ca_cert_pem=read(args.ca),
        users_file=args.users_file,
        port=args.port,
        data_dir=args.data_dir,
    )
    # SIGTERM ends the demo like Ctrl-C does, through the same clean stop.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    started = time.monotonic()
    with provider:
        print(f"OIDC provider ready in {time.monotonic() - started:.1f}s (Ctrl-C stops it)")
        _print_demo_banner(provider)
        try:
            while provider.running():
                time.sleep(1)
        except KeyboardInterrupt:
            return 0
    print(f"the OIDC provider exited; see {provider.log_path}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
