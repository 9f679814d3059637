"""The real Pulumi engine (`make pulumi`) on the sandbox: `tau run --target pulumi` to
"submitted" against `--target kube` (ratio; median of 3), `tau platform preview --stack sandbox`
for real (with TauGrid's policy pack and without), and `tau platform plan --stack prod` under
mocks (the AKS stack cannot be previewed for real here). Skipped parts say why.

    .venv/bin/python bench/bench_pulumi.py
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
TAU = str(Path(sys.executable).parent / "tau")


def timed(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    res = subprocess.run([TAU, *args], env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, res.stdout.strip()


def median(args: list[str], env: dict[str, str], n: int = 3) -> float:
    return statistics.median(timed(args, env)[0] for _ in range(n))


def main() -> int:
    from taugrid.api.errors import TauError
    from taugrid.infra import engine
    from taugrid.sandbox.controlplane import binaries_dir

    env = {**os.environ}
    plan = median(["platform", "plan", "--stack", "prod"], env)
    print(f"tau platform plan --stack prod (mocks, median of 3):   {plan:.2f}s")
    try:
        engine.find_bin()
    except TauError:
        print("the Pulumi engine is not built (make pulumi): engine timings not measured")
        return 0
    if binaries_dir() is None:
        print("the control plane is not built (make controlplane): engine timings not measured")
        return 0
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as project:
        env = {**os.environ, "TAU_HOME": home}
        subprocess.run(
            [TAU, "sandbox", "up", "--no-platform", "--real-nodes", "0"],
            env=env,
            check=True,
            capture_output=True,
        )
        try:
            admin = {**env, "KUBECONFIG": timed(["sandbox", "kubeconfig"], env)[1]}
            up, _ = timed(["platform", "up", "--stack", "sandbox", "--yes"], admin)
            print(f"tau platform up --stack sandbox (first, 50 resources): {up:.2f}s")
            pv = median(["platform", "preview", "--stack", "sandbox"], admin)
            pv_bare = median(["platform", "preview", "--stack", "sandbox", "--no-policies"], admin)
            print(
                f"tau platform preview --stack sandbox (median of 3):    {pv:.2f}s "
                f"({pv_bare:.2f}s without the policy pack)"
            )
            kc = timed(["sandbox", "kubeconfig", "--as", "researcher"], env)[1]
            (Path(project) / "s.py").write_text("print('done')\n")
            (Path(project) / "tau.yaml").write_text(
                "schema_version: 1\nname: bench\nrun: {entrypoint: s.py, workload_kind: job}\n"
                "compute: {gpus: 0, cpus: 1, memory: 1Gi}\nruntime: {image: python:3.12-slim}\n"
            )
            researcher = {**env, "KUBECONFIG": kc}
            times = {}
            for target in ("kube", "pulumi"):
                times[target] = median(["run", project, "-d", "--target", target], researcher)
            print(
                f"submit to 'submitted' (median of 3): kube {times['kube']:.2f}s, pulumi "
                f"{times['pulumi']:.2f}s, ratio {times['pulumi'] / times['kube']:.1f}x"
            )
            subprocess.run([TAU, "run", "gc"], env=researcher, capture_output=True, check=False)
        finally:
            subprocess.run([TAU, "sandbox", "down"], env=env, capture_output=True, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
