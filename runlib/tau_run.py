"""tau_run: a tiny, stdlib-only helper for training code that runs under TauGrid.

    import tau_run
    start = tau_run.resume_step()                 # 0, or the step of TAU_RESUME_FROM
    for step in range(start + 1, steps + 1):
        ...
        tau_run.log(step, loss=loss)              # one row in $TAU_METRICS_FILE
        if step % 100 == 0:
            with tau_run.checkpoint(step) as d:   # a folder to write into; complete on exit
                (d / "model.pt").write_bytes(...)

Everything here can be done without this module (see docs/local.md):
- metrics: append `{"step": <int>, "ts": <unix seconds>, "<name>": <number>, ...}` lines to
  $TAU_METRICS_FILE;
- checkpoints: write a folder under $TAU_CHECKPOINT_DIR, then list it in
  $TAU_CHECKPOINT_DIR/index.json (`{"complete": [{"step": N, "path": "<folder>", "ts": T}]}`),
  replacing the index atomically (write a temp file, then rename). Only listed folders are
  complete: a run killed while writing one never resumes from it.

The module is copied next to your code in every run, so `import tau_run` works on a cluster
image that does not have TauGrid installed.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "checkpoint",
    "checkpoint_dir",
    "complete_checkpoints",
    "latest_checkpoint",
    "log",
    "output_dir",
    "resume_from",
    "resume_step",
    "run_dir",
]

INDEX = "index.json"


def _env_path(name: str, default: str) -> Path:
    return Path(os.environ.get(name) or default)


def run_dir() -> Path:
    return _env_path("TAU_RUN_DIR", "tau-run")


def checkpoint_dir() -> Path:
    return _env_path("TAU_CHECKPOINT_DIR", str(run_dir() / "checkpoints"))


def output_dir() -> Path:
    d = _env_path("TAU_OUTPUT_DIR", str(run_dir() / "outputs"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def metrics_file() -> Path:
    return _env_path("TAU_METRICS_FILE", str(run_dir() / "metrics.jsonl"))


def log(step: int, **metrics: float) -> None:
    """Append one metrics row. Values must be finite numbers; the write is one line, flushed."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    row: dict[str, Any] = {"step": step, "ts": round(time.time(), 3)}
    for name, value in metrics.items():
        if name in ("step", "ts"):
            raise ValueError(f"{name!r} is reserved in a metrics row")
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise ValueError(f"metric {name}={value!r} must be a finite number")
        row[name] = value
    path = metrics_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()


def _read_index(ckpt: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads((ckpt / INDEX).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return []
    entries = data.get("complete", []) if isinstance(data, dict) else []
    return [
        e
        for e in entries
        if isinstance(e, dict) and isinstance(e.get("step"), int) and isinstance(e.get("path"), str)
    ]


def _write_index(ckpt: Path, entries: list[dict[str, Any]]) -> None:
    fd, tmp = tempfile.mkstemp(dir=ckpt, prefix=".index-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"complete": sorted(entries, key=lambda e: e["step"])}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, ckpt / INDEX)


def complete_checkpoints(ckpt: Path | None = None) -> list[dict[str, Any]]:
    """Index entries whose folder exists, oldest first."""
    ckpt = ckpt or checkpoint_dir()
    return [e for e in _read_index(ckpt) if (ckpt / e["path"]).is_dir()]


def latest_checkpoint(ckpt: Path | None = None) -> Path | None:
    done = complete_checkpoints(ckpt)
    return (ckpt or checkpoint_dir()) / done[-1]["path"] if done else None


@contextlib.contextmanager
def checkpoint(step: int) -> Iterator[Path]:
    """Yield an empty folder; on normal exit it becomes checkpoint `step-<step>` and is indexed."""
    ckpt = checkpoint_dir()
    ckpt.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:08d}"
    tmp = Path(tempfile.mkdtemp(dir=ckpt, prefix=f".tmp-{name}-"))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    final = ckpt / name
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    entries = [e for e in _read_index(ckpt) if e["step"] != step]
    entries.append({"step": step, "path": name, "ts": round(time.time(), 3)})
    _write_index(ckpt, entries)


def resume_from() -> Path | None:
    """The checkpoint folder this run resumes from (TAU_RESUME_FROM), if any."""
    value = os.environ.get("TAU_RESUME_FROM")
    return Path(value) if value else None


def resume_step() -> int:
    """The step of the checkpoint being resumed (0 when starting fresh)."""
    src = resume_from()
    if src is None:
        return 0
    try:
        return int(src.name.rsplit("-", 1)[-1])
    except ValueError:
        return 0
