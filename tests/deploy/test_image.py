"""The portal image: Dockerfile, .dockerignore, entrypoint, gunicorn config and the build's
collectstatic step, checked without building anything; and `manage.py check --deploy`.
"""

from __future__ import annotations

import os
import re
import runpy
import shlex
import subprocess
import sys
import tomllib

import pytest

from tests.deploy.helpers import (
    DOCKERFILE,
    HEX64,
    ROOT,
    clean_env,
    compose_config,
    compose_env_on_this_machine,
    run_python,
)

ROOT_USERS = {"root", "0", "root:root", "0:0", "root:0", "0:root"}
RUNTIME_TARGETS = ("web", "worker")


# --- A small Dockerfile reader ------------------------------------------------------------------


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    result, buffer = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not buffer):
            continue
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        buffer += line
        keyword, _, args = buffer.partition(" ")
        result.append((keyword.upper(), args.strip()))
        buffer = ""
    return result


def parse_dockerfile() -> tuple[dict[str, str], list[dict]]:
    """Global ARG defaults, and the stages in order: {name, base, steps}."""
    global_args: dict[str, str] = {}
    stages: list[dict] = []
    for keyword, args in instructions(DOCKERFILE.read_text()):
        if keyword == "FROM":
            parts = args.split()
            flags = [p for p in parts if p.startswith("--")]
            rest = [p for p in parts if not p.startswith("--")]
            name = rest[2] if len(rest) >= 3 and rest[1].upper() == "AS" else str(len(stages))
            stages.append({"name": name, "base": rest[0], "flags": flags, "steps": []})
        elif not stages:
            if keyword == "ARG" and "=" in args:
                key, value = args.split("=", 1)
                global_args[key] = value
        else:
            stages[-1]["steps"].append((keyword, args))
    return global_args, stages


@pytest.fixture(scope="module")
def dockerfile():
    return parse_dockerfile()


def stage(stages: list[dict], name: str) -> dict:
    return next(s for s in stages if s["name"] == name)


def chain(stages: list[dict], name: str) -> list[dict]:
    """The stage and the stages it is built FROM, nearest first."""
    names = {s["name"] for s in stages}
    result = [stage(stages, name)]
    while result[-1]["base"] in names:
        result.append(stage(stages, result[-1]["base"]))
    return result


def effective(stages: list[dict], name: str, keyword: str) -> str | None:
    """The last value of an inherited instruction (USER, CMD, ENTRYPOINT, HEALTHCHECK) for a stage."""
    for current in chain(stages, name):
        values = [args for kw, args in current["steps"] if kw == keyword]
        if values:
            return values[-1]
    return None


def steps(stages: list[dict], name: str, keyword: str) -> list[str]:
    return [args for current in reversed(chain(stages, name)) for kw, args in current["steps"] if kw == keyword]


# --- Dockerfile ---------------------------------------------------------------------------------


def test_targets_exist_and_web_is_the_default(dockerfile):
    _, stages = dockerfile
    names = [s["name"] for s in stages]
    assert {"web", "worker"} <= set(names)
    assert names[-1] == "web", "a plain `docker build .` must give the web image"


def test_base_images_are_pinned(dockerfile):
    _, stages = dockerfile
    names = {s["name"] for s in stages}
    external = [s["base"] for s in stages if s["base"] not in names]
    assert external
    for base in external:
        assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", base), base


@pytest.mark.parametrize("target", RUNTIME_TARGETS)
def test_runs_as_a_non_root_user(dockerfile, target):
    _, stages = dockerfile
    user = effective(stages, target, "USER")
    assert user and user not in ROOT_USERS, f"{target} runs as {user!r}"
    name = user.split(":")[0]
    created = " ".join(steps(stages, target, "RUN"))
    match = re.search(rf"useradd\b[^&;]*--uid (\d+)[^&;]*\b{name}\b", created)
    assert match and int(match.group(1)) >= 1000, f"user {name} is not created with a non-system uid"


def test_web_has_a_healthcheck_on_healthz(dockerfile):
    _, stages = dockerfile
    check = effective(stages, "web", "HEALTHCHECK")
    assert check and "/healthz" in check and not check.upper().startswith("NONE")


def test_gunicorn_is_the_default_command(dockerfile):
    _, stages = dockerfile
    command = effective(stages, "web", "CMD")
    assert command and "gunicorn" in command and "deploy/gunicorn.conf.py" in command
    entrypoint = effective(stages, "web", "ENTRYPOINT")
    assert entrypoint and "deploy/entrypoint.sh" in entrypoint


def test_only_runtime_dependencies_are_installed_with_the_constraints(dockerfile):
    _, stages = dockerfile
    installs = [run for s in stages for kw, run in s["steps"] if kw == "RUN" and "pip install" in run]
    assert len(installs) == 1
    install = installs[0]
    assert "-c constraints.txt" in install
    assert "['project']['dependencies']" in install
    assert "optional-dependencies" not in install and "[test]" not in install
    # And what it installs is pinned: every runtime dependency has an exact version in constraints.txt.
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = {
        re.split(r"==", line)[0].strip().lower().replace("_", "-")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line
    }
    for dep in deps:
        name = re.match(r"[A-Za-z0-9_.-]+", dep).group(0).lower().replace("_", "-")
        assert name in pinned, f"{name} has no exact version in constraints.txt"


def test_collectstatic_runs_at_build_time_with_a_throwaway_secret(dockerfile):
    _, stages = dockerfile
    runs = [run for run in steps(stages, "web", "RUN") if "manage.py collectstatic" in run]
    assert len(runs) == 1
    assert "DJANGO_SECRET_KEY=" in runs[0] and "DJANGO_DEBUG=false" in runs[0]
    # The dummy values exist for that command only: never in ENV or ARG, so never in the image.
    for s in stages:
        for keyword, args in s["steps"]:
            if keyword in ("ENV", "ARG"):
                assert "SECRET" not in args, f"{keyword} {args}"


def test_downloaded_binaries_are_verified_against_pinned_checksums(dockerfile):
    global_args, stages = dockerfile
    assert not [a for s in stages for kw, a in s["steps"] if kw == "ADD" and "://" in a], "no unverified ADD <url>"
    downloads = 0
    for s in stages:
        for keyword, run in s["steps"]:
            if keyword != "RUN" or not re.search(r"\b(curl|wget)\b[^&;|]*https?://", run):
                continue
            fetched = re.findall(r"\bcurl\b[^&;|]*?-\w*o\s+(\S+)\s+\"?https?://", run)
            assert fetched, f"every download must be written to a file and checked: {run[:120]}"
            checked = re.findall(r'echo "\$\{\w+\}\s+(\S+)" \| sha256sum --check', run)
            assert sorted(fetched) == sorted(checked), f"unchecked downloads: {set(fetched) - set(checked)}"
            downloads += len(fetched)
    assert downloads >= 2, "kubectl and helm are downloaded"
    checksums = {k: v for k, v in global_args.items() if "SHA256" in k}
    assert {"KUBECTL_SHA256_AMD64", "HELM_SHA256_AMD64"} <= set(checksums)
    for key, value in checksums.items():
        assert HEX64.fullmatch(value), f"{key} is not a pinned sha256"
    for key in ("KUBECTL_VERSION", "HELM_VERSION"):
        assert re.fullmatch(r"v\d+\.\d+\.\d+", global_args[key]), f"{key}={global_args.get(key)}"
    copies = " ".join(steps(stages, "worker", "COPY"))
    assert "kubectl" in copies and "helm" in copies
    assert "kubectl" not in " ".join(steps(stages, "web", "COPY")), "the web image has no cluster tools"


def test_dockerignore_keeps_secrets_out_of_the_build_context():
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    for entry in (".env", "deploy/secrets/", "deploy/kube/", ".git/", ".venv/", "tests/"):
        assert entry in ignored, f"{entry} must be in .dockerignore"
    for needed in ("deploy/", "deploy/entrypoint.sh", "deploy/gunicorn.conf.py", "portal/", "manage.py"):
        assert needed not in ignored


# --- The entrypoint -----------------------------------------------------------------------------

ENTRYPOINT = ROOT / "deploy" / "entrypoint.sh"


def test_entrypoint_reads_the_database_password_file(tmp_path):
    assert os.access(ENTRYPOINT, os.X_OK)
    password = tmp_path / "postgres_password"
    password.write_text("s3cret pass\n")
    show = ["sh", "-c", 'printf "%s" "$PGPASSWORD"']
    done = subprocess.run(
        [str(ENTRYPOINT), *show],
        env={"PATH": os.environ["PATH"], "PGPASSWORD_FILE": str(password)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "s3cret pass"
    missing = subprocess.run(
        [str(ENTRYPOINT), "true"],
        env={"PATH": os.environ["PATH"], "PGPASSWORD_FILE": str(tmp_path / "nope")},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert missing.returncode == 78 and "not readable" in missing.stderr
    plain = subprocess.run([str(ENTRYPOINT), "sh", "-c", "exit 7"], env={"PATH": os.environ["PATH"]}, timeout=30)
    assert plain.returncode == 7, "the entrypoint execs the command and passes its status on"


# --- gunicorn -----------------------------------------------------------------------------------

GUNICORN_CONF = ROOT / "deploy" / "gunicorn.conf.py"


def test_gunicorn_config_values(monkeypatch):
    monkeypatch.setenv("GUNICORN_WORKERS", "7")
    monkeypatch.setenv("GUNICORN_FORWARDED_ALLOW_IPS", "10.0.0.0/8")
    conf = runpy.run_path(str(GUNICORN_CONF))
    assert conf["bind"] == "0.0.0.0:8000"
    assert conf["workers"] == 7
    assert conf["accesslog"] == "-"
    assert conf["forwarded_allow_ips"] == "10.0.0.0/8"
    assert conf["wsgi_app"] == "portal.wsgi:application"
    monkeypatch.delenv("GUNICORN_WORKERS")
    monkeypatch.setenv("WEB_CONCURRENCY", "3")
    assert runpy.run_path(str(GUNICORN_CONF))["workers"] == 3


def test_gunicorn_accepts_the_config_and_loads_the_portal():
    """`gunicorn --check-config` with the web service's compose environment: config and app load."""
    web = compose_config()["services"]["web"]
    env = clean_env(compose_env_on_this_machine(web))
    done = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "gunicorn"), "--check-config", "--config", str(GUNICORN_CONF)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# --- The build's collectstatic step, run here -------------------------------------------------


def test_the_build_collectstatic_step_works_without_database_or_secrets(dockerfile, tmp_path):
    """The exact environment the Dockerfile gives collectstatic, and nothing else."""
    _, stages = dockerfile
    run = next(r for r in steps(stages, "web", "RUN") if "manage.py collectstatic" in r)
    command = run[run.index("DJANGO_DEBUG=") :]
    words = shlex.split(command.split("&&")[0])
    assignments = dict(w.split("=", 1) for w in words if re.match(r"^[A-Z_]+=", w))
    argv = [w for w in words if not re.match(r"^[A-Z_]+=", w)]
    assert argv[:3] == ["python", "manage.py", "collectstatic"]
    static_root = tmp_path / "static"
    done = run_python(argv[1:], clean_env({**assignments, "DJANGO_STATIC_ROOT": str(static_root)}))
    assert done.returncode == 0, done.stderr
    assert (static_root / "staticfiles.json").is_file(), "manifest storage (DEBUG off) wrote no manifest"
    assert any(static_root.rglob("*.gz")), "WhiteNoise's compressed copies are missing"


# --- The portal core's deploy check ---------------------------------------------------------------


def test_manage_py_check_deploy_has_no_warnings():
    """Acceptance criterion of the portal core: `check --deploy` is clean in a production-like setup."""
    env = clean_env(
        {
            "DJANGO_DEBUG": "false",
            "DJANGO_SECRET_KEY": "deploy-check-" + "k7Qp2xZr9LmN4vBt8WcY6dHs3JfG5aE1" * 2,
            "OIDC_RP_CLIENT_SECRET": "deploy-check-client-secret",
            "DJANGO_ALLOWED_HOSTS": "berth.example.com",
            "DJANGO_CSRF_TRUSTED_ORIGINS": "https://berth.example.com",
            "BERTH_PUBLIC_URL": "https://berth.example.com",
            "DATABASE_URL": "postgres://berth@db.example.invalid:5432/berth",
            "DJANGO_SECURE_SSL_REDIRECT": "true",
            "DJANGO_SECURE_HSTS_SECONDS": "31536000",
            "EMAIL_URL": "smtp://mail.example.invalid:25",
        }
    )
    done = run_python(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "WARNING" not in output.upper(), output
