"""Metric charts drawn on the server: downsampled so a series keeps its peaks, as inline SVG
(no chart library, no JavaScript: a page with a chart works without scripts)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

Point = tuple[float, float]
MAX_POINTS = 1000  # per series, after downsampling
PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
)


def downsample(points: Sequence[Point], limit: int = MAX_POINTS) -> list[Point]:
    """At most `limit` points, in x order: the series cut into limit/2 buckets, each kept as its
    lowest and highest point (in the order they came), so every peak and dip survives."""
    pts = [p for p in points if math.isfinite(p[0]) and math.isfinite(p[1])]
    if len(pts) <= limit:
        return pts
    buckets = max(1, limit // 2)
    size = len(pts) / buckets
    ys = [p[1] for p in pts]
    out: list[Point] = []
    for b in range(buckets):
        start, end = int(b * size), int((b + 1) * size)
        if end <= start:
            continue
        chunk = ys[start:end]
        lo = start + chunk.index(min(chunk))
        hi = start + chunk.index(max(chunk))
        out.extend(pts[i] for i in ((lo, hi) if lo < hi else (hi, lo) if hi < lo else (lo,)))
    return out


@dataclass(frozen=True)
class Series:
    label: str
    points: list[Point]


def svg(series: Sequence[Series], title: str, width: int = 720, height: int = 260) -> str:
    """One chart: a polyline per series on shared axes, the y range labelled, a legend."""
    drawn = [s for s in series if s.points]
    if not drawn:
        return f'<p class="empty">no values of {escape(title)} yet</p>'
    xs = [x for s in drawn for x, _ in s.points]
    ys = [y for s in drawn for _, y in s.points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    pad_l, pad_r, pad_t, pad_b = 60, 10, 10, 24
    w, h = width - pad_l - pad_r, height - pad_t - pad_b

    def at(p: Point) -> str:
        x = pad_l + (p[0] - x0) / (x1 - x0) * w
        y = pad_t + (1 - (p[1] - y0) / (y1 - y0)) * h
        return f"{x:.1f},{y:.1f}"

    lines = [
        f'<svg class="chart" role="img" aria-label="{escape(title)}" viewBox="0 0 {width} '
        f'{height}" '
        f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<rect x="{pad_l}" y="{pad_t}" width="{w}" height="{h}" class="plot"/>',
        f'<text x="{pad_l - 4}" y="{pad_t + 10}" class="tick" text-anchor="end">{_num(y1)}</text>',
        f'<text x="{pad_l - 4}" y="{pad_t + h}" class="tick" text-anchor="end">{_num(y0)}</text>',
        f'<text x="{pad_l}" y="{height - 6}" class="tick">{_num(x0)}</text>',
        f'<text x="{pad_l + w}" y="{height - 6}" class="tick" text-anchor="end">{_num(x1)}</text>',
    ]
    for i, s in enumerate(drawn):
        colour = PALETTE[i % len(PALETTE)]
        pts = " ".join(at(p) for p in s.points)
        lines.append(
            f'<polyline class="series" data-label="{escape(s.label)}" fill="none" '
            f'stroke="{colour}" stroke-width="1.5" points="{pts}"/>'
        )
    lines.append("</svg>")
    legend = "".join(
        f'<li><span class="swatch" style="background:{PALETTE[i % len(PALETTE)]}"></span>'
        f"{escape(s.label)}</li>"
        for i, s in enumerate(drawn)
    )
    return "\n".join(lines) + f'\n<ul class="legend">{legend}</ul>'


def _num(v: float) -> str:
    return f"{v:.4g}"


def gpu_series(history: Sequence[object], until: float | None = None) -> dict[str, list[Point]]:
    """A run's GPU use changes (`GpuSample`s: at, smActive, powerW, fbUsedMiB) as step series
    over minutes since the first, each value held until the next change (or `until`, epoch s)."""
    from datetime import datetime

    pts: list[tuple[float, dict[str, float]]] = []
    for h in history:
        at = datetime.fromisoformat(str(getattr(h, "at", "")).replace("Z", "+00:00")).timestamp()
        sm = getattr(h, "smActive", None)
        values = {"GPU power (W)": float(getattr(h, "powerW", 0))}
        values["GPU memory used (GiB)"] = float(getattr(h, "fbUsedMiB", 0)) / 1024
        if sm is not None:
            values["GPU SM active (%)"] = float(sm) * 100
        pts.append((at, values))
    if not pts:
        return {}
    t0 = pts[0][0]
    ends = [t for t, _ in pts[1:]] + [max(until or pts[-1][0], pts[-1][0])]
    out: dict[str, list[Point]] = {}
    for (t, values), end in zip(pts, ends, strict=True):
        for name, v in values.items():
            out.setdefault(name, []).extend([((t - t0) / 60, v), ((end - t0) / 60, v)])
    return {k: out[k] for k in sorted(out, key=lambda k: ("SM" not in k, k))}
