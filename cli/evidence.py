"""The evidence record on disk: written as the run goes, sealed at the end, verifiable.

Layout under TAU_RUN_DIR (api/constants.py names the files):
  run.json  config/tau.yaml  config/resolved.yaml  config/manifests/  logs/  metrics.jsonl
  checkpoints/ (+ index.json)  outputs/  history.jsonl  MANIFEST.sha256 (last)
Every write of a JSON document is atomic (temp file + rename), and history is append-only,
so a run killed at any moment leaves a readable record.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from taugrid.api import constants as C
from taugrid.api.evidence import HistoryEvent, RunRecord
from taugrid.cli.errors import EXIT_PLATFORM, EXIT_RUN_FAILED, TauError
from taugrid.cli.paths import runs_root, write_atomic


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def run_id(self) -> str:
        return self.path.name

    # --- paths ------------------------------------------------------------------------------
    @property
    def record_path(self) -> Path:
        return self.path / C.RUN_RECORD_FILENAME

    @property
    def history_path(self) -> Path:
        return self.path / C.HISTORY_FILENAME

    @property
    def metrics_path(self) -> Path:
        return self.path / C.METRICS_FILENAME

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def driver_log(self) -> Path:
        return self.logs / "driver.log"

    @property
    def manifest_path(self) -> Path:
        return self.path / C.MANIFEST_FILENAME

    # --- record -----------------------------------------------------------------------------
    def read_record(self) -> RunRecord:
        try:
            return RunRecord.model_validate_json(self.record_path.read_bytes())
        except FileNotFoundError:
            raise TauError(
                f"{self.path}: no run.json (not a run folder, or a run still being created)"
            ) from None
        except ValueError as e:
            raise TauError(
                f"{self.record_path}: unreadable run record ({e.__class__.__name__})"
            ) from None

    def write_record(self, rec: RunRecord) -> None:
        write_atomic(self.record_path, rec.model_dump_json(indent=2).encode() + b"\n")

    def update(self, **changes: Any) -> RunRecord:
        """Read-modify-write of run.json under a lock (the CLI and the supervisor both write)."""
        import fcntl

        with (self.path / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            rec = self.read_record().model_copy(update=changes)
            self.write_record(rec)
        return rec

    def append_history(
        self, phase: str, reason: str | None = None, message: str | None = None, attempt: int = 0
    ) -> None:
        ev = HistoryEvent.model_validate(
            {
                "ts": now_iso(),
                "phase": phase,
                "reason": reason,
                "message": message,
                "attempt": attempt,
            }
        )
        line = ev.model_dump_json(exclude_none=True) + "\n"
        with self.history_path.open("a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def read_history(self) -> list[HistoryEvent]:
        out: list[HistoryEvent] = []
        try:
            text = self.history_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return out
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                out.append(HistoryEvent.model_validate_json(line))
        return out

    def plan(self) -> dict[str, Any]:
        """What a local run was submitted as (config/manifests/local-<kind>.json)."""
        found = sorted((self.path / "config" / "manifests").glob("local-*.json"))
        if not found:
            raise TauError(f"{self.path}: no local submission in config/manifests/")
        data: dict[str, Any] = json.loads(found[0].read_text())
        return data

    # --- metrics and checkpoints ------------------------------------------------------------
    def metric_rows(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        try:
            text = self.metrics_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return rows
        for line in text.splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a torn last line of a killed run
            if isinstance(row, dict) and isinstance(row.get("step"), int):
                rows.append(row)
        return rows

    def checkpoint_dir(self, subdir: str = C.DEFAULT_CHECKPOINT_SUBDIR) -> Path:
        return self.path / subdir

    def complete_checkpoints(
        self, subdir: str = C.DEFAULT_CHECKPOINT_SUBDIR
    ) -> list[dict[str, Any]]:
        import tau_run

        found: list[dict[str, Any]] = tau_run.complete_checkpoints(self.checkpoint_dir(subdir))
        return found

    # --- sealing ----------------------------------------------------------------------------
    def _files(self) -> Iterator[Path]:
        for p in sorted(self.path.rglob("*")):
            # Dotfiles are transient (locks, half-written temp files): not part of the record.
            if (
                p.is_file()
                and p != self.manifest_path
                and not any(part.startswith(".") for part in p.relative_to(self.path).parts)
            ):
                yield p

    def seal(self) -> int:
        """Write MANIFEST.sha256 (sha256sum format) over every file of the record."""
        lines = []
        for p in self._files():
            lines.append(f"{_sha256(p)}  {p.relative_to(self.path).as_posix()}")
        body = (
            f"# tau evidence record {self.run_id}, sealed {now_iso()}\n" + "\n".join(lines) + "\n"
        )
        write_atomic(self.manifest_path, body.encode())
        return len(lines)

    def verify(self) -> tuple[int, list[str]]:
        """(files checked, problems). Missing, changed and unlisted files are problems."""
        try:
            text = self.manifest_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise TauError(
                f"{self.path}: not sealed yet (no {C.MANIFEST_FILENAME}); a run is sealed when it ends",
                exit_code=EXIT_RUN_FAILED,
            ) from None
        listed: dict[str, str] = {}
        problems: list[str] = []
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            digest, _, rel = line.partition("  ")
            listed[rel] = digest
        for rel, digest in listed.items():
            p = self.path / rel
            if not p.is_file():
                problems.append(f"missing: {rel}")
            elif _sha256(p) != digest:
                problems.append(f"changed: {rel}")
        for p in self._files():
            rel = p.relative_to(self.path).as_posix()
            if rel not in listed:
                problems.append(f"not in the manifest: {rel}")
        return len(listed), problems


def _sha256(p: Path) -> str:
    h = hashlib.sha256()
    with p.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def list_runs() -> list[RunDir]:
    root = runs_root()
    if not root.is_dir():
        return []
    dirs = [
        RunDir(p) for p in root.iterdir() if p.is_dir() and (p / C.RUN_RECORD_FILENAME).is_file()
    ]
    return sorted(dirs, key=lambda d: d.record_path.stat().st_mtime)


def find_run(ref: str) -> RunDir:
    """A run by id, unique id prefix, or name (the newest run of that name)."""
    root = runs_root()
    exact = root / ref
    if (exact / C.RUN_RECORD_FILENAME).is_file():
        return RunDir(exact)
    runs = list_runs()
    # A run name (with or without its resource_naming prefix): the newest run of that name.
    by_name = [
        r for r in runs if (stem := r.run_id.rsplit("-", 1)[0]) == ref or stem.endswith("-" + ref)
    ]
    if by_name:
        return by_name[-1]
    by_prefix = [r for r in runs if r.run_id.startswith(ref)]
    if len(by_prefix) == 1:
        return by_prefix[0]
    if len(by_prefix) > 1:
        raise TauError(
            f"{ref!r} matches several runs: {', '.join(r.run_id for r in by_prefix[:8])}"
        )
    raise TauError(f"no run {ref!r} under {root}", hint="`tau run list` shows the runs")


def ensure_writable(root: Path) -> None:
    """Fail early, with the reason, when the data root cannot take a new run."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".probe-{os.getpid()}-{time.monotonic_ns()}"
        probe.write_bytes(b"x" * 4096)
        probe.unlink()
    except OSError as e:
        raise TauError(
            f"the local data root {root} is not writable: {e.strerror or e}",
            exit_code=EXIT_PLATFORM,
            hint="free some space, or point TAU_HOME at a writable folder",
        ) from None
