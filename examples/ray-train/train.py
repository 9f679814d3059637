"""Data-parallel linear regression (numpy): each worker fits its own shard of the data and
reports every epoch (with torch installed, tau uses Ray's TorchTrainer, which sets up the
process group for DDP's all-reduce)."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import ray.train


def train_loop_per_worker(config: dict[str, Any]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=5)
    args = ap.parse_args(config.get("args", []))
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    rng = np.random.default_rng(rank)
    x = rng.uniform(-1, 1, size=(512, 3))
    y = x @ np.array([2.0, -1.0, 0.5]) + 0.3 + 0.01 * rng.normal(size=512)
    w, b = np.zeros(3), 0.0
    for epoch in range(args.epochs):
        for _ in range(50):
            err = x @ w + b - y
            w -= 0.1 * (x.T @ err) / len(x)
            b -= 0.1 * err.mean()
        loss = float(np.mean((x @ w + b - y) ** 2))
        ray.train.report({"epoch": epoch, "loss": loss, "world_size": world})


if __name__ == "__main__":
    print("run it with tau: tau run examples/ray-train (it calls train_loop_per_worker)")
