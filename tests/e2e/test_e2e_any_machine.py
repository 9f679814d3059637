"""The TauRun is the shared truth: one researcher, two machines (two TAU_HOMEs). A run submitted
from one is listed, shown and cancelled from the other; a detached run's local record is sealed
when its end is first seen."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import run_tau as tau
from kubekit import wait_until
from sandboxkit import cpu_job, gpu_rayjob, kube_env

pytestmark = pytest.mark.e2e


def other_machine(sandbox: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A second TAU_HOME with the same researcher's kubeconfig (copied: nothing else shared)."""
    home = tmp_path / "laptop-2"
    home.mkdir()
    kc = Path(kube_env(sandbox)["KUBECONFIG"])
    mine = home / "kubeconfig"
    shutil.copy(kc, mine)
    return home, {"KUBECONFIG": str(mine), "TAU_TARGET": "kube"}


def test_a_run_is_seen_and_cancelled_from_another_machine(sandbox: Path, tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    gpu_rayjob(project, "elsewhere")  # runs until cancelled
    res = tau(sandbox, "run", str(project), "-d", env=kube_env(sandbox))
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    home2, env2 = other_machine(sandbox, tmp_path)
    try:
        listed = tau(home2, "run", "list", "--cluster", "-o", "json", env=env2)
        assert listed.returncode == 0, listed.stderr
        assert run_id in [r["run_id"] for r in json.loads(listed.stdout)]
        mine = json.loads(
            tau(home2, "run", "list", "--cluster", "--mine", "-o", "json", env=env2).stdout
        )
        assert run_id in [r["run_id"] for r in mine]
        st = tau(home2, "run", "status", run_id, "-o", "json", env=env2)
        assert st.returncode == 0, st.stderr
        doc = json.loads(st.stdout)
        assert doc["run_id"] == run_id and doc["target"] == "kube"
        by_name = tau(home2, "run", "status", "elsewhere", "-o", "json", env=env2)
        assert json.loads(by_name.stdout)["run_id"] == run_id
        gone = tau(home2, "run", "cancel", run_id, env=env2)
        assert gone.returncode == 0 and "cancelled" in gone.stdout, gone.stderr
    finally:
        tau(sandbox, "run", "cancel", run_id, env=kube_env(sandbox))
    # the first machine sees the end too, and its record is sealed
    st1 = json.loads(
        tau(sandbox, "run", "status", run_id, "-o", "json", env=kube_env(sandbox)).stdout
    )
    assert st1["phase"] in ("Cancelled", "Failed")


def test_a_detached_run_that_ended_is_sealed_and_verifies(sandbox: Path, tmp_path: Path) -> None:
    folder = cpu_job(tmp_path, "sealed")
    res = tau(sandbox, "run", str(folder), "-d", env=kube_env(sandbox))
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    try:

        def ended() -> bool:
            st = json.loads(tau(sandbox, "run", "status", run_id, "-o", "json",
                                env=kube_env(sandbox)).stdout)  # fmt: skip
            return st["phase"] in ("Succeeded", "Failed")

        wait_until(ended, timeout=180, what="the job to end")
        record = json.loads((sandbox / "data" / "runs" / run_id / "run.json").read_text())
        assert record["phase"] in ("Succeeded", "Failed")
        v = tau(sandbox, "run", "verify", run_id, env=kube_env(sandbox))
        assert v.returncode == 0, v.stderr
    finally:
        tau(sandbox, "run", "cancel", run_id, env=kube_env(sandbox))
