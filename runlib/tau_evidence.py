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
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

MANIFEST = "MANIFEST.sha256"
HISTORY = "history.jsonl"
METRICS = "metrics.jsonl"  # taugrid.api.constants.METRICS_FILENAME


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


# --- progress: what a run's record says of it while it runs (a run's status needs no more) ---
def metric_summary(path: Path) -> tuple[int, dict[str, Any] | None]:
    """How many metric rows a metrics file has, and the last one, without parsing the others:
    lines are counted, the last complete row is parsed (a torn last line is not a row)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0, None
    lines = data.split(b"\n")
    count = len(lines) - lines.count(b"")  # empty lines are not rows
    for line in reversed(lines):
        if not line:
            continue
        try:
            row = json.loads(line)
        except ValueError:
            count -= 1
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            return count, row
        count -= 1
    return count, None


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


ERROR_LINE = re.compile(r"(Error|Exception|error:|FATAL|Killed|Traceback)")


def last_error_line(log: Path, tail_bytes: int = 64 * 1024) -> str | None:
    """The last line of a log that reads like an error (else its last line), at most 300
    characters: the program's own words for how it ended."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - tail_bytes))
            lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines()]
    except OSError:
        return None
    lines = [ln for ln in lines if ln]
    for ln in reversed(lines):
        if ERROR_LINE.search(ln):
            return ln[:300]
    return lines[-1][:300] if lines else None


def progress(
    run_dir: Path, checkpoints: str = "checkpoints", outputs: str = "outputs"
) -> dict[str, Any]:
    """A run's progress from its record, the same for a local run and a cluster run (read by
    tau_files.py on the workspace volume): metric rows and the last one, when metrics and logs
    were last written, complete checkpoints (the newest and its step), output files, sealed."""
    import tau_run

    count, last = metric_summary(run_dir / METRICS)
    done = tau_run.complete_checkpoints(run_dir / checkpoints)
    logs = [p for p in (run_dir / "logs").glob("*.log") if p.name != "supervisor.log"]
    out = run_dir / outputs
    return {
        "metric_rows": count,
        "last_step": last["step"] if last else None,
        "latest_metrics": {k: v for k, v in last.items() if k not in ("step", "ts")}
        if last
        else {},
        "last_metric_ts": _mtime(run_dir / METRICS),
        "last_log_ts": max((t for t in map(_mtime, logs) if t is not None), default=None),
        "checkpoints": len(done),
        "newest_checkpoint": done[-1]["path"] if done else None,
        "newest_checkpoint_step": done[-1].get("step") if done else None,
        "outputs": sum(1 for p in out.rglob("*") if p.is_file()) if out.is_dir() else 0,
        "sealed": (run_dir / MANIFEST).is_file(),
        "last_error": last_error_line(run_dir / "logs" / "driver.log"),
    }
