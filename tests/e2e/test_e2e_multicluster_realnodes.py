"""One queue across clusters, with code that runs (#43 on real nodes): `tau sandbox up --clusters 2
--real-nodes 1` is a MultiKueue manager (KWOK nodes only: it runs no run's pods) and a worker with
a real node (kubelet, containerd, runc). A researcher submits to the manager; MultiKueue copies
the Job to the worker, TauGrid's controller makes the ConfigMaps its pod mounts there (its code and
TauGrid's helpers), and everything a researcher does next works from the manager's side: live
progress, the program's own log, metrics, a verified pull from another machine, a resume that
continues from the checkpoint on the worker's volume. Skips where real nodes cannot run, unless
TAU_REQUIRE_REAL_NODES=1 (`make e2e`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_tau as tau
from kubekit import wait_until
from sandboxkit import (
    corpus_reader,
    kube_env,
    need_real_nodes,
    project,
    resumed_after_a_fault,
    sig,
    submit,
    wait_phase,
)

pytestmark = pytest.mark.e2e
WORKER = "worker-1"

STEPS = """
import os, socket, time, tau_run
start = tau_run.resume_step()
print("starting after step", start, "on", socket.gethostname(), flush=True)
for step in range(start + 1, 21):
    tau_run.log(step, loss=1.0 / step)
    if step % 10 == 0:
        with tau_run.checkpoint(step) as d:
            (d / "state.txt").write_text(str(step))
    print("step", step, flush=True)
    time.sleep(1)
    if step == 15 and start == 0 and os.environ.get("FAIL_AT_15"):
        raise SystemExit("a fault at step 15")
os.makedirs(os.environ["TAU_OUTPUT_DIR"], exist_ok=True)
open(os.path.join(os.environ["TAU_OUTPUT_DIR"], "answer.txt"), "w").write("42")
"""


@pytest.fixture(scope="module")
def mc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    need_real_nodes()
    home = tmp_path_factory.mktemp("mcreal")
    res = tau(home, "sandbox", "up", "--clusters", "2", "--real-nodes", "1", timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{WORKER}: API server" in res.stdout and "real: cpu-0" in res.stdout, res.stdout
    yield home
    assert tau(home, "sandbox", "down", timeout=300).returncode == 0


def on_worker(home: Path, kind: str, namespace: str = "research") -> list[dict[str, Any]]:
    from taugrid.kube.client import Kube

    kubeconfig = tau(home, "sandbox", "kubeconfig").stdout.strip()
    return Kube(WORKER, kubeconfig=kubeconfig).list(kind, namespace)


def test_a_run_sent_to_the_manager_runs_its_code_on_the_worker_and_its_results_come_back(
    mc: Path, tmp_path: Path
) -> None:
    """20 steps over ~20 s on the worker's real node: `tau run status --watch` on the manager
    names the worker and shows the step and the newest checkpoint moving; the log is the
    program's own; a teammate's machine (another TAU_HOME) reads the curve and pulls the whole
    record verified; the run's own ConfigMaps on the worker go with its Job."""
    run_id = submit(mc, project(tmp_path / "p", "mc-steps", STEPS))
    res = tau(mc, "run", "status", run_id, "--watch", "-o", "json", env=kube_env(mc), timeout=300)
    docs = [json.loads(line) for line in res.stdout.splitlines()]
    assert docs and docs[-1]["phase"] == "Succeeded", (res.stderr, docs[-1:])
    assert docs[-1]["clusters"] == [WORKER], docs[-1]
    running = [d for d in docs if d["phase"] == "Running"]
    steps = [d["last_step"] for d in running if d.get("last_step") is not None]
    assert len(set(steps)) >= 3 and steps == sorted(steps), steps  # it moved, forward
    saved = {sig(d, "ArtifactSaved")["reason"] for d in running}
    assert any("(step 10)" in r for r in saved), saved
    phases = [d["phase"] for d in docs]
    assert "Starting" not in phases[phases.index("Running") :], phases  # never back

    logs = tau(mc, "run", "logs", run_id, env=kube_env(mc))
    assert logs.returncode == 0, logs.stderr
    assert f"runs on worker cluster {WORKER}" in logs.stderr, logs.stderr
    assert "starting after step 0 on" in logs.stdout and "step 20" in logs.stdout, logs.stdout

    other = tmp_path / "teammate"
    rows = json.loads(tau(other, "run", "metrics", run_id, "-o", "json", env=kube_env(mc)).stdout)
    assert [r["step"] for r in rows] == list(range(1, 21))
    got = tmp_path / "got"
    pulled = tau(other, "run", "pull", run_id, "--to", str(got), "-o", "json", env=kube_env(mc))
    assert pulled.returncode == 0, pulled.stderr
    doc = json.loads(pulled.stdout)
    assert doc["ok"] and doc["sealed"], doc
    assert (got / "outputs" / "answer.txt").read_text() == "42"
    assert len(list((got / "checkpoints").glob("step-*/state.txt"))) == 2

    # its code ConfigMap was made on the worker owned by the Job there: gone with it (the
    # helpers, shared and named by their content, stay as they do on the manager)
    def code_gone() -> bool:
        names = [c["metadata"]["name"] for c in on_worker(mc, "ConfigMap")]
        return not any(run_id in n for n in names) and any("helpers" in n for n in names)

    wait_until(code_gone, timeout=120, what="the run's ConfigMaps on the worker gone with its Job")


def test_resume_from_the_manager_continues_from_the_checkpoint_on_the_worker(
    mc: Path, tmp_path: Path
) -> None:
    """A run that fails at step 15 after its checkpoint at step 10, resumed from the manager:
    the child reads the parent's checkpoint on the worker's volume and goes on from step 11;
    the lineage's metrics are one curve."""
    folder = project(
        tmp_path / "p",
        "mc-resume",
        STEPS.replace('os.environ.get("FAIL_AT_15")', "True"),
        "resilience: {max_retries: 0}\n",
    )
    resumed_after_a_fault(mc, folder)


def test_a_data_input_submitted_to_the_manager_is_read_on_the_worker(
    mc: Path, tmp_path: Path
) -> None:
    """A dataset registered on the researcher's machine, named as a run's input and submitted to
    the manager: it is copied into the workspace's registry on the worker (its volume's
    /data/registry, which the manager's TauCluster names), and the code on the worker reads it.
    Before, it went to the manager's registry only, which no worker's pod reads."""
    folder, _ = corpus_reader(mc, tmp_path, "mc-data")
    res = tau(mc, "run", str(folder), "-d", env=kube_env(mc))
    assert res.returncode == 0, res.stderr
    assert f"registry on worker {WORKER}" in res.stderr, res.stderr
    run_id = res.stdout.strip()
    st = wait_phase(mc, run_id, {"Succeeded", "Failed"})
    logs = tau(mc, "run", "logs", run_id, env=kube_env(mc)).stdout
    assert st["phase"] == "Succeeded" and st["clusters"] == [WORKER], (st, logs)
    assert "read 3 words" in logs, logs
