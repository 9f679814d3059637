"""Status: one answer to "where is it stuck, and why". A pure function of observations.

Backends only gather `Observations` (the record, its history, files, process liveness, and on
a cluster the objects of one LIST per kind); each of the six signals is one function of them,
and `compute` joins them into a phase, a one-sentence summary and the signal table.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from taugrid.api import constants as C
from taugrid.api.evidence import HistoryEvent
from taugrid.api.gpuuse import DCGM_EVIDENCE
from taugrid.api.kueuewords import evicted, explain, without_noise
from taugrid.api.multicluster import dispatched
from taugrid.api.observations import ClusterFacts, Observations, PodFact
from taugrid.api.vocabulary import (
    TERMINAL,
    Phase,
    RunStatus,
    Signal,
    SignalName,
    SignalState,
    TerminationReason,
)


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds") if ts else None


def _first(
    history: list[HistoryEvent], phases: set[Phase] | frozenset[Phase]
) -> HistoryEvent | None:
    return next((h for h in history if h.phase in phases), None)


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


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
NOT_SENT = (
    "the submission was interrupted before the cluster received it: `tau run attach "
    "{run}` sends it, `tau run cancel {run}` drops it"
)
SUPERVISOR_LOST = "the local supervisor process is gone without recording an end (killed?)"


def _cond(c: ClusterFacts, kind: str) -> dict[str, str] | None:
    """A Kueue condition by type (never the last one in the list as the state)."""
    return next((x for x in c.kueue or [] if x.get("type") == kind), None)


def _true(c: ClusterFacts, kind: str) -> bool:
    x = _cond(c, kind)
    return bool(x and x.get("status") == "True")


def cluster_phase(o: Observations) -> tuple[Phase, str | None]:
    """A cluster run's phase from what the cluster says (the local record only knows the
    submission, and a cancel)."""
    rec, c = o.record, o.cluster
    assert c is not None
    if rec.phase in TERMINAL:
        return rec.phase, rec.reason
    if c.from_record:
        assert c.recorded is not None and c.recorded.phase is not None
        return c.recorded.phase, c.recorded.summary
    if c.finished == "Succeeded":
        return Phase.Succeeded, c.workload_message or "the workload succeeded"
    if c.finished == "Failed":
        return Phase.Failed, c.workload_message or "the workload failed"
    if not c.taurun and not c.workload:
        if not getattr(rec.handle, "sent", True):
            return Phase.Pending, NOT_SENT.format(run=rec.run_id)
        return Phase.Failed, "its TauRun and workload are gone from the cluster (deleted?)"
    if _true(c, "Admitted"):
        if c.worker and not c.pods and c.remote_ready:
            return Phase.Running, f"running on worker cluster {c.worker} ({_ready(c)})"
        if c.worker and not c.pods and c.remote_succeeded:  # never "starting" again after
            return Phase.Running, f"pods ended on worker cluster {c.worker}; finishing"
        if c.worker and not c.pods and c.remote_active and c.was_running:  # a pod exiting
            return Phase.Running, f"running on worker cluster {c.worker} (no pod ready now)"
        running = [p for p in c.pods if p.phase == "Running"]
        ranks = nodes_summary(c.pods, rec.workers)
        if running and len(running) == len(c.pods) and len(c.pods) >= rec.workers:
            return Phase.Running, ranks or "pods running"
        ended = [p for p in c.pods if p.phase == "Succeeded"]
        if ended and len(ended) + len(running) == len(c.pods) and len(c.pods) >= rec.workers:
            # its code ended (or ends) on every pod: the workload has not said so yet; never
            # "starting" again after running
            return Phase.Running, "pods ended; the workload is finishing"
        return Phase.Starting, f"admitted; {ranks}" if ranks else "admitted; pods starting"
    if c.kueue is not None:
        return Phase.Queued, "waiting in the queue"
    return Phase.Pending, "submitted"


def nodes_summary(pods: list[PodFact], nodes: int) -> str | None:
    """A multi-node torchrun job's nodes in one phrase, e.g. "3/4 nodes running, node 2
    pending: 0/20 nodes are available: 4 Insufficient nvidia.com/gpu" (None: not such a job)."""
    by_rank = {p.node_rank: p for p in pods if p.node_rank is not None}
    if not by_rank:
        return None
    running = sum(1 for p in by_rank.values() if p.phase == "Running")
    out = f"{running}/{nodes} nodes running"
    for rank in range(nodes):
        p = by_rank.get(rank)
        if p is None:
            return f"{out}, node {rank} has no pod yet"
        if p.phase == "Pending":
            why = p.unschedulable or p.waiting or "starting"
            return f"{out}, node {rank} pending: {why}"
    return out


def effective_phase(o: Observations) -> tuple[Phase, str | None]:
    """The phase, corrected when the run's owner died without recording an end: Failed if
    nothing of the run is left, else what is true: it still runs, without a supervisor."""
    if o.cluster is not None:
        return cluster_phase(o)
    rec = o.record
    if rec.phase not in TERMINAL and o.owner_alive is False:
        if o.orphans:
            return rec.phase, SUPERVISOR_LOST_RUNNING.format(n=o.orphans)
        return Phase.Failed, SUPERVISOR_LOST
    return rec.phase, rec.reason


# --- one function per signal --------------------------------------------------------------------
def _position_words(c: ClusterFacts) -> str:
    if c.position is not None:
        return f"; position {c.position}"
    return f"; position unknown ({c.position_note})" if c.position_note else ""


def _queue_words(c: ClusterFacts) -> str:
    return (f" in queue {c.queue}" if c.queue else "") + _position_words(c)


def admitted(o: Observations) -> Signal:
    if o.cluster is not None:
        return _admitted_cluster(o.cluster)
    return _admitted_local(o)


def _admitted_cluster(c: ClusterFacts) -> Signal:
    name, ev = SignalName.Admitted, "Kueue Workload"
    for kind in ("Evicted", "Preempted"):
        x = _cond(c, kind)
        if x and x.get("status") == "True":
            raw = x.get("message", "")
            why = evicted(x.get("reason", ""), raw)
            if _cond(c, "Requeued") and (_cond(c, "Requeued") or {}).get("status") == "True":
                why += f"; queued again{_queue_words(c)}"
            return Signal(
                name=name,
                state=SignalState.false,
                since=x.get("lastTransitionTime"),
                reason=why,
                evidence=ev,
                detail=f"{kind}: {raw}",
            )
    adm = _cond(c, "Admitted")
    if adm and adm.get("status") == "True":
        cq = f" to ClusterQueue {c.cluster_queue}" if c.cluster_queue else ""
        on = f", running on worker cluster {c.worker} (MultiKueue)" if c.worker else ""
        return Signal(
            name=name,
            state=SignalState.true,
            since=adm.get("lastTransitionTime"),
            reason=f"admitted{cq}{on}",
            evidence=ev,
        )
    if c.nominated:
        return Signal(
            name=name,
            state=SignalState.pending,
            since=(_cond(c, "QuotaReserved") or {}).get("lastTransitionTime"),
            reason=f"offered to worker clusters {', '.join(c.nominated)} (MultiKueue): the "
            "first to admit it runs it",
            evidence=ev,
        )
    if c.kueue is None:
        why = "no Kueue Workload yet" + ("" if c.workload else " (the workload is not there)")
        return Signal(name=name, state=SignalState.pending, reason=why, evidence=ev)
    return _waiting_for_admission(c, adm)


def _waiting_for_admission(c: ClusterFacts, adm: dict[str, str] | None) -> Signal:
    """Not admitted: Kueue's reason in TauGrid's words (never admissible: false; else pending,
    with the place in the queue)."""
    name, ev = SignalName.Admitted, "Kueue Workload"
    qr = _cond(c, "QuotaReserved")
    raw = (qr or adm or {}).get("message") or (qr or adm or {}).get("reason") or "waiting"
    since = (qr or {}).get("lastTransitionTime")
    words = explain(raw, c.queue)
    if words is not None and words.never:
        return Signal(
            name=name,
            state=SignalState.false,
            since=since,
            reason=words.text,
            evidence=ev,
            detail=raw,
        )
    if words is not None:
        return Signal(
            name=name,
            state=SignalState.pending,
            since=since,
            reason=f"{words.text}{_position_words(c)}",
            evidence=ev,
            detail=raw,
        )
    waiting = "waiting for quota" if qr and qr.get("status") == "False" else "waiting for admission"
    return Signal(
        name=name,
        state=SignalState.pending,
        since=since,
        reason=f"{waiting}{_queue_words(c)}: {without_noise(raw)}",
        evidence=ev,
        detail=raw,
    )


def _admitted_local(o: Observations) -> Signal:
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
    if o.cluster is not None:
        return _scheduled_cluster(o.cluster)
    phase, reason = effective_phase(o)
    running = _first(o.history, {Phase.Running})
    if running:
        return Signal(
            name=SignalName.Scheduled,
            state=SignalState.true,
            since=running.ts,
            reason="process started",
            evidence="history.jsonl",
        )
    if phase in TERMINAL:
        return Signal(
            name=SignalName.Scheduled,
            state=SignalState.false,
            reason=reason or "ended before it started",
            evidence="history.jsonl",
        )
    return Signal(
        name=SignalName.Scheduled,
        state=SignalState.pending,
        reason="waiting for the process to start",
        evidence="history.jsonl",
    )


def node_lost(problems: list[str]) -> str | None:
    """The part of a node's problems that says it is lost (gone, or not Ready)."""
    lost = [p for p in problems if p == C.NODE_GONE or p.startswith(C.NODE_NOT_READY)]
    return ", ".join(lost) or None


_IMAGE = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName")


def _waiting_words(p: PodFact) -> str:
    """A container that cannot start, in words: the pod is placed; this is what stops it."""
    assert p.waiting is not None
    reason, _, detail = p.waiting.partition(": ")
    where = f"{p.name} is scheduled on {p.node}" if p.node else f"{p.name}"
    if reason in _IMAGE:
        what = "its image cannot be pulled"
    elif reason == "CrashLoopBackOff":
        what = "its container keeps crashing"
    else:
        what = "its container cannot start"
    return f"{where}, but {what} ({reason}{': ' + detail if detail else ''})"


def _ready(c: ClusterFacts) -> str:
    return f"{c.remote_ready} pod(s) ready"


def _scheduled_cluster(c: ClusterFacts) -> Signal:
    name, ev = SignalName.Scheduled, "pods, events"
    stuck = _pod_not_placed(c)
    if stuck is not None:
        return stuck
    settled = bool(c.pods) and all(p.phase in ("Running", "Succeeded") for p in c.pods)
    for reason, message, ts in reversed(c.warnings):  # newest first; old ones may be over
        if settled:
            break  # events outlive what they describe: the pods are placed and running now
        if reason == "FailedScheduling":
            return Signal(
                name=name,
                state=SignalState.false,
                since=ts,
                reason=f"not scheduled: {reason}: {message}",
                evidence="events",
            )
        if reason in ("FailedMount", "FailedAttachVolume", "FailedCreate"):
            return Signal(
                name=name,
                state=SignalState.false,
                since=ts,
                reason=f"{reason}: {message}",
                evidence="events",
            )
    if c.pods and all(p.node for p in c.pods):
        nodes = ", ".join(sorted({p.node for p in c.pods if p.node}))
        return Signal(
            name=name,
            state=SignalState.true,
            reason=f"{len(c.pods)} pod(s) on {nodes}",
            evidence=ev,
        )
    if c.finished:
        return Signal(name=name, state=SignalState.true, reason="the workload ran", evidence=ev)
    if c.worker and not c.pods:
        if c.remote_ready or c.remote_succeeded or (c.remote_active and c.was_running):
            where = (
                f"{_ready(c)} on worker cluster {c.worker}"
                if c.remote_ready
                else f"{c.remote_succeeded} pod(s) ended on worker cluster {c.worker}"
                if c.remote_succeeded
                else f"{c.remote_active} pod(s) on worker cluster {c.worker}, none ready now"
            )
            return Signal(
                name=name, state=SignalState.true, reason=where, evidence="workload status"
            )
        return Signal(
            name=name,
            state=SignalState.pending,
            reason=f"waiting for pods on worker cluster {c.worker}",
            evidence="workload status",
        )
    if not _true(c, "Admitted"):
        return Signal(name=name, state=SignalState.pending, reason="not admitted yet", evidence=ev)
    return Signal(name=name, state=SignalState.pending, reason="waiting for pods", evidence=ev)


def _pod_not_placed(c: ClusterFacts) -> Signal | None:
    """The first pod that is not where it should be: on a lost node, unschedulable, or
    waiting (an image, a volume)."""
    name, ev = SignalName.Scheduled, "pods, events"
    for p in c.pods:
        lost = node_lost(c.node_problems.get(p.node) or []) if p.node else None
        if lost:
            return Signal(
                name=name,
                state=SignalState.false,
                since=p.since,
                reason=f"{p.name} is on node {p.node}, which is {lost}",
                evidence="pods, nodes",
            )
        if p.unschedulable:
            return Signal(
                name=name,
                state=SignalState.false,
                since=p.since,
                reason=f"not scheduled: {p.name}: {p.unschedulable}",
                evidence=ev,
            )
        if p.waiting:
            return Signal(
                name=name,
                state=SignalState.false,
                since=p.since,
                reason=_waiting_words(p),
                evidence=ev,
            )
    return None


def gpu_healthy(o: Observations) -> Signal:
    rec = o.record
    if o.cluster is not None and rec.gpus_per_worker > 0:
        c = o.cluster
        name = SignalName.GPUHealthy
        used = sorted({p.node for p in c.pods if p.node})
        bad = {n: c.node_problems[n] for n in used if c.node_problems.get(n)}
        if bad:
            why = "; ".join(f"{n}: {', '.join(v)}" for n, v in bad.items())
            return Signal(
                name=name, state=SignalState.false, reason=why, evidence="node conditions"
            )
        if not used:
            return Signal(
                name=name,
                state=SignalState.pending,
                reason="no GPU node yet",
                evidence="node conditions",
            )
        if not c.nodes_visible:
            return Signal(
                name=name,
                state=SignalState.unknown,
                reason="nodes are not readable with your identity",
                evidence="",
            )
        return Signal(
            name=name,
            state=SignalState.true,
            reason=f"no GPU problem on {', '.join(used)}",
            evidence="node conditions",
        )
    if rec.gpus_per_worker == 0:
        return Signal(
            name=SignalName.GPUHealthy,
            state=SignalState.true,
            reason="no GPUs requested",
            evidence="tau.yaml",
        )
    if rec.target != "local":  # a cluster run seen from its record: this machine's GPUs say nothing
        return Signal(
            name=SignalName.GPUHealthy,
            state=SignalState.unknown,
            reason="its nodes' GPUs are not observed from the run's record",
            evidence="run.json",
        )
    if rec.gpus_available == 0:
        why = f"{rec.gpus_per_worker} GPU(s) requested; this machine has none, the run uses CPU"
        return Signal(
            name=SignalName.GPUHealthy, state=SignalState.unknown, reason=why, evidence="run.json"
        )
    return Signal(
        name=SignalName.GPUHealthy,
        state=SignalState.true,
        reason=f"{rec.gpus_available} GPU(s) visible",
        evidence="nvidia-smi",
    )


def progressing(o: Observations) -> Signal:
    rec = o.record
    c = o.cluster
    phase, _ = effective_phase(o)
    name = SignalName.Progressing
    if c is not None and c.progress is None:
        if phase in TERMINAL:
            return Signal(name=name, state=SignalState.false, since=rec.finished_at, reason="ended")
        if phase != Phase.Running:
            return Signal(name=name, state=SignalState.pending, reason="not running yet")
        why = c.progress_note or "its metrics and logs on the workspace volume were not read"
        return Signal(
            name=name, state=SignalState.unknown, reason=f"pods run; {why}", evidence="pods"
        )
    running = _first(o.history, {Phase.Running})
    beats = [t for t in (o.last_metric_ts, o.last_log_ts) if t]
    last = max(beats) if beats else None
    step = f"step {o.last_step}, " if o.last_step is not None else ""
    evidence = "metrics.jsonl, logs/" + (" (the workspace volume)" if c is not None else "")
    if phase in TERMINAL:
        return Signal(
            name=name,
            state=SignalState.false,
            since=rec.finished_at,
            reason=f"ended ({step}{o.metric_rows} metric rows)",
            evidence="metrics.jsonl",
        )
    started = running.ts if running is not None else _cluster_start(c)
    if phase != Phase.Running or started is None:
        return Signal(name=name, state=SignalState.pending, reason="not running yet")
    t0 = datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp()
    quiet = o.now - (last or t0)
    if quiet > rec.stall_after_seconds:
        limit = ago(rec.stall_after_seconds)
        why = f"stalled: no metric or log line for {ago(quiet)} (limit {limit})"
        return Signal(
            name=name,
            state=SignalState.false,
            since=_iso(last or t0),
            reason=why,
            evidence=evidence,
        )
    what = (
        f"{step}last heartbeat {ago(quiet)} ago"
        if last
        else f"started {ago(quiet)} ago, no output yet"
    )
    if o.latest_metrics:
        shown = ", ".join(f"{k}={_short(v)}" for k, v in list(o.latest_metrics.items())[:4])
        what += f" ({shown})"
    return Signal(
        name=name, state=SignalState.true, since=_iso(last or t0), reason=what, evidence=evidence
    )


def _cluster_start(c: ClusterFacts | None) -> str | None:
    if c is None:
        return None
    return c.started_at or (c.recorded.startTime if c.recorded else None)


def _short(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def completed(o: Observations) -> Signal:
    rec = o.record
    phase, reason = effective_phase(o)
    name = SignalName.Completed
    c = o.cluster
    if c is not None and phase in TERMINAL:
        still = [p.name for p in c.pods if p.phase == "Running"]
        contradiction = f"; but pod(s) still run: {', '.join(still)}" if still else ""
        state = SignalState.true if phase == Phase.Succeeded else SignalState.false
        return Signal(
            name=name,
            state=state,
            since=rec.finished_at,
            reason=f"{phase}: {reason}{contradiction}",
            evidence="workload status",
        )
    if phase == Phase.Succeeded:
        return Signal(
            name=name,
            state=SignalState.true,
            since=rec.finished_at,
            reason="exit code 0",
            evidence="run.json",
        )
    if phase in (Phase.Failed, Phase.Cancelled):
        end = _first(list(reversed(o.history)), TERMINAL)
        why = reason or (
            f"exit code {rec.exit_code}" if rec.exit_code is not None else phase.lower()
        )
        return Signal(
            name=name,
            state=SignalState.false,
            since=rec.finished_at or (end.ts if end else None),
            reason=f"{phase}: {why}",
            evidence="run.json",
        )
    return Signal(name=name, state=SignalState.pending, reason=phase.lower(), evidence="run.json")


def artifact_saved(o: Observations) -> Signal:
    rec = o.record
    c = o.cluster
    name = SignalName.ArtifactSaved
    if c is not None and c.progress is None:
        why = c.progress_note or "the workspace volume was not read"
        return Signal(
            name=name,
            state=SignalState.unknown,
            reason=f"checkpoints and outputs are on the workspace volume under "
            f"/data/runs/{rec.run_id}/ ({why})",
        )
    phase, _ = effective_phase(o)
    where = f"{rec.checkpoint_subdir}/index.json, {rec.output_subdir}/"
    if o.checkpoints or o.outputs:
        parts = []
        if o.checkpoints:
            step = c.progress.newest_checkpoint_step if c is not None and c.progress else None
            at = f" (step {step})" if step is not None else ""
            parts.append(
                f"{o.checkpoints} complete checkpoint(s), newest {o.newest_checkpoint}{at}"
            )
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
    if o is not None and o.cluster is None and o.record.target != "local":
        return f"{phase.lower()} when last recorded here; its cluster was not observed"
    if o is not None and o.cluster is not None and phase not in TERMINAL:
        c = o.cluster
        if not c.taurun and not c.workload and not getattr(o.record.handle, "sent", True):
            return f"{phase.lower()}: {NOT_SENT.format(run=o.record.run_id)}"
        adm = by_name[SignalName.Admitted]
        sched = by_name[SignalName.Scheduled]
        nodes = nodes_summary(c.pods, o.record.workers)
        if nodes and adm.state == SignalState.true:  # a multi-node job: its nodes, and the cause
            return f"{phase.lower()}: {nodes}"
        if sched.state == SignalState.false:
            return f"{phase.lower()}, but {sched.reason}"
        if adm.state != SignalState.true:
            return f"{phase.lower()}: {adm.reason}"
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


def end_reason(c: ClusterFacts) -> TerminationReason | None:
    """Why a failed cluster run failed, as far as its objects show (None: nothing more than
    "failed"): a node fault (a node it ran on has a GPU fault or is gone, or its pod's node was
    lost), an eviction or a preemption, or a container killed over its memory limit. One answer
    for the controller's record and a client's own look, so both tell an end the same way."""
    ran_on = {*c.ran_on, *(p.node for p in c.pods if p.node)}
    # a node merely missing from the list is not a fault here: a node index that has not caught
    # up looks the same (a lost node's pods say NodeLost themselves)
    if any(set(c.node_problems.get(n) or []) - {C.NODE_GONE} for n in ran_on):
        return TerminationReason.NodeFailure
    for p in c.pods:
        if p.node_lost:
            return TerminationReason.NodeFailure
        if p.disruption:
            return (
                TerminationReason.Preempted
                if "Preempt" in p.disruption
                else TerminationReason.Evicted
            )
        if p.oom_killed:
            return TerminationReason.OOMKilled
    return TerminationReason.Preempted if _true(c, "Preempted") else None


def end_words(summary: str, reason: TerminationReason | None, c: ClusterFacts) -> str:
    """The cluster's words for a failure (a Job's BackoffLimitExceeded), led by what it was: a
    researcher reads "out of memory", not a backoff limit."""
    if reason == TerminationReason.NodeFailure:
        return f"failed on a faulty GPU node ({summary})"
    if reason == TerminationReason.OOMKilled:
        return f"out of memory: {oom_words(c)} ({summary})"
    if reason == TerminationReason.Evicted:
        return f"evicted from its node ({summary})"
    if reason == TerminationReason.Preempted:
        return f"preempted ({summary})"
    return summary


def oom_words(c: ClusterFacts) -> str:
    """Which container went over which memory limit (the first one the kernel killed)."""
    p = next((p for p in c.pods if p.oom_killed), None)
    if p is None:
        return "a container went over its memory limit and was killed (OOMKilled)"
    over = f"its memory limit {p.memory_limit}" if p.memory_limit else "its memory limit"
    return (
        f"container {p.oom_killed} of pod {p.name} went over {over} and was killed (OOMKilled); "
        "ask for more (compute.memory in tau.yaml) or use less"
    )


RECORDED = "TauRun status (the controller's record; the run's pods and events are gone)"
CURRENT = "TauRun status (written by the controller, alive at {heartbeat})"
ENDED = "TauRun status (the controller's record of how the run ended)"


def _recorded(o: Observations) -> RunStatus | None:
    """A cluster run as the controller recorded it: current (the controller is alive, or the
    run ended), or all that is left (its workload and pods are gone)."""
    c = o.cluster
    if c is None or not c.from_record or o.record.phase in TERMINAL:
        return None
    r = c.recorded
    assert r is not None and r.phase is not None
    rec = o.record
    start = r.startTime or rec.created_at
    end = _ts(r.completionTime) if r.completionTime else o.now
    if c.current:  # alive, or ended: the controller's words, as they are
        signals, summary = list(r.signals), r.summary or r.phase.lower()
        evidence = CURRENT.format(heartbeat=c.heartbeat) if r.phase not in TERMINAL else ENDED
    else:
        signals = [
            s.model_copy(
                update={"evidence": f"{s.evidence}; recorded {r.observedAt or ''}".strip("; ")}
            )
            for s in r.signals
        ]
        summary = f"{r.summary or r.phase.lower()} (recorded by the controller at {r.observedAt})"
        evidence = ENDED if r.phase in TERMINAL else RECORDED
    if c.progress is not None or c.progress_note:  # the run's record on the volume, read now
        read = {SignalName.Progressing: progressing(o), SignalName.ArtifactSaved: artifact_saved(o)}
        # "allocated but idle" (its GPUs, for the window) outranks a heartbeat in its output
        signals = [s if s.evidence == DCGM_EVIDENCE else read.get(s.name, s) for s in signals]
    return RunStatus(
        last_step=o.last_step,
        latest_metrics=o.latest_metrics,
        run_id=rec.run_id,
        name=rec.name,
        phase=r.phase,
        target=rec.target,
        workspace=rec.workspace,
        experiment=rec.experiment,
        workload_kind=rec.workload_kind,
        attempt=max(r.attempt, rec.attempt),
        created_at=rec.created_at,
        started_at=r.startTime,
        finished_at=r.completionTime,
        duration_s=round(max(0.0, end - _ts(start)), 1),
        termination_reason=r.terminationReason,
        signals=signals,
        summary=summary,
        evidence=evidence,
        timeline=r.timeline,
        exit_code=rec.exit_code,
        inputs=rec.inputs,
        gpu_use=r.gpuUse,
        clusters=r.clusters or ([r.cluster] if r.cluster else []),  # a listing has the column
    )


def compute(o: Observations) -> RunStatus:
    rec = o.record
    gone = _recorded(o)
    if gone is not None:
        return gone
    phase, _ = effective_phase(o)
    signals = [f(o) for f in SIGNAL_FUNCTIONS]
    termination = rec.termination_reason
    c = o.cluster
    summary = summarize(phase, signals, o)
    if phase != rec.phase and phase == Phase.Failed:
        # a local run whose supervisor died; a cluster run the cluster says failed, narrowed
        # as its objects show (OOMKilled, a node fault, an eviction), as the controller does
        if c is None:
            termination = TerminationReason.SupervisorLost
        else:
            termination = end_reason(c) or TerminationReason.Failed
            summary = end_words(summary, termination, c)
            if o.last_error and termination == TerminationReason.Failed:
                # the program's own words first (as a local run's), the cluster's after them
                said = summary.split(": ", 1)[-1]
                summary = f"failed: {o.last_error} ({said})"
    start = rec.started_at or (c.started_at if c else None) or rec.created_at
    finished_at = rec.finished_at or (c.finished_at if c and phase in TERMINAL else None)
    end = _ts(finished_at) if finished_at else o.now
    return RunStatus(
        started_at=rec.started_at or (c.started_at if c else None),
        duration_s=round(max(0.0, end - _ts(start)), 1),
        last_step=o.last_step,
        latest_metrics=o.latest_metrics,
        last_error=o.last_error if phase in (Phase.Failed, Phase.Cancelled) else None,
        evidence=o.evidence,
        run_id=rec.run_id,
        name=rec.name,
        phase=phase,
        target=rec.target,
        workspace=rec.workspace,
        experiment=rec.experiment,
        workload_kind=rec.workload_kind,
        attempt=rec.attempt + (c.retries if c else 0),
        created_at=rec.created_at,
        finished_at=finished_at,
        termination_reason=termination,
        signals=signals,
        summary=summary,
        exit_code=rec.exit_code,
        timeline=c.recorded.timeline if c and c.recorded else [],
        inputs=rec.inputs,
        clusters=_clusters(c),
    )


def _clusters(c: ClusterFacts | None) -> list[str]:
    """The worker clusters a manager's run was dispatched to: as recorded, and where it is now."""
    if c is None:
        return []
    return dispatched(list(c.recorded.clusters) if c.recorded else [], c.worker)
