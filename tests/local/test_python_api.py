"""docs/python-api.md's worked example, run as written (real Ray on 127.0.0.1, its own
TAU_HOME): a notebook can submit, follow and read a run with `taugrid.client`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from localkit import have_ray

pytestmark = [
    pytest.mark.local,
    pytest.mark.skipif(not have_ray(), reason="needs Ray (pip install -e '.[local]')"),
]


def example() -> str:
    text = (ROOT / "docs" / "python-api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "docs/python-api.md has a python example"
    return blocks[0]


def test_the_documented_example_runs(tmp_path: Path) -> None:
    env = {**os.environ, "TAU_HOME": str(tmp_path / "home")}
    env.pop("TAU_TARGET", None)
    try:
        res = subprocess.run(
            [sys.executable, "-c", example()],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    finally:  # the example's run started a local Ray head in this TAU_HOME: it must not outlive us
        tau_bin = str(Path(sys.executable).parent / "tau")
        subprocess.run(
            [tau_bin, "local", "stop"], env=env, capture_output=True, timeout=120, check=False
        )
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    run_id = re.search(r"submitted (\S+) evidence in", out)
    assert run_id, out
    assert "ended: Succeeded" in out and "Succeeded - succeeded" in out
    assert re.search(r"\d+ metric rows; last: \{'step': \d+", out)
    assert (tmp_path / "home" / "data" / "runs" / run_id.group(1) / "MANIFEST.sha256").is_file()


def test_errors_are_tau_errors_with_the_clis_exit_codes(tmp_path: Path) -> None:
    code = (
        "from taugrid import client\n"
        "try:\n    client.status('no-such-run')\n"
        "except client.TauError as e:\n    print(e.exit_code, e.message)\n"
    )
    env = {**os.environ, "TAU_HOME": str(tmp_path / "home"), "KUBECONFIG": str(tmp_path / "none")}
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert res.returncode == 0 and res.stdout.startswith("2 no run 'no-such-run'"), res.stderr
