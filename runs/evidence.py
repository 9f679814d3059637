"""The evidence record on disk: written as the run goes, sealed at the end, verifiable.

Layout under TAU_RUN_DIR (api/constants.py names the files):
  run.json  config/tau.yaml  config/resolved.yaml  config/manifests/  logs/  metrics.jsonl
  checkpoints/ (+ index.json)  outputs/  history.jsonl  MANIFEST.sha256 (last)
Every write of a JSON document is atomic (temp file + rename), and history is append-only,
so a run killed at any moment leaves a readable record. A run changes phase only through
`RunDir.transition` (api/evidence.py's `transition`, under a lock, then history and seal).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tau_evidence

from taugrid.api import constants as C
from taugrid.api.errors import EXIT_PLATFORM, EXIT_RUN_FAILED, TauError
from taugrid.api.evidence import HistoryEvent, RunRecord, TerminalStateError, transition
from taugrid.api.vocabulary import TERMINAL, Phase, RunStatus, TerminationReason
from taugrid.runs.paths import write_atomic

now_iso = tau_evidence.now_iso


def parse_metric_rows(text: str) -> list[dict[str, Any]]:
    """A metrics file's rows (dicts with an int `step`), in the order written. The text is parsed
    as one JSON array (a 100,000-row file in a fraction of the time of a parse per line); a torn
    line (a killed run's last) sends it down the line-by-line path."""
    try:  # one parse; a blank or torn line makes it fail: then line by line
        parsed = json.loads("[" + text.strip().replace("\n", ",") + "]")
    except ValueError:
        parsed = []
        for line in text.splitlines():
            try:
                parsed.append(json.loads(line))
            except ValueError:
                continue  # a torn last line of a killed run
    return [r for r in parsed if isinstance(r, dict) and isinstance(r.get("step"), int)]


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
    def final_status_path(self) -> Path:
        """The status a cluster run ended with, as it was observed (record_end)."""
        return self.path / C.FINAL_STATUS_FILENAME

    def final_status(self) -> RunStatus | None:
        try:
            return RunStatus.model_validate_json(self.final_status_path.read_bytes())
        except (FileNotFoundError, ValueError):
            return None

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

    def create(self, rec: RunRecord, reason: str = "submitted") -> None:
        """The first write of a new run: its record, and history's first line."""
        self.write_record(rec)
        self._append(HistoryEvent(ts=now_iso(), phase=rec.phase, reason=reason))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        import fcntl

        with (self.path / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def transition(
        self,
        phase: Phase,
        reason: str | None,
        *,
        attempt: int | None = None,
        termination: TerminationReason | None = None,
        exit_code: int | None = None,
        **fields: Any,
    ) -> RunRecord:
        """The one way a run changes phase: refuses to leave a terminal phase
        (TerminalStateError), stamps times, appends history once per change, and seals the
        record when the run ends. The CLI and the supervisor may both call it (a lock)."""
        with self._locked():
            rec, event = transition(
                self.read_record(),
                phase,
                reason,
                now=now_iso(),
                attempt=attempt,
                termination=termination,
                exit_code=exit_code,
                **fields,
            )
            if event is not None:
                self._append(event)
            self.write_record(rec)
            if event is not None and phase in TERMINAL:
                self.seal()
        return rec

    def record_end(self, st: RunStatus) -> RunRecord | None:
        """A run's end as it was observed (a cluster run's end, seen by status, list, logs,
        verify or follow, wherever from), recorded and sealed once: its phase, summary,
        termination reason and exit code (0 for a success whose code the cluster did not say),
        and the status it ended with (status.json: signals, the controller's timeline), so that
        status works offline afterwards. None: the record had ended already."""
        if st.phase not in TERMINAL:
            raise ValueError(f"{st.run_id} has not ended ({st.phase})")
        if self.read_record().phase in TERMINAL:
            return None
        code = st.exit_code
        if code is None and st.phase == Phase.Succeeded:
            code = 0
        termination = st.termination_reason or TerminationReason.for_phase(st.phase)
        final = st.model_copy(update={"exit_code": code, "termination_reason": termination})
        write_atomic(self.final_status_path, final.model_dump_json(indent=2).encode() + b"\n")
        try:
            return self.transition(st.phase, st.summary, termination=termination, exit_code=code)
        except TerminalStateError:
            return None

    def update(self, **changes: Any) -> RunRecord:
        """Read-modify-write of fields other than the phase (those go through transition)."""
        if {"phase", "reason", "finished_at"} & set(changes):
            raise ValueError("a change of phase goes through RunDir.transition")
        with self._locked():
            rec = self.read_record()
            if "handle" in changes and isinstance(changes["handle"], dict):
                changes["handle"] = rec.handle.model_copy(update=changes["handle"])
            rec = rec.model_copy(update=changes)
            self.write_record(rec)
        return rec

    def update_handle(self, **changes: Any) -> RunRecord:
        """Update fields of the run's backend handle (e.g. the supervisor's pid)."""
        return self.update(handle=changes)

    def _append(self, ev: HistoryEvent) -> None:
        tau_evidence.append_history(self.path, ev.model_dump(mode="json", exclude_none=True))

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

    # --- metrics and checkpoints ------------------------------------------------------------
    def metric_rows(self) -> list[dict[str, Any]]:
        """Every metric row (a dict with an int `step`), in the order written."""
        try:
            return parse_metric_rows(self.metrics_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []

    def metric_summary(self) -> tuple[int, dict[str, Any] | None]:
        """How many metric rows there are, and the last one, without parsing the others (a
        run's status needs no more): `tau_evidence.metric_summary`."""
        return tau_evidence.metric_summary(self.metrics_path)

    def last_error_line(self, tail_bytes: int = 64 * 1024) -> str | None:
        """The last line of the driver log that reads like an error (else its last line)."""
        return tau_evidence.last_error_line(self.driver_log, tail_bytes)

    def checkpoint_dir(self, subdir: str = C.DEFAULT_CHECKPOINT_SUBDIR) -> Path:
        return self.path / subdir

    def complete_checkpoints(
        self, subdir: str = C.DEFAULT_CHECKPOINT_SUBDIR
    ) -> list[dict[str, Any]]:
        import tau_run

        found: list[dict[str, Any]] = tau_run.complete_checkpoints(self.checkpoint_dir(subdir))
        return found

    def newest_checkpoint(self, subdir: str = C.DEFAULT_CHECKPOINT_SUBDIR) -> str | None:
        """The path of the newest complete checkpoint, or None."""
        ckpts = self.complete_checkpoints(subdir)
        return str(self.checkpoint_dir(subdir) / ckpts[-1]["path"]) if ckpts else None

    def output_files(self, subdir: str = C.DEFAULT_OUTPUT_SUBDIR) -> int:
        out = self.path / subdir
        return sum(1 for p in out.rglob("*") if p.is_file()) if out.is_dir() else 0

    # --- sealing ----------------------------------------------------------------------------
    def seal(self) -> int:
        """Write MANIFEST.sha256 (sha256sum format) over every file of the record (the same
        code seals a cluster run's record in its pod: runlib/tau_evidence.py)."""
        return tau_evidence.seal(self.path, self.run_id)

    def record_child(self, child_id: str, checkpoint: str | None) -> None:
        """Lineage: a run resumed from this one (lineage.jsonl; the seal is renewed over it)."""
        line = json.dumps({"ts": now_iso(), "resumed_by": child_id, "checkpoint": checkpoint})
        with (self.path / "lineage.jsonl").open("a", encoding="utf-8") as f:
            f.write(line + "\n")
        self.reseal_if_sealed()

    def settled(self) -> bool:
        """Once any transition under way has finished (a run's end is recorded and sealed under
        one lock, so a reader that saw the terminal phase waits here for the seal, never on a
        clock); whether the record is sealed now."""
        with self._locked():
            pass
        return self.sealed

    @property
    def sealed(self) -> bool:
        return self.manifest_path.exists()

    def reseal_if_sealed(self) -> None:
        """After an addition to an ended run's record (e.g. lineage), renew its seal."""
        if self.sealed:
            self.seal()

    def verify(self) -> tuple[int, list[str]]:
        """(files checked, problems). Missing, changed and unlisted files are problems."""
        try:
            return tau_evidence.verify(self.path)
        except FileNotFoundError:
            raise TauError(
                f"{self.path}: not sealed yet (no {C.MANIFEST_FILENAME}); a run is sealed when it "
                "ends",
                exit_code=EXIT_RUN_FAILED,
            ) from None


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
