"""What a cold local Ray head costs, quiet and with 8 busy loops on the machine (issue #45): the
time to each stage of its start (GCS, raylet, dashboard, job agent) and, for `tau run` of the
quickstart in a fresh TAU_HOME, the time to the run's first log line.

    .venv/bin/python bench/bench_head.py [--busy N] [--rounds R]

Prints one JSON object per condition (quiet, busy) with the median of the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TAU = str(Path(sys.executable).parent / "tau")
STAGE = re.compile(r"the local Ray head: (\w[\w ]*?) up \(([\d.]+)s\)")


def busy_loops(n: int, at_most_s: float = 900) -> list[subprocess.Popen[bytes]]:
    code = f"import time\nend = time.time() + {at_most_s}\nwhile time.time() < end:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def one_round() -> dict[str, float]:
    """A fresh TAU_HOME: `tau run examples/quickstart`, its stages and its first log line."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TAU_HOME": tmp, "TAU_TARGET": "local"}
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [TAU, "run", str(ROOT / "examples" / "quickstart")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
        )
        out: dict[str, float] = {}
        assert proc.stdout is not None
        for line in proc.stdout:
            m = STAGE.search(line)
            if m:
                out[f"{m.group(1).replace(' ', '_')}_s"] = float(m.group(2))
            elif (
                "first_log_line_s" not in out
                and out.get("job_agent_s")
                and not line.startswith(("run ", "starting", "the local", "note", "warning", "["))
            ):
                out["first_log_line_s"] = time.monotonic() - t0
        proc.wait()
        out["run_s"] = time.monotonic() - t0
        out["ok"] = float(proc.returncode == 0)
        subprocess.run([TAU, "local", "stop"], env=env, capture_output=True, check=False)
        return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--busy", type=int, default=8, help="busy loops for the busy condition")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    for condition in ("quiet", "busy"):
        loops = busy_loops(args.busy) if condition == "busy" else []
        try:
            rounds = [one_round() for _ in range(args.rounds)]
        finally:
            for p in loops:
                p.kill()
                p.wait()
        keys = sorted({k for r in rounds for k in r})
        med = {k: round(statistics.median(r[k] for r in rounds if k in r), 2) for k in keys}
        print(
            json.dumps(
                {
                    "condition": condition,
                    "busy_loops": len(loops),
                    **med,
                    "loadavg_1m": round(os.getloadavg()[0], 2),
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
