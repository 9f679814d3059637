"""The end of `.ci/run`: each step's start and seconds, the e2e modules' seconds, and the
minutes left of the budget (docs/ci.md keeps the measured tables).

usage: table.py STEPS_TSV TESTS_JSONL TOTAL_SECONDS BUDGET_MINUTES   (stdlib only: it runs
before or without the venv)"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(steps_tsv: str, tests_jsonl: str, total_s: str, budget_min: str) -> int:
    """Prints the tables; 1 when a test was skipped anywhere (CI runs every test), else 0."""
    steps = []
    for line in Path(steps_tsv).read_text().splitlines():
        name, start, secs, rc = line.split("\t")
        steps.append((int(start), name, int(secs), int(rc)))
    steps.sort()
    total, budget = int(total_s), float(budget_min) * 60
    print("\n=== CI steps (s from the start; steps that overlap ran at once) ===")
    print(f"{'step':<14} {'start':>6} {'seconds':>8} {'min':>6} {'exit':>5}")
    for start, name, secs, rc in steps:
        print(f"{name:<14} {start:6d} {secs:8d} {secs / 60:6.1f} {rc:5d}")

    rows = []
    path = Path(tests_jsonl)
    if path.is_file():
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    suites: dict[str, list[dict[str, object]]] = {}
    for row in rows:
        suites.setdefault(str(row["suite"]), []).append(row)
    print("\n=== test suites (seconds summed over their modules; failed, skipped) ===")
    for suite, mods in suites.items():
        secs = sum(float(str(m["seconds"])) for m in mods)
        tests = sum(int(str(m["tests"])) for m in mods)
        failed = sum(int(str(m["failed"])) for m in mods)
        skipped = sum(int(str(m["skipped"])) for m in mods)
        print(f"{suite:<32} {tests:5d} tests {secs:8.0f} s {failed:4d} failed {skipped:4d} skipped")
    e2e = sorted(
        (r for r in rows if str(r["module"]).startswith("tests/e2e/")),
        key=lambda r: -float(str(r["seconds"])),
    )
    if e2e:
        t0 = min(float(str(r["start"])) for r in e2e)
        print("\n=== e2e modules (start: s from the e2e suite's first test) ===")
        print(f"{'seconds':>8} {'start':>6} {'worker':<6} module")
        for r in e2e:
            start = float(str(r["start"])) - t0
            workers = ",".join(str(w) for w in r["workers"]) or "-"  # type: ignore[attr-defined]
            print(f"{float(str(r['seconds'])):8.0f} {start:6.0f} {workers:<6} {r['module']}")

    left = budget - total
    print(
        f"\n=== total {total / 60:.1f} min of the {budget / 60:.0f}-minute budget: "
        f"{left / 60:.1f} min left for the suites this round adds ==="
    )
    summary = {
        "total_s": total,
        "budget_s": budget,
        "left_s": left,
        "steps": [{"step": n, "start": s, "seconds": d, "exit": rc} for s, n, d, rc in steps],
    }
    (Path(steps_tsv).parent / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    skipped = [r for r in rows if int(str(r["skipped"]))]
    for r in skipped:
        print(f"!!! {r['skipped']} skipped in {r['module']} ({r['suite']}): CI runs every test")
    return 1 if skipped else 0


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
