"""Score rows with a fixed logistic model and write a summary report (stdlib only)."""

from __future__ import annotations

import argparse
import json
import math
import os
import random

import tau_run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1000)
    args = ap.parse_args()
    threshold = float(os.environ.get("SCORE_THRESHOLD", "0.5"))
    out = tau_run.output_dir()
    rng = random.Random(7)
    positives = 0
    for i in range(1, args.rows + 1):
        x1, x2 = rng.gauss(0, 1), rng.gauss(0, 1)
        p = 1 / (1 + math.exp(-(1.5 * x1 - 0.7 * x2)))
        positives += p >= threshold
        if i % 1000 == 0:
            tau_run.log(i, positive_rate=positives / i)
    report = {"rows": args.rows, "threshold": threshold, "positives": positives}
    (out / "report.json").write_text(json.dumps(report, indent=2))
    print(f"scored {args.rows} rows: {positives} positive -> {out / 'report.json'}", flush=True)


if __name__ == "__main__":
    main()
