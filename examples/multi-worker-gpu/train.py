"""Data-parallel training of a small MLP-free model with checkpoints and resume.

Every step each worker computes a gradient on its shard (on its GPUs when torch+CUDA are
there, else on CPU in plain Python); the driver averages them. A checkpoint is written every
`--checkpoint-every` steps through `tau_run.checkpoint` (complete only once fully written),
so a run killed at any moment resumes from the newest complete one via TAU_RESUME_FROM.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

import tau_run

DIM = 16
TRUE_W = [((i * 7) % 5 - 2) / 2 for i in range(DIM)]


def gradient(w: list[float], seed: int, n: int = 128) -> tuple[list[float], float]:
    rng = random.Random(seed)
    g = [0.0] * DIM
    loss = 0.0
    for _ in range(n):
        x = [rng.gauss(0, 1) for _ in range(DIM)]
        err = sum(a * b for a, b in zip(w, x, strict=True)) - sum(
            a * b for a, b in zip(TRUE_W, x, strict=True)
        )
        loss += err * err / n
        for i in range(DIM):
            g[i] += 2 * err * x[i] / n
    return g, loss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--checkpoint-every", type=int, default=5)
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args()
    workers = int(os.environ.get("TAU_NUM_WORKERS", "1"))
    step_sleep = float(os.environ.get("TRAIN_STEP_SLEEP", "0"))
    print(f"multi-worker-gpu: {workers} worker(s), steps {args.steps}", flush=True)
    w, start = [0.0] * DIM, tau_run.resume_step()
    if start:
        src = tau_run.resume_from()
        assert src is not None
        w = json.loads((src / "state.json").read_text())["w"]
        print(f"resuming at step {start} from {src}", flush=True)

    grad = gradient
    try:
        import ray

        if os.environ.get("RAY_ADDRESS") or ray.is_initialized():
            ray.init(ignore_reinit_error=True)
            remote = ray.remote(num_cpus=1)(gradient)

            def grad(w: list[float], seed: int, n: int = 128) -> tuple[list[float], float]:
                parts = ray.get([remote.remote(w, seed * 100 + i, n) for i in range(workers)])
                g = [sum(p[0][i] for p in parts) / len(parts) for i in range(DIM)]
                return g, sum(p[1] for p in parts) / len(parts)
    except ImportError:
        pass

    for step in range(start + 1, args.steps + 1):
        g, loss = grad(w, step)
        w = [a - args.lr * b for a, b in zip(w, g, strict=True)]
        tau_run.log(step, loss=loss)
        if step % args.checkpoint_every == 0:
            with tau_run.checkpoint(step) as d:
                (d / "state.json").write_text(json.dumps({"step": step, "w": w}))
            print(f"step {step}: loss={loss:.5f} (checkpoint)", flush=True)
        if step_sleep:
            time.sleep(step_sleep)
    (tau_run.output_dir() / "model.json").write_text(json.dumps({"w": w}))
    print(f"done after {args.steps} steps", flush=True)


if __name__ == "__main__":
    main()
