"""A run's facts from a cluster's objects (pure: dicts in, `ClusterFacts` out).

Shared by the kube backend (objects from one LIST per kind) and the controller's lifecycle
recorder (objects from its watches), so `tau run status` and TauRun.status say the same.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from taugrid.api import constants as C
from taugrid.api.crds import TauRunSpec, TauRunStatus, read_spec, read_status
from taugrid.api.evidence import RunRecord
from taugrid.api.kubetime import k8s_time
from taugrid.api.observations import ClusterFacts, PodFact

JOB_INDEX = "batch.kubernetes.io/job-completion-index"  # an Indexed Job's pod: its index


def node_problems(items: list[dict[str, Any]] | None) -> tuple[dict[str, list[str]], bool]:
    if items is None:
        return {}, False
    problems: dict[str, list[str]] = {}
    for n in items:
        conds = (n.get("status") or {}).get("conditions") or []
        ready = next((c for c in conds if c.get("type") == "Ready"), None)
        lost = (
            [
                f"{C.NODE_NOT_READY} (Ready={ready.get('status')}"
                + (f": {ready.get('reason')})" if ready.get("reason") else ")")
            ]
            if ready is not None and ready.get("status") != "True"
            else []
        )
        bad = lost + [
            f"{c['type']}={c['status']}" + (f" ({c.get('reason')})" if c.get("reason") else "")
            for c in (n.get("status") or {}).get("conditions") or []
            if c.get("type") in C.GPU_FAULT_CONDITIONS and c.get("status") == "True"
        ]
        bad += [
            f"taint {t['key']}"
            for t in (n.get("spec") or {}).get("taints") or []
            if t.get("key") == C.GPU_UNHEALTHY_TAINT
        ]
        problems[n["metadata"]["name"]] = bad
    return problems, True


def recorded_status(taurun: dict[str, Any]) -> TauRunStatus | None:
    """TauRun.status as the controller wrote it (None: none yet, or not ours to read)."""
    return read_status(TauRunStatus, taurun.get("status"))[0]


def heartbeat_of(tau_cluster: dict[str, Any] | None) -> str | None:
    """When the controller last said it is alive (TauCluster.status), if ever."""
    return ((tau_cluster or {}).get("status") or {}).get("controllerHeartbeat")


def current_status(
    taurun: dict[str, Any], heartbeat: str | None, now: float
) -> TauRunStatus | None:
    """TauRun.status when it is the answer a client would compute itself: the run ended (the
    controller keeps what it ended with), or the controller is alive (its heartbeat is younger
    than HEARTBEAT_FRESH_S) and the run runs. None: compute it here: a queued run's position
    and a never-admittable request's numbers are read by the client, and so is a starting
    run, whose record lags its objects (a watch that saw its pods ready from the objects must
    not be told "starting" by a record written before they were)."""
    from taugrid.api.kubetime import parse_k8s_time
    from taugrid.api.vocabulary import TERMINAL, Phase

    st = recorded_status(taurun)
    if st is None or st.phase is None:
        return None
    if st.phase in TERMINAL:
        return st
    if st.phase in (Phase.Pending, Phase.Queued, Phase.Starting):
        return None
    beat = parse_k8s_time(heartbeat) if heartbeat else None
    if beat is None or abs(now - beat.timestamp()) > C.HEARTBEAT_FRESH_S:  # clocks may differ a bit
        return None
    return st


REMOTE = "(submitted from another machine)"


def other_run(rec: RunRecord, taurun: dict[str, Any]) -> str | None:
    """Why the TauRun found under a run's name is not the run recorded here (None: it is). A
    record that knows its TauRun's uid compares the uid; an older one, the config hash."""
    meta = taurun.get("metadata") or {}
    uid, found_uid = getattr(rec.handle, "uid", None), meta.get("uid")
    if uid and found_uid:
        return None if uid == found_uid else f"its TauRun's uid is {found_uid}, not {uid}"
    found_hash = _spec(taurun).configHash
    if rec.config_hash != "?" and found_hash != "?" and found_hash != rec.config_hash:
        return f"its config hash is {found_hash}, not {rec.config_hash}"
    return None


def _spec(taurun: dict[str, Any]) -> TauRunSpec:
    """A TauRun's spec; what a thin one (a listing's printer columns) lacks reads as unknown."""
    name = (taurun.get("metadata") or {}).get("name") or "?"
    unknown = {"workspace": "?", "profile": "?", "workloadKind": "job", "configHash": "?"}
    return read_spec(TauRunSpec, taurun, {"runId": name, "runName": name, **unknown})


def record_from_taurun(taurun: dict[str, Any], context: str | None) -> RunRecord:
    """A run's record made from its TauRun: what a teammate's machine knows of a run submitted
    from another (the code stays where it was submitted; its digest is the TauRun's)."""
    from taugrid.api.evidence import KubeHandle, Lineage

    meta, spec = taurun.get("metadata") or {}, _spec(taurun)
    manifest = spec.manifest  # the tau.yaml as submitted (kept as it was written)
    runtime, resilience = manifest.get("runtime") or {}, manifest.get("resilience") or {}
    metrics = manifest.get("metrics") or {}
    ann = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    parent = spec.parentRun
    return RunRecord(
        run_id=spec.runId,
        name=spec.runName,
        workspace=spec.workspace,
        profile=spec.profile,
        experiment=(manifest.get("experiment") or {}).get("name")
        or (manifest.get("research") or {}).get("experiment"),
        workload_kind=spec.workloadKind,
        handle=KubeHandle(
            context=context,
            namespace=meta.get("namespace") or "default",
            queue=labels.get(C.KUEUE_QUEUE_LABEL),
            uid=meta.get("uid"),
        ),
        submitter=spec.submitter or "?",
        code_folder=REMOTE,
        code_revision=spec.codeRevision or "?",
        code_digest=ann.get(C.ANN_CODE_DIGEST) or "?",
        config_hash=spec.configHash,
        image=runtime.get("image") or "?",
        entrypoint=(manifest.get("run") or {}).get("entrypoint") or "",
        created_at=str(meta.get("creationTimestamp") or k8s_time()),
        attempt=spec.attempt,
        max_retries=int(resilience.get("max_retries") or 0),
        workers=spec.workers,
        gpus_per_worker=spec.gpusPerWorker,
        gpus_available=spec.gpusPerWorker,
        primary_metric=metrics.get("primary"),
        metric_direction=metrics.get("direction"),
        resumed_from=Lineage(run_id=parent, checkpoint=spec.resumeFrom) if parent else None,
        inputs=spec.inputs,
    )


_UID = re.compile(r"\(UID: (?P<uid>[^,)\s]+)(?:, JobUID: [^)]*)?\)")


def name_preemptor(message: str, workloads_by_uid: Mapping[str, dict[str, Any]]) -> str:
    """Kueue names the workload that took the quota by UID: say which run it is (name,
    workspace, priority) when it is one the user can see, else that it is another workspace's."""

    def words(m: re.Match[str]) -> str:
        w = workloads_by_uid.get(m["uid"])
        if w is None:
            return "(a workload you cannot see: another workspace's)"
        labels = w["metadata"].get("labels") or {}
        refs: list[dict[str, Any]] = w["metadata"].get("ownerReferences") or []
        owner = refs[0].get("name") if refs else None
        run = labels.get(C.LABEL_RUN_ID) or owner or w["metadata"].get("name")
        ws = labels.get(C.LABEL_WORKSPACE) or w["metadata"].get("namespace")
        spec = w.get("spec") or {}
        prio = (
            (spec.get("priorityClassRef") or {}).get("name")
            or spec.get("priorityClassName")
            or labels.get(C.KUEUE_PRIORITY_LABEL)
        )
        return f"(run {run}, workspace {ws}" + (f", priority {prio})" if prio else ")")

    return _UID.sub(words, message)


def kueue_retries(kw: Mapping[str, Any]) -> int:
    """Each time Kueue evicted the run (a preemption, a node lost) and queued it again is an
    attempt: its eviction counts (`schedulingStats`), or its requeue count (older Kueues)."""
    status = kw.get("status") or {}
    evictions = sum(
        int(e.get("count") or 0)
        for e in (status.get("schedulingStats") or {}).get("evictions") or []
    )
    return max(evictions, int((status.get("requeueState") or {}).get("count") or 0))


def admitted(w: dict[str, Any]) -> bool:
    conds = (w.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Admitted" and c.get("status") == "True" for c in conds)


Pending = dict[tuple[str, str], list[dict[str, Any]] | str]


def _position(kw: dict[str, Any], ns: str, pending: Pending) -> tuple[int | None, str | None]:
    """(1-based position in its LocalQueue, or None with the reason it is unknown)."""
    queue = str((kw.get("spec") or {}).get("queueName"))
    got = pending.get((ns, queue))
    if got is None:
        return None, None
    if isinstance(got, str):
        return None, got
    name = kw["metadata"]["name"]
    for item in got:
        if (item.get("metadata") or {}).get("name") == name:
            return int(item.get("positionInLocalQueue", 0)) + 1, None
    return None, "not in Kueue's pending list (being admitted?)"


def namespace_facts(
    ns: str,
    recs: list[RunRecord],
    lists: dict[tuple[str, str | None], list[dict[str, Any]] | None],
    nodes: dict[str, list[str]],
    nodes_visible: bool,
    pending: Pending | None = None,
) -> dict[str, ClusterFacts]:
    def items(kind: str) -> list[dict[str, Any]]:
        return lists.get((kind, ns)) or []

    taruns = {o["metadata"]["name"] for o in items("TauRun")}
    recorded = {o["metadata"]["name"]: recorded_status(o) for o in items("TauRun")}
    workloads = {o["metadata"]["name"]: o for o in [*items("RayJob"), *items("Job")]}
    kueue: dict[str, dict[str, Any]] = {}
    by_uid = {
        str(w["metadata"].get("uid")): w for w in items("Workload") if w["metadata"].get("uid")
    }
    for w in items("Workload"):
        for ref in w["metadata"].get("ownerReferences") or []:
            kueue[ref["name"]] = w
    pods: dict[str, list[dict[str, Any]]] = {}
    for p in items("Pod"):
        rid = (p["metadata"].get("labels") or {}).get(C.LABEL_RUN_ID)
        if rid:
            pods.setdefault(rid, []).append(p)
    events: dict[str, list[dict[str, Any]]] = {}
    for e in items("Event"):
        events.setdefault((e.get("involvedObject") or {}).get("name") or "", []).append(e)
    return {
        rec.run_id: run_facts(
            rec,
            rec.run_id in taruns,
            workloads.get(rec.run_id),
            kueue.get(rec.run_id),
            pods.get(rec.run_id, []),
            events,
            nodes,
            nodes_visible,
            ns,
            pending or {},
            recorded.get(rec.run_id),
            by_uid,
        )
        for rec in recs
    }


def run_facts(
    rec: RunRecord,
    taurun: bool,
    workload: dict[str, Any] | None,
    kw: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    events: dict[str, list[dict[str, Any]]],
    nodes: dict[str, list[str]],
    nodes_visible: bool,
    ns: str = "",
    pending: Pending | None = None,
    recorded: TauRunStatus | None = None,
    workloads_by_uid: Mapping[str, dict[str, Any]] | None = None,
    was_running: bool | None = None,
    ran_on: Iterable[str] | None = None,
) -> ClusterFacts:
    w = _workload_facts(rec, workload)
    kueue_conds, cq, queue, kueue_retried = _kueue_facts(kw, workloads_by_uid)
    position = position_note = None
    if kw is not None and not admitted(kw):
        position, position_note = _position(kw, ns, pending or {})
    facts = [pod_fact(p) for p in pods]
    if nodes_visible:  # a pod on a node the cluster no longer has: the node is gone
        nodes = {
            **nodes,
            **{f.node: [C.NODE_GONE] for f in facts if f.node and f.node not in nodes},
        }
    names = {rec.run_id, *(p["metadata"]["name"] for p in pods)}
    if kw is not None:
        names.add(kw["metadata"]["name"])
    return ClusterFacts(
        taurun=taurun,
        workload=workload is not None,
        suspended=w.suspended,
        finished=w.finished,
        started_at=w.started,
        finished_at=w.ended,
        workload_message=w.message,
        kueue=kueue_conds,
        cluster_queue=cq,
        queue=queue,
        worker=((kw or {}).get("status") or {}).get("clusterName"),
        nominated=list(((kw or {}).get("status") or {}).get("nominatedClusterNames") or []),
        remote_ready=w.ready if not pods else None,
        remote_succeeded=w.succeeded if not pods else None,
        remote_active=w.active if not pods else None,
        # a dispatched run's pods are the worker's: whether it ran already is what was recorded
        was_running=was_running
        if was_running is not None
        else bool(recorded is not None and recorded.phase == "Running"),
        position=position,
        position_note=position_note,
        pods=facts,
        warnings=_warnings(names, events),
        node_problems=nodes,
        nodes_visible=nodes_visible,
        recorded=recorded,
        ran_on=sorted(ran_on if ran_on is not None else (recorded.nodes if recorded else [])),
        retries=w.retries + kueue_retried,
    )


@dataclass
class _WorkloadFacts:
    suspended: bool | None = None
    started: str | None = None
    ended: str | None = None
    finished: str | None = None  # Succeeded / Failed, as the Job or RayJob says
    message: str | None = None
    retries: int = 0
    ready: int | None = None  # pods ready, as the Job or RayJob says
    succeeded: int = 0  # pods that ended well, as the Job says
    active: int = 0  # pods not ended (pending, running, exiting), as the Job says


def _workload_facts(rec: RunRecord, workload: dict[str, Any] | None) -> _WorkloadFacts:
    """What the run's Job or RayJob says: suspended, start and end, how it finished and why,
    and (a Job) how many pods failed before another attempt."""
    out = _WorkloadFacts()
    if workload is None:
        return out
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    out.suspended = spec.get("suspend")
    started = status.get("startTime")
    ended = status.get("completionTime") or status.get("endTime")
    out.started = str(started) if started else None
    out.ended = str(ended) if ended else None
    if rec.workload_kind == "rayjob":
        js, ds = status.get("jobStatus"), status.get("jobDeploymentStatus")
        if js == "SUCCEEDED" or (ds == "Complete" and js in (None, "SUCCEEDED")):
            out.finished = "Succeeded"
        elif js in ("FAILED", "STOPPED") or ds == "Failed":
            out.finished = "Failed"
        out.message = status.get("message") or (f"RayJob {ds}" if ds else None)
        out.ready = 1 if ds == "Running" else 0  # its driver runs (the head and submitter)
        return out
    conds = {c["type"]: c for c in status.get("conditions") or [] if c.get("status") == "True"}
    # each failed pod was followed by another attempt, but the one that failed the Job
    failed_pods = int(status.get("failed") or 0)
    out.retries = max(failed_pods - 1, 0) if "Failed" in conds else failed_pods
    out.ready = int(status.get("ready") or 0)
    out.succeeded = int(status.get("succeeded") or 0)
    out.active = int(status.get("active") or 0)
    if "Complete" in conds:
        out.finished, out.message = "Succeeded", "the Job completed"
    elif "Failed" in conds:
        out.finished = "Failed"
        out.message = f"{conds['Failed'].get('reason', '')}: {conds['Failed'].get('message', '')}"
    return out


def _kueue_facts(
    kw: dict[str, Any] | None, workloads_by_uid: Mapping[str, dict[str, Any]] | None
) -> tuple[list[dict[str, str]] | None, str | None, str | None, int]:
    """Kueue's Workload: its conditions (a preemptor named by its run, not its UID), the
    ClusterQueue that admitted it, its LocalQueue, and its evictions as retries."""
    if kw is None:
        return None, None, None, 0
    conds = [
        {k: str(v) for k, v in c.items()} for c in (kw.get("status") or {}).get("conditions") or []
    ]
    for c in conds:  # "which run took the quota", not Kueue's UIDs
        if workloads_by_uid is not None and c.get("type") in ("Preempted", "Evicted"):
            c["message"] = name_preemptor(c.get("message", ""), workloads_by_uid)
    cq = ((kw.get("status") or {}).get("admission") or {}).get("clusterQueue")
    queue = (kw.get("spec") or {}).get("queueName")
    return conds, cq, queue, kueue_retries(kw)


def _warnings(
    names: set[str], events: dict[str, list[dict[str, Any]]]
) -> list[tuple[str, str, str]]:
    """The Warning events of the run's objects, oldest first: (reason, message, time)."""
    return sorted(
        (
            (
                e.get("reason") or "",
                e.get("message") or "",
                str(e.get("lastTimestamp") or e.get("eventTime") or ""),
            )
            for n in names
            for e in events.get(n, [])
            if e.get("type") == "Warning"
        ),
        key=lambda w: w[2],
    )


def pod_fact(p: dict[str, Any]) -> PodFact:
    status = p.get("status") or {}
    unsched = None
    since = None
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            unsched = f"{c.get('reason', 'Unschedulable')}: {c.get('message', '')}".rstrip(": ")
            since = str(c.get("lastTransitionTime") or "")
    waiting = None
    for cs in [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]:
        w = (cs.get("state") or {}).get("waiting") or {}
        if w.get("reason") in (
            "ImagePullBackOff",
            "ErrImagePull",
            "CrashLoopBackOff",
            "CreateContainerConfigError",
            "InvalidImageName",
        ):
            waiting = f"{w['reason']}: {w.get('message', '')}".rstrip(": ")
    index = ((p.get("metadata") or {}).get("annotations") or {}).get(JOB_INDEX, "")
    oom, limit = _oom_killed(p)
    return PodFact(
        name=p["metadata"]["name"],
        phase=status.get("phase") or "Unknown",
        node=(p.get("spec") or {}).get("nodeName"),
        unschedulable=unsched,
        waiting=waiting,
        since=since,
        node_rank=int(index) if str(index).isdigit() else None,
        node_lost=status.get("reason") in ("NodeLost", "NodeAffinity", "Terminated"),
        disruption=_disruption(status),
        oom_killed=oom,
        memory_limit=limit,
    )


def _disruption(status: dict[str, Any]) -> str | None:
    """The reason of a pod's DisruptionTarget=True condition (it is being evicted or preempted)."""
    for c in status.get("conditions") or []:
        if c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            return str(c.get("reason") or "Disrupted")
    return None


def _oom_killed(p: dict[str, Any]) -> tuple[str | None, str | None]:
    """(the first container the kernel killed over its memory limit, in its current or last
    state; that limit as the pod's spec asks it) or (None, None)."""
    spec = {c.get("name"): c for c in (p.get("spec") or {}).get("containers") or []}
    for cs in (p.get("status") or {}).get("containerStatuses") or []:
        term = (
            (cs.get("state") or {}).get("terminated")
            or (cs.get("lastState") or {}).get("terminated")
            or {}
        )
        if term.get("reason") == "OOMKilled":
            name = str(cs.get("name") or "?")
            limits = ((spec.get(name) or {}).get("resources") or {}).get("limits") or {}
            return name, (str(limits["memory"]) if limits.get("memory") else None)
    return None, None
