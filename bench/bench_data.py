"""Budgets of `tau data` (issue #22, docs/data.md), on the file store of this machine:

- register 100,000 small files: the first time within 1.5x of `sha256sum` over the same tree
  (the floor: reading and hashing every byte), then again unchanged <= 10 s (the stat cache);
  median of paired rounds;
- `tau data dataset list` with 1,000 datasets <= 0.5 s (the CLI, cold; median of 7, beside the
  floor of its libraries: a Python process importing only Typer and pydantic);
- a 2 GB file registers with flat memory (peak RSS < 200 MB: streamed hashing and copying).

    .venv/bin/python bench/bench_data.py [--files N] [--big-gb G]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TAU = str(Path(sys.executable).parent / "tau")
# what `tau data dataset list` imports at the least: Typer and pydantic
FLOOR_LIST = "import typer.main; from pydantic import BaseModel, Field, types"


def make_tree(root: Path, n: int) -> int:
    total = 0
    for i in range(n):
        d = root / f"shard-{i // 1000:03d}"
        if i % 1000 == 0:
            d.mkdir(parents=True)
        data = os.urandom(64 + (i % 7) * 100)
        (d / f"doc-{i:06d}.txt").write_bytes(data)
        total += len(data)
    return total


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> int:
    # Long because: a benchmark reads top to bottom as the scenario it measures (set
    # up, load, measure, report); its steps are used only here.
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--big-gb", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        home = Path(tmp) / "home"
        env = {**os.environ, "TAU_HOME": str(home)}
        tree = Path(tmp) / "tree"
        make_tree(tree, args.files)
        subprocess.run(["sync"], check=True)
        # paired rounds (sha256sum, then a first registration into an empty registry, then the
        # same again unchanged); the median of each: this VM's speed wanders by 2x between runs
        rounds = []
        for _ in range(args.rounds):
            shutil.rmtree(home, ignore_errors=True)
            sha = timed(
                ["bash", "-c", f"find {tree} -type f -print0 | xargs -0 sha256sum > /dev/null"], env
            )
            first = timed([TAU, "data", "dataset", "register", "big", str(tree)], env)
            again = timed([TAU, "data", "dataset", "register", "big", str(tree)], env)
            rounds.append((first / sha, sha, first, again))
        out["sha256sum_s"] = statistics.median(r[1] for r in rounds)
        out["register_first_s"] = statistics.median(r[2] for r in rounds)
        out["register_unchanged_s"] = statistics.median(r[3] for r in rounds)
        out["first_vs_sha256sum"] = statistics.median(r[0] for r in rounds)
        # 1,000 datasets (one small file each), then a cold `list`
        from taugrid.api.data import Created
        from taugrid.data.filestore import FileStore

        store = FileStore(home / "data" / "registry", None)
        one = Path(tmp) / "one"
        one.mkdir()
        for i in range(1000):
            (one / "f").write_bytes(str(i).encode())
            store.register(
                "dataset", f"ds-{i:04d}", one, Created(by="b", at="2026-12-01T00:00:00Z", host="h")
            )
        subprocess.run(["sync"], check=True)  # the records on disk: the listing reads, only
        lists, floors = [], []
        for _ in range(7):  # in alternation with the floor of its libraries (Typer, pydantic)
            lists.append(timed([TAU, "data", "dataset", "list", "-o", "json"], env))
            floors.append(timed([sys.executable, "-c", FLOOR_LIST], env))
        out["list_1000_s"] = statistics.median(lists)
        out["list_floor_s"] = statistics.median(floors)
        # a big file: peak RSS of the registering process
        big = Path(tmp) / "big.bin"
        with big.open("wb") as f:
            for _ in range(int(args.big_gb * 1024)):
                f.write(os.urandom(1 << 20))
        # its own peak: measured by a process that runs only that registration
        probe = (
            "import resource, subprocess, sys, time; t0 = time.perf_counter();"
            "subprocess.run(sys.argv[1:], check=True, capture_output=True);"
            "print(time.perf_counter() - t0, "
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
        )
        got = subprocess.run(
            [sys.executable, "-c", probe, TAU, "data", "dataset", "register", "huge", str(big)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        secs, rss_kb = got.stdout.split()
        out["register_big_s"] = float(secs)
        out["register_big_peak_rss_mb"] = int(rss_kb) / 1024
    budgets = {
        "first_vs_sha256sum": 1.5,
        "register_unchanged_s": 10.0,
        "list_1000_s": 0.5,
        "register_big_peak_rss_mb": 200.0,
    }
    for k, v in out.items():
        b = budgets.get(k)
        mark = "" if b is None else (f"  <= {b}  {'ok' if v <= b else 'OVER'}")
        print(f"{k:28s} {v:10.3f}{mark}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
