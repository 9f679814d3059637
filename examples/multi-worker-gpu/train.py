"""Data-parallel training of a small MLP-free model with checkpoints and resume.

Every step each worker computes a gradient on its shard (on its GPUs when torch+CUDA are
there, else on CPU in plain Python); the driver averages them. A checkpoint is written every
`--checkpoint-every` steps, atomically (a temp folder renamed into place), so a run killed
at any moment resumes from the newest complete one via TAU_RESUME_FROM.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

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


def save_checkpoint(ckpt_dir: Path, step: int, w: list[float]) -> Path:
    final = ckpt_dir / f"step-{step:06d}"
    tmp = ckpt_dir / f".tmp-step-{step:06d}"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "state.json").write_text(json.dumps({"step": step, "w": w}))
    tmp.rename(final)
    return final


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--checkpoint-every", type=int, default=5)
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args()
    workers = int(os.environ.get("TAU_NUM_WORKERS", "1"))
    ckpt_dir = Path(os.environ.get("TAU_CHECKPOINT_DIR", "checkpoints"))
    metrics = Path(os.environ.get("TAU_METRICS_FILE", "metrics.jsonl"))
    out = Path(os.environ.get("TAU_OUTPUT_DIR", "outputs"))
    step_sleep = float(os.environ.get("TRAIN_STEP_SLEEP", "0"))
    for d in (ckpt_dir, metrics.parent, out):
        d.mkdir(parents=True, exist_ok=True)

    w, start = [0.0] * DIM, 0
    if os.environ.get("TAU_RESUME_FROM"):
        state = json.loads((Path(os.environ["TAU_RESUME_FROM"]) / "state.json").read_text())
        w, start = state["w"], state["step"]
        print(f"resuming at step {start} from {os.environ['TAU_RESUME_FROM']}", flush=True)

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
        with metrics.open("a") as f:
            f.write(json.dumps({"step": step, "ts": time.time(), "loss": loss}) + "\n")
        if step % args.checkpoint_every == 0:
            path = save_checkpoint(ckpt_dir, step, w)
            print(f"step {step}: loss={loss:.5f} checkpoint={path.name}", flush=True)
        if step_sleep:
            time.sleep(step_sleep)
    (out / "model.json").write_text(json.dumps({"w": w}))
    print(f"done after {args.steps} steps", flush=True)


if __name__ == "__main__":
    main()
