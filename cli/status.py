"""Status: one answer to "where is it stuck, and why". A pure function of a snapshot.

Backends only gather a `Snapshot` (files, process liveness, clock); `compute` turns it into
six signals, each true/false/pending/unknown with since, reason and evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from taugrid.api.evidence import (
    TERMINAL,
    HistoryEvent,
    Phase,
    RunRecord,
    RunStatus,
    Signal,
    SignalState,
)


@dataclass(frozen=True)
class Snapshot:
    record: RunRecord
    history: list[HistoryEvent]
    now: float  # unix seconds
    supervisor_alive: bool | None  # None: not applicable (e.g. no local supervisor)
    last_metric_ts: float | None = None  # mtime of metrics.jsonl
    last_log_ts: float | None = None  # mtime of the newest log
    metric_rows: int = 0
    last_step: int | None = None
    checkpoints: int = 0
    newest_checkpoint: str | None = None
    sealed: bool = False
    outputs: int = 0
    extra: dict[str, str] = field(default_factory=dict)


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds") if ts else None


def _first(history: list[HistoryEvent], phases: set[str]) -> HistoryEvent | None:
    return next((h for h in history if h.phase in phases), None)


def _ago(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def effective_phase(s: Snapshot) -> tuple[Phase, str | None]:
    """The phase, corrected when the supervisor died without recording an end."""
    rec = s.record
    if rec.phase not in TERMINAL and s.supervisor_alive is False:
        return "Failed", "the local supervisor process is gone without recording an end (killed?)"
    return rec.phase, rec.reason


def compute(s: Snapshot) -> RunStatus:
    rec = s.record
    phase, reason = effective_phase(s)
    hist = s.history
    signals: list[Signal] = []

    started = _first(hist, {"Starting", "Running"})
    admitted_state: SignalState = "true" if started or phase in TERMINAL else "pending"
    signals.append(
        Signal(
            name="Admitted",
            state=admitted_state,
            since=started.ts if started else None,
            reason="local runs need no queue admission" if rec.target == "local" else "",
            evidence="history.jsonl",
        )
    )

    running = _first(hist, {"Running"})
    if running:
        sched = Signal(
            name="Scheduled",
            state="true",
            since=running.ts,
            reason="process started",
            evidence="history.jsonl",
        )
    elif phase in TERMINAL:
        sched = Signal(
            name="Scheduled",
            state="false",
            reason=reason or "ended before it started",
            evidence="history.jsonl",
        )
    else:
        sched = Signal(
            name="Scheduled",
            state="pending",
            reason="waiting for the process to start",
            evidence="history.jsonl",
        )
    signals.append(sched)

    if rec.gpus_per_worker == 0:
        gpu = Signal(
            name="GPUHealthy", state="true", reason="no GPUs requested", evidence="tau.yaml"
        )
    elif rec.gpus_available == 0:
        gpu = Signal(
            name="GPUHealthy",
            state="unknown",
            reason=f"{rec.gpus_per_worker} GPU(s) requested; this machine has none, the run uses CPU",
            evidence="run.json",
        )
    else:
        gpu = Signal(
            name="GPUHealthy",
            state="true",
            reason=f"{rec.gpus_available} GPU(s) visible",
            evidence="nvidia-smi",
        )
    signals.append(gpu)

    beats = [t for t in (s.last_metric_ts, s.last_log_ts) if t]
    last = max(beats) if beats else None
    step = f"step {s.last_step}, " if s.last_step is not None else ""
    if phase in TERMINAL:
        prog = Signal(
            name="Progressing",
            state="false",
            since=rec.finished_at,
            reason=f"ended ({step}{s.metric_rows} metric rows)",
            evidence="metrics.jsonl",
        )
    elif phase != "Running" or running is None:
        prog = Signal(name="Progressing", state="pending", reason="not running yet", evidence="")
    else:
        t0 = datetime.fromisoformat(running.ts).timestamp()
        quiet = s.now - (last or t0)
        if quiet > rec.stall_after_seconds:
            prog = Signal(
                name="Progressing",
                state="false",
                since=_iso(last or t0),
                reason=f"stalled: no metric or log line for {_ago(quiet)} (limit {_ago(rec.stall_after_seconds)})",
                evidence="metrics.jsonl, logs/",
            )
        else:
            what = (
                f"{step}last heartbeat {_ago(quiet)} ago"
                if last
                else f"started {_ago(quiet)} ago, no output yet"
            )
            prog = Signal(
                name="Progressing",
                state="true",
                since=_iso(last or t0),
                reason=what,
                evidence="metrics.jsonl, logs/",
            )
    signals.append(prog)

    end = _first(list(reversed(hist)), set(TERMINAL))
    if phase == "Succeeded":
        comp = Signal(
            name="Completed",
            state="true",
            since=rec.finished_at,
            reason="exit code 0",
            evidence="run.json",
        )
    elif phase in ("Failed", "Cancelled"):
        why = reason or (
            f"exit code {rec.exit_code}" if rec.exit_code is not None else phase.lower()
        )
        comp = Signal(
            name="Completed",
            state="false",
            since=rec.finished_at or (end.ts if end else None),
            reason=f"{phase}: {why}",
            evidence="run.json",
        )
    else:
        comp = Signal(
            name="Completed", state="pending", reason=f"{phase.lower()}", evidence="run.json"
        )
    signals.append(comp)

    if s.checkpoints or s.outputs:
        parts = []
        if s.checkpoints:
            parts.append(f"{s.checkpoints} complete checkpoint(s), newest {s.newest_checkpoint}")
        if s.outputs:
            parts.append(f"{s.outputs} output file(s)")
        if s.sealed:
            parts.append("record sealed")
        art = Signal(
            name="ArtifactSaved",
            state="true",
            reason="; ".join(parts),
            evidence="checkpoints/index.json, outputs/",
        )
    elif phase in TERMINAL:
        art = Signal(
            name="ArtifactSaved",
            state="false",
            reason="no checkpoint or output was saved" + ("; record sealed" if s.sealed else ""),
            evidence="checkpoints/index.json, outputs/",
        )
    else:
        art = Signal(
            name="ArtifactSaved",
            state="pending",
            reason="nothing saved yet",
            evidence="checkpoints/index.json",
        )
    signals.append(art)

    stuck = next((x for x in signals if x.state == "false"), None)
    if phase == "Succeeded":
        summary = "succeeded"
    elif phase in ("Failed", "Cancelled"):
        summary = f"{phase.lower()}: {comp.reason.split(': ', 1)[-1]}"
    elif stuck is not None:
        summary = f"{phase.lower()}, but {stuck.name}: {stuck.reason}"
    else:
        pend = next((x for x in signals if x.state == "pending"), None)
        summary = phase.lower() + (
            f" ({pend.name}: {pend.reason})" if pend and phase != "Running" else ""
        )
    return RunStatus(
        run_id=rec.run_id,
        name=rec.name,
        phase=phase,
        target=rec.target,
        workload_kind=rec.workload_kind,
        attempt=rec.attempt,
        created_at=rec.created_at,
        finished_at=rec.finished_at,
        signals=signals,
        summary=summary,
        exit_code=rec.exit_code,
    )
