"""Metric plots: plotext in the terminal, matplotlib for PNG files (both imported on use)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from taugrid.api.errors import TauError, missing_extra

RESERVED = ("step", "ts", "run_id")


def numeric_names(rows: list[dict[str, Any]]) -> list[str]:
    names: dict[str, None] = {}
    for row in rows:
        for k, v in row.items():
            if k not in RESERVED and isinstance(v, (int, float)) and not isinstance(v, bool):
                names[k] = None
    return list(names)


def pick_metrics(
    rows: list[dict[str, Any]], wanted: list[str] | None, primary: str | None
) -> list[str]:
    available = numeric_names(rows)
    if wanted:
        unknown = [w for w in wanted if w not in available]
        if unknown:
            raise TauError(
                f"no metric {', '.join(unknown)}; available: {', '.join(available) or '(none)'}"
            )
        return wanted
    if primary and primary in available:
        return [primary]
    return available[:4]


def series(rows: list[dict[str, Any]], name: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for row in rows:
        v = row.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            xs.append(int(row["step"]))
            ys.append(float(v))
    return xs, ys


def to_text(
    rows: list[dict[str, Any]], names: list[str], title: str, width: int = 100, height: int = 24
) -> str:
    try:
        import plotext as plt
    except ImportError:
        raise missing_extra("local", "plotext (terminal plots)") from None
    plt.clear_figure()
    plt.plotsize(width, height)
    plt.theme("clear")
    for name in names:
        xs, ys = series(rows, name)
        plt.plot(xs, ys, label=name)
    plt.title(title)
    plt.xlabel("step")
    out: str = plt.build()
    last = rows[-1]
    summary = ", ".join(
        f"{n}={last[n]:.6g}" for n in names if isinstance(last.get(n), (int, float))
    )
    return out + f"\nlast step {last['step']}: {summary}"


def to_png(rows: list[dict[str, Any]], names: list[str], path: Path, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise missing_extra("plot", "matplotlib (--png)") from None
    fig, axes = plt.subplots(
        len(names), 1, figsize=(8, 2.6 * len(names)), squeeze=False, sharex=True
    )
    for ax, name in zip(axes[:, 0], names, strict=True):
        xs, ys = series(rows, name)
        ax.plot(xs, ys, marker="." if len(xs) < 60 else None)
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("step")
    fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as e:
        raise TauError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
