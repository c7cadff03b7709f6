"""deploy/helm/berth, linted and rendered by the real helm for every documented values combination (ci/*.yaml).

What the chart must guarantee is asserted on what helm renders: non-root read-only pods, one beat, a worker per
queue entry, migrations as a hook, only web and worker holding a cluster token, every setting production
requires, secrets as files or Secret references, and RBAC that matches the worker's own code. The server-side dry
run of the same objects is in test_chart_dry_run.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.deploy.chart import (
    CHART,
    NAMESPACE,
    RELEASE,
    VALUES_FILES,
    by_kind,
    containers,
    env_of,
    helm,
    load_values,
    mounted_paths,
    named,
    pod_specs,
    portal_containers,
    render,
    template_args,
)
from tests.deploy.helpers import (
    PRODUCTION_SETTINGS,
    clean_env,
    required_plain_settings,
    required_secret_settings,
    run_python,
)
from worker import guards, kube, manifests, reconcile

VALUES = pytest.mark.parametrize("values", VALUES_FILES, ids=[p.stem for p in VALUES_FILES])
PORTAL_VALUES = [p for p in VALUES_FILES if not load_values(p).get("rbacOnly")]
PORTAL = pytest.mark.parametrize("values", PORTAL_VALUES, ids=[p.stem for p in PORTAL_VALUES])
FULLNAME = RELEASE  # the release is named like the chart


def test_every_documented_combination_is_covered():
    """Guards the guard: production, trial, RBAC-only and every-kind values all exist."""
    assert {p.stem for p in VALUES_FILES} >= {
        "production-values",
        "trial-values",
        "rbac-only-values",
        "virtual-clusters-values",
    }


@VALUES
def test_lint_passes_strictly(helm_bin, values):
    done = helm(helm_bin, "lint", str(CHART), "--strict", "--values", str(values))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


def test_default_values_name_every_missing_setting(helm_bin):
    """Without a database, broker and OIDC provider the chart refuses to render, saying what is missing."""
    done = helm(helm_bin, *template_args(None))
    assert done.returncode != 0
    assert "database.url is required" in done.stderr


@pytest.mark.parametrize(
    "bad, complaint",
    [
        ("web.replicas=0", "/web/replicas"),
        ("workers[0].queues=null", "/workers/0/queues"),
        ("workers[0].name=Provision_Queue", "/workers/0/name"),
        ("rbac.virtualClusterKinds={openshift}", "/rbac/virtualClusterKinds/0"),
        ("config.logLevel=LOUD", "/config/logLevel"),
        ("image.digest=latest", "/image/digest"),
        ("json:monitoring.alerts.failureRatio=2", "/monitoring/alerts/failureRatio"),
        ("databse.url=postgres://x@y/z", "additional properties 'databse' not allowed"),
        ("database.url=postgres://berth:hunter2@db/berth", "/database/url"),
    ],
)
def test_schema_refuses_bad_values(helm_bin, bad, complaint):
    done = helm(helm_bin, *template_args(CHART / "ci" / "trial-values.yaml", bad))
    assert done.returncode != 0, f"{bad} was accepted"
    assert complaint in done.stderr, done.stderr


@VALUES
def test_every_pod_runs_non_root_read_only_without_capabilities(helm_bin, values):
    objs = render(helm_bin, values)
    for where, spec in pod_specs(objs):
        security = spec["securityContext"]
        assert security["runAsNonRoot"] is True and security["runAsUser"] > 0, where
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}, where
    for where, _, container in containers(objs):
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True, where
        assert security["allowPrivilegeEscalation"] is False, where
        assert security["capabilities"] == {"drop": ["ALL"]}, where
        assert container["resources"]["requests"], f"{where} requests no resources"


@PORTAL
def test_exactly_one_beat_that_is_never_rolled(helm_bin, values):
    objs = render(helm_bin, values)
    beats = [c for where, c in portal_containers(objs).items() if "beat" in c["args"]]
    assert len(beats) == 1
    beat = named(objs, "Deployment", f"{FULLNAME}-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}


@PORTAL
def test_one_worker_deployment_per_queue_entry(helm_bin, values):
    objs = render(helm_bin, values)
    configured = load_values(values).get("workers") or load_values(CHART / "values.yaml")["workers"]
    for worker in configured:
        deployment = named(objs, "Deployment", f"{FULLNAME}-worker-{worker['name']}")
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[:3] == ["celery", "--app=portal", "worker"]
        assert f"--queues={','.join(worker['queues'])}" in args
        assert f"--concurrency={worker['concurrency']}" in args
        assert deployment["spec"]["replicas"] == worker["replicas"]
    workers = [d for d in by_kind(objs, "Deployment") if d["metadata"]["labels"].get("berth.dev/worker") == "true"]
    assert len(workers) == len(configured)


def test_the_default_workers_consume_the_teams_queues(helm_bin):
    objs = render(helm_bin, CHART / "ci" / "production-values.yaml")
    queues = {
        arg.split("=", 1)[1] for _, _, c in containers(objs) for arg in c.get("args", []) if arg.startswith("--queues=")
    }
    assert {q for entry in queues for q in entry.split(",")} >= {"provision", "reconcile", "events"}


def test_every_declared_queue_has_a_worker_and_provisioning_shares_none_with_reconcile(helm_bin):
    from django.conf import settings

    consumed = [set(worker["queues"]) for worker in load_values(CHART / "values.yaml")["workers"]]
    assert set().union(*consumed) >= {queue.name for queue in settings.CELERY_TASK_QUEUES}
    assert not any({"provision", "reconcile"} <= queues for queues in consumed)


@pytest.mark.parametrize(
    "values, hook",
    [
        (CHART / "ci" / "production-values.yaml", "pre-install,pre-upgrade"),
        # The bundled PostgreSQL only exists once the release is installed.
        (CHART / "ci" / "trial-values.yaml", "post-install,pre-upgrade"),
    ],
    ids=["external-database", "bundled-database"],
)
def test_migrations_run_as_a_hook_before_every_upgrade(helm_bin, values, hook):
    objs = render(helm_bin, values)
    job = named(objs, "Job", f"{FULLNAME}-migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == hook
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["python", "manage.py", "migrate", "--noinput"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


@PORTAL
def test_only_web_worker_and_watcher_pods_carry_a_cluster_token(helm_bin, values):
    objs = render(helm_bin, values)
    for sa in by_kind(objs, "ServiceAccount"):
        assert sa["automountServiceAccountToken"] is False, sa["metadata"]["name"]
    with_token = {
        where.split("/")[1]: spec["serviceAccountName"]
        for where, spec in pod_specs(objs)
        if spec.get("automountServiceAccountToken")
    }
    assert set(with_token.values()) == {f"{FULLNAME}-web", f"{FULLNAME}-worker", f"{FULLNAME}-watcher"}
    assert with_token[f"{FULLNAME}-web"] == f"{FULLNAME}-web"
    assert with_token[f"{FULLNAME}-watcher"] == f"{FULLNAME}-watcher"
    for where, spec in pod_specs(objs):
        if where.split("/")[1] not in with_token:
            assert spec["automountServiceAccountToken"] is False, where


@PORTAL
def test_every_setting_production_requires_is_set(helm_bin, values):
    """The required settings come from parsing portal/settings.py: a new one fails here until the chart sets it."""
    objs = render(helm_bin, values)
    for where, _, container in containers(objs):
        env = env_of(container)
        if "DJANGO_DEBUG" not in env:
            continue
        missing = sorted((required_plain_settings() | set(PRODUCTION_SETTINGS)) - set(env) - {"EMAIL_URL"})
        assert not missing, f"{where}: not set: {missing}"
        assert env["DJANGO_DEBUG"]["value"] == "false"


@PORTAL
def test_secrets_are_mounted_files_or_secret_references_never_values(helm_bin, values):
    objs = render(helm_bin, values)
    specs = dict(pod_specs(objs))
    for where, container in portal_containers(objs).items():
        env = env_of(container)
        files = mounted_paths(specs[where.rsplit("/", 1)[0]], container)
        for secret in sorted(required_secret_settings() | {"PGPASSWORD"}):
            assert secret not in env, f"{where}: {secret} is an environment variable; the chart mounts it as a file"
            path = env.get(f"{secret}_FILE", {}).get("value")
            if secret == "PGPASSWORD" and path is None:
                continue  # a database without a password (e.g. client certificates)
            assert path in files, f"{where}: {secret}_FILE={path} is not a file mounted from a Secret"
        for name in ("CELERY_BROKER_URL", "EMAIL_URL"):
            value = env.get(name, {}).get("value", "")
            assert "@" not in value, f"{where}: {name} carries credentials as a plain value"


@PORTAL
def test_portal_processes_share_one_environment(helm_bin, values):
    objs = render(helm_bin, values)
    shared = ("DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SECRET_KEY_FILE", "BERTH_NAMESPACE_GRANTS", "OIDC_OP_ISSUER")
    seen = {
        name: {json.dumps(env_of(c)[name], sort_keys=True) for c in portal_containers(objs).values()} for name in shared
    }
    for name, definitions in seen.items():
        assert len(definitions) == 1, f"{name} differs between the portal's processes: {definitions}"


SETTINGS_PROBE = r"""
import json
import django
django.setup()
from django.conf import settings as s
from worker.backends.namespace import namespace_grants
db = s.DATABASES["default"]
print(json.dumps({
    "DEBUG": s.DEBUG, "SECRET_KEY_LEN": len(s.SECRET_KEY), "ALLOWED_HOSTS": s.ALLOWED_HOSTS,
    "DB": [db["HOST"], db["NAME"], db["USER"], db["PASSWORD"]], "BROKER": s.CELERY_BROKER_URL,
    "OIDC_RP_CLIENT_SECRET": s.OIDC_RP_CLIENT_SECRET, "OIDC_OP_ISSUER": s.OIDC_OP_ISSUER,
    "RESERVED": s.BERTH_RESERVED_NAMES, "GRANTS": [[g.cluster_role, g.namespace, g.service_account]
    for g in namespace_grants()],
}))
"""


# What a Secret referenced by a variable might hold, by variable.
SECRET_STAND_INS = {
    "CELERY_BROKER_URL": "redis://:stand-in@redis.example.invalid:6379/0",
    "EMAIL_URL": "smtp+tls://berth:stand-in@mail.example.invalid:587",
    "CACHE_URL": "locmemcache://",
}


def _environment_on_this_machine(container: dict, files: dict[str, tuple[str, str]], tmp_path: Path) -> dict:
    """The container's environment with mounted Secret files and Secret references replaced by local stand-ins."""
    env: dict[str, str] = {}
    for name, definition in env_of(container).items():
        if "valueFrom" in definition:
            env[name] = SECRET_STAND_INS[name]
            continue
        value = str(definition["value"])
        if value in files:
            stand_in = tmp_path / value.strip("/").replace("/", "_")
            stand_in.write_text(f"stand-in-for-{files[value][0]}-{files[value][1]}-" + "x" * 50)
            value = str(stand_in)
        env[name] = value
    return env


@PORTAL
def test_settings_load_with_each_process_environment(helm_bin, values, tmp_path):
    """portal/settings.py itself, given exactly what the chart gives each process (Secrets by stand-ins)."""
    objs = render(helm_bin, values)
    specs = dict(pod_specs(objs))
    seen: set[str] = set()
    for where, container in portal_containers(objs).items():
        files = mounted_paths(specs[where.rsplit("/", 1)[0]], container)
        env = _environment_on_this_machine(container, files, tmp_path)
        if json.dumps(env, sort_keys=True) in seen:
            continue  # the same environment as a process already loaded (e.g. a second worker Deployment)
        seen.add(json.dumps(env, sort_keys=True))
        done = run_python(["-c", SETTINGS_PROBE], clean_env(env))
        assert done.returncode == 0, f"{where}:\n{done.stderr}"
        loaded = json.loads(done.stdout.strip().splitlines()[-1])
        assert loaded["DEBUG"] is False and loaded["SECRET_KEY_LEN"] >= 50
        assert loaded["OIDC_RP_CLIENT_SECRET"].startswith("stand-in-for-")
        assert NAMESPACE in loaded["RESERVED"], "the release's own namespace must never become a tenant"
        assert loaded["GRANTS"] == [
            [f"{FULLNAME}-worker-namespace", NAMESPACE, f"{FULLNAME}-worker"],
            [f"{FULLNAME}-web-namespace", NAMESPACE, f"{FULLNAME}-web"],
        ]


def test_production_values_pass_djangos_deployment_checks(helm_bin, tmp_path):
    objs = render(helm_bin, CHART / "ci" / "production-values.yaml")
    spec = named(objs, "Deployment", f"{FULLNAME}-web")["spec"]["template"]["spec"]
    web = spec["containers"][0]
    env = _environment_on_this_machine(web, mounted_paths(spec, web), tmp_path)
    done = run_python(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], clean_env(env))
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "WARNING" not in output.upper(), output


def test_rbac_only_renders_identities_and_rules_and_nothing_that_runs(helm_bin):
    objs = render(helm_bin, CHART / "ci" / "rbac-only-values.yaml")
    kinds = {o["kind"] for o in objs}
    assert kinds == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    assert {o["metadata"]["name"] for o in by_kind(objs, "ServiceAccount")} == {
        f"{FULLNAME}-web",
        f"{FULLNAME}-worker",
        f"{FULLNAME}-watcher",
    }


def _rules(objs: list[dict], name: str) -> list[dict]:
    return named(objs, "ClusterRole", name)["rules"]


def test_the_chart_lets_the_worker_write_exactly_its_guards(helm_bin):
    objs = render(helm_bin, CHART / "ci" / "production-values.yaml")
    admission = [r for r in _rules(objs, f"{FULLNAME}-worker") if "admissionregistration.k8s.io" in r["apiGroups"]]
    assert len(admission) == 1
    assert sorted(admission[0]["resourceNames"]) == sorted(guards.GUARD_NAMES)
    assert "delete" not in admission[0]["verbs"]


def test_the_worker_binds_exactly_the_cluster_roles_it_grants_per_namespace(helm_bin):
    objs = render(helm_bin, CHART / "ci" / "production-values.yaml")
    bind = [r for r in _rules(objs, f"{FULLNAME}-worker") if "bind" in r["verbs"]]
    assert bind == [
        {
            "apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["clusterroles"],
            "verbs": ["bind"],
            "resourceNames": [f"{FULLNAME}-worker-namespace", f"{FULLNAME}-web-namespace"],
        }
    ]
    grants_env = env_of(
        named(objs, "Deployment", f"{FULLNAME}-worker-provision")["spec"]["template"]["spec"]["containers"][0]
    )
    grants = manifests.parse_grants(grants_env["BERTH_NAMESPACE_GRANTS"]["value"].split(","))
    assert [g.cluster_role for g in grants] == bind[0]["resourceNames"]
    for grant in grants:
        named(objs, "ClusterRole", grant.cluster_role)  # exists
        named(objs, "ServiceAccount", grant.service_account)


@pytest.mark.parametrize("values", [CHART / "ci" / "production-values.yaml"], ids=["production"])
def test_no_cluster_wide_rule_reaches_secrets_or_escalates(helm_bin, values):
    """Cluster-wide, nothing reads Secrets, writes workloads, impersonates or escalates (unless opted in)."""
    objs = render(helm_bin, values)
    for binding in by_kind(objs, "ClusterRoleBinding"):
        for rule in _rules(objs, binding["roleRef"]["name"]):
            assert "*" not in rule["verbs"] and "*" not in rule.get("resources", []), rule
            assert not {"secrets", "pods", "serviceaccounts/token"} & set(rule["resources"]), rule
            assert not {"escalate", "impersonate"} & set(rule["verbs"]), rule


def test_the_watcher_reads_exactly_the_managed_kinds_and_writes_nothing(helm_bin):
    """get/list/watch cluster-wide on every kind the reconcile pass manages (worker.reconcile.MANAGED_KINDS), never
    Secrets; the storage and priority class names a tenant's quota is rendered from; nothing else, no write verb."""
    objs = render(helm_bin, CHART / "ci" / "production-values.yaml")
    rules = _rules(objs, f"{FULLNAME}-watcher")
    watched = {
        (group, resource)
        for rule in rules
        if rule["verbs"] == ["get", "list", "watch"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    expected = set()
    for kind in reconcile.MANAGED_KINDS:
        api = kube.KINDS[kind]
        expected.add((api.api_version.rpartition("/")[0], api.plural))
    assert watched == expected
    facts = [r for r in rules if r["verbs"] != ["get", "list", "watch"]]
    assert facts == [
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["list"]},
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["list"]},
    ]
    assert not any("resourceNames" in r or "nonResourceURLs" in r for r in rules)
    binding = named(objs, "ClusterRoleBinding", f"{FULLNAME}-watcher")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{FULLNAME}-watcher", "namespace": NAMESPACE}]


@PORTAL
def test_two_watchers_run_the_watch_command_and_the_pass_is_a_safety_net(helm_bin, values):
    objs = render(helm_bin, values)
    deployment = named(objs, "Deployment", f"{FULLNAME}-watcher")
    assert deployment["spec"]["replicas"] == 2
    spec = deployment["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == f"{FULLNAME}-watcher"
    assert spec["containers"][0]["args"] == ["python", "manage.py", "berth_watch"]
    for where, container in portal_containers(objs).items():
        env = env_of(container)
        assert env["BERTH_WATCHER"]["value"] == "true", where
        assert float(env["BERTH_RECONCILE_SECONDS"]["value"]) >= 3600, where
    off = render(helm_bin, values, "watcher.enabled=false")
    assert not [d for d in by_kind(off, "Deployment") if d["metadata"]["name"].endswith("-watcher")]


@PORTAL
def test_a_hung_watcher_is_restarted_by_its_heartbeat_files_liveness_probe(helm_bin, values):
    """Its lock is a database session's: only a restart frees it from a leader that is alive but hung."""
    objs = render(helm_bin, values)
    container = named(objs, "Deployment", f"{FULLNAME}-watcher")["spec"]["template"]["spec"]["containers"][0]
    beat = env_of(container)["BERTH_WATCHER_HEARTBEAT_FILE"]["value"]
    assert beat.startswith("/tmp/")  # the writable emptyDir; the root filesystem is read-only
    assert any(mount["mountPath"] == "/tmp" for mount in container["volumeMounts"])
    probe = container["livenessProbe"]
    command = probe["exec"]["command"]
    assert command[:2] == ["python", "-c"] and beat in command[2]
    # Stale after 2 minutes (the file is touched every 10 s), restarted after 3 failures 30 s apart.
    assert "> 120" in command[2] and (probe["periodSeconds"], probe["failureThreshold"]) == (30, 3)


def test_oidc_isolation_impersonation_is_an_explicit_choice(helm_bin):
    plain = _rules(render(helm_bin, CHART / "ci" / "production-values.yaml"), f"{FULLNAME}-worker")
    opted = _rules(render(helm_bin, CHART / "ci" / "virtual-clusters-values.yaml"), f"{FULLNAME}-worker")
    assert not any("impersonate" in r["verbs"] for r in plain)
    assert any("impersonate" in r["verbs"] for r in opted)


def test_network_policy_lets_only_the_ingress_controller_reach_the_web(helm_bin):
    objs = render(helm_bin, CHART / "ci" / "trial-values.yaml")
    policies = {p["metadata"]["name"]: p["spec"] for p in by_kind(objs, "NetworkPolicy")}
    deny = policies[f"{FULLNAME}-default-deny"]
    assert deny["policyTypes"] == ["Ingress"] and "ingress" not in deny
    web = policies[f"{FULLNAME}-web"]
    assert web["ingress"][0]["ports"] == [{"port": 8000, "protocol": "TCP"}]
    assert web["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
    ]
    for db, port in (("postgresql", 5432), ("redis", 6379)):
        assert policies[f"{FULLNAME}-{db}"]["ingress"][0]["ports"] == [{"port": port, "protocol": "TCP"}]
    assert not by_kind(render(helm_bin, CHART / "ci" / "virtual-clusters-values.yaml"), "NetworkPolicy")


def test_disruption_budgets_cover_what_runs_more_than_once(helm_bin):
    objs = render(helm_bin, CHART / "ci" / "production-values.yaml")
    budgets = {p["metadata"]["name"] for p in by_kind(objs, "PodDisruptionBudget")}
    # beat has one replica: no budget
    assert budgets == {f"{FULLNAME}-web", f"{FULLNAME}-worker-provision", f"{FULLNAME}-watcher"}
    assert not by_kind(render(helm_bin, CHART / "ci" / "virtual-clusters-values.yaml"), "PodDisruptionBudget")


def test_ingress_serves_the_public_host_with_tls(helm_bin):
    ingress = by_kind(render(helm_bin, CHART / "ci" / "production-values.yaml"), "Ingress")[0]
    assert ingress["spec"]["rules"][0]["host"] == "berth.example.com"
    assert ingress["spec"]["tls"] == [{"hosts": ["berth.example.com"], "secretName": "berth-tls"}]
    assert ingress["spec"]["ingressClassName"] == "nginx"


def test_generated_secrets_exist_before_the_migrations_and_only_when_needed(helm_bin):
    trial = render(helm_bin, CHART / "ci" / "trial-values.yaml")
    secret = named(trial, "Secret", f"{FULLNAME}-generated")
    assert set(secret["data"]) == {"secret-key", "secrets-key", "postgresql-password", "redis-password", "redis-url"}
    assert int(secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < 0
    assert "pre-install" in secret["metadata"]["annotations"]["helm.sh/hook"]
    assert not by_kind(render(helm_bin, CHART / "ci" / "production-values.yaml"), "Secret")


def test_image_digest_wins_over_the_tag(helm_bin):
    objs = render(helm_bin, CHART / "ci" / "production-values.yaml")
    images = {c["image"] for _, _, c in containers(objs)}
    assert "registry.example.com/berth/portal:0.1.0" in images
    assert "registry.example.com/berth/worker@sha256:" + "0" * 64 in images


def test_each_named_prometheus_gets_a_label_proxy_on_the_web_pods_loopback(helm_bin):
    """Tenant metrics (docs/monitoring.md): the sidecar enforces the label Berth's code sends, and nobody but the
    web container can reach it."""
    from tenants.prometheus import HEADER, LABEL

    objs = render(helm_bin, CHART / "ci" / "production-values.yaml")
    web = named(objs, "Deployment", f"{FULLNAME}-web")["spec"]["template"]["spec"]
    sidecars = [c for c in web["containers"] if c["name"].startswith("prom-label-proxy")]
    assert [c["name"] for c in sidecars] == ["prom-label-proxy-main"]
    assert sidecars[0]["args"] == [
        f"-label={LABEL}",
        f"-header-name={HEADER}",
        "-enable-label-apis",
        "-upstream=http://prometheus-operated.monitoring.svc:9090",
        "-insecure-listen-address=127.0.0.1:9091",
    ]
    assert sidecars[0]["image"] == "quay.io/prometheuscommunity/prom-label-proxy:v0.11.1"
    assert "ports" not in sidecars[0]  # nothing outside the pod is meant to reach it
    portal = next(c for c in web["containers"] if c["name"] == "web")
    prometheus = "http://prometheus-operated.monitoring.svc:9090"
    assert json.loads(env_of(portal)["BERTH_PROMETHEUS"]["value"]) == {
        "main": {"label_proxy": "http://127.0.0.1:9091", "url": prometheus}
    }
    # Only the web answers metrics queries; the workers read measured usage from Prometheus itself (no proxy
    # runs beside them); beat and the migrations need neither. Without names there is neither sidecar nor setting.
    workers = [c for _, _, c in containers(objs) if c["name"] == "worker"]
    assert workers
    for where, _, container in containers(objs):
        if container in workers:
            assert json.loads(env_of(container)["BERTH_PROMETHEUS"]["value"]) == {"main": {"url": prometheus}}, where
            # ... from the kubelet's series only (monitoring.sources, the jobs the alert rules trust as well).
            assert env_of(container)["BERTH_KUBELET_JOB"]["value"] == "kubelet", where
            assert env_of(container)["BERTH_KUBELET_CADVISOR_PATH"]["value"] == "/metrics/cadvisor", where
        elif container is not portal:
            assert "BERTH_PROMETHEUS" not in env_of(container), where
    trial = named(render(helm_bin, CHART / "ci" / "trial-values.yaml"), "Deployment", f"{FULLNAME}-web")
    assert [c["name"] for c in trial["spec"]["template"]["spec"]["containers"]] == ["web"]
