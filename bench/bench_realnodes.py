"""Budgets of the sandbox's real nodes (docs/sandbox.md): warm `tau sandbox up --real-nodes 1`
<= 60 s; a CPU Job from submit to Succeeded <= 15 s on a warm sandbox (median of 3); the
quickstart's code as a CPU RayJob (a head and a worker pod forming a Ray cluster, 20 steps) from
submit to Succeeded and `down` reported; a 512 MiB checkpoint pulled by `tau run pull` from
another TAU_HOME <= 30 s, and a cut-off pull (killed at about half) finished; `tau run status` of
a finished run with its progress read from the volume (median of 5). Skipped (with the reason)
where real nodes cannot run: not root, containerd or
`make images` missing, the kubelet not built.

    .venv/bin/python bench/bench_realnodes.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TAU = str(Path(sys.executable).parent / "tau")
UP_BUDGET_S = 60.0
JOB_BUDGET_S = 15.0
PULL_BUDGET_S = 30.0
STATUS_BUDGET_S = 0.5
BIG = """
import os, tau_run
block = os.urandom(8 << 20)
with tau_run.checkpoint(1) as d:
    with open(d / "model.bin", "wb") as f:
        for _ in range(64):
            f.write(block)
"""


def why_not() -> str | None:
    from taugrid.sandbox import realnodes
    from taugrid.sandbox.controlplane import binaries_dir

    bins = binaries_dir()
    if bins is None or not (bins / "kubelet").is_file():
        return "the control plane or the kubelet is not built (make controlplane)"
    return realnodes.can_run()


def tau(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TAU, *args], env=env, capture_output=True, text=True, check=False)


def until_done(kenv: dict[str, str], project: Path) -> float | None:
    """Seconds from `tau run -d` to Succeeded; None (said) when it ended otherwise."""
    t0 = time.perf_counter()
    res = tau(kenv, "run", str(project), "-d")
    run_id, phase = res.stdout.strip(), None
    while phase not in ("Succeeded", "Failed") and time.perf_counter() - t0 < 600:
        st = tau(kenv, "run", "status", run_id, "-o", "json")
        phase = json.loads(st.stdout or "{}").get("phase")
    if phase != "Succeeded":
        print(f"{project.name}: ended {phase}: {res.stdout}{res.stderr}")
        return None
    return time.perf_counter() - t0


def main() -> int:
    # Long because: a benchmark reads top to bottom as the scenario it measures (set
    # up, load, measure, report); its steps are used only here.
    why = why_not()
    if why is not None:
        print(f"bench_realnodes: skipped: {why}")
        return 0
    with tempfile.TemporaryDirectory(prefix="tau-bench-rn-") as tmp:
        home = Path(tmp) / "home"
        env = {**os.environ, "TAU_HOME": str(home)}
        t0 = time.perf_counter()
        res = tau(env, "sandbox", "up", "--real-nodes", "1")
        up_s = time.perf_counter() - t0
        if res.returncode != 0:
            print(res.stderr)
            return 1
        try:
            kc = tau(env, "sandbox", "kubeconfig", "--as", "researcher").stdout.strip()
            kenv = {**env, "KUBECONFIG": kc, "TAU_TARGET": "kube"}
            project = Path(tmp) / "p"
            project.mkdir()
            (project / "main.py").write_text("print('done')\n")
            (project / "tau.yaml").write_text(
                "schema_version: 1\nname: bench\nrun: {entrypoint: main.py, workload_kind: job}\n"
                "compute: {gpus: 0, cpus: 0.5, memory: 512Mi}\n"
                "runtime: {image: python:3.12-slim}\n"
            )
            jobs = []
            for _ in range(3):
                took = until_done(kenv, project)
                if took is None:
                    return 1
                jobs.append(took)
            quickstart = Path(tmp) / "q"
            quickstart.mkdir()
            root = Path(__file__).resolve().parents[1]
            (quickstart / "train.py").write_text(
                (root / "examples/quickstart/train.py").read_text()
            )
            (quickstart / "tau.yaml").write_text(
                "schema_version: 1\nname: bench-ray\n"
                "run: {entrypoint: train.py, workload_kind: rayjob}\n"
                "compute: {gpus: 0, workers: 1, cpus: 1, memory: 2Gi}\n"
                "runtime:\n  image: rayproject/ray:2.56.0-py312-cpu\n"
                "  env: [{name: QUICKSTART_STEPS, value: '20'}]\n"
            )
            rayjob = until_done(kenv, quickstart)
            if rayjob is None:
                return 1
            pulled = pull_figures(Path(tmp), kenv)
            if pulled is None:
                return 1
        finally:
            t0 = time.perf_counter()
            tau(env, "sandbox", "down")
            down_s = time.perf_counter() - t0
    job = statistics.median(jobs)
    print(f"sandbox up, 1 real node (warm): {up_s:.1f} s (budget {UP_BUDGET_S:.0f} s)")
    print(
        f"CPU Job submit -> Succeeded: median {job:.1f} s of {[round(j, 1) for j in jobs]} "
        f"(budget {JOB_BUDGET_S:.0f} s)"
    )
    print(f"CPU RayJob (quickstart, head + 1 worker pod) submit -> Succeeded: {rayjob:.1f} s")
    print(f"sandbox down: {down_s:.1f} s")
    pull_s, resumed_s, status_s = pulled
    print(
        f"tau run pull of a 512 MiB checkpoint (another TAU_HOME): {pull_s:.1f} s "
        f"(budget {PULL_BUDGET_S:.0f} s); killed at about half, then again: {resumed_s:.1f} s"
    )
    print(
        f"tau run status with the run's progress from the volume: median {status_s:.2f} s "
        f"(budget {STATUS_BUDGET_S} s)"
    )
    ok = up_s <= UP_BUDGET_S and job <= JOB_BUDGET_S and pull_s <= PULL_BUDGET_S
    return 0 if ok and status_s <= STATUS_BUDGET_S else 1


def pull_figures(tmp: Path, kenv: dict[str, str]) -> tuple[float, float, float] | None:
    """(whole pull, a cut-off pull finished, status) for a run that wrote a 512 MiB checkpoint."""
    project = tmp / "big"
    project.mkdir()
    (project / "main.py").write_text(BIG)
    (project / "tau.yaml").write_text(
        "schema_version: 1\nname: bench-big\nrun: {entrypoint: main.py, workload_kind: job}\n"
        "compute: {gpus: 0, cpus: 0.5, memory: 512Mi}\nruntime: {image: python:3.12-slim}\n"
    )
    t0 = time.perf_counter()
    res = tau(kenv, "run", str(project), "-d")
    run_id = res.stdout.strip()
    if until_phase(kenv, run_id) != "Succeeded":
        print(f"bench-big: {res.stdout}{res.stderr}")
        return None
    other = {**kenv, "TAU_HOME": str(tmp / "teammate")}
    t0 = time.perf_counter()
    got = tau(other, "run", "pull", run_id, "--to", str(tmp / "got"), "-o", "json")
    pull_s = time.perf_counter() - t0
    if got.returncode != 0:
        print(got.stderr)
        return None
    cut = subprocess.Popen(
        [TAU, "run", "pull", run_id, "--to", str(tmp / "cut")],
        env=other,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(pull_s / 2)  # about half of it, as measured just now
    cut.kill()
    cut.wait()
    t0 = time.perf_counter()
    again = tau(other, "run", "pull", run_id, "--to", str(tmp / "cut"), "-o", "json")
    resumed_s = time.perf_counter() - t0
    if again.returncode != 0 or not json.loads(again.stdout)["ok"]:
        print(again.stdout, again.stderr)
        return None
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        tau(other, "run", "status", run_id)
        times.append(time.perf_counter() - t0)
    return pull_s, resumed_s, statistics.median(times)


def until_phase(kenv: dict[str, str], run_id: str) -> str | None:
    t0, phase = time.perf_counter(), None
    while phase not in ("Succeeded", "Failed") and time.perf_counter() - t0 < 600:
        st = tau(kenv, "run", "status", run_id, "-o", "json")
        phase = json.loads(st.stdout or "{}").get("phase")
    return phase


if __name__ == "__main__":
    sys.exit(main())
