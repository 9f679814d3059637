"""Distributed training with real torch on this machine (make distributed: a test-only torch
environment): the example's DDP over two local nodes with gloo, its replicas equal after the
all-reduces; a rank killed with SIGKILL fails the whole run at once (it never hangs) and leaves
no process behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from localkit import EXAMPLES, Tau

pytestmark = pytest.mark.torch
PYTHON = os.environ.get("TAU_TORCH_PYTHON", "")


def run_of(res: subprocess.CompletedProcess[str]) -> str:
    out = res.stdout + res.stderr
    return Path(next(ln.split()[-1] for ln in out.splitlines() if ln.startswith("evidence:"))).name


@pytest.fixture(autouse=True)
def _torch() -> None:
    if not PYTHON or not Path(PYTHON).is_file():
        pytest.skip("no torch environment: `make distributed` makes one (TAU_TORCH_PYTHON)")


def test_ddp_over_two_local_nodes_all_reduces_with_gloo(tau: Tau, tmp_path: Path) -> None:
    folder = tmp_path / "ddp"
    shutil.copytree(EXAMPLES / "torchrun-ddp", folder)
    res = tau("run", str(folder), "--python", PYTHON, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout + res.stderr
    # rank 0 reports (the c10d rendezvous gives ranks in the order the nodes join: either node)
    assert re.search(r"\[node [01]\] world 2: .*replicas equal: True", out), out
    run_id = run_of(res)
    losses = [p["loss"] for p in json.loads(tau("run", "metrics", run_id, "-o", "json").stdout)]
    assert len(losses) == 30 and losses[-1] < losses[0] / 10  # rank 0's, all-reduced
    assert tau("run", "verify", run_id).returncode == 0


def test_a_rank_killed_with_sigkill_fails_the_run_without_hanging(tau: Tau, tmp_path: Path) -> None:
    folder = tmp_path / "kill"
    shutil.copytree(EXAMPLES / "torchrun-ddp", folder)
    train = folder / "train.py"
    # rank 1 dies as the OOM killer would kill it, after the process group is up; rank 0 is
    # then blocked in an all-reduce that can never complete
    train.write_text(
        train.read_text().replace(
            "        opt.step()\n",
            "        opt.step()\n        if rank == 1 and step == 3:\n"
            "            os.kill(os.getpid(), 9)\n",
        )
    )
    (folder / "tau.yaml").write_text((folder / "tau.yaml").read_text().replace('"30"', '"100000"'))
    res = tau("run", str(folder), "--python", PYTHON, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    run_id = run_of(res)
    left = subprocess.run(["pgrep", "-f", f"rdzv-id={run_id}"], capture_output=True, text=True)
    assert left.returncode == 1, "a node outlived the run"
    st = json.loads(tau("run", "status", run_id, "-o", "json").stdout)
    assert st["phase"] == "Failed"
