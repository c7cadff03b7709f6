"""worker.helm, the runner of the helm binary: the host kubeconfig exists only as a private file during one call."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from worker import helm
from worker.kube import KubePermanentError, KubeTransientError

KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "c",
    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
    "users": [{"name": "u", "user": {"client-key-data": "c2VjcmV0LWtleS1kYXRh"}}],
    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
}


@pytest.fixture
def helm_binary(tmp_path, settings):
    """A stand-in helm that reports what it was handed to ``seen.json``, then answers as told by ``answer.json``."""
    seen, answer = tmp_path / "seen.json", tmp_path / "answer.json"
    script = tmp_path / "helm"
    script.write_text(f"""#!{sys.executable}
import json, os, stat, sys
args = sys.argv[1:]
files = {{flag: args[i + 1] for i, flag in enumerate(args) if flag in ("--kubeconfig", "--values")}}
report = {{"args": args, "env_kubeconfig": os.environ.get("KUBECONFIG"),
          "modes": {{f: oct(stat.S_IMODE(os.stat(p).st_mode)) for f, p in files.items()}},
          "dir_mode": (oct(stat.S_IMODE(os.stat(os.path.dirname(files["--kubeconfig"])).st_mode))
                       if "--kubeconfig" in files else ""),
          "contents": {{f: open(p).read() for f, p in files.items()}}, "paths": files}}
json.dump(report, open({str(seen)!r}, "w"))
answer = json.load(open({str(answer)!r})) if os.path.exists({str(answer)!r}) else {{}}
sys.stdout.write(answer.get("stdout", "ok\\n"))
sys.stderr.write(answer.get("stderr", ""))
sys.exit(answer.get("code", 0))
""")
    script.chmod(0o755)
    settings.BERTH_HELM_BINARY = str(script)

    def reply(*, code: int = 0, stderr: str = "") -> None:
        answer.write_text(json.dumps({"code": code, "stderr": stderr}))

    return {"seen": lambda: json.loads(seen.read_text()), "answer": reply}


def test_upgrade_install_hands_helm_a_private_kubeconfig_that_is_gone_afterwards(helm_binary, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", "/somewhere/else")
    helm.upgrade_install(
        release="web",
        namespace="dev-web",
        repo="https://charts.loft.sh",
        chart="vcluster",
        version="0.30.0",
        values={"controlPlane": {"distro": {"k8s": {"enabled": True}}}},
        kubeconfig=KUBECONFIG,
    )
    seen = helm_binary["seen"]()
    assert seen["args"][:10] == [
        "upgrade",
        "--install",
        "web",
        "vcluster",
        "--repo",
        "https://charts.loft.sh",
        "--version",
        "0.30.0",
        "--namespace",
        "dev-web",
    ]
    assert seen["modes"] == {"--kubeconfig": "0o600", "--values": "0o600"} and seen["dir_mode"] == "0o700"
    assert seen["env_kubeconfig"] is None  # the worker's own KUBECONFIG never leaks into the call
    assert "c2VjcmV0LWtleS1kYXRh" in seen["contents"]["--kubeconfig"]
    assert json.loads(seen["contents"]["--values"]) == {"controlPlane": {"distro": {"k8s": {"enabled": True}}}}
    assert not any(Path(p).exists() for p in seen["paths"].values())


def test_an_oci_chart_is_named_by_its_registry_path(helm_binary):
    helm.upgrade_install(
        release="web",
        namespace="dev-web",
        repo="oci://ghcr.io/loft-sh/charts",
        chart="vcluster",
        version="0.30.0",
        values={},
        kubeconfig=None,
    )
    seen = helm_binary["seen"]()
    assert seen["args"][:4] == ["upgrade", "--install", "web", "oci://ghcr.io/loft-sh/charts/vcluster"]
    assert "--repo" not in seen["args"] and "--kubeconfig" not in seen["args"]


def test_a_local_chart_directory_installs_the_packaged_chart_of_the_pinned_version(helm_binary):
    helm.upgrade_install(
        release="web",
        namespace="dev-web",
        repo="file:///opt/charts",
        chart="vcluster",
        version="0.30.0",
        values={},
        kubeconfig=KUBECONFIG,
    )
    seen = helm_binary["seen"]()
    assert seen["args"][:6] == [
        "upgrade",
        "--install",
        "web",
        "/opt/charts/vcluster-0.30.0.tgz",
        "--namespace",
        "dev-web",
    ]
    assert "--repo" not in seen["args"] and "--version" not in seen["args"]  # helm ignores --version for a file


@pytest.mark.parametrize(
    ("stderr", "error"),
    [
        (
            'Error: Kubernetes cluster unreachable: Get "https://10.0.0.1:6443/version": '
            "dial tcp 10.0.0.1:6443: connect: connection refused",
            KubeTransientError,
        ),
        (
            'Error: looks like "https://charts.loft.sh" is not a valid chart repository or cannot be reached: '
            "context deadline exceeded",
            KubeTransientError,
        ),
        ("Error: UPGRADE FAILED: another operation (install/upgrade/rollback) is in progress", KubeTransientError),
        ('Error: chart "vcluster" version "0.99.0" not found in https://charts.loft.sh repository', KubePermanentError),
        (
            "Error: values don't meet the specifications of the schema(s) in the following chart(s):\n"
            "vcluster:\n- controlPlane: Additional property foo is not allowed",
            KubePermanentError,
        ),
    ],
)
def test_failures_are_transient_or_permanent_with_helms_last_words(helm_binary, stderr, error):
    helm_binary["answer"](code=1, stderr="WARNING: something unrelated\n" + stderr)
    with pytest.raises(error) as raised:
        helm.upgrade_install(
            release="web",
            namespace="dev-web",
            repo="https://charts.loft.sh",
            chart="vcluster",
            version="0.30.0",
            values={},
            kubeconfig=KUBECONFIG,
        )
    assert str(raised.value).startswith("helm upgrade --install web in dev-web: ")
    assert "WARNING" not in str(raised.value) and "c2VjcmV0LWtleS1kYXRh" not in str(raised.value)
    assert type(raised.value) is error


def test_uninstalling_a_release_that_is_not_there_is_not_an_error(helm_binary):
    helm_binary["answer"](code=1, stderr="Error: uninstall: Release not loaded: web: release: not found")
    assert helm.uninstall(release="web", namespace="dev-web", kubeconfig=KUBECONFIG) is False
    helm_binary["answer"]()
    assert helm.uninstall(release="web", namespace="dev-web", kubeconfig=KUBECONFIG) is True
    assert helm_binary["seen"]()["args"][:4] == ["uninstall", "web", "--namespace", "dev-web"]


def test_a_missing_helm_is_a_permanent_error_that_says_how_to_fix_it(settings, tmp_path):
    settings.BERTH_HELM_BINARY = str(tmp_path / "no-helm-here")
    with pytest.raises(KubePermanentError, match="BERTH_HELM_BINARY"):
        helm.uninstall(release="web", namespace="dev-web", kubeconfig=KUBECONFIG)
