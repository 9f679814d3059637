"""The trainable of the sweep: gradient descent with momentum on a small quadratic, whose
loss after each step is reported to Ray Tune (tau's driver calls objective(config))."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ray import tune


def descend(
    config: dict[str, Any], report: Callable[[dict[str, float]], None], steps: int = 20
) -> float:
    x, v = 5.0, 0.0
    scale = config["width"] / 16
    loss = x * x
    for _ in range(steps):
        grad = 2 * x * scale
        v = config["momentum"] * v - config["lr"] * grad
        x += v
        loss = x * x
        report({"loss": loss})
    return loss


def objective(config: dict[str, Any]) -> None:
    """The trainable tau's driver calls: every step's loss reported to Ray Tune."""
    descend(config, tune.report)


if __name__ == "__main__":  # one trial by hand: python objective.py
    print(descend({"lr": 0.1, "momentum": 0.5, "width": 16}, report=lambda _: None))
