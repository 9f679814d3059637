"""Time to the first log line of a local run, cold (no Ray head yet) and warm (head reused).

    .venv/bin/python bench/bench_local.py   # budget (DESIGN.md): warm <= 1 s

Measured from starting `tau run examples/quickstart` to the first line the training script
prints on tau's stdout, in a throw-away TAU_HOME. Warm runs follow each other back to back, as in
an edit-run loop: by default each claims the standby job the previous run prepared; the same is
measured with standbys off (TAU_LOCAL_STANDBY=0: the job is submitted after the record).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TAU = str(Path(sys.executable).parent / "tau")
EXAMPLE = ROOT / "examples" / "quickstart"
BUDGET_WARM_S = 1.0


WARM_RUNS = 7


def first_line_s(env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [TAU, "run", str(EXAMPLE)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - t0
    proc.wait(timeout=120)
    if not line or proc.returncode != 0:
        raise SystemExit(f"run failed (exit {proc.returncode})")
    return elapsed


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tau-bench-") as home:
        env = {**os.environ, "TAU_HOME": home, "TAU_TARGET": "local"}
        try:
            cold = first_line_s(env)
            warm = [first_line_s(env) for _ in range(WARM_RUNS)]
            no_standby = {**env, "TAU_LOCAL_STANDBY": "0"}
            first_line_s(no_standby)  # the standby the last run prepared is not used from here
            early = [first_line_s(no_standby) for _ in range(WARM_RUNS)]
        finally:
            subprocess.run([TAU, "local", "stop"], env=env, capture_output=True, check=False)
    results = {
        "first_log_line_cold_s": cold,
        "first_log_line_warm_median_s": statistics.median(warm),
        "first_log_line_warm_all_s": warm,
        "first_log_line_warm_no_standby_median_s": statistics.median(early),
        "first_log_line_warm_no_standby_all_s": early,
    }
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "local.json").write_text(json.dumps(results, indent=2))
    ok = "ok" if results["first_log_line_warm_median_s"] <= BUDGET_WARM_S else "OVER"
    print(f"first log line, cold (starts the Ray head): {cold:.2f}s")
    print(
        f"first log line, warm (median of {WARM_RUNS}):          "
        f"{results['first_log_line_warm_median_s']:.2f}s  <= {BUDGET_WARM_S}s {ok}"
    )
    print("warm runs: " + ", ".join(f"{w:.2f}s" for w in warm))
    print(
        "first log line, warm without standbys (median): "
        f"{results['first_log_line_warm_no_standby_median_s']:.2f}s"
    )
    print("warm runs without standbys: " + ", ".join(f"{w:.2f}s" for w in early))
    return 0


if __name__ == "__main__":
    sys.exit(main())
