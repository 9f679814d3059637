"""Benchmarks for the researcher CLI budgets (DESIGN.md): cold start and renders per second.

    make bench            # or: .venv/bin/python bench/bench_cli.py

Cold start: wall time of fresh `tau` processes (median of N). Renders per second: the whole
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


def cold_start(args: list[str], runs: int = 15) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(
            tau_bin() + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
        )
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


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


def main() -> int:
    results = {
        "cold_start_help_s": cold_start(["--help"]),
        "cold_start_validate_s": cold_start(["run", "validate", str(QUICKSTART)]),
        "cold_start_render_s": cold_start(
            ["run", "render", str(QUICKSTART), "--profiles", str(PROFILES)]
        ),
    }
    full, render_only = renders_per_second()
    results["renders_per_s_full_pipeline"] = full
    results["renders_per_s_resolve_and_render"] = render_only
    results["cpu_count"] = os.cpu_count() or 0
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "cli.json").write_text(json.dumps(results, indent=2))
    print(f"{'measure':38} {'value':>10}  budget")
    for k in ("cold_start_help_s", "cold_start_validate_s", "cold_start_render_s"):
        ok = "ok" if results[k] <= BUDGET_COLD_S else "OVER"
        print(f"{k:38} {results[k]:>9.3f}s  <= {BUDGET_COLD_S}s {ok}")
    for k in ("renders_per_s_full_pipeline", "renders_per_s_resolve_and_render"):
        ok = "ok" if results[k] >= BUDGET_RENDERS_PER_S else "UNDER"
        print(f"{k:38} {results[k]:>9.0f}/s  >= {BUDGET_RENDERS_PER_S}/s {ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
