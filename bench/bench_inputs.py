"""What laying out a run's data inputs costs now that a run gets its own copy (issue #46: a
hard link let a run's write reach the stored bytes): a dataset of large files registered once,
then laid out as a run's launcher lays it out (`tau_inputs.materialize`: a reflink where the
filesystem has them, else a copy hashed as it is written), beside the floor of reading and
hashing the same bytes (what the hard-link layout cost: it checked every file's sha256 too).

    .venv/bin/python bench/bench_inputs.py [--gib G] [--dir DIR]

Prints one JSON object: the filesystem, the seconds and GB/s of each step, and whether reflinks
were used (FICLONE answered).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

FILE_GIB = 1  # each file of the dataset (a shard)


def fill(path: Path, size: int) -> None:
    block = os.urandom(1 << 20)
    with path.open("wb") as f:
        for _ in range(size >> 20):
            f.write(block)


def read_hash(paths: list[Path]) -> None:
    for p in paths:
        h = hashlib.sha256()
        with p.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)


def drop_caches() -> bool:
    """The page cache emptied (root only), so each step reads from the disk; False: not here."""
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=int, default=2, help="dataset size in GiB (the issue: 10)")
    ap.add_argument("--dir", type=Path, default=None, help="where (default: a temp folder)")
    args = ap.parse_args()
    import tau_inputs

    from taugrid.api.data import Created
    from taugrid.data.filestore import FileStore

    base = Path(tempfile.mkdtemp(prefix="tau-bench-inputs-", dir=args.dir))
    try:
        src = base / "src"
        src.mkdir()
        for i in range(max(1, args.gib // FILE_GIB)):
            fill(src / f"shard-{i:03d}.bin", FILE_GIB << 30)
        store = FileStore(base / "registry")
        t = time.perf_counter()
        reg = store.register("dataset", "big", src, Created(by="bench", at="now", host="here"))
        register_s = time.perf_counter() - t
        blobs = [store.blob(f.sha256) for f in reg.record.files]
        cold = drop_caches()
        t = time.perf_counter()
        read_hash(blobs)
        floor_s = time.perf_counter() - t
        drop_caches()
        inputs = [{"kind": "dataset", "name": "big", "version": reg.record.version, "path": "big"}]
        t = time.perf_counter()
        tau_inputs.materialize(store.root, inputs, base / "run" / "inputs")
        layout_s = time.perf_counter() - t
        laid = next((base / "run" / "inputs" / "big").iterdir())
        shared = os.stat(laid).st_ino == os.stat(blobs[0]).st_ino
        size = reg.record.size
        fs = subprocess.run(["stat", "-f", "-c", "%T", str(base)], capture_output=True, text=True)
        print(
            json.dumps(
                {
                    "gib": size / (1 << 30),
                    "filesystem": fs.stdout.strip(),
                    "page_cache_dropped": cold,
                    "register_s": round(register_s, 2),
                    "layout_s": round(layout_s, 2),
                    "layout_gb_s": round(size / 1e9 / layout_s, 3),
                    "read_and_hash_floor_s": round(floor_s, 2),
                    "layout_over_floor": round(layout_s / floor_s, 2),
                    "reflink": _reflinked(laid, blobs[0]),
                    "same_inode_as_the_blob": shared,
                },
                indent=1,
            )
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _reflinked(a: Path, b: Path) -> bool:
    """Whether the two files share extents (filefrag's physical offsets; False where unknown)."""
    try:
        out = [
            subprocess.run(["filefrag", "-v", str(p)], capture_output=True, text=True).stdout
            for p in (a, b)
        ]
    except OSError:
        return False

    def first_extent(text: str) -> str | None:
        for line in text.splitlines():
            parts = line.split()
            if parts[:1] == ["0:"] and len(parts) > 3:
                return parts[3]
        return None

    ea, eb = first_extent(out[0]), first_extent(out[1])
    return ea is not None and ea == eb


if __name__ == "__main__":
    main()
