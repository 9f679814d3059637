"""tau_evidence: the evidence record's files, written the same way everywhere (stdlib only).

tau's local backend (taugrid.runs.evidence) and the in-pod launcher of a cluster run
(tau_launch.py, carried in the run's code) both use these functions, so a record sealed in a pod
on the workspace PVC verifies with `tau run verify` exactly like a local one.

    history.jsonl    one JSON line per change of phase: {"ts", "phase", "reason", "attempt", ...}
    MANIFEST.sha256  sha256sum format over every file of the record (dotfiles excluded), last
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

MANIFEST = "MANIFEST.sha256"
HISTORY = "history.jsonl"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def append_history(run_dir: Path, event: dict[str, Any]) -> None:
    """One line, flushed and synced: a run killed at any moment leaves a readable history."""
    line = json.dumps({k: v for k, v in event.items() if v is not None}, separators=(",", ":"))
    with (run_dir / HISTORY).open("a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def record_files(run_dir: Path) -> Iterator[Path]:
    """Every file of the record but the manifest; dotfiles are transient (locks, temp files)."""
    for p in sorted(run_dir.rglob("*")):
        rel = p.relative_to(run_dir)
        if p.is_file() and p.name != MANIFEST and not any(s.startswith(".") for s in rel.parts):
            yield p


WORKING_COPIES = ("inputs",)  # laid out for the run from the registry: not its record


def seal(run_dir: Path, run_id: str | None = None) -> int:
    """Write MANIFEST.sha256 over every file of the record (atomically). Returns the count.
    The run's working copies of its data inputs (inputs/, and each torchrun node's) go first:
    the record names each input's exact version, and the registry keeps its bytes."""
    import shutil

    for sub in WORKING_COPIES:
        shutil.rmtree(run_dir / sub, ignore_errors=True)
        for node in run_dir.glob(f"nodes/*/{sub}"):
            shutil.rmtree(node, ignore_errors=True)
    lines = [f"{sha256(p)}  {p.relative_to(run_dir).as_posix()}" for p in record_files(run_dir)]
    body = (
        f"# tau evidence record {run_id or run_dir.name}, sealed {now_iso()}\n"
        + "\n".join(lines)
        + "\n"
    )
    tmp = run_dir / f".{MANIFEST}.tmp"
    tmp.write_text(body, encoding="utf-8")
    os.replace(tmp, run_dir / MANIFEST)
    return len(lines)


def verify(run_dir: Path) -> tuple[int, list[str]]:
    """(files listed, problems): missing, changed and unlisted files are problems.
    FileNotFoundError when the record is not sealed."""
    listed: dict[str, str] = {}
    for line in (run_dir / MANIFEST).read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            digest, _, rel = line.partition("  ")
            listed[rel] = digest
    problems = []
    for rel, digest in listed.items():
        p = run_dir / rel
        if not p.is_file():
            problems.append(f"missing: {rel}")
        elif sha256(p) != digest:
            problems.append(f"changed: {rel}")
    for p in record_files(run_dir):
        rel = p.relative_to(run_dir).as_posix()
        if rel not in listed:
            problems.append(f"not in the manifest: {rel}")
    return len(listed), problems
