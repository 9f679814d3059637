"""Status: one answer to "where is it stuck, and why". A pure function of observations.

Backends only gather `Observations` (the record, its history, files, process liveness, and on
a cluster the objects of one LIST per kind); each of the six signals is one function of them,
and `compute` joins them into a phase, a one-sentence summary and the signal table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from taugrid.api.evidence import HistoryEvent, RunRecord
from taugrid.api.vocabulary import (
    TERMINAL,
    Phase,
    RunStatus,
    Signal,
    SignalName,
    SignalState,
    TerminationReason,
)


@dataclass(frozen=True)
class Observations:
    """Everything status needs about one run, gathered by its backend at one moment."""

    record: RunRecord
    history: list[HistoryEvent]
    now: float  # unix seconds
    owner_alive: bool | None  # the process that owns the run (local supervisor); None: n/a
    orphans: int = 0  # processes of the run still alive while its owner is gone
    last_metric_ts: float | None = None  # mtime of metrics.jsonl
    last_log_ts: float | None = None  # mtime of the newest log
    metric_rows: int = 0
    last_step: int | None = None
    checkpoints: int = 0
    newest_checkpoint: str | None = None
    sealed: bool = False
    outputs: int = 0  # files under the run's storage.output folder
    latest_metrics: dict[str, float | int | str] = field(default_factory=dict)  # the last row
    last_error: str | None = None  # the last error-looking line of the log
    evidence: str | None = None  # where the evidence record is
    extra: dict[str, str] = field(default_factory=dict)


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds") if ts else None


def _first(
    history: list[HistoryEvent], phases: set[Phase] | frozenset[Phase]
) -> HistoryEvent | None:
    return next((h for h in history if h.phase in phases), None)


def ago(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


SUPERVISOR_LOST_RUNNING = (
    "its supervisor is gone (killed?) but {n} process(es) of the run still run"
)
SUPERVISOR_LOST = "the local supervisor process is gone without recording an end (killed?)"


def effective_phase(o: Observations) -> tuple[Phase, str | None]:
    """The phase, corrected when the run's owner died without recording an end: Failed if
    nothing of the run is left, else what is true: it still runs, without a supervisor."""
    rec = o.record
    if rec.phase not in TERMINAL and o.owner_alive is False:
        if o.orphans:
            return rec.phase, SUPERVISOR_LOST_RUNNING.format(n=o.orphans)
        return Phase.Failed, SUPERVISOR_LOST
    return rec.phase, rec.reason


# --- one function per signal --------------------------------------------------------------------
def admitted(o: Observations) -> Signal:
    phase, _ = effective_phase(o)
    started = _first(o.history, {Phase.Starting, Phase.Running})
    state = SignalState.true if started or phase in TERMINAL else SignalState.pending
    return Signal(
        name=SignalName.Admitted,
        state=state,
        since=started.ts if started else None,
        reason="local runs need no queue admission" if o.record.target == "local" else "",
        evidence="history.jsonl",
    )


def scheduled(o: Observations) -> Signal:
    phase, reason = effective_phase(o)
    running = _first(o.history, {Phase.Running})
    if running:
        return Signal(name=SignalName.Scheduled, state=SignalState.true, since=running.ts,
                      reason="process started", evidence="history.jsonl")  # fmt: skip
    if phase in TERMINAL:
        return Signal(name=SignalName.Scheduled, state=SignalState.false,
                      reason=reason or "ended before it started", evidence="history.jsonl")  # fmt: skip
    return Signal(name=SignalName.Scheduled, state=SignalState.pending,
                  reason="waiting for the process to start", evidence="history.jsonl")  # fmt: skip


def gpu_healthy(o: Observations) -> Signal:
    rec = o.record
    if rec.gpus_per_worker == 0:
        return Signal(name=SignalName.GPUHealthy, state=SignalState.true,
                      reason="no GPUs requested", evidence="tau.yaml")  # fmt: skip
    if rec.gpus_available == 0:
        why = f"{rec.gpus_per_worker} GPU(s) requested; this machine has none, the run uses CPU"
        return Signal(name=SignalName.GPUHealthy, state=SignalState.unknown, reason=why,
                      evidence="run.json")  # fmt: skip
    return Signal(name=SignalName.GPUHealthy, state=SignalState.true,
                  reason=f"{rec.gpus_available} GPU(s) visible", evidence="nvidia-smi")  # fmt: skip


def progressing(o: Observations) -> Signal:
    rec = o.record
    phase, _ = effective_phase(o)
    running = _first(o.history, {Phase.Running})
    beats = [t for t in (o.last_metric_ts, o.last_log_ts) if t]
    last = max(beats) if beats else None
    step = f"step {o.last_step}, " if o.last_step is not None else ""
    name, evidence = SignalName.Progressing, "metrics.jsonl, logs/"
    if phase in TERMINAL:
        return Signal(name=name, state=SignalState.false, since=rec.finished_at,
                      reason=f"ended ({step}{o.metric_rows} metric rows)", evidence="metrics.jsonl")  # fmt: skip
    if phase != Phase.Running or running is None:
        return Signal(name=name, state=SignalState.pending, reason="not running yet")
    t0 = datetime.fromisoformat(running.ts).timestamp()
    quiet = o.now - (last or t0)
    if quiet > rec.stall_after_seconds:
        why = f"stalled: no metric or log line for {ago(quiet)} (limit {ago(rec.stall_after_seconds)})"
        return Signal(name=name, state=SignalState.false, since=_iso(last or t0), reason=why,
                      evidence=evidence)  # fmt: skip
    what = (
        f"{step}last heartbeat {ago(quiet)} ago"
        if last
        else f"started {ago(quiet)} ago, no output yet"
    )
    return Signal(name=name, state=SignalState.true, since=_iso(last or t0), reason=what,
                  evidence=evidence)  # fmt: skip


def completed(o: Observations) -> Signal:
    rec = o.record
    phase, reason = effective_phase(o)
    name = SignalName.Completed
    if phase == Phase.Succeeded:
        return Signal(name=name, state=SignalState.true, since=rec.finished_at,
                      reason="exit code 0", evidence="run.json")  # fmt: skip
    if phase in (Phase.Failed, Phase.Cancelled):
        end = _first(list(reversed(o.history)), TERMINAL)
        why = reason or (
            f"exit code {rec.exit_code}" if rec.exit_code is not None else phase.lower()
        )
        return Signal(name=name, state=SignalState.false, since=rec.finished_at or (end.ts if end else None),
                      reason=f"{phase}: {why}", evidence="run.json")  # fmt: skip
    return Signal(name=name, state=SignalState.pending, reason=phase.lower(), evidence="run.json")


def artifact_saved(o: Observations) -> Signal:
    rec = o.record
    phase, _ = effective_phase(o)
    name = SignalName.ArtifactSaved
    where = f"{rec.checkpoint_subdir}/index.json, {rec.output_subdir}/"
    if o.checkpoints or o.outputs:
        parts = []
        if o.checkpoints:
            parts.append(f"{o.checkpoints} complete checkpoint(s), newest {o.newest_checkpoint}")
        if o.outputs:
            parts.append(f"{o.outputs} output file(s) in {rec.output_subdir}/")
        if o.sealed:
            parts.append("record sealed")
        return Signal(name=name, state=SignalState.true, reason="; ".join(parts), evidence=where)
    if phase in TERMINAL:
        why = "no checkpoint or output was saved" + ("; record sealed" if o.sealed else "")
        return Signal(name=name, state=SignalState.false, reason=why, evidence=where)
    return Signal(name=name, state=SignalState.pending, reason="nothing saved yet", evidence=where)


SIGNAL_FUNCTIONS: tuple[Callable[[Observations], Signal], ...] = (
    admitted,
    scheduled,
    gpu_healthy,
    progressing,
    completed,
    artifact_saved,
)


def summarize(phase: Phase, signals: list[Signal], o: Observations | None = None) -> str:
    """The first line of `tau run status`: the cause in one sentence."""
    by_name = {s.name: s for s in signals}
    if phase == Phase.Succeeded:
        return "succeeded"
    if phase in (Phase.Failed, Phase.Cancelled):
        return f"{phase.lower()}: {by_name[SignalName.Completed].reason.split(': ', 1)[-1]}"
    if o is not None and o.owner_alive is False and o.orphans and phase not in TERMINAL:
        rid = o.record.run_id
        return (
            f"{phase.lower()}, but {SUPERVISOR_LOST_RUNNING.format(n=o.orphans)}: "
            f"`tau run attach {rid}` re-attaches it, `tau run cancel {rid}` stops it"
        )
    stuck = next((x for x in signals if x.state == SignalState.false), None)
    if stuck is not None:
        return f"{phase.lower()}, but {stuck.name}: {stuck.reason}"
    pend = next((x for x in signals if x.state == SignalState.pending), None)
    return phase.lower() + (
        f" ({pend.name}: {pend.reason})" if pend and phase != Phase.Running else ""
    )


def compute(o: Observations) -> RunStatus:
    rec = o.record
    phase, _ = effective_phase(o)
    signals = [f(o) for f in SIGNAL_FUNCTIONS]
    termination = rec.termination_reason
    if phase != rec.phase and phase == Phase.Failed:
        termination = TerminationReason.SupervisorLost
    start = rec.started_at or rec.created_at
    end = datetime.fromisoformat(rec.finished_at).timestamp() if rec.finished_at else o.now
    return RunStatus(
        started_at=rec.started_at,
        duration_s=round(max(0.0, end - datetime.fromisoformat(start).timestamp()), 1),
        last_step=o.last_step,
        latest_metrics=o.latest_metrics,
        last_error=o.last_error if phase in (Phase.Failed, Phase.Cancelled) else None,
        evidence=o.evidence,
        run_id=rec.run_id,
        name=rec.name,
        phase=phase,
        target=rec.target,
        workload_kind=rec.workload_kind,
        attempt=rec.attempt,
        created_at=rec.created_at,
        finished_at=rec.finished_at,
        termination_reason=termination,
        signals=signals,
        summary=summarize(phase, signals, o),
        exit_code=rec.exit_code,
    )
