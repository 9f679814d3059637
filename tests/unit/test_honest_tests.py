"""Tests assert behaviour, never a latency (latencies belong to benchmarks): no test compares a
measured duration with a bound."""

from __future__ import annotations

import re

from conftest import ROOT

TIMED = re.compile(r"^\s*assert\b.*\b(took|elapsed|monotonic\(\)|perf_counter\(\)).*(<=|<|>=|>)")


def test_no_test_asserts_a_latency() -> None:
    offenders = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path.name == "test_honest_tests.py":
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if TIMED.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert offenders == [], "timed assertions (move them to bench/):\n" + "\n".join(offenders)
