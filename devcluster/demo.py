"""`make demo`: PostgreSQL, Redis, the dev control plane, the OIDC provider, the portal, workers, the watcher and beat.

The control plane has kube-scheduler and BERTH_DEMO_NODES real nodes (default 2: the shared pool and the large
tier's dedicated pool; 0 for none), so the team's pods run and the quota bars show their use.

Everything binds to 127.0.0.1; data (database, OIDC keys) persists under $BERTH_CACHE/demo.
BERTH_DEMO_IDP=keycloak signs in at Keycloak (devcluster/keycloak.py, the realm compose imports) instead of
the light dev provider. Ctrl-C stops it all.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from devcluster import keycloak, servers
from devcluster.images import (
    VCLUSTER_IMAGES,
    VCLUSTER_KUBERNETES_IMAGE,
    VCLUSTER_REGISTRY,
    VCLUSTER_SYNCER_IMAGE,
    WORKLOAD_IMAGE,
)
from devcluster.launcher import ControlPlane, OIDCIssuer, find_bin_dir, free_port, helm_binary
from devcluster.oidc import API_RESOURCE, DEMO_PORT, KUBECTL_CLIENT_ID, OidcProvider
from devcluster.pki import CertificateAuthority
from devcluster.process import Component, berth_watcher, celery_worker
from devcluster.prometheus import SOURCES, start_label_proxy

ROOT = Path(__file__).resolve().parent.parent
VCLUSTER_CHART = ROOT / "third_party" / "upstream" / "vcluster-chart-0.30.0"
CACHE = Path(os.environ.get("BERTH_CACHE", Path.home() / ".cache" / "berth")) / "demo"
WEB_PORT = int(os.environ.get("BERTH_DEMO_PORT", "8000"))
# "oidc" (default): the light dev provider (devcluster/oidc.py); "keycloak": Keycloak with the compose realm.
IDP = os.environ.get("BERTH_DEMO_IDP", "oidc")
NODES = int(os.environ.get("BERTH_DEMO_NODES", "2"))
# The demo runs as production does; BERTH_DEMO_DEBUG=1 is for developers: Django's debug pages and runserver.
DEBUG = os.environ.get("BERTH_DEMO_DEBUG", "").strip().lower() in ("1", "true", "yes")
LOGINS = [
    ("alice", "owner of team-payments"),
    ("amir", "member of team-payments"),
    ("bob", "owner of team-search"),
    ("vera", "viewer in team-search"),
    ("carol", "approver"),
    ("dave", "platform admin"),
    ("erin", "in no team"),
]


def settings_env(*, data_dir: Path, port: int, debug: bool) -> dict[str, str]:
    """The portal's settings (portal/settings.py) for the demo; the database, broker and provider come apart.

    Without ``debug`` the portal runs as production does: DEBUG off, a secret key of its own (made once, kept in
    ``data_dir``), hashed and compressed static files served by WhiteNoise, the designed error pages. Only what
    plain http on loopback needs differs: no redirect to https, cookies not https-only, no HSTS.
    """
    return {
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DJANGO_DEBUG": "true" if debug else "false",
        "DJANGO_SECRET_KEY_FILE": str(_secret_key_file(data_dir)),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DJANGO_STATIC_ROOT": str(data_dir / "static"),
        "DJANGO_SECURE_SSL_REDIRECT": "false",
        "DJANGO_SECURE_COOKIES": "false",
        "DJANGO_SECURE_HSTS_SECONDS": "0",
        "EMAIL_URL": "consolemail://",
        "BERTH_PUBLIC_URL": f"http://127.0.0.1:{port}",
        # The watcher runs (below): drift is repaired as it happens, the periodic pass is the slow safety net.
        "BERTH_WATCHER": "true",
    }


def _secret_key_file(data_dir: Path) -> Path:
    """The demo's Django secret key: made once, kept (mode 0600), so sessions outlive a restart of the demo."""
    path = data_dir / "secret-key"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(secrets.token_urlsafe(50))
    return path


def collect_static(env: dict) -> None:
    """Static files as the image builds them (hashed, compressed), for WhiteNoise; runserver with DEBUG needs none."""
    if env["DJANGO_DEBUG"] != "true":
        _run(env, "collectstatic", "--no-input", "-v0")


def web_command(*, port: int, debug: bool) -> list[str]:
    """gunicorn with the image's configuration (deploy/gunicorn.conf.py), or runserver for developers."""
    if debug:
        return [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
    config = ROOT / "deploy" / "gunicorn.conf.py"
    return [sys.executable, "-m", "gunicorn", "--config", str(config), "--bind", f"127.0.0.1:{port}", "--workers", "3"]


def _run(env: dict, *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True)


def _vcluster_settings(charts: Path) -> dict[str, str]:
    """The dev cluster's vcluster settings: the packaged chart, the project's images, and the dev load balancer's
    address as each vcluster's endpoint (no public host template)."""
    return {
        "installer": "helm",
        "chart_repo": f"file://{charts}",
        "expose": "LoadBalancer",
        "image_registry": VCLUSTER_REGISTRY,
        "syncer_image": VCLUSTER_SYNCER_IMAGE,
        "kubernetes_image": VCLUSTER_KUBERNETES_IMAGE,
    }


def _package_vcluster_chart(helm: Path) -> Path:
    """The vendored vcluster chart packaged as upstream releases it, in a directory a vcluster cluster's
    ``chart_repo`` can name (``file://...``): the worker's helm installs it without reaching a repository."""
    charts = CACHE / "charts"
    subprocess.run(
        [
            str(helm),
            "package",
            str(VCLUSTER_CHART),
            "--version",
            "0.30.0",
            "--app-version",
            "0.30.0",
            "-d",
            str(charts),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return charts


def _spawn(stack: ExitStack, env: dict, name: str, argv: list[str]) -> Component:
    component = Component(name, argv, CACHE / f"{name}.log", cwd=ROOT, env=env)
    component.start()
    stack.callback(component.stop, grace_seconds=15)
    return component


PROMETHEUS_NAME = "dev"


def _start_monitoring(stack: ExitStack, plane: ControlPlane) -> dict[str, str]:
    """prom-label-proxy beside the portal, in front of the dev cluster's Prometheus (as the chart's sidecar), and
    the portal's settings that go with it: the proxy for tenants' queries, Prometheus itself for the worker's
    measured usage; nothing without nodes (no Prometheus then)."""
    if plane.prometheus is None:
        return {}
    from tenants.prometheus import HEADER, LABEL

    port = free_port()
    proxy = start_label_proxy(
        find_bin_dir("prom-label-proxy"),
        upstream=plane.prometheus.url,
        port=port,
        label=LABEL,
        header=HEADER,
        log_path=CACHE / "prom-label-proxy.log",
    )
    stack.callback(proxy.stop)
    return {
        "BERTH_PROMETHEUS": json.dumps(
            {PROMETHEUS_NAME: {"label_proxy": f"http://127.0.0.1:{port}", "url": plane.prometheus.url}}
        ),
        # The dev Prometheus's kubelet jobs, whose series measured usage reads (docs/monitoring.md).
        "BERTH_KUBELET_JOB": SOURCES.kubelet_job,
        # What Prometheus shows to read the portal's /metrics: made per run, never logged.
        "BERTH_METRICS_TOKEN": secrets.token_urlsafe(32),
        # What Alertmanager shows to post tenant alerts to the portal (/hooks/alertmanager/).
        "BERTH_ALERTMANAGER_TOKEN": secrets.token_urlsafe(32),
    }


def _metrics_dir(name: str) -> dict[str, str]:
    """PROMETHEUS_MULTIPROC_DIR for one process group (the portal's gunicorn workers, one Celery worker's
    children), as the chart gives each container its own."""
    directory = CACHE / "metrics" / name
    directory.mkdir(parents=True, exist_ok=True)
    return {"PROMETHEUS_MULTIPROC_DIR": str(directory)}


def main() -> int:
    CACHE.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    started = time.monotonic()
    with ExitStack() as stack:
        # As root, PostgreSQL runs as 'postgres', which cannot enter root's home directory.
        pg_root = Path("/var/lib/berth/demo-postgres") if os.geteuid() == 0 else CACHE / "postgres"
        db = stack.enter_context(servers.postgres_server(root=pg_root))
        redis = stack.enter_context(servers.redis_server())
        ca = CertificateAuthority("berth-demo-ca")
        cert, key = ca.issue_serving_cert(["127.0.0.1", "localhost"])
        provider: OidcProvider | keycloak.Keycloak
        if IDP == "keycloak":
            provider = stack.enter_context(
                keycloak.Keycloak(
                    cert_pem=cert, key_pem=key, ca_cert_pem=ca.cert_pem, port=keycloak.DEMO_PORT, data_dir=CACHE / "kc"
                )
            )
            # The realm registers the portal at 127.0.0.1:8000; BERTH_DEMO_PORT may move it.
            provider.add_redirect_uris(
                keycloak.PORTAL_CLIENT_ID,
                [f"http://127.0.0.1:{WEB_PORT}/oidc/callback/"],
                [f"http://127.0.0.1:{WEB_PORT}/login/"],
            )
        elif IDP == "oidc":
            provider = stack.enter_context(
                OidcProvider(
                    cert_pem=cert, key_pem=key, ca_cert_pem=ca.cert_pem, port=DEMO_PORT, data_dir=CACHE / "oidc"
                )
            )
        else:
            print(f"BERTH_DEMO_IDP={IDP!r}: use 'oidc' (the default) or 'keycloak'", file=sys.stderr)
            return 2
        plane = stack.enter_context(
            ControlPlane(
                ca=ca,
                oidc_issuers=[OIDCIssuer(url=provider.issuer, audience=KUBECTL_CLIENT_ID)],
                nodes=NODES,
                # Real vclusters for the teams that ask for one: the nodes hold the images the project builds.
                extra_images=VCLUSTER_IMAGES if NODES else (),
                # Prometheus scraping every kubelet and Berth itself: the teams' graphs and data sources.
                prometheus=bool(NODES),
            )
        )
        helm = helm_binary()
        charts = _package_vcluster_chart(helm)
        metrics_env = _start_monitoring(stack, plane)
        env = {
            **os.environ,
            **provider.portal_env(),
            **settings_env(data_dir=CACHE, port=WEB_PORT, debug=DEBUG),
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "CELERY_BROKER_URL": redis.url,
            "BERTH_SWEEP_SECONDS": "30",
            # Reconciling also reads quota usage back: the bars follow the team's pods within half a minute.
            "BERTH_RECONCILE_SECONDS": "30",
            # The real helm (devcluster/build.sh helm) installs vcluster tenants, not whatever helm is on PATH.
            "BERTH_HELM_BINARY": str(helm),
            **metrics_env,
        }
        _run(env, "migrate", "--no-input", "-v0")
        _run(
            env,
            "seed_demo",
            "--api-url",
            plane.api_url,
            "--kubeconfig",
            str(plane.kubeconfig_path),
            "--ca-file",
            str(plane.ca_file),
            "--oidc-issuer",
            provider.issuer,
            *(["--vcluster", json.dumps(_vcluster_settings(charts))] if NODES else []),
            *(["--prometheus", PROMETHEUS_NAME] if plane.prometheus else []),
        )
        # As deployed: provisioning has workers of its own, so an approval never waits behind a reconcile pass.
        # On one machine the reconcile worker also yields the CPU to provisioning (nice).
        workers = (("provision", ["provision", "celery", "events"], 4, 0), ("reconcile", ["reconcile"], 2, 10))
        worker_targets = []
        for name, queues, concurrency, nice in workers:
            log = CACHE / f"worker-{name}.log"
            worker_env = {**env, **_metrics_dir(f"worker-{name}")}
            if plane.prometheus:  # each worker's own exporter, which Prometheus scrapes
                worker_env["BERTH_WORKER_METRICS_PORT"] = str(port := free_port())
                worker_targets.append(f"127.0.0.1:{port}")
            worker = celery_worker(
                log, cwd=ROOT, env=worker_env, queues=queues, node=f"{name}@%h", concurrency=concurrency, nice=nice
            )
            worker.start()
            stack.callback(worker.stop, grace_seconds=15)
        watcher_env = dict(env)
        if plane.prometheus:
            watcher_env["BERTH_WATCHER_METRICS_PORT"] = str(watcher_port := free_port())
            worker_targets.append(f"127.0.0.1:{watcher_port}")
        watcher = berth_watcher(CACHE / "watcher.log", cwd=ROOT, env=watcher_env)
        watcher.start()
        stack.callback(watcher.stop, grace_seconds=10)
        _spawn(
            stack,
            env,
            "beat",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "portal",
                "beat",
                "-l",
                "INFO",
                "--schedule",
                str(CACHE / "celerybeat-schedule"),
            ],
        )
        collect_static(env)
        web = _spawn(stack, {**env, **_metrics_dir("web")}, "web", web_command(port=WEB_PORT, debug=DEBUG))
        servers.wait_port(WEB_PORT, web, timeout=60)
        if plane.prometheus:
            plane.prometheus.set_targets("berth-worker", worker_targets)
            plane.prometheus.set_targets("berth-web", [f"127.0.0.1:{WEB_PORT}"], token=env["BERTH_METRICS_TOKEN"])
        if plane.alertmanager:
            plane.alertmanager.route_to(
                f"http://127.0.0.1:{WEB_PORT}/hooks/alertmanager/", token=env["BERTH_ALERTMANAGER_TOKEN"]
            )
        monitoring = "not without nodes"
        if plane.prometheus:
            proxy = json.loads(env["BERTH_PROMETHEUS"])[PROMETHEUS_NAME]["label_proxy"]
            monitoring = (
                f"{plane.prometheus.url} (every kubelet, the portal and the workers; unscoped, for the platform "
                f"team; the worker reads measured usage from it).\n                Teams query their own through "
                f"prom-label-proxy ({proxy}) as http://127.0.0.1:{WEB_PORT}/api/v1/tenants/<id>/prometheus"
            )
        if plane.alertmanager:
            monitoring += (
                f"\n                Alertmanager {plane.alertmanager.url} sends tenant alerts (quota nearly full, "
                f"crash loops, OOM kills) to http://127.0.0.1:{WEB_PORT}/hooks/alertmanager/"
            )
        mode = (
            "Debug on (BERTH_DEMO_DEBUG): Django's debug pages, runserver."
            if DEBUG
            else "As in production: debug off, gunicorn, static files from WhiteNoise (BERTH_DEMO_DEBUG=1: debug on)."
        )
        idp_name = "Keycloak" if IDP == "keycloak" else "the dev OpenID Connect provider"
        node_names = ", ".join(node.name for node in plane.nodes) or "none (BERTH_DEMO_NODES=0)"
        vclusters = (
            f'offered on "dev": chart file://{charts}, installed by {helm}; each one\'s endpoint is its load '
            f"balancer address (from {plane.network.load_balancer_pool})"
            if plane.network
            else "not offered without nodes"
        )
        print(
            f"""
Berth is running ({time.monotonic() - started:.0f}s to start). Open http://127.0.0.1:{WEB_PORT}/
{mode}

Sign in through {idp_name} ({provider.issuer}); password = username + "-pass":
"""
            + "\n".join(f"  {user:<6} {user}-pass   {role}" for user, role in LOGINS)
            + f"""

API docs:       http://127.0.0.1:{WEB_PORT}/api/docs/
CLI:            .venv/bin/berth --url http://127.0.0.1:{WEB_PORT} login --oidc --issuer {provider.issuer} \\
                  --oidc-ca-file {provider.ca_file}{"" if IDP == "keycloak" else f" --resource {API_RESOURCE}"}
Admin:          http://127.0.0.1:{WEB_PORT}/admin/ (sign in as dave first)
Dev cluster:    {plane.api_url}  admin kubeconfig: {plane.kubeconfig_path}
Nodes:          {node_names}; pods run the image {WORKLOAD_IMAGE} (imagePullPolicy: Never)
vclusters:      {vclusters}
Prometheus:     {monitoring}
Logs:           {CACHE}/{{web,worker-provision,worker-reconcile,watcher,beat}}.log  (mail: web and worker logs)
Ctrl-C stops everything.
""",
            flush=True,
        )
        try:
            while web.exited() is None:
                time.sleep(1)
            print(f"The portal exited; see {CACHE}/web.log", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("\nStopping…")
            return 0


if __name__ == "__main__":
    sys.exit(main())
