"""Which Python runs a local entrypoint: tau's own by default, the project's with
runtime.python / --python (tau's helper still importable), and with --ray-pip the Python of the
env Ray built. Tested with a real package that tau does not depend on (humanize, from PyPI)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from localkit import Tau, have_ray

pytestmark = pytest.mark.local
PACKAGE = "humanize"
PROBE = (
    "import sys, tau_run, humanize\n"
    "print('python', sys.executable)\n"
    "print('humanize', humanize.__file__)\n"
    "tau_run.log(1, ok=1.0)\n"
)


def test_tau_does_not_depend_on_the_probe_package() -> None:
    res = subprocess.run(
        [sys.executable, "-c", f"import {PACKAGE}"], capture_output=True, check=False
    )
    assert res.returncode != 0, f"{PACKAGE} is importable by tau itself: pick another probe"


@pytest.fixture(scope="module")
def project_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's own venv (not tau's) with the package installed from PyPI."""
    root = tmp_path_factory.mktemp("uservenv")
    venv = root / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(site),
            PACKAGE,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if res.returncode != 0:
        pytest.skip(f"cannot install {PACKAGE} from the package index: {res.stderr[-300:]}")
    return venv


@pytest.mark.parametrize("kind", ["job", "rayjob"])
def test_runtime_python_runs_the_entrypoint_in_the_projects_venv(
    tau: Tau, project: Callable[[str, str, str], Path], project_venv: Path, kind: str
) -> None:
    if kind == "rayjob" and not have_ray():
        pytest.skip("Ray is not installed")
    folder = project(
        f"schema_version: 1\nname: own-venv\nrun: {{entrypoint: p.py, workload_kind: {kind}}}\n"
        f"runtime: {{python: {project_venv}/bin/python}}\n",
        "p.py",
        PROBE,
    )
    res = tau("run", str(folder), timeout=300)
    assert res.returncode == 0, res.stderr + res.stdout
    assert f"python {project_venv}/bin/python" in res.stdout
    assert f"humanize {project_venv}" in res.stdout


def test_python_option_overrides_and_a_missing_interpreter_is_a_clear_error(
    tau: Tau, project: Callable[[str, str, str], Path], project_venv: Path
) -> None:
    folder = project(
        "schema_version: 1\nname: own-venv2\nrun: {entrypoint: p.py, workload_kind: job}\n"
        "runtime: {python: .venv/bin/python}\n",
        "p.py",
        PROBE,
    )
    res = tau("run", str(folder))
    assert res.returncode == 2
    assert "runtime.python='.venv/bin/python': no such interpreter" in res.stderr
    assert str(folder / ".venv" / "bin" / "python") in res.stderr
    res = tau("run", str(folder), "--python", str(project_venv / "bin" / "python"))
    assert res.returncode == 0, res.stderr
    assert f"humanize {project_venv}" in res.stdout
    res = tau("run", str(folder), "--python", "no-such-python-3.99")
    assert res.returncode == 2 and "no such interpreter on PATH" in res.stderr


@pytest.mark.skipif(not have_ray(), reason="Ray is not installed")
def test_ray_pip_runs_the_entrypoint_in_the_env_ray_built(
    tau: Tau, project: Callable[[str, str, str], Path]
) -> None:
    folder = project(
        "schema_version: 1\nname: raypip\nrun: {entrypoint: p.py, workload_kind: rayjob}\n"
        f"runtime: {{pip: [{PACKAGE}]}}\n",
        "p.py",
        PROBE,
    )
    res = tau("run", str(folder), "--ray-pip", timeout=600)
    if res.returncode != 0 and "pip" in res.stdout + res.stderr and "Could not" in res.stdout:
        pytest.skip("Ray could not install from the package index")
    assert res.returncode == 0, res.stderr + res.stdout
    line = next(x for x in res.stdout.splitlines() if x.startswith("humanize "))
    assert "runtime_resources/pip" in line  # the env Ray built, not tau's
