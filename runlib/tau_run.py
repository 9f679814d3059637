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
import operator
import os
import shutil
import sys
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


# Non-finite values are kept, as JSON strings (JSON has no NaN): a diverging loss is evidence.
NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        print(f"tau_run: {message} (said once)", file=sys.stderr, flush=True)


def _scalar(value: Any) -> Any:
    """A plain Python number from anything number-like: numpy and torch scalars (and 1-element
    arrays/tensors) through .item(), others through __index__ / __float__."""
    if isinstance(value, bool):
        raise TypeError("a bool is not a metric")
    if isinstance(value, (int, float)):
        return value
    item = getattr(value, "item", None)
    if callable(item):
        return _scalar(item())
    if hasattr(value, "__index__"):
        return operator.index(value)
    if hasattr(value, "__float__"):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not a number")


def _step(step: Any) -> int | None:
    try:
        value = _scalar(step)
    except (TypeError, ValueError):
        return None
    if isinstance(value, float):
        if not value.is_integer():
            return None
        value = int(value)
    return value if value >= 0 else None


def log(step: Any, **metrics: Any) -> None:
    """Append one metrics row `{"step": N, "ts": T, name: value, ...}`, one line, flushed.

    `step` is a non-negative whole number (numpy/torch integers too). Values are anything
    number-like (int, float, numpy and torch scalars, Decimal, ...). NaN and infinities are
    recorded as the strings "NaN", "Infinity", "-Infinity", with a warning. A value that is not
    a number is left out with a warning: this never raises, so a metric never stops training.
    """
    n = _step(step)
    if n is None:
        _warn_once("step", f"step must be a non-negative whole number, got {step!r}: row skipped")
        return
    row: dict[str, Any] = {"step": n, "ts": round(time.time(), 3)}
    for name, raw in metrics.items():
        if name in ("step", "ts"):
            _warn_once(f"reserved:{name}", f"{name!r} is reserved in a metrics row: left out")
            continue
        try:
            value = _scalar(raw)
        except (TypeError, ValueError) as e:
            _warn_once(f"type:{name}", f"metric {name}={raw!r} is not a number ({e}): left out")
            continue
        if isinstance(value, float) and not math.isfinite(value):
            _warn_once(f"nonfinite:{name}", f"metric {name} is {value}: recorded as a string")
            value = NON_FINITE[str(value)]
        row[name] = value
    path = metrics_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, allow_nan=False) + "\n")
            f.flush()
    except OSError as e:
        _warn_once("write", f"cannot write metrics to {path}: {e}")


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
