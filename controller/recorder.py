"""The lifecycle recorder (pure): a run's objects in, its TauRun.status out.

The same facts (`kube.facts`) and the same status engine (`runs.status`) as
`tau run status`, so the CLI and the cluster say the same thing; the result is kept in
TauRun.status with a condensed timeline, so a run is still explained after its pods and events
are gone. A run that ended keeps the status it ended with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from taugrid.api import constants as C
from taugrid.api.crds import TauRunStatus
from taugrid.api.evidence import RunRecord
from taugrid.api.gpuuse import DCGM_EVIDENCE, GpuUseStatus, describe
from taugrid.api.kubetime import k8s_time
from taugrid.api.multicluster import dispatched
from taugrid.api.observations import ClusterFacts, Observations
from taugrid.api.vocabulary import (
    TERMINAL,
    Phase,
    Signal,
    SignalName,
    SignalState,
    TerminationReason,
    TimelineEntry,
)
from taugrid.controller.timeline import condense
from taugrid.kube.facts import name_preemptor, record_from_taurun, recorded_status, run_facts
from taugrid.runs.status import compute, end_reason

IN_CLUSTER = "in-cluster"


@dataclass
class RunObjects:
    """Everything the cluster holds about one run now (from the controller's watches)."""

    taurun: dict[str, Any]
    workload: dict[str, Any] | None = None  # Job or RayJob
    kueue: dict[str, Any] | None = None  # Kueue Workload
    pods: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # Warning events of its objects
    # Kueue Workloads by UID (Kueue names a preemptor by UID: the status names the run)
    workloads_by_uid: Mapping[str, dict[str, Any]] = field(default_factory=dict)


def record_of(taurun: Mapping[str, Any]) -> RunRecord:
    """The run record a TauRun stands for (what status needs of it): the kube layer's reading,
    the same a teammate's machine makes."""
    return record_from_taurun(dict(taurun), IN_CLUSTER)


def compute_status(
    objs: RunObjects,
    node_problems: Mapping[str, list[str]],
    now: datetime,
    problem_since: Mapping[str, str] | None = None,
    gpu_use: GpuUseStatus | None = None,
) -> TauRunStatus:
    """TauRun.status for the run now (`observedAt` is `now`; `gpu_use`: its GPUs as DCGM
    reports them, kept while it runs)."""
    old = recorded_status(dict(objs.taurun)) or TauRunStatus()
    if old.phase in TERMINAL:
        return old  # ended: what it ended with stays (its objects go, one by one, after that)
    rec = record_of(objs.taurun)
    facts = _facts(rec, objs, node_problems)
    st = compute(
        Observations(record=rec, history=[], now=now.timestamp(), owner_alive=None, cluster=facts)
    )
    # the engine narrows a failure (OOMKilled, a node fault, an eviction) as a client's own look
    # does, from the same facts: the nodes it ran on include those recorded before its pods went
    phase, reason, summary = st.phase, st.termination_reason, st.summary
    nodes = sorted({p.node for p in facts.pods if p.node} | set(old.nodes))
    if phase == Phase.Failed:
        reason = reason or TerminationReason.Failed
    elif objs.workload is None and not objs.pods and old.phase in (Phase.Running, Phase.Starting):
        phase, reason = Phase.Failed, TerminationReason.Failed
    entries = list(
        observed_timeline(objs, phase, summary, now, old.phase, node_problems, problem_since or {})
    )
    if st.attempt > old.attempt:  # the cluster (or TauGrid) tried again: each retry, with why
        entries.append(_retrying(facts, st.attempt, now))
    # kept after it runs: its last use and its history (the portal plots it)
    use = (gpu_use if phase == Phase.Running else None) or old.gpuUse
    signals = st.signals
    if use is not None and use.idleSince and phase == Phase.Running:
        signals = [idle_signal(use) if s.name == SignalName.Progressing else s for s in signals]
        if not (old.gpuUse and old.gpuUse.idleSince):
            entries.append(
                TimelineEntry(at=use.idleSince, reason="GPUsIdle", message=describe(use))
            )
    clusters = _dispatches(old, facts.worker, objs.kueue, now, entries)
    return TauRunStatus(
        clusters=clusters,
        cluster=clusters[-1] if clusters else None,
        phase=phase,
        attempt=st.attempt,
        terminationReason=reason if phase in TERMINAL else None,
        startTime=st.started_at or old.startTime,
        completionTime=(st.finished_at or old.completionTime or k8s_time(now))
        if phase in TERMINAL
        else None,
        runDir=old.runDir or C.run_dir(rec.run_id),
        summary=summary,
        nodes=nodes,
        observedAt=k8s_time(now),
        signals=signals,
        timeline=condense(old.timeline, entries),
        conditions=old.conditions,
        gpuUse=use,
    )


def _dispatches(
    old: TauRunStatus,
    worker: str | None,
    kw: Mapping[str, Any] | None,
    now: datetime,
    entries: list[TimelineEntry],
) -> list[str]:
    """A MultiKueue manager's run: the worker clusters it was dispatched to, in order (one more
    when it moves, said in the timeline, as is Kueue taking it back from a lost worker)."""
    clusters = dispatched(old.clusters, worker)
    if len(clusters) > len(old.clusters) and old.clusters:
        entries.append(
            TimelineEntry(
                at=k8s_time(now),
                reason="Redispatched",
                message=f"now on worker cluster {worker} (was on {old.clusters[-1]})",
            )
        )
    lost = worker_lost(kw)
    if lost and clusters and not any(e.reason == "WorkerLost" for e in old.timeline[-3:]):
        entries.append(
            TimelineEntry(
                at=lost,
                reason="WorkerLost",
                message=f"worker cluster {clusters[-1]} stopped answering for longer than the "
                "worker-lost timeout: Kueue took the run back to dispatch it again",
            )
        )
    return clusters


def worker_lost(kw: Mapping[str, Any] | None) -> str | None:
    """When Kueue evicted a MultiKueue run because its worker was lost (None: it did not)."""
    for c in ((kw or {}).get("status") or {}).get("conditions") or []:
        lost = "Admitting remote lost" in str(c.get("message") or "")
        if c.get("type") == "Evicted" and c.get("status") == "True" and lost:
            return str(c.get("lastTransitionTime") or "") or None
    return None


def idle_signal(use: GpuUseStatus) -> Signal:
    """Progressing, from its GPUs: allocated, and idle for the window."""
    sm = "unknown" if use.smActive is None else f"{use.smActive:.0%}"
    return Signal(
        name=SignalName.Progressing,
        state=SignalState.false,
        since=use.idleSince,
        reason=f"allocated but idle: its {use.gpus} GPU(s) at {sm} SM activity since "
        f"{use.idleSince}",
        evidence=DCGM_EVIDENCE,
    )


def _facts(
    rec: RunRecord, objs: RunObjects, node_problems: Mapping[str, list[str]]
) -> ClusterFacts:
    """What the cluster shows of the run: its objects and their events, by object name."""
    old = recorded_status(dict(objs.taurun)) or TauRunStatus()
    ns = rec.handle.namespace  # type: ignore[union-attr]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for e in objs.events:
        by_name.setdefault((e.get("involvedObject") or {}).get("name") or "", []).append(e)
    return run_facts(
        rec,
        True,
        objs.workload,
        objs.kueue,
        objs.pods,
        by_name,
        dict(node_problems),
        True,
        ns,
        workloads_by_uid=objs.workloads_by_uid,
        was_running=old.phase == "Running",
        ran_on=old.nodes,  # a node fault after its pods are gone is still its node's
    )


def _retrying(facts: ClusterFacts, attempt: int, now: datetime) -> TimelineEntry:
    """A retry on the timeline, with why the attempt before it failed."""
    why = end_reason(facts)
    return TimelineEntry(
        at=k8s_time(now),
        reason="Retrying",
        message=f"attempt {attempt}" + (f" after {why}" if why else ""),
    )


_KUEUE_STEPS = ("QuotaReserved", "Admitted", "Evicted", "Preempted", "Requeued", "Finished")


def observed_timeline(
    objs: RunObjects,
    phase: Phase,
    summary: str,
    now: datetime,
    old_phase: Phase | None,
    node_problems: Mapping[str, list[str]] | None = None,
    problem_since: Mapping[str, str] | None = None,
) -> Iterable[TimelineEntry]:
    """Timeline entries of what the objects show now (merged with the stored ones later), in
    the order things happen: Kueue's steps, scheduling, warnings, then the phase they led to."""
    conds = {
        c.get("type"): c for c in ((objs.kueue or {}).get("status") or {}).get("conditions") or []
    }
    for step in _KUEUE_STEPS:
        c = conds.get(step)
        if c and c.get("status") == "True" and c.get("lastTransitionTime"):
            yield TimelineEntry(
                at=str(c["lastTransitionTime"]),
                reason=f"Kueue{step}",
                message=name_preemptor(str(c.get("message") or ""), objs.workloads_by_uid),
            )
    for p in objs.pods:
        node = (p.get("spec") or {}).get("nodeName")
        for c in (p.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "True" and node:
                yield TimelineEntry(
                    at=str(c.get("lastTransitionTime") or k8s_time(now)),
                    reason="Scheduled",
                    message=f"{p['metadata']['name']} on {node}",
                )
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
                yield TimelineEntry(
                    at=str(c.get("lastTransitionTime") or k8s_time(now)),
                    reason=str(c.get("reason") or "Disrupted"),
                    message=f"{p['metadata']['name']} on {node}: {c.get('message', '')}",
                )
    for node in sorted({str(n) for p in objs.pods if (n := (p.get("spec") or {}).get("nodeName"))}):
        bad = (node_problems or {}).get(node)
        if bad:
            yield TimelineEntry(
                at=(problem_since or {}).get(node) or k8s_time(now),
                reason="GPUFault",
                message=f"{node}: {', '.join(bad)}",
            )
    for e in objs.events:
        at = e.get("firstTimestamp") or e.get("eventTime") or e.get("lastTimestamp")
        if not at:
            continue
        yield TimelineEntry(
            at=str(at),
            reason=str(e.get("reason") or "Warning"),
            message=str(e.get("message") or "")[:300],
            count=max(1, int(e.get("count") or 1)),
            last=str(e.get("lastTimestamp") or at),
        )
    if phase != old_phase:
        yield TimelineEntry(at=k8s_time(now), reason=str(phase), message=summary)


def same(a: TauRunStatus, b: TauRunStatus) -> bool:
    """Equal but for when it was observed (nothing to write)."""
    dump = {"exclude": {"observedAt"}, "mode": "json"}
    return a.model_dump(**dump) == b.model_dump(**dump)  # type: ignore[arg-type]
