"""Multi-interest user modelling on CPUs: k-means over item embeddings, one shard per worker.

Each Ray worker assigns its shard of synthetic user interactions to the nearest interest
centroid; the driver averages the partial sums (one Lloyd iteration per step).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random

import tau_run

DIM = 8


def make_shard(seed: int, n: int = 400) -> list[list[float]]:
    rng = random.Random(seed)
    centers = [[math.sin(k * (d + 1)) for d in range(DIM)] for k in range(6)]
    return [[c + rng.gauss(0, 0.2) for c in rng.choice(centers)] for _ in range(n)]


def assign(
    shard_seed: int, centroids: list[list[float]]
) -> tuple[list[list[float]], list[int], float]:
    sums = [[0.0] * DIM for _ in centroids]
    counts = [0] * len(centroids)
    inertia = 0.0
    for x in make_shard(shard_seed):
        dists = [sum((a - b) ** 2 for a, b in zip(x, c, strict=True)) for c in centroids]
        k = min(range(len(dists)), key=dists.__getitem__)
        inertia += dists[k]
        counts[k] += 1
        sums[k] = [s + a for s, a in zip(sums[k], x, strict=True)]
    return sums, counts, inertia


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--interests", type=int, default=4)
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    workers = int(os.environ.get("TAU_NUM_WORKERS", "1"))
    out = tau_run.output_dir()

    run = assign
    try:
        import ray

        if os.environ.get("RAY_ADDRESS") or ray.is_initialized():
            ray.init(ignore_reinit_error=True)
            remote = ray.remote(num_cpus=1)(assign)

            def run(seed: int, c: list[list[float]]) -> tuple[list[list[float]], list[int], float]:
                return ray.get(remote.remote(seed, c))  # type: ignore[no-any-return]
    except ImportError:
        pass

    rng = random.Random(0)
    centroids = [[rng.uniform(-1, 1) for _ in range(DIM)] for _ in range(args.interests)]
    for step in range(1, args.steps + 1):
        parts = [run(w, centroids) for w in range(workers)]
        inertia = sum(p[2] for p in parts)
        for k in range(args.interests):
            n = sum(p[1][k] for p in parts)
            if n:
                centroids[k] = [sum(p[0][k][d] for p in parts) / n for d in range(DIM)]
        tau_run.log(step, inertia=inertia)
        print(f"step {step}: inertia={inertia:.2f} over {workers} worker shard(s)", flush=True)
    (out / "interests.json").write_text(json.dumps({"centroids": centroids}, indent=1))
    print(f"wrote {out / 'interests.json'}", flush=True)


if __name__ == "__main__":
    main()
