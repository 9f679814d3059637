"""Quickstart: fit y = 3x + 2 with data-parallel SGD across the run's Ray workers.

Runs anywhere: on a cluster (KubeRay), on the local backend, or as `python train.py`.
Plain Python (no GPU needed to try it); metrics and checkpoints go through `tau_run`, the
stdlib-only helper, so `tau run status`, `metrics` and `resume` have evidence.
"""

from __future__ import annotations

import json
import os
import random

import tau_run

STEPS = int(os.environ.get("QUICKSTART_STEPS", "40"))


def shard_gradient(w: float, b: float, seed: int, n: int = 256) -> tuple[float, float, float]:
    rng = random.Random(seed)
    gw = gb = loss = 0.0
    for _ in range(n):
        x = rng.uniform(-1, 1)
        y = 3 * x + 2 + rng.gauss(0, 0.05)
        err = w * x + b - y
        gw += 2 * err * x / n
        gb += 2 * err / n
        loss += err * err / n
    return gw, gb, loss


def main() -> None:
    workers = int(os.environ.get("TAU_NUM_WORKERS", "1"))
    print(f"quickstart: fitting y = 3x + 2 on {workers} worker(s), {STEPS} steps", flush=True)
    w, b = 0.0, 0.0
    start = tau_run.resume_step()
    if start:
        state = json.loads((tau_run.resume_from() / "state.json").read_text())  # type: ignore[operator]
        w, b = state["w"], state["b"]
        print(f"resumed at step {start}", flush=True)

    grad = shard_gradient
    try:
        import ray

        if os.environ.get("RAY_ADDRESS") or ray.is_initialized():
            ray.init(ignore_reinit_error=True)
            remote = ray.remote(num_cpus=1)(shard_gradient)

            def grad(w: float, b: float, seed: int, n: int = 256) -> tuple[float, float, float]:
                parts = ray.get([remote.remote(w, b, seed * 1000 + i, n) for i in range(workers)])
                return tuple(sum(p[k] for p in parts) / len(parts) for k in range(3))  # type: ignore[return-value]
    except ImportError:
        pass

    for step in range(start + 1, STEPS + 1):
        gw, gb, loss = grad(w, b, step)
        w -= 0.3 * gw
        b -= 0.3 * gb
        tau_run.log(step, loss=loss, w=w, b=b)
        if step % 10 == 0:
            with tau_run.checkpoint(step) as d:
                (d / "state.json").write_text(json.dumps({"w": w, "b": b, "step": step}))
            print(f"step {step}: loss={loss:.5f} w={w:.3f} b={b:.3f} (checkpoint)", flush=True)
    print(f"done: w={w:.3f} b={b:.3f}", flush=True)


if __name__ == "__main__":
    main()
