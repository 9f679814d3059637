"""The cluster's queues and GPU nodes as rows (pure: objects in, rows out), for pages and
commands that show the fleet: Kueue's ClusterQueues with their quota and use, GPU nodes with
their pool, health and the controller's quarantine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from taugrid.api import constants as C
from taugrid.api.gpuhealth import VerdictSummary, history_of
from taugrid.kube.facts import node_problems


@dataclass(frozen=True)
class Quota:
    """One resource of one flavor of a ClusterQueue: what it may use and what it uses now."""

    flavor: str
    resource: str
    nominal: str
    used: str = "0"
    borrowed: str = "0"
    borrowing_limit: str | None = None
    lending_limit: str | None = None


@dataclass(frozen=True)
class QueueRow:
    name: str
    cohort: str | None
    active: bool
    pending: int
    admitted: int
    message: str = ""
    quota: list[Quota] = field(default_factory=list)


def queue_rows(cluster_queues: list[dict[str, Any]]) -> list[QueueRow]:
    rows = []
    for cq in sorted(cluster_queues, key=lambda o: o["metadata"]["name"]):
        spec, status = cq.get("spec") or {}, cq.get("status") or {}
        usage = {
            (f.get("name"), r.get("name")): r
            for f in status.get("flavorsUsage") or []
            for r in f.get("resources") or []
        }
        quota = []
        for group in spec.get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                for r in flavor.get("resources") or []:
                    used = usage.get((flavor.get("name"), r.get("name"))) or {}
                    quota.append(
                        Quota(
                            flavor=str(flavor.get("name")),
                            resource=str(r.get("name")),
                            nominal=str(r.get("nominalQuota", "0")),
                            used=str(used.get("total", "0")),
                            borrowed=str(used.get("borrowed", "0")),
                            borrowing_limit=_opt(r.get("borrowingLimit")),
                            lending_limit=_opt(r.get("lendingLimit")),
                        )
                    )
        conds: list[dict[str, Any]] = status.get("conditions") or []
        active: dict[str, Any] = next((c for c in conds if c.get("type") == "Active"), {})
        rows.append(
            QueueRow(
                name=cq["metadata"]["name"],
                cohort=spec.get("cohortName") or spec.get("cohort"),
                active=active.get("status") == "True",
                pending=int(status.get("pendingWorkloads") or 0),
                admitted=int(status.get("admittedWorkloads") or 0),
                message="" if active.get("status") == "True" else str(active.get("message") or ""),
                quota=quota,
            )
        )
    return rows


@dataclass(frozen=True)
class NodeRow:
    name: str
    pool: str | None
    gpu_class: str | None
    gpus: int
    ready: bool
    quarantined: bool
    problems: list[str] = field(default_factory=list)
    quarantine: str | None = None  # the fault that quarantined it, and since when
    recent: list[str] = field(default_factory=list)  # GPU faults now, or cleared in the last day
    verdicts: list[VerdictSummary] = field(default_factory=list)  # validations kept, oldest first
    validating: bool = False  # kept from work until its validation passes (the taint)


RECENT_S = 24 * 3600


def _recent_faults(node: dict[str, Any], now: float) -> list[str]:
    """Each GPU fault condition that is true (since when), or turned false within a day."""
    from taugrid.api.kubetime import parse_k8s_time

    out = []
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") not in C.GPU_FAULT_CONDITIONS:
            continue
        at = str(c.get("lastTransitionTime") or "")
        when = parse_k8s_time(at)
        age = now - when.timestamp() if when is not None else None
        if c.get("status") == "True":
            out.append(f"{c['type']} since {at or '?'}")
        elif age is not None and age <= RECENT_S:
            out.append(f"{c['type']} cleared at {at}")
    return out


def gpu_node_rows(nodes: list[dict[str, Any]], now: float | None = None) -> list[NodeRow]:
    """Nodes with GPUs (allocatable nvidia.com/gpu, or a GPU class label), by pool then name."""
    import time

    now = time.time() if now is None else now
    problems, _ = node_problems(nodes)
    rows = []
    for n in nodes:
        labels = n["metadata"].get("labels") or {}
        alloc = (n.get("status") or {}).get("allocatable") or {}
        gpus = _int(alloc.get(C.GPU_RESOURCE))
        if not gpus and C.LABEL_GPU_CLASS not in labels:
            continue
        conds = (n.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
        taints = (n.get("spec") or {}).get("taints") or []
        quarantined = any(t.get("key") == C.GPU_UNHEALTHY_TAINT for t in taints)
        ann = n["metadata"].get("annotations") or {}
        why = labels.get(C.QUARANTINE_REASON_LABEL)
        rows.append(
            NodeRow(
                name=n["metadata"]["name"],
                pool=labels.get(C.LABEL_POOL),
                gpu_class=labels.get(C.LABEL_GPU_CLASS),
                gpus=gpus,
                ready=ready,
                quarantined=quarantined,
                problems=problems.get(n["metadata"]["name"], []),
                quarantine=(
                    f"{why or 'a GPU fault'} since {ann.get(C.QUARANTINED_AT_ANNOTATION, '?')}"
                    if quarantined
                    else None
                ),
                recent=_recent_faults(n, now),
                verdicts=history_of(n),
                validating=any(t.get("key") == C.VALIDATING_TAINT for t in taints),
            )
        )
    return sorted(rows, key=lambda r: (r.pool or "", r.name))


@dataclass(frozen=True)
class PendingRow:
    """A run waiting in a LocalQueue, where Kueue's visibility API puts it."""

    workspace: str
    queue: str
    position: int  # 1 = next in its LocalQueue
    cluster_position: int | None
    run_id: str
    priority: int | None


def pending_rows(workspace: str, queue: str, items: list[dict[str, Any]]) -> list[PendingRow]:
    rows = []
    for item in items:
        meta = item.get("metadata") or {}
        owner = next(
            (
                o.get("name")
                for o in meta.get("ownerReferences") or []
                if o.get("kind") in ("Job", "RayJob") and o.get("name")
            ),
            None,
        )
        run_id = owner or (meta.get("labels") or {}).get(C.LABEL_RUN_ID) or meta.get("name", "?")
        cq = item.get("positionInClusterQueue")
        rows.append(
            PendingRow(
                workspace=workspace,
                queue=queue,
                position=int(item.get("positionInLocalQueue", 0)) + 1,
                cluster_position=int(cq) + 1 if cq is not None else None,
                run_id=str(run_id),
                priority=item.get("priority"),
            )
        )
    return sorted(rows, key=lambda r: r.position)


def _opt(v: Any) -> str | None:
    return None if v is None else str(v)


def _int(v: Any) -> int:
    try:
        return int(str(v))
    except (TypeError, ValueError):
        return 0
