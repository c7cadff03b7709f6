"""`pip install .` gives the `berth` script and the berth_cli package, apart from the checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.plugins.worker import ROOT


def test_the_wheel_installs_a_working_berth_script(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copytree(ROOT / "berth_cli", source / "berth_cli", ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("berth-*.whl")
    target = tmp_path / "site"
    installed = subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(target), str(wheel)], capture_output=True, text=True, timeout=300
    )
    assert installed.returncode == 0, installed.stderr
    # Only the CLI is packaged: the portal runs from its checkout, never from site-packages.
    assert sorted(p.name for p in target.iterdir() if not p.name.endswith(".dist-info")) == ["berth_cli", "bin"]

    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(target), "HOME": str(tmp_path)}
    ran = subprocess.run(
        [str(target / "bin" / "berth"), "--version"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "berth, version 0.1.0"
    where = subprocess.run(
        [sys.executable, "-c", "import berth_cli; print(berth_cli.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.stdout.startswith(str(target)), where.stdout + where.stderr
