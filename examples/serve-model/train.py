"""A softmax classifier of three flower species from four measurements (synthetic, seeded).

Writes checkpoints (`model.json`: weights, bias, classes, feature means) and logs accuracy, so
`tau data model register iris --from-run RUN --checkpoint best` has something to register.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import tau_run

CLASSES = ["setosa", "versicolor", "virginica"]
CENTRES = np.array([[5.0, 3.4, 1.5, 0.2], [5.9, 2.8, 4.3, 1.3], [6.6, 3.0, 5.6, 2.0]])


def data(seed: int, n: int = 150) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    x = CENTRES[y] + rng.normal(0, 0.35, (n, 4))
    return x, y


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    x, y = data(a.seed)
    mean = x.mean(axis=0)
    xc = x - mean
    w, b = np.zeros((4, 3)), np.zeros(3)
    onehot = np.eye(3)[y]
    for epoch in range(1, a.epochs + 1):
        z = xc @ w + b
        prob = np.exp(z - z.max(axis=1, keepdims=True))
        prob /= prob.sum(axis=1, keepdims=True)
        grad = prob - onehot
        w -= a.lr * xc.T @ grad / len(x)
        b -= a.lr * grad.mean(axis=0)
        if epoch % 50 == 0 or epoch == a.epochs:
            acc = float((prob.argmax(axis=1) == y).mean())
            tau_run.log(epoch, accuracy=acc, loss=float(-np.log(prob[np.arange(len(y)), y]).mean()))
            with tau_run.checkpoint(epoch) as d:
                (d / "model.json").write_text(
                    json.dumps(
                        {
                            "classes": CLASSES,
                            "mean": mean.tolist(),
                            "weights": w.tolist(),
                            "bias": b.tolist(),
                            "epochs": epoch,
                            "seed": a.seed,
                        }
                    )
                )
            print(f"epoch {epoch}: accuracy {acc:.3f}", flush=True)


if __name__ == "__main__":
    main()
