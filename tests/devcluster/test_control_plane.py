"""The dev control plane behaves like the parts of a real cluster the portal relies on."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from kubernetes.client import ApiClient, CoreV1Api, RbacAuthorizationV1Api
from kubernetes.client.exceptions import ApiException

from devcluster.launcher import (
    CONTROLLER_API_QPS,
    SERVICE_ACCOUNT_MAX_TOKEN_EXPIRATION,
    ControlPlane,
    ControlPlaneError,
    OIDCIssuer,
    controller_rate_args,
)
from tests.plugins.kube import KubectlRunner, manifest, read_or_none, wait_for

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # never pulled: there is no kubelet


def _kubernetes_pin(module_dir: Path) -> str:
    for line in (module_dir / "go.mod").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "k8s.io/kubernetes":
            return parts[1]
    raise AssertionError(f"{module_dir}/go.mod does not pin k8s.io/kubernetes")


def _pinned_kubernetes_version() -> str:
    """The release this run's cluster must be: devcluster/gobuild's, or with K8S_VERSION the gobuild-1.* module's
    that pins it."""
    default = _kubernetes_pin(REPO / "devcluster" / "gobuild")
    wanted = os.environ.get("K8S_VERSION") or default
    pins = {_kubernetes_pin(d) for d in (REPO / "devcluster").glob("gobuild-1.*")} | {default}
    assert wanted in pins, f"K8S_VERSION={wanted}: no devcluster module pins it ({sorted(pins)})"
    return wanted


def _pod(name: str, *, requests: dict[str, str] | None = None, restricted: bool = False) -> Any:
    container: dict = {"name": "main", "image": PAUSE_IMAGE}
    if requests:
        container["resources"] = {"requests": requests, "limits": requests}
    pod_security: dict = {}
    if restricted:
        pod_security = {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
        container["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    return manifest({"metadata": {"name": name}, "spec": {"containers": [container], "securityContext": pod_security}})


def _refusal(create: Callable[[], object]) -> tuple[int, str]:
    """(HTTP status, the API server's message) of a request that must be refused."""
    with pytest.raises(ApiException) as refused:
        create()
    assert refused.value.body is not None
    return refused.value.status, json.loads(refused.value.body)["message"]


def _alive(pid: int) -> bool:
    """True while the pid exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


def _children_of(parent_pid: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[1]) == parent_pid:
                children.append(int(entry.name))
    return children


# -- controllers ---------------------------------------------------------------------


def test_new_namespace_gets_default_serviceaccount_and_root_ca_configmap(
    control_plane: ControlPlane, kube_admin: ApiClient, unique_ns_name: str
) -> None:
    core = CoreV1Api(kube_admin)
    core.create_namespace(manifest({"metadata": {"name": unique_ns_name}}))

    wait_for(
        lambda: read_or_none(lambda: core.read_namespaced_service_account("default", unique_ns_name)),
        what="the default ServiceAccount",
    )
    config_map = wait_for(
        lambda: read_or_none(lambda: core.read_namespaced_config_map("kube-root-ca.crt", unique_ns_name)),
        what="the kube-root-ca.crt ConfigMap",
    )
    assert config_map.data is not None
    assert config_map.data["ca.crt"].strip() == control_plane.ca_cert_pem.strip()


def test_quota_status_is_computed_and_admission_enforces_it(
    kube_admin: ApiClient, make_namespace: Callable[..., str]
) -> None:
    core = CoreV1Api(kube_admin)
    namespace = make_namespace("quota")
    hard = {"requests.cpu": "1", "requests.memory": "1Gi", "limits.cpu": "1", "limits.memory": "1Gi", "pods": "2"}
    core.create_namespaced_resource_quota(namespace, manifest({"metadata": {"name": "tier"}, "spec": {"hard": hard}}))

    quota = wait_for(
        lambda: (q := core.read_namespaced_resource_quota("tier", namespace)).status.hard and q,
        what="the quota controller to fill status.hard",
    )
    assert quota.status.hard == hard
    assert quota.status.used["requests.cpu"] == "0"

    status, message = _refusal(
        lambda: core.create_namespaced_pod(namespace, _pod("big", requests={"cpu": "2", "memory": "64Mi"}))
    )
    assert status == 403 and "exceeded quota: tier" in message and "requests.cpu=2" in message

    status, message = _refusal(lambda: core.create_namespaced_pod(namespace, _pod("bare")))
    assert status == 403 and "failed quota: tier: must specify" in message and "requests.cpu" in message

    core.create_namespaced_pod(namespace, _pod("fits", requests={"cpu": "500m", "memory": "64Mi"}))
    wait_for(
        lambda: (
            (core.read_namespaced_resource_quota("tier", namespace).status.used or {}).get("requests.cpu") == "500m"
        ),
        what="the quota controller to count the admitted Pod",
    )


def test_pod_security_restricted_refuses_a_noncompliant_pod_and_admits_a_compliant_one(
    kube_admin: ApiClient, make_namespace: Callable[..., str]
) -> None:
    core = CoreV1Api(kube_admin)
    namespace = make_namespace("psa", labels={"pod-security.kubernetes.io/enforce": "restricted"})

    status, message = _refusal(lambda: core.create_namespaced_pod(namespace, _pod("loose")))
    assert status == 403 and 'violates PodSecurity "restricted:latest"' in message

    admitted = core.create_namespaced_pod(namespace, _pod("tight", restricted=True))
    assert admitted.metadata.uid
    assert admitted.status.phase == "Pending"  # no scheduler, no kubelet


def test_deleting_a_namespace_with_objects_completes(kube_admin: ApiClient, make_namespace: Callable[..., str]) -> None:
    core, rbac = CoreV1Api(kube_admin), RbacAuthorizationV1Api(kube_admin)
    namespace = make_namespace("doomed")
    for index in range(3):
        core.create_namespaced_config_map(
            namespace, manifest({"metadata": {"name": f"cm-{index}"}, "data": {"k": "v"}})
        )
    core.create_namespaced_service_account(namespace, manifest({"metadata": {"name": "robot"}}))
    rbac.create_namespaced_role(
        namespace,
        manifest(
            {
                "metadata": {"name": "reader"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
            }
        ),
    )

    core.delete_namespace(namespace)

    assert core.read_namespace(namespace).status.phase == "Terminating"
    wait_for(
        lambda: read_or_none(lambda: core.read_namespace(namespace)) is None,
        timeout=60,
        what=f"namespace {namespace} to be emptied and removed",
    )


# -- authentication and authorization ------------------------------------------------------


def test_serviceaccount_token_is_limited_to_its_roles_namespace(
    control_plane: ControlPlane,
    kube_admin: ApiClient,
    kubectl: KubectlRunner,
    make_namespace: Callable[..., str],
    tmp_path: Path,
) -> None:
    core, rbac = CoreV1Api(kube_admin), RbacAuthorizationV1Api(kube_admin)
    home, elsewhere = make_namespace("home"), make_namespace("elsewhere")
    core.create_namespaced_service_account(home, manifest({"metadata": {"name": "deployer"}}))
    rbac.create_namespaced_role(
        home,
        manifest(
            {
                "metadata": {"name": "configmap-reader"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
            }
        ),
    )
    rbac.create_namespaced_role_binding(
        home,
        manifest(
            {
                "metadata": {"name": "deployer-reads"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmap-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": home}],
            }
        ),
    )
    token = core.create_namespaced_service_account_token(
        "deployer", home, manifest({"spec": {"expirationSeconds": 600}})
    ).status.token
    config = control_plane.write_kubeconfig(tmp_path / "deployer.kubeconfig", user="deployer", token=token)
    assert "client-key-data" not in config.read_text()

    def can_i(*args: str) -> tuple[int, str]:
        result = kubectl("auth", "can-i", *args, kubeconfig=config)
        return result.returncode, result.stdout.strip()

    assert can_i("list", "configmaps", "-n", home) == (0, "yes")
    assert can_i("list", "configmaps", "-n", elsewhere) == (1, "no")
    assert can_i("list", "namespaces") == (1, "no")
    assert kubectl("get", "configmaps", "-n", home, kubeconfig=config).returncode == 0
    denied = kubectl("get", "configmaps", "-n", elsewhere, kubeconfig=config)
    assert denied.returncode != 0 and "Forbidden" in denied.stderr


def test_no_serviceaccount_token_outlives_the_servers_maximum(
    kube_admin: ApiClient, make_namespace: Callable[..., str]
) -> None:
    """A year-long TokenRequest (what a hostile pod's projected volume would ask for) is cut to the maximum."""
    core = CoreV1Api(kube_admin)
    namespace = make_namespace("tokens")
    asked = datetime.datetime.now(datetime.UTC)
    status = core.create_namespaced_service_account_token(
        "default", namespace, manifest({"spec": {"expirationSeconds": 365 * 24 * 3600}})
    ).status
    assert status.expiration_timestamp is not None
    lifetime = status.expiration_timestamp - asked
    assert SERVICE_ACCOUNT_MAX_TOKEN_EXPIRATION == "24h"
    assert datetime.timedelta(hours=23) < lifetime <= datetime.timedelta(hours=24, minutes=1)


def test_namespace_default_tolerations_reach_its_pods_and_its_whitelist_is_enforced(
    kube_admin: ApiClient, make_namespace: Callable[..., str]
) -> None:
    """PodTolerationRestriction is on: defaultTolerations are merged in, tolerationsWhitelist is enforced."""
    core = CoreV1Api(kube_admin)
    namespace = make_namespace("tolerations")
    pool = {"key": "berth.dev/pool", "operator": "Equal", "value": "gold", "effect": "NoSchedule"}
    node_problems = [
        {"key": f"node.kubernetes.io/{problem}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for problem in ("not-ready", "unreachable")
    ]
    core.patch_namespace(
        namespace,
        {
            "metadata": {
                "annotations": {
                    "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps([pool]),
                    # DefaultTolerationSeconds adds these two to every pod; a whitelist must allow them.
                    "scheduler.alpha.kubernetes.io/tolerationsWhitelist": json.dumps([pool, *node_problems]),
                }
            }
        },
    )
    admitted = core.create_namespaced_pod(namespace, _pod("pooled"))
    assert any(t.key == "berth.dev/pool" and t.value == "gold" for t in admitted.spec.tolerations)

    other = {"key": "berth.dev/pool", "operator": "Equal", "value": "platinum", "effect": "NoSchedule"}
    body = _pod("elsewhere")
    body["spec"]["tolerations"] = [other]
    _, message = _refusal(lambda: core.create_namespaced_pod(namespace, body))  # (the plugin answers 500)
    assert "pod tolerations (possibly merged with namespace default tolerations) conflict" in message
    assert read_or_none(lambda: core.read_namespaced_pod("elsewhere", namespace)) is None


class _OIDCProvider:
    """Just enough of an OIDC issuer for kube-apiserver: discovery, JWKS, signed tokens."""

    def __init__(self, control_plane: ControlPlane) -> None:
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        cert_pem, key_pem = control_plane.ca.issue_serving_cert(["127.0.0.1"])
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self._key.public_key()))
        self._server = ThreadingHTTPServer(
            ("127.0.0.1", 0), self._handler({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]})
        )
        self.url = f"https://127.0.0.1:{self._server.server_port}"
        self._server.socket = self._tls(cert_pem, key_pem).wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _handler(self, jwks: dict) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                documents = {
                    "/.well-known/openid-configuration": {
                        "issuer": provider.url,
                        "jwks_uri": f"{provider.url}/jwks",
                        "id_token_signing_alg_values_supported": ["RS256"],
                    },
                    "/jwks": jwks,
                }
                body = json.dumps(documents.get(self.path, {})).encode()
                self.send_response(200 if self.path in documents else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    @staticmethod
    def _tls(cert_pem: str, key_pem: str) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as scratch:
            (Path(scratch) / "tls.crt").write_text(cert_pem)
            (Path(scratch) / "tls.key").write_text(key_pem)
            context.load_cert_chain(Path(scratch) / "tls.crt", Path(scratch) / "tls.key")
        return context

    def token(self, *, subject: str, groups: list[str], audience: str) -> str:
        now = datetime.datetime.now(datetime.UTC)
        claims = {
            "iss": self.url,
            "aud": audience,
            "sub": subject,
            "groups": groups,
            "iat": now,
            "nbf": now,
            "exp": now + datetime.timedelta(minutes=10),
        }
        return jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": "k1"})

    def __enter__(self) -> _OIDCProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def test_oidc_issuer_added_at_runtime_authenticates_with_prefixed_names(
    control_plane: ControlPlane, kubectl: KubectlRunner, tmp_path: Path
) -> None:
    with _OIDCProvider(control_plane) as provider:
        token = provider.token(subject="alice", groups=["team-a"], audience="berth")
        config = control_plane.write_kubeconfig(tmp_path / "alice.kubeconfig", user="alice", token=token)
        before = kubectl("auth", "whoami", "-o", "json", kubeconfig=config)
        assert before.returncode != 0 and "Unauthorized" in before.stderr

        try:
            control_plane.set_oidc_issuers([OIDCIssuer(url=provider.url, audience="berth")])
            after = kubectl("auth", "whoami", "-o", "json", kubeconfig=config)
        finally:
            control_plane.set_oidc_issuers([])

    assert after.returncode == 0, after.stderr
    user = json.loads(after.stdout)["status"]["userInfo"]
    assert user["username"] == "oidc:alice"
    assert "oidc:team-a" in user["groups"]
    # Removed again: refused once the API server's 10 s token cache forgets the success.
    wait_for(
        lambda: "Unauthorized" in kubectl("auth", "whoami", kubeconfig=config).stderr,
        timeout=30,
        what="the token to be refused after its issuer was removed",
    )


# -- the binaries and the launcher ----------------------------------------------------------


def test_kubectl_and_server_report_the_pinned_release(kubectl: KubectlRunner) -> None:
    result = kubectl("version", "-o", "json")
    assert result.returncode == 0, result.stderr
    versions = json.loads(result.stdout)
    pinned = _pinned_kubernetes_version()
    assert versions["serverVersion"]["gitVersion"] == pinned
    assert versions["clientVersion"]["gitVersion"] == pinned


def test_two_control_planes_run_side_by_side_with_separate_state(
    control_plane: ControlPlane, kube_admin: ApiClient, kubectl: KubectlRunner, unique_ns_name: str
) -> None:
    with ControlPlane(name="berth-second") as second:
        assert second.api_url != control_plane.api_url
        assert second.ca_cert_pem != control_plane.ca_cert_pem
        created = kubectl("create", "namespace", unique_ns_name, kubeconfig=second.kubeconfig_path)
        assert created.returncode == 0, created.stderr

        assert kubectl("get", "namespace", unique_ns_name, kubeconfig=second.kubeconfig_path).returncode == 0
        assert read_or_none(lambda: CoreV1Api(kube_admin).read_namespace(unique_ns_name)) is None
        # Each kubeconfig trusts only its own CA.
        crossed = subprocess.run(
            [
                str(second.kubectl),
                f"--kubeconfig={second.kubeconfig_path}",
                f"--server={control_plane.api_url}",
                "get",
                "ns",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert crossed.returncode != 0 and "certificate" in crossed.stderr


def test_the_controller_manager_runs_with_the_client_rate_limit_of_a_big_cluster(control_plane: ControlPlane) -> None:
    # The quota controller shares this limit with every other controller: at upstream's 20/30 a burst of writes
    # to many namespaces delays a new tenant's quota being counted (docs/deployment.md).
    argv = _cmdline(control_plane.pids()["kube-controller-manager"]).split()
    assert f"--kube-api-qps={CONTROLLER_API_QPS}" in argv
    assert f"--kube-api-burst={CONTROLLER_API_QPS}" in argv
    with pytest.raises(ControlPlaneError, match="controller_api_qps"):
        ControlPlane(controller_api_qps=0)
    assert controller_rate_args(None) == []  # ControlPlane(controller_api_qps=None): as upstream ships it


def test_stopping_leaves_no_processes_or_files_behind() -> None:
    plane = ControlPlane(name="berth-stop").start()
    pids, data_dir = plane.pids(), plane.data_dir
    assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}
    assert all(_alive(pid) for pid in pids.values())

    plane.stop()

    assert [name for name, pid in pids.items() if _alive(pid)] == []
    assert data_dir is not None and not data_dir.exists()


def test_a_failed_start_raises_with_the_components_log_and_cleans_up() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        plane = ControlPlane(name="berth-clash", apiserver_port=squatter.getsockname()[1])
        with pytest.raises(ControlPlaneError) as failure:
            plane.start()
    assert "kube-apiserver exited" in str(failure.value)
    assert "address already in use" in str(failure.value)
    assert plane.data_dir is not None and str(plane.data_dir) in str(failure.value)  # kept for reading
    leftovers = [pid for pid in _children_of(os.getpid()) if _alive(pid) and str(plane.data_dir) in _cmdline(pid)]
    shutil.rmtree(plane.data_dir)
    assert leftovers == []  # etcd, already up, was stopped


@pytest.fixture
def launcher_cli() -> Iterator[Callable[[], tuple[subprocess.Popen[str], dict[str, str]]]]:
    """Starts `python -m devcluster.launcher` and returns it once it printed its addresses."""
    started: list[subprocess.Popen[str]] = []

    def start() -> tuple[subprocess.Popen[str], dict[str, str]]:
        process = subprocess.Popen(
            [sys.executable, "-m", "devcluster.launcher"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        printed: dict[str, str] = {}
        assert process.stdout is not None
        for line in process.stdout:
            key, _, value = line.partition(":")
            printed[key.strip()] = value.strip()
            if line.startswith("export KUBECONFIG="):
                return process, printed
        pytest.fail(f"launcher exited early: {process.wait()} {process.stderr.read() if process.stderr else ''}")

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


def test_launcher_cli_stops_everything_on_sigterm(launcher_cli: Callable, kubectl: KubectlRunner) -> None:
    process, printed = launcher_cli()
    assert printed["API server"].startswith("https://127.0.0.1:")
    assert kubectl("get", "--raw=/readyz", kubeconfig=printed["kubeconfig"]).stdout == "ok"
    children = _children_of(process.pid)
    assert len(children) == 3

    process.send_signal(signal.SIGTERM)

    assert process.wait(timeout=30) == 0
    assert [pid for pid in children if _alive(pid)] == []
    assert not Path(printed["data dir"]).exists()


def test_components_die_with_a_killed_launcher(launcher_cli: Callable) -> None:
    process, printed = launcher_cli()
    children = _children_of(process.pid)
    assert len(children) == 3

    os.kill(process.pid, signal.SIGKILL)
    process.wait()

    wait_for(
        lambda: not any(_alive(pid) for pid in children),
        timeout=10,
        what="etcd, kube-apiserver and kube-controller-manager to die with their parent",
    )
    shutil.rmtree(printed["data dir"])  # a killed launcher cannot clean up after itself
