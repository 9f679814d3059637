"""Benchmarks for the researcher CLI budgets (DESIGN.md): cold start and renders per second.

    make bench            # or: .venv/bin/python bench/bench_cli.py

Cold start: wall time of fresh `tau` processes (median of N). Beside each, in alternating runs,
the floor of its libraries: a Python process that only imports what the command cannot do without
(Typer; for validate and render also pydantic and PyYAML), so a figure from a slow day can be
told apart from a slower tau ("above floor" is tau's own share). Renders per second: the whole
pipeline per render (read + validate tau.yaml, resolve the profile, collect code, render).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart"
PROFILES = ROOT / "examples" / "profiles.yaml"
BUDGET_COLD_S = 0.3
BUDGET_RENDERS_PER_S = 500


def tau_bin() -> list[str]:
    exe = Path(sys.executable).parent / "tau"
    return [str(exe)] if exe.exists() else [shutil.which("tau") or "tau"]


# What each command imports at the least: Typer (every command), pydantic and PyYAML (a tau.yaml)
FLOOR_HELP = "import typer.main"
FLOOR_MANIFEST = "import typer.main, yaml; from pydantic import BaseModel, Field, types"


def _wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def cold_start(args: list[str], floor: str, runs: int = 15) -> tuple[float, float]:
    """Medians of `tau ARGS` and of its libraries' floor, run in alternation."""
    times, floors = [], []
    for _ in range(runs):
        times.append(_wall(tau_bin() + args))
        floors.append(_wall([sys.executable, "-c", floor]))
    return statistics.median(times), statistics.median(floors)


def renders_per_second(seconds: float = 3.0) -> tuple[float, float]:
    from taugrid.api import naming
    from taugrid.runs import codebundle, load, render, resolve

    snap = load.load_snapshot(PROFILES)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        loaded = load.load_manifest(QUICKSTART)
        r = resolve.resolve(loaded.manifest, snap)
        bundle = codebundle.collect(loaded.folder)
        render.render(
            r, render.RunMeta(run_id=naming.new_run_id(loaded.manifest.run_id_stem)), bundle
        )
        n += 1
    full = n / (time.perf_counter() - t0)
    loaded = load.load_manifest(QUICKSTART)
    bundle = codebundle.collect(loaded.folder)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        r = resolve.resolve(loaded.manifest, snap)
        render.render(
            r, render.RunMeta(run_id=naming.new_run_id(loaded.manifest.run_id_stem)), bundle
        )
        n += 1
    return full, n / (time.perf_counter() - t0)


def byte_compile() -> None:
    """Write the bytecode of taugrid's modules first, as an installed package has it: with
    PYTHONDONTWRITEBYTECODE set, an edited module would otherwise be compiled by every timed
    process (render.py alone ~4 ms)."""
    import taugrid.api

    package = Path(taugrid.api.__file__).parents[1]  # taugrid/ as imported (editable: links)
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(package)],
        stdout=subprocess.DEVNULL,
        check=False,
    )


def main() -> int:
    byte_compile()
    results: dict[str, float] = {}
    for name, args, floor in (
        ("help", ["--help"], FLOOR_HELP),
        ("validate", ["run", "validate", str(QUICKSTART)], FLOOR_MANIFEST),
        ("render", ["run", "render", str(QUICKSTART), "--profiles", str(PROFILES)], FLOOR_MANIFEST),
    ):
        took, base = cold_start(args, floor)
        results[f"cold_start_{name}_s"] = took
        results[f"floor_{name}_s"] = base
    full, render_only = renders_per_second()
    results["renders_per_s_full_pipeline"] = full
    results["renders_per_s_resolve_and_render"] = render_only
    results["cpu_count"] = os.cpu_count() or 0
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "cli.json").write_text(json.dumps(results, indent=2))
    print(f"{'measure':38} {'value':>10}  budget          libraries' floor, tau above it")
    for name in ("help", "validate", "render"):
        k, base = f"cold_start_{name}_s", results[f"floor_{name}_s"]
        ok = "ok" if results[k] <= BUDGET_COLD_S else "OVER"
        print(
            f"{k:38} {results[k]:>9.3f}s  <= {BUDGET_COLD_S}s {ok:4}   {base:.3f}s, "
            f"+{results[k] - base:.3f}s"
        )
    for k in ("renders_per_s_full_pipeline", "renders_per_s_resolve_and_render"):
        ok = "ok" if results[k] >= BUDGET_RENDERS_PER_S else "UNDER"
        print(f"{k:38} {results[k]:>9.0f}/s  >= {BUDGET_RENDERS_PER_S}/s {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
