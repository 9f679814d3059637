"""Budgets of the kube backend (DESIGN.md): status of 1,000 runs from one snapshot <= 1 s;
against the sandbox, cold `tau run --target kube` to "submitted" <= 0.8 s and `tau run status`
<= 0.5 s (median of 5; skipped when the control plane is not built).

    .venv/bin/python bench/bench_kube.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "unit"))
TAU = str(Path(sys.executable).parent / "tau")


def status_of_many(n: int = 1000) -> float:
    from test_kube_observe import cluster_objects, record

    from taugrid.kube.fake import FakeKube
    from taugrid.runs import status
    from taugrid.runs.backends.kube.backend import KubeBackend
    from taugrid.runs.evidence import RunDir

    with tempfile.TemporaryDirectory() as tmp:
        ids = [f"run-{i:05d}" for i in range(n)]
        dirs = []
        for rid in ids:
            rd = RunDir(Path(tmp) / rid)
            rd.path.mkdir()
            rd.create(record(rid))
            dirs.append(rd)
        backend = KubeBackend(kube=FakeKube(cluster_objects(ids)))
        t0 = time.perf_counter()
        results = [status.compute(o) for o in backend.observe(dirs)]
        elapsed = time.perf_counter() - t0
        assert len(results) == n
        return elapsed


def _project(folder: Path) -> Path:
    """The quickstart with a sandbox Ray job that runs until cancelled (SANDBOX_RUN_SECONDS)."""
    import shutil

    import yaml

    shutil.copytree(ROOT / "examples" / "quickstart", folder)
    doc = yaml.safe_load((folder / "tau.yaml").read_text())
    runtime = doc.setdefault("runtime", {})
    env = runtime.get("env") or []
    if isinstance(env, dict):
        env = [{"name": k, "value": v} for k, v in env.items()]
    runtime["env"] = [*env, {"name": "SANDBOX_RUN_SECONDS", "value": "86400"}]
    (folder / "tau.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return folder


# What a cluster command imports at the least: Typer, pydantic, PyYAML and the Kubernetes client
# (lightkube on HTTP/1.1, h2 left out as tau leaves it out: taugrid.kube.client._without_http2)
def _floor_kube() -> str:
    from taugrid.kube.client import HTTP2_MODULES

    return (
        f"import sys; [sys.modules.setdefault(m, None) for m in {HTTP2_MODULES!r}]; "
        "import typer.main, yaml, lightkube; from pydantic import BaseModel, Field, types"
    )


def floor() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", _floor_kube()], check=True)
    return time.perf_counter() - t0


def sandbox_cli() -> tuple[float, float, float, float, float] | None:
    """Medians of 5: submit (cold CLI), status right after it (computed by the client while
    the machine's cluster is busy with that submission), status once running (TauRun.status,
    written by the controller), status of a run queued for quota on a quiet cluster (computed
    by the client: its place and what it waits for); and of the libraries' floor (_floor_kube),
    measured between them."""
    from taugrid.sandbox.controlplane import binaries_dir

    if binaries_dir() is None:
        return None
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "TAU_HOME": home}
        subprocess.run(
            [TAU, "sandbox", "up", "--real-nodes", "0"], env=env, check=True, capture_output=True
        )
        try:
            kc = subprocess.run(
                [TAU, "sandbox", "kubeconfig", "--as", "researcher"],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            env.update(KUBECONFIG=kc, TAU_TARGET="kube")
            project = _project(Path(home) / "project")
            submits, queued, running, floors = [], [], [], []

            def timed(*args: str) -> tuple[float, str]:
                t0 = time.perf_counter()
                res = subprocess.run(
                    [TAU, *args], env=env, capture_output=True, text=True, check=False
                )
                return time.perf_counter() - t0, res.stdout

            for _ in range(5):
                took, out = timed("run", str(project), "-d")
                submits.append(took)
                run_id = out.strip()
                queued.append(timed("run", "status", run_id)[0])
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    took, out = timed("run", "status", run_id, "-o", "json")
                    if '"phase": "Running"' in out and "written by the controller" in out:
                        break
                    time.sleep(0.5)
                floors.append(floor())
                running.append(timed("run", "status", run_id)[0])
                timed("run", "cancel", run_id)
            waiting = queued_for_quota(timed, project)
            return (
                statistics.median(submits),
                statistics.median(queued),
                statistics.median(running),
                statistics.median(floors),
                waiting,
            )
        finally:
            subprocess.run([TAU, "sandbox", "down"], env=env, capture_output=True, check=False)


def queued_for_quota(
    timed: Callable[..., tuple[float, str]], project: Path, most: int = 8
) -> float:
    """Runs submitted until one waits for quota; once the cluster is quiet again, the median of
    5 statuses of that run (the client computes a queued run's: Kueue's word on it). NaN if
    none queued within `most` runs."""
    ids, queued_id = [], None
    for _ in range(most):
        ids.append(timed("run", str(project), "-d")[1].strip())
        deadline, out = time.monotonic() + 30, ""
        while time.monotonic() < deadline:
            out = timed("run", "status", ids[-1], "-o", "json")[1]
            if '"phase": "Queued"' in out or '"phase": "Running"' in out:
                break
            time.sleep(0.5)
        if '"phase": "Queued"' in out:
            queued_id = ids[-1]
            break
    try:
        if queued_id is None:
            return float("nan")
        time.sleep(5)  # the cluster done with the submissions (what the figure is about)
        return statistics.median(timed("run", "status", queued_id)[0] for _ in range(5))
    finally:
        for run_id in ids:
            timed("run", "cancel", run_id)


def main() -> int:
    many = status_of_many()
    print(
        f"status of 1000 runs from one snapshot:     {many:.3f}s  <= 1.0s "
        f"{'ok' if many <= 1 else 'OVER'}"
    )
    cli = sandbox_cli()
    if cli is None:
        print("sandbox: control plane not built (make controlplane); CLI budgets not measured")
        return 0
    submit, queued, running, base, waiting = cli
    print(
        f"tau run --target kube to submitted (median): {submit:.3f}s  <= 0.8s "
        f"{'ok' if submit <= 0.8 else 'OVER'}"
    )
    print(
        f"tau run status, running run (median):       {running:.3f}s  <= 0.5s "
        f"{'ok' if running <= 0.5 else 'OVER'}"
    )
    print(
        f"tau run status, right after submitting (median; the cluster busy with it): {queued:.3f}s"
    )
    print(
        f"tau run status, queued for quota (median):  {waiting:.3f}s  <= 0.5s "
        f"{'ok' if waiting <= 0.5 else 'OVER'}"
    )
    print(
        f"the libraries' floor (Python importing Typer, pydantic, PyYAML, lightkube): {base:.3f}s;"
        f" status of a running run is {running - base:.3f}s above it"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
