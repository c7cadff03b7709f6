"""docker-compose.yml, parsed by a real compose implementation (no container engine needed).

The required environment is derived from portal/settings.py itself: a new ``env.str("X")``
without a default, or a new ``secret("X")``, fails here until the compose file sets it.
"""

from __future__ import annotations

import json
import re

import pytest

from devcluster import keycloak
from tests.deploy.helpers import (
    PORTAL_SERVICES,
    PRODUCTION_SETTINGS,
    REALM_FILE,
    ROOT,
    SECRETS_DIR,
    clean_env,
    command_of,
    compose_config,
    compose_env_on_this_machine,
    required_plain_settings,
    required_secret_settings,
    run_python,
    service_depends_on,
    service_env,
    service_mounts,
    service_ports,
    service_secret_targets,
    url_host_port,
)

EXPECTED_SERVICES = {
    "web",
    "migrate",
    "worker",
    "worker-reconcile",
    "watcher",
    "beat",
    "postgres",
    "redis",
    "keycloak",
    "mailpit",
}
BACKCHANNEL = ("OIDC_OP_TOKEN_ENDPOINT", "OIDC_OP_USER_ENDPOINT", "OIDC_OP_JWKS_ENDPOINT")
FRONTCHANNEL = ("OIDC_OP_AUTHORIZATION_ENDPOINT", "OIDC_OP_LOGOUT_ENDPOINT")
KUBECONFIG_REF = "kubeconfig:/run/berth/kubeconfig"


@pytest.fixture(scope="module")
def config() -> dict:
    return compose_config()


@pytest.fixture(scope="module")
def services(config) -> dict:
    return config["services"]


@pytest.fixture(scope="module")
def realm() -> dict:
    return json.loads(REALM_FILE.read_text())


def test_the_settings_parser_finds_the_known_required_settings():
    """Guards the guard: the two secrets settings.py is known to require are found."""
    assert {"DJANGO_SECRET_KEY", "OIDC_RP_CLIENT_SECRET"} <= required_secret_settings()


def test_all_services_are_defined(services):
    assert EXPECTED_SERVICES <= set(services), f"missing: {sorted(EXPECTED_SERVICES - set(services))}"


@pytest.mark.parametrize("name", PORTAL_SERVICES + ("migrate",))
def test_every_setting_production_requires_is_set(services, name):
    env = service_env(services[name])
    secret_targets = service_secret_targets(services[name])
    missing = sorted((required_plain_settings() | set(PRODUCTION_SETTINGS)) - set(env))
    assert not missing, f"{name}: not set: {missing}"
    assert env["DJANGO_DEBUG"].lower() == "false"
    for secret in sorted(required_secret_settings()):
        assert secret not in env, f"{name}: {secret} is a plain value; give it as {secret}_FILE and a compose secret"
        path = env.get(f"{secret}_FILE")
        assert path, f"{name}: neither {secret} nor {secret}_FILE is set"
        assert path in secret_targets, f"{name}: {secret}_FILE={path} is not a secret mounted into the service"


def test_portal_processes_share_one_environment(services):
    """web, worker and beat (and migrate) come from the same x-portal-env anchor."""
    envs = {name: service_env(services[name]) for name in PORTAL_SERVICES + ("migrate",)}
    shared = set.intersection(*(set(env) for env in envs.values()))
    assert set(PRODUCTION_SETTINGS) <= shared
    for key in sorted(shared):
        values = {name: env[key] for name, env in envs.items()}
        assert len(set(values.values())) == 1, f"{key} differs between services: {values}"


def test_secrets_are_files_with_shipped_examples(config, services):
    declared = config.get("secrets") or {}
    for name in PORTAL_SERVICES + ("migrate", "postgres"):
        for secret in service_secret_targets(services[name]).values():
            assert secret in declared, f"{name} uses undeclared secret {secret}"
    for secret, spec in declared.items():
        assert spec.get("file"), f"secret {secret} must come from a file"
        assert spec["file"].endswith(f"deploy/secrets/{secret}"), spec["file"]
        assert (SECRETS_DIR / f"{secret}.example").is_file(), f"deploy/secrets/{secret}.example is missing"
    gitignore = (SECRETS_DIR / ".gitignore").read_text().split()
    assert "*" in gitignore and "!*.example" in gitignore, "real secrets must be ignored by git"


def test_database_url_points_at_the_postgres_service(services):
    postgres = service_env(services["postgres"])
    for name in PORTAL_SERVICES + ("migrate",):
        env = service_env(services[name])
        url = env["DATABASE_URL"]
        assert url.startswith(("postgres://", "postgresql://"))
        host, port = url_host_port(url)
        assert host == "postgres" and port in (None, 5432), url
        assert re.match(r"^postgres(ql)?://berth@", url), "the password must not be in the URL"
        assert url.rsplit("/", 1)[1] == postgres["POSTGRES_DB"]
        assert url.split("://", 1)[1].split("@", 1)[0] == postgres["POSTGRES_USER"]
        # The password: the same secret file on both sides.
        assert env["PGPASSWORD_FILE"] in service_secret_targets(services[name])
        pg_secret = service_secret_targets(services["postgres"])[postgres["POSTGRES_PASSWORD_FILE"]]
        assert service_secret_targets(services[name])[env["PGPASSWORD_FILE"]] == pg_secret


def test_broker_and_mail_point_at_their_services(services):
    mail_ports = {target for _, _, target in service_ports(services["mailpit"])}
    assert {1025, 8025} <= mail_ports
    for name in PORTAL_SERVICES:
        env = service_env(services[name])
        assert env["CELERY_BROKER_URL"].startswith("redis://")
        assert url_host_port(env["CELERY_BROKER_URL"]) in (("redis", None), ("redis", 6379))
        assert env["EMAIL_URL"] == "smtp://mailpit:1025"


def test_oidc_endpoints_point_at_keycloak(services, realm):
    """The portal's own calls go to the keycloak service; the browser's to Keycloak's published port.

    Keycloak's KC_HOSTNAME fixes the issuer to the browser-facing URL, so tokens fetched over the
    back channel still carry ``iss`` = OIDC_OP_ISSUER.
    """
    keycloak = services["keycloak"]
    kc_env = service_env(keycloak)
    published = {target: (ip, port) for ip, port, target in service_ports(keycloak)}
    assert 8080 in published, "Keycloak's http port 8080 must be published for the browser"
    public_ip, public_port = published[8080]
    frontend = kc_env["KC_HOSTNAME"].rstrip("/")
    assert url_host_port(frontend) == ("localhost", public_port)
    assert kc_env.get("KC_HOSTNAME_BACKCHANNEL_DYNAMIC") == "true"
    realm_base = f"/realms/{realm['realm']}"
    for name in PORTAL_SERVICES:
        env = service_env(services[name])
        assert env["OIDC_OP_ISSUER"] == frontend + realm_base
        for key in BACKCHANNEL:
            assert url_host_port(env[key]) == ("keycloak", 8080), f"{key}={env[key]}"
            assert env[key].startswith(f"http://keycloak:8080{realm_base}/protocol/openid-connect/"), env[key]
        for key in FRONTCHANNEL:
            assert env[key].startswith(f"{frontend}{realm_base}/protocol/openid-connect/"), f"{key}={env[key]}"
        assert env["OIDC_RP_CLIENT_ID"] in {c["clientId"] for c in realm["clients"]}
        assert env["OIDC_API_AUDIENCE"] == "berth-api" != env["OIDC_RP_CLIENT_ID"]
        assert set(env["OIDC_API_CLIENTS"].split(",")) <= {c["clientId"] for c in realm["clients"]}
        public_url = env["BERTH_PUBLIC_URL"]
        assert public_url.rstrip("/") in env["DJANGO_CSRF_TRUSTED_ORIGINS"].split(",")
        assert url_host_port(public_url)[0] in env["DJANGO_ALLOWED_HOSTS"].split(",")
        assert env["DJANGO_SECURE_SSL_REDIRECT"].lower() == "false", "plain http on localhost"


def test_keycloak_imports_the_berth_realm(services):
    keycloak = services["keycloak"]
    command = command_of(keycloak)
    assert command[0] == "start-dev" and "--import-realm" in command
    mounts = {target: (source, ro) for source, target, ro in service_mounts(keycloak)}
    target = "/opt/keycloak/data/import/berth-realm.json"
    assert target in mounts, "the realm export must be mounted into Keycloak's import directory"
    source, read_only = mounts[target]
    assert source.endswith("deploy/keycloak/berth-realm.json") and read_only


def test_keycloak_is_the_version_the_tests_run(services):
    """The image compose runs is the release tests/plugins/keycloak.py starts natively (devcluster/keycloak.py)."""
    assert services["keycloak"]["image"] == f"quay.io/keycloak/keycloak:{keycloak.VERSION}"
    assert keycloak.REALM_FILE == REALM_FILE


def test_depends_on_names_exist_and_wait_for_health(services):
    for name, service in services.items():
        for dependency in service_depends_on(service):
            assert dependency in services, f"{name} depends on unknown service {dependency}"
    for name in PORTAL_SERVICES:
        deps = service_depends_on(services[name])
        assert deps.get("postgres") == "service_healthy", name
        assert deps.get("redis") == "service_healthy", name
        assert deps.get("migrate") == "service_completed_successfully", name
    assert service_depends_on(services["migrate"]).get("postgres") == "service_healthy"


def test_healthchecks(services):
    for name in ("postgres", "redis", "web", "keycloak"):
        check = services[name].get("healthcheck") or {}
        assert check.get("test") and not check.get("disable"), f"{name} has no healthcheck"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), check["test"]
    assert "pg_isready" in services["postgres"]["healthcheck"]["test"]
    assert "ping" in services["redis"]["healthcheck"]["test"]
    assert any("/healthz" in part for part in services["web"]["healthcheck"]["test"])


def test_commands(services):
    web = command_of(services["web"])
    assert web[0] == "gunicorn" and "/app/deploy/gunicorn.conf.py" in web
    worker, beat, migrate = (command_of(services[n]) for n in ("worker", "beat", "migrate"))
    assert worker[:4] == ["celery", "--app", "portal", "worker"] or worker[:4] == ["celery", "-A", "portal", "worker"]
    assert beat[:4] == ["celery", "--app", "portal", "beat"] or beat[:4] == ["celery", "-A", "portal", "beat"]
    assert migrate[:3] == ["python", "manage.py", "migrate"]
    # beat keeps its schedule on a volume: the image's file system is read-only.
    schedule = beat[beat.index("--schedule") + 1]
    assert any(schedule.startswith(target + "/") for _, target, ro in service_mounts(services["beat"]) if not ro)


def test_provisioning_never_waits_behind_reconcile_passes(services):
    """The worker that provisions does not consume the reconcile queue; another worker does; every queue the
    portal declares has a consumer."""
    from django.conf import settings

    def queues(name: str) -> set[str]:
        command = command_of(services[name])
        return set(command[command.index("--queues") + 1].split(","))

    assert "provision" in queues("worker") and "reconcile" not in queues("worker")
    assert queues("worker-reconcile") == {"reconcile"}
    declared = {queue.name for queue in settings.CELERY_TASK_QUEUES}
    assert queues("worker") | queues("worker-reconcile") == declared


def test_only_the_worker_image_has_the_cluster_tools(services):
    for name in ("worker", "worker-reconcile"):
        assert services[name]["build"]["target"] == "worker"
    for name in ("web", "beat", "migrate"):
        assert services[name]["build"]["target"] == "web"


def test_no_privileged_or_public_host_ports(services):
    for name, service in services.items():
        for ip, published, target in service_ports(service):
            assert published is not None, f"{name}: container port {target} published on a random host port"
            assert published >= 1024, f"{name} binds privileged host port {published}"
            assert ip in ("127.0.0.1", "::1"), f"{name} publishes {published} on all interfaces"
    for name in ("postgres", "redis"):
        assert not service_ports(services[name]), f"{name} must not be published on the host"


def test_images_are_pinned(services):
    for name, service in services.items():
        image = service.get("image")
        assert image, f"{name} has no image"
        assert not image.endswith(":latest"), f"{name}: {image}"
        last = image.rsplit("/", 1)[-1]
        assert ":" in last or "@sha256:" in image, f"{name}: {image} has no tag"
        if "build" not in service:
            tag = last.split("@", 1)[0].split(":", 1)[1]
            assert re.search(r"\d+\.\d+", tag), f"{name}: {image} is not pinned to a version"


def test_cluster_credentials_are_mounted_read_only(services):
    for name in ("web", "worker", "worker-reconcile"):
        mounts = {target: (source, ro) for source, target, ro in service_mounts(services[name])}
        assert "/run/berth" in mounts, f"{name}: the kubeconfig directory is not mounted"
        source, read_only = mounts["/run/berth"]
        assert source.endswith("deploy/kube") and read_only
    assert (ROOT / "deploy" / "kube" / ".gitignore").is_file()
    assert KUBECONFIG_REF in (ROOT / "docs" / "deployment.md").read_text()


def test_portal_containers_are_locked_down(services):
    for name in PORTAL_SERVICES + ("migrate",):
        service = services[name]
        assert service.get("read_only") is True, name
        assert "ALL" in (service.get("cap_drop") or []), name
        assert any("no-new-privileges" in opt for opt in service.get("security_opt") or []), name


def test_cluster_network_overlay_parses():
    merged = compose_config(ROOT / "deploy" / "compose.cluster-network.yml", env={"BERTH_CLUSTER_NETWORK": "k3d-berth"})
    assert merged["networks"]["cluster"]["name"] == "k3d-berth"
    for name in ("web", "worker", "worker-reconcile"):
        assert set(merged["services"][name]["networks"]) == {"default", "cluster"}


SETTINGS_PROBE = r"""
import json
import django
django.setup()
from django.conf import settings as s
db = s.DATABASES["default"]
print(json.dumps({
    "DEBUG": s.DEBUG, "SECRET_KEY_LEN": len(s.SECRET_KEY), "ALLOWED_HOSTS": s.ALLOWED_HOSTS,
    "DB": [db["ENGINE"], db["HOST"], db["PORT"], db["NAME"], db["USER"], db["PASSWORD"]],
    "BROKER": s.CELERY_BROKER_URL, "ACKS_LATE": s.CELERY_TASK_ACKS_LATE,
    "EMAIL": [s.EMAIL_BACKEND, s.EMAIL_HOST, s.EMAIL_PORT],
    "OIDC_RP_CLIENT_SECRET": s.OIDC_RP_CLIENT_SECRET, "OIDC_OP_ISSUER": s.OIDC_OP_ISSUER,
    "SSL_REDIRECT": s.SECURE_SSL_REDIRECT, "STATIC": s.STORAGES["staticfiles"]["BACKEND"],
}))
"""


@pytest.mark.parametrize("name", PORTAL_SERVICES)
def test_settings_load_with_the_compose_environment(services, realm, name):
    """portal/settings.py itself, given exactly the service's environment (secrets from the examples)."""
    done = run_python(["-c", SETTINGS_PROBE], clean_env(compose_env_on_this_machine(services[name])))
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["DEBUG"] is False
    assert loaded["SECRET_KEY_LEN"] >= 50
    assert "localhost" in loaded["ALLOWED_HOSTS"], "the image's HEALTHCHECK sends Host: localhost"
    assert loaded["DB"] == ["django.db.backends.postgresql", "postgres", 5432, "berth", "berth", ""]
    assert loaded["BROKER"] == "redis://redis:6379/0"
    assert loaded["ACKS_LATE"] is True
    assert loaded["EMAIL"] == ["django.core.mail.backends.smtp.EmailBackend", "mailpit", 1025]
    portal_client = next(c for c in realm["clients"] if c["clientId"] == "berth-portal")
    assert loaded["OIDC_RP_CLIENT_SECRET"] == portal_client["secret"]
    assert loaded["SSL_REDIRECT"] is False
    assert loaded["STATIC"] == "whitenoise.storage.CompressedManifestStaticFilesStorage"
