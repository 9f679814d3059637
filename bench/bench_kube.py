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


def sandbox_cli() -> tuple[float, float] | None:
    from taugrid.infra.controlplane import binaries_dir

    if binaries_dir() is None:
        return None
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "TAU_HOME": home}
        subprocess.run([TAU, "sandbox", "up"], env=env, check=True, capture_output=True)
        try:
            kc = subprocess.run([TAU, "sandbox", "kubeconfig", "--as", "researcher"], env=env,
                                check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
            env.update(KUBECONFIG=kc, TAU_TARGET="kube")
            submits, statuses = [], []
            for _ in range(5):
                t0 = time.perf_counter()
                res = subprocess.run([TAU, "run", str(ROOT / "examples" / "quickstart"), "-d"],
                                     env=env, capture_output=True, text=True, check=True)  # fmt: skip
                submits.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                subprocess.run([TAU, "run", "status", res.stdout.strip()], env=env,
                               capture_output=True, check=False)  # fmt: skip
                statuses.append(time.perf_counter() - t0)
            return statistics.median(submits), statistics.median(statuses)
        finally:
            subprocess.run([TAU, "sandbox", "down"], env=env, capture_output=True, check=False)


def main() -> int:
    many = status_of_many()
    print(
        f"status of 1000 runs from one snapshot:     {many:.3f}s  <= 1.0s {'ok' if many <= 1 else 'OVER'}"
    )
    cli = sandbox_cli()
    if cli is None:
        print("sandbox: control plane not built (make controlplane); CLI budgets not measured")
        return 0
    submit, st = cli
    print(
        f"tau run --target kube to submitted (median): {submit:.3f}s  <= 0.8s {'ok' if submit <= 0.8 else 'OVER'}"
    )
    print(
        f"tau run status, kube run (median):          {st:.3f}s  <= 0.5s {'ok' if st <= 0.5 else 'OVER'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
