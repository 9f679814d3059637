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
            st = json.loads(
                tau(sandbox, "run", "status", run_id, "-o", "json", env=kube_env(sandbox)).stdout
            )
            return st["phase"] in ("Succeeded", "Failed")

        wait_until(ended, timeout=180, what="the job to end")
        record = json.loads((sandbox / "data" / "runs" / run_id / "run.json").read_text())
        assert record["phase"] in ("Succeeded", "Failed")
        v = tau(sandbox, "run", "verify", run_id, env=kube_env(sandbox))
        assert v.returncode == 0, v.stderr
    finally:
        tau(sandbox, "run", "cancel", run_id, env=kube_env(sandbox))


def test_the_table_a_listing_reads_holds_what_whole_taururns_hold(
    sandbox: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run list --cluster` asks the API server for TauRuns' printer columns (a Table): the
    real server's cells must be, field for field, what the columns' paths read from the whole
    objects (the JSONPath escapes, the types, what an absent field becomes)."""
    from taugrid.api.crds import thin as thin_of
    from taugrid.kube.client import Kube

    folder = cpu_job(tmp_path / "p", "tabled", extra="experiment: {name: tables}\n")
    res = tau(sandbox, "run", str(folder), env=kube_env(sandbox))  # follows it to its end
    assert res.returncode == 0, res.stderr
    monkeypatch.setenv("KUBECONFIG", kube_env(sandbox)["KUBECONFIG"])
    kube = Kube()

    def recorded() -> bool:  # the controller's status, as a listing reads it
        return any(
            o["spec"].get("runName") == "tabled"
            and (o.get("status") or {}).get("phase") == "Succeeded"
            for o in kube.list("TauRun", "research")
        )

    wait_until(recorded, timeout=120, what="the controller to record the end")
    thin = {o["metadata"]["name"]: o for o in kube.list_columns("TauRun", "research")}
    whole = kube.list("TauRun", "research")
    assert whole and set(thin) == {o["metadata"]["name"] for o in whole}
    for obj in whole:
        assert thin[obj["metadata"]["name"]] == thin_of(obj, "TauRun")
    ran = next(o for o in thin.values() if o["spec"]["runName"] == "tabled")
    assert ran["spec"]["manifest"] == {"experiment": {"name": "tables"}}
    # the tau.yaml the TauRun carries is whole on the server (nested maps were once pruned)
    sent = next(o for o in whole if o["spec"]["runName"] == "tabled")["spec"]["manifest"]
    assert sent["run"] == {"entrypoint": "s.py", "workload_kind": "job"}
    assert sent["runtime"]["image"] == "python:3.12-slim"
    assert ran["status"]["phase"] == "Succeeded" and ran["metadata"]["annotations"]
