"""Fleet scale, small (docs/scale.md): the scale benchmark with 100 runs on 20 KWOK nodes, in
its own sandbox. It asserts behaviour, not speed (the figures are the benchmark's): every run
ends, each as its pods did; the controller writes nothing once all have ended, records the
runs submitted while it was down after a restart, without a burst of writes, and stays within
its memory bound."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from taugrid.sandbox.controlplane import binaries_dir

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_100_runs_on_20_nodes_end_truthfully_and_the_controller_stays_quiet(
    tmp_path: Path,
) -> None:
    if binaries_dir() is None:
        pytest.skip("the control plane is not built: `make e2e` builds it")
    out = tmp_path / "scale.json"
    res = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bench_scale.py"),
            "--runs",
            "100",
            "--nodes",
            "20",
            "--max-seconds",
            "15",
            "--idle-seconds",
            "15",
            "--restart-seconds",
            "60",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    f = json.loads(out.read_text())
    assert sum(f["phases"].values()) == 100, f["phases"]
    assert set(f["phases"]) <= {"Succeeded", "Failed"}, f["phases"]
    assert f["ended_otherwise_than_their_pods"] == [], "a run's phase is not what its pods did"
    assert f["admitted"] == 100, "every run was admitted once quota came free"
    idle = {w: n for w, n in f["controller_idle"]["writes"].items() if w != "patch clusters/status"}
    assert idle == {}, f"the controller wrote while every run had ended: {idle}"
    restart = f["controller_restart"]
    # it records the runs submitted while it was down (a restarted controller once wrote
    # nothing, ever: kopf's worker bound and its index barrier), and without a burst
    assert restart["missed_runs"] >= 5 and restart["recorded_missed_s"] is not None, restart
    assert restart["max_writes_in_a_second"] <= 20, restart
    assert f["controller_peak_rss_mb"] <= 300
    assert restart["peak_rss_mb"] <= 300, restart
