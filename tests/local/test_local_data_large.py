"""A 2 GB file registers with flat memory: the file store hashes while it copies, 1 MiB at a
time, so the registering process's peak RSS stays far below the file's size (issue budget:
< 200 MB). The file is sparse (no 2 GB written to make it); the store's copy is real."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import TAU

SIZE = 2 * 1024**3
PEAK_RSS_LIMIT_MB = 200

# runs the command as its only child, then prints that child's peak RSS (KiB on Linux)
MEASURE = (
    "import resource, subprocess, sys\n"
    "res = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "sys.stderr.write(res.stderr)\n"
    "print(res.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "print(res.stdout)\n"
)


def test_a_2_gb_file_registers_with_flat_memory(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    with big.open("wb") as f:
        f.truncate(SIZE - 4)
        f.seek(SIZE - 4)
        f.write(b"tail")  # a byte pattern that is not all zeros
    env = {**os.environ, "TAU_HOME": str(tmp_path / "home")}
    try:
        res = subprocess.run(
            [
                sys.executable,
                "-c",
                MEASURE,
                TAU,
                "data",
                "dataset",
                "register",
                "huge",
                str(big),
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            check=False,
        )
        first, _, rest = res.stdout.partition("\n")
        code, peak_kib = (int(x) for x in first.split())
        assert code == 0, res.stderr
        doc = json.loads(rest)
        assert doc["size"] == SIZE
        expected = subprocess.run(
            ["sha256sum", str(big)], capture_output=True, text=True, check=True
        ).stdout.split()[0]
        blob = tmp_path / "home" / "data" / "registry" / "blobs" / "sha256"
        stored = blob / expected[:2] / expected[2:]
        assert stored.is_file() and stored.stat().st_size == SIZE
        assert peak_kib / 1024 < PEAK_RSS_LIMIT_MB, f"peak RSS {peak_kib / 1024:.0f} MB"
    finally:
        shutil.rmtree(tmp_path / "home", ignore_errors=True)
        big.unlink(missing_ok=True)
