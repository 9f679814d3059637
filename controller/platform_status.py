"""Status of the platform objects (pure): TauCluster's live capacity per workload profile,
TauWorkspace's StorageReady and QueueReady, and each quota target's room (pool capacity and
base quota) for grants."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from taugrid.api import naming
from taugrid.api.crds import Condition, ProfileCapacity, TauQuotaRequestSpec
from taugrid.api.kubetime import k8s_time as iso
from taugrid.api.platform import RemediationConfig
from taugrid.api.profiles import WorkloadProfile
from taugrid.api.quantity import QuantityError, parse_quantity
from taugrid.controller.quota import Room, Target
from taugrid.controller.remediation import NodeView, faults


def matches(node: NodeView, profile: WorkloadProfile) -> bool:
    return all(node.labels.get(k) == v for k, v in profile.nodeSelector.items())


def _count(value: object) -> Decimal:
    try:
        return parse_quantity(value) if value is not None else Decimal(0)
    except QuantityError:
        return Decimal(0)


def healthy(node: NodeView, cfg: RemediationConfig) -> bool:
    return node.ready and not node.unschedulable and not faults(node, cfg) and not node.ours


def profile_capacity(
    profiles: Iterable[WorkloadProfile],
    nodes: Iterable[NodeView],
    allocatable: Mapping[str, Mapping[str, Any]],
    cfg: RemediationConfig,
) -> list[ProfileCapacity]:
    """Per profile: its pool's nodes now, the healthy ones, the GPUs they offer."""
    nodes = list(nodes)
    out = []
    for p in profiles:
        mine = [n for n in nodes if matches(n, p)]
        good = [n for n in mine if healthy(n, cfg)]
        gpus = sum(_count(allocatable.get(n.name, {}).get(p.gpuResource)) for n in good)
        out.append(
            ProfileCapacity(
                name=p.name,
                nodes=len(mine),
                healthyNodes=len(good),
                allocatableGpus=int(gpus),
                cordonedByTau=sum(1 for n in mine if n.ours),
            )
        )
    return out


def pool_capacity(
    profiles: Iterable[WorkloadProfile],
    nodes: Iterable[NodeView],
    allocatable: Mapping[str, Mapping[str, Any]],
    flavor_labels: Mapping[str, Mapping[str, str]],
    flavor: str,
    resource: str,
) -> Decimal | None:
    """A flavor's capacity of a resource: the pool's declared maximum (maxWorkers x GPUs per
    node of its profiles), else what its nodes offer now; None when nothing says."""
    declared = [
        Decimal(p.maxWorkers * p.gpusPerWorker)
        for p in profiles
        if p.flavor == flavor and p.gpuResource == resource and p.maxWorkers is not None
    ]
    if declared:
        return max(declared)
    labels = flavor_labels.get(flavor)
    if labels is None:
        return None
    live = [n for n in nodes if all(n.labels.get(k) == v for k, v in labels.items())]
    if not live:
        return None
    return sum((_count(allocatable.get(n.name, {}).get(resource)) for n in live), Decimal(0))


def base_quota(cluster_queue: Mapping[str, Any], flavor: str, resource: str) -> Decimal:
    """The ClusterQueue's nominal quota of (flavor, resource): what Pulumi declared."""
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for f in group.get("flavors") or []:
            if f.get("name") != flavor:
                continue
            for r in f.get("resources") or []:
                if r.get("name") == resource:
                    return _count(r.get("nominalQuota"))
    return Decimal(0)


def covers(cluster_queue: Mapping[str, Any], flavor: str, resource: str) -> bool:
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        if resource in (group.get("coveredResources") or []) and any(
            f.get("name") == flavor for f in group.get("flavors") or []
        ):
            return True
    return False


def borrowing_limit(cluster_queue: Mapping[str, Any], flavor: str, resource: str) -> Decimal | None:
    """The ClusterQueue's declared borrowingLimit of (flavor, resource): the most it may use
    above its nominal quota, grants included (None: no limit)."""
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for f in group.get("flavors") or []:
            if f.get("name") == flavor:
                for r in f.get("resources") or []:
                    if r.get("name") == resource and r.get("borrowingLimit") is not None:
                        return _count(r.get("borrowingLimit"))
    return None


def rooms(
    targets: Iterable[Target],
    cluster_queues: Mapping[str, Mapping[str, Any]],
    capacity: Mapping[tuple[str, str], Decimal | None],
) -> dict[Target, Room]:
    out = {}
    for t in targets:
        cq = cluster_queues.get(t.cluster_queue) or {}
        out[t] = Room(
            capacity=capacity.get((t.flavor, t.resource)),
            base=base_quota(cq, t.flavor, t.resource),
            borrowing_limit=borrowing_limit(cq, t.flavor, t.resource),
        )
    return out


def condition(
    kind: str, ok: bool, reason: str, message: str, old: Iterable[Condition], now: datetime
) -> Condition:
    """A condition whose transition time moves only when its status does."""
    status = "True" if ok else "False"
    was = next((c for c in old if c.type == kind), None)
    at = was.lastTransitionTime if was is not None and was.status == status else iso(now)
    return Condition(
        type=kind, status=status, reason=reason, message=message, lastTransitionTime=at
    )


def workspace_conditions(
    storage_pvc: str,
    pvc: Mapping[str, Any] | None,
    local_queues: Iterable[str],
    present: Mapping[str, Mapping[str, Any]],  # LocalQueue name -> object
    cluster_queues: Mapping[str, Mapping[str, Any]],
    old: Iterable[Condition],
    now: datetime,
) -> list[Condition]:
    old = list(old)
    if pvc is None:
        storage = condition(
            "StorageReady", False, "Missing", f"PVC {storage_pvc} not found", old, now
        )
    else:
        phase = (pvc.get("status") or {}).get("phase") or "Pending"
        storage = condition(
            "StorageReady", phase == "Bound", phase, f"PVC {storage_pvc} is {phase}", old, now
        )
    problems = []
    for q in local_queues:
        lq = present.get(q)
        if lq is None:
            problems.append(f"LocalQueue {q} not found")
            continue
        cq_name = (lq.get("spec") or {}).get("clusterQueue")
        cq = cluster_queues.get(str(cq_name))
        if cq is None:
            problems.append(f"{q}: ClusterQueue {cq_name} not found")
            continue
        active = next(
            (
                c
                for c in (cq.get("status") or {}).get("conditions") or []
                if c.get("type") == "Active"
            ),
            None,
        )
        if active is not None and active.get("status") != "True":
            problems.append(f"{q}: ClusterQueue {cq_name} inactive ({active.get('message', '')})")
    queues = condition(
        "QueueReady",
        not problems,
        "Ready" if not problems else "NotReady",
        "; ".join(problems) or f"{len(list(local_queues))} queue(s) ready",
        old,
        now,
    )
    return [storage, queues]


def resolve_target(
    ns: str,
    spec: TauQuotaRequestSpec,
    lqs: list[dict[str, Any]],
    cqs: Mapping[str, Any],
    workspaces: Mapping[str, Any],
    profiles: list[WorkloadProfile],
) -> tuple[Target | None, str | None]:
    """The ClusterQueue a request raises, checked against what the workspace may use."""
    ws = workspaces.get(spec.workspace)
    if ws is None:
        return None, f"no workspace {spec.workspace!r}"
    if (ws.get("spec") or {}).get("namespace") != ns:
        return None, f"workspace {spec.workspace!r} is not namespace {ns!r}'s"
    mine = {
        str((q.get("spec") or {}).get("clusterQueue"))
        for q in lqs
        if q["metadata"]["namespace"] == ns
    }
    fits = sorted(cq for cq in mine if cq in cqs and covers(cqs[cq], spec.flavor, spec.resource))
    wanted = spec.clusterQueue
    if wanted is None and spec.profile:
        wanted = next((p.clusterQueue for p in profiles if p.name == spec.profile), None)
    if wanted is not None:
        if wanted not in fits:
            return None, (
                f"ClusterQueue {wanted} does not serve {spec.flavor}/{spec.resource} "
                f"to this workspace's queues ({', '.join(sorted(mine)) or 'none'})"
            )
    elif len(fits) == 1:
        wanted = fits[0]
    else:
        return None, (
            f"{len(fits)} ClusterQueues serve {spec.flavor}/{spec.resource} here: "
            "name one (spec.clusterQueue)"
        )
    cohort = (cqs[wanted].get("spec") or {}).get("cohortName")
    if cohort != naming.grant_cohort(wanted):
        return None, (
            f"ClusterQueue {wanted} is in cohort {cohort!r}, not its grant cohort "
            f"{naming.grant_cohort(wanted)!r} (a platform older than this controller)"
        )
    return Target(wanted, spec.flavor, spec.resource), None
