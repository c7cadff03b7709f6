"""docker-compose.yml's wiring, exercised without a container engine: every service that can run here starts as a
plain process on 127.0.0.1 with the environment and command line the compose file gives it, and the README's
journey goes through the API.

Read from the file (through a real compose implementation): each service's environment, command, secrets and
mounts. Rewritten: the `host:port` each container uses (service names, published ports) to where the native
process listens; /run/secrets/* to the shipped example secrets copied to a temporary directory; the mounts'
container paths and tmpfs to temporary directories; /app (the image's WORKDIR) to this checkout. Run as they are:
`migrate`, `web` (gunicorn with deploy/gunicorn.conf.py), the workers, `beat` (each through deploy/entrypoint.sh),
Redis with compose's command line, Keycloak with the realm file compose mounts. In place of images: PostgreSQL
from Debian (user and database as compose's POSTGRES_USER/POSTGRES_DB), Keycloak's server distribution at the
image's version (devcluster/keycloak.py), a small SMTP sink for Mailpit, and the dev control plane as the
cluster behind deploy/kube/kubeconfig. What only a container engine shows is listed in docs/deployment.md.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import pytest
import requests
import yaml

from devcluster import servers
from devcluster.keycloak import Keycloak
from devcluster.launcher import free_port
from devcluster.process import Component, wait_for_celery_ready, wait_until
from tests.deploy.helpers import (
    REALM_FILE,
    ROOT,
    SmtpSink,
    command_of,
    compose_config,
    loopback_env,
    materialise_secrets,
    native_command,
    native_process_env,
    service_env,
    service_mounts,
)
from tests.plugins.keycloak import redeem_at_keycloak, sign_in_at_keycloak

pytestmark = [pytest.mark.cluster, pytest.mark.worker, pytest.mark.keycloak, pytest.mark.timeout(900)]

KUBE_MOUNT = "/run/berth"
BEAT_MOUNT = "/var/lib/berth/beat"


def _start(stack: ExitStack, name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> Component:
    component = Component(name, argv, log_dir / f"{name}.log", cwd=ROOT, env=env)
    component.start()
    stack.callback(component.stop, grace_seconds=20)
    return component


def _redis(stack: ExitStack, service: dict, directory: Path) -> str:
    """Redis with compose's command line (append-only file), bound to loopback on a free port."""
    port = servers.free_port()
    directory.mkdir()
    argv = [*command_of(service), "--bind", "127.0.0.1", "--port", str(port), "--dir", str(directory)]
    component = _start(stack, "redis", argv, {"PATH": "/usr/bin:/bin"}, directory)
    servers.wait_port(port, component)
    return f"127.0.0.1:{port}"


def _api(token: str) -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # no proxies for loopback
    session.headers["Authorization"] = f"Bearer {token}"
    return session


def test_the_compose_services_run_natively_and_carry_the_readme_journey(control_plane, kubectl, tmp_path):
    config = compose_config()
    services = config["services"]
    secrets = materialise_secrets(config, tmp_path / "secrets")
    kube_dir, beat_dir = tmp_path / "kube", tmp_path / "beat"
    kube_dir.mkdir()
    beat_dir.mkdir()
    shutil.copyfile(control_plane.kubeconfig_path, kube_dir / "kubeconfig")  # deploy/kube/kubeconfig
    mounts = {KUBE_MOUNT: kube_dir, BEAT_MOUNT: beat_dir}
    # Every process built from Berth's images but the one-shot migrate: web, the workers, the watcher, beat.
    portal_processes = [name for name, service in services.items() if "build" in service and name != "migrate"]
    assert {"web", "worker", "watcher", "beat"} <= set(portal_processes)

    def mounts_of(name: str) -> dict[str, Path]:
        """The shared mounts, and each of the service's tmpfs but /tmp as an empty directory of its own."""
        own = dict(mounts)
        for index, path in enumerate(services[name].get("tmpfs") or []):
            if path != "/tmp":
                own[path] = tmp_path / f"{name}-tmpfs{index}"
                own[path].mkdir(exist_ok=True)
        return own

    keycloak_service = services["keycloak"]
    assert command_of(keycloak_service)[:2] == ["start-dev", "--import-realm"]
    realm_source = next(src for src, target, _ in service_mounts(keycloak_service) if target.endswith(".json"))
    assert Path(realm_source).resolve() == REALM_FILE
    postgres_env = service_env(services["postgres"])
    assert (postgres_env["POSTGRES_USER"], postgres_env["POSTGRES_DB"]) == ("berth", "berth")

    with ExitStack() as stack:
        started = time.monotonic()
        db = stack.enter_context(servers.postgres_server())  # initdb -U berth, database berth
        redis = _redis(stack, services["redis"], tmp_path / "redis")
        smtp = stack.enter_context(SmtpSink())
        keycloak = stack.enter_context(Keycloak(http=True, realm_file=Path(realm_source), data_dir=tmp_path / "kc"))
        web = f"127.0.0.1:{free_port()}"
        keycloak_address = keycloak.base_url.removeprefix("http://")
        addresses = {
            "postgres:5432": f"127.0.0.1:{db['PORT']}",
            "redis:6379": redis,
            "mailpit:1025": f"127.0.0.1:{smtp.port}",
            "keycloak:8080": keycloak_address,
            "localhost:8080": keycloak_address,
            "localhost:8000": web,
            "127.0.0.1:8000": web,
        }
        # Keycloak's own settings point where the portal's do: its issuer is the portal's OIDC_OP_ISSUER.
        keycloak_env = loopback_env(keycloak_service, addresses=addresses, secrets=secrets, mounts=mounts)
        assert keycloak_env["KC_HOSTNAME"] == keycloak.base_url

        envs = {
            name: native_process_env(
                loopback_env(services[name], addresses=addresses, secrets=secrets, mounts=mounts_of(name))
            )
            for name in ("migrate", *portal_processes)
        }
        assert envs["web"]["OIDC_OP_ISSUER"] == keycloak.issuer
        # The container binds 0.0.0.0:8000 (gunicorn.conf.py's default), published on 127.0.0.1:8000.
        envs["web"]["GUNICORN_BIND"] = web
        for env in envs.values():  # a port a process listens on, fixed in the container: a free one here
            for port in ("BERTH_WORKER_METRICS_PORT", "BERTH_WATCHER_METRICS_PORT"):
                if port in env:
                    env[port] = str(free_port())

        migrate = subprocess.run(
            native_command(services["migrate"], mounts_of("migrate")),
            cwd=ROOT,
            env=envs["migrate"],
            capture_output=True,
            timeout=300,
        )
        assert migrate.returncode == 0, migrate.stderr.decode()[-3000:]
        # What a platform admin does in /admin/ (docs/deployment.md, "Connecting a cluster"), in one command.
        kubeconfig_in_container = f"{KUBE_MOUNT}/kubeconfig"
        seeded = subprocess.run(
            ["python", "manage.py", "seed_demo", "--api-url", control_plane.api_url, "--ca-file",
             str(control_plane.ca_file), "--kubeconfig", kubeconfig_in_container.replace(KUBE_MOUNT, str(kube_dir))],
            cwd=ROOT, env=envs["web"], capture_output=True, timeout=120,
        )  # fmt: skip
        assert seeded.returncode == 0, seeded.stderr.decode()[-3000:]

        processes = {
            name: _start(stack, name, native_command(services[name], mounts_of(name)), envs[name], tmp_path)
            for name in portal_processes
        }
        wait_for_celery_ready(processes["worker"], timeout=120)
        healthcheck = [part.replace("127.0.0.1:8000", web) for part in services["web"]["healthcheck"]["test"][1:]]
        wait_until(
            lambda: subprocess.run(healthcheck, env=envs["web"], capture_output=True).returncode == 0,
            timeout=120,
            watched=list(processes.values()),
            what="the web healthcheck",
            interval=1.0,
        )
        print(f"compose stack natively up in {time.monotonic() - started:.0f}s")

        # The README's journey, through the API with Keycloak access tokens.
        def token(username: str) -> str:
            return str(redeem_at_keycloak(keycloak, sign_in_at_keycloak(keycloak, username))["access_token"])

        alice, carol = _api(token("alice")), _api(token("carol"))
        base = f"http://{web}/api/v1"
        name = f"compose-{uuid.uuid4().hex[:6]}"
        submitted = alice.post(
            f"{base}/requests/",
            json={"team": "team-payments", "name": name, "tier": "medium", "cluster": "dev", "kind": "namespace"},
            headers={"Idempotency-Key": name},
            timeout=60,
        )
        assert submitted.status_code == 201, submitted.text
        request = submitted.json()
        assert request["status"] == "pending" and request["requested_by"] == "alice"
        approved = carol.post(f"{base}/requests/{request['id']}/approve/", json={"comment": "ok"}, timeout=60)
        assert approved.status_code == 200, approved.text

        def tenant_ready() -> bool:
            status = alice.get(f"{base}/tenants/{request['tenant']}/", timeout=30).json()["status"]
            assert status != "failed", status
            return status == "ready"

        wait_until(tenant_ready, timeout=240, watched=list(processes.values()), what="the tenant", interval=2.0)
        tenant = alice.get(f"{base}/tenants/{request['tenant']}/", timeout=30).json()

        issued = alice.post(
            f"{base}/tenants/{request['tenant']}/kubeconfig/", json={"lifetime_seconds": 900}, timeout=60
        )
        assert issued.status_code == 200, issued.text
        kubeconfig = tmp_path / "alice.kubeconfig"
        kubeconfig.write_text(issued.text)
        assert yaml.safe_load(issued.text)["users"][0]["user"]["token"]
        can = kubectl("auth", "can-i", "create", "deployments", "-n", tenant["namespace"], kubeconfig=kubeconfig)
        assert can.stdout.strip() == "yes", can.stderr
        cannot = kubectl("auth", "can-i", "list", "pods", "-n", "kube-system", kubeconfig=kubeconfig)
        assert cannot.stdout.strip() == "no", cannot.stderr

        # The worker told the team by mail, through the SMTP server EMAIL_URL names.
        wait_until(
            lambda: any(f"{name} is ready" in str(m["Subject"]) for m in smtp.messages),
            timeout=60,
            watched=list(processes.values()),
            what="the tenant-ready mail",
        )
        mail = next(m for m in smtp.messages if f"{name} is ready" in str(m["Subject"]))
        assert "berth@example.test" in str(mail["From"]) and "alice@example.test" in str(mail["To"])
        for process_name, process in processes.items():
            assert process.exited() is None, f"{process_name} exited:\n{process.log_tail()}"
