"""torchrun on this machine: `compute.workers` local nodes on 127.0.0.1, each a torchrun agent
with its node rank at one c10d rendezvous; the first node that fails stops the others. These run
a stand-in for `torch.distributed.run` (torch is not installed here): it records the arguments
tau gives torchrun and runs the script once per node, so what is tested is tau's part."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from localkit import Tau

STAND_IN = """import runpy, sys
args = sys.argv[1:]
i = next(k for k, a in enumerate(args) if not a.startswith("--"))
print("agent", " ".join(args[:i]), flush=True)
sys.argv = args[i:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    fake = tmp_path / "fake" / "torch" / "distributed"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "run.py").write_text(STAND_IN)
    folder = tmp_path / "ddp"
    folder.mkdir()
    (folder / "tau.yaml").write_text(
        "schema_version: 1\nname: ddp\nrun: {entrypoint: train.py, launcher: torchrun, "
        "args: ['--lr', '0.1']}\ncompute: {workers: 3}\n"
        f"runtime: {{env: {{PYTHONPATH: '{tmp_path / 'fake'}'}}}}\n"
    )
    return folder


def record(out: str) -> Path:
    """The run's evidence folder, as `tau run` prints it."""
    return Path(next(ln.split()[-1] for ln in out.splitlines() if ln.startswith("evidence:")))


def test_three_local_nodes_meet_at_one_rendezvous_and_each_keeps_its_log(
    tau: Tau, project: Path
) -> None:
    (project / "train.py").write_text(
        "import os, sys\nprint('node', os.environ['TAU_NODE_RANK'], sys.argv[1:], "
        "os.environ['TAU_WORLD_SIZE'], flush=True)\n"
    )
    res = tau("run", str(project))
    assert res.returncode == 0, res.stderr
    run_dir = record(res.stdout + res.stderr)
    log = (run_dir / "logs" / "driver.log").read_text()
    agents = [ln for ln in log.splitlines() if " agent " in ln]
    assert len(agents) == 3
    port = {a.split("--rdzv-endpoint=")[1].split()[0] for a in agents}
    assert len(port) == 1 and next(iter(port)).startswith("127.0.0.1:")  # one rendezvous
    for i in range(3):
        mine = (run_dir / "nodes" / str(i) / "driver.log").read_text()
        assert f"--node-rank={i}" in mine and f"is_host={int(i == 0)}" in mine
        assert f"node {i} ['--lr', '0.1'] 3" in mine  # the script's args; world size 3
        assert f"[node {i}] node {i}" in log  # and in the run's log, prefixed
        assert json.loads((run_dir / "nodes" / str(i) / "exit.json").read_text()) == {
            "exit_code": 0
        }
    assert tau("run", "verify", run_dir.name).returncode == 0


def test_the_first_node_that_fails_stops_the_others(tau: Tau, project: Path) -> None:
    (project / "train.py").write_text(
        "import os, sys, time\n"
        "if os.environ['TAU_NODE_RANK'] == '1':\n    time.sleep(0.5)\n    sys.exit(7)\n"
        "time.sleep(600)\n"
    )
    res = tau("run", str(project), timeout=120)  # would wait 600 s if the others kept running
    assert res.returncode == 1, res.stderr
    assert "exit code 7" in res.stdout + res.stderr
    run_id = record(res.stdout + res.stderr).name
    # every node's agent carries the run id (its rendezvous id): none is left
    left = subprocess.run(["pgrep", "-f", f"rdzv-id={run_id}"], capture_output=True, text=True)
    assert left.returncode == 1 and left.stdout.strip() == "", "a node outlived the run"
    st = json.loads(tau("run", "status", run_id, "-o", "json").stdout)
    assert st["phase"] == "Failed"
