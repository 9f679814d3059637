"""Decide (pure): from the objects the operator gathered, the writes that bring what the
controller owns to its desired state, and when to look again. The operator only gathers
(watches, LISTs), calls these, and applies the writes; no condition, cohort or status body is
built in the kopf layer.

- `quota`: TauQuotaRequests -> each ClusterQueue's grant Cohort and each request's status;
- `platform`: TauWorkspace StorageReady/QueueReady, TauCluster capacity and conditions;
- `status_body`: what is applied to a status subresource (the lifecycle recorder's too).
Only writes whose result differs from what the object holds are returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from taugrid.api import constants as C
from taugrid.api import naming
from taugrid.api.crds import (
    TauClusterSpec,
    TauClusterStatus,
    TauQuotaRequestSpec,
    TauQuotaRequestStatus,
    TauWorkspaceSpec,
    TauWorkspaceStatus,
    read_status,
)
from taugrid.api.kubetime import k8s_time, parse_k8s_time
from taugrid.api.platform import RemediationConfig
from taugrid.api.profiles import WorkloadProfile
from taugrid.api.quantity import canonical
from taugrid.controller import platform_status as P
from taugrid.controller import quota as Q
from taugrid.controller import remediation as R


@dataclass(frozen=True)
class Write:
    verb: Literal["apply", "apply_status"]
    body: dict[str, Any]
    note: str | None = None  # what to log


@dataclass(frozen=True)
class Decision:
    writes: list[Write] = field(default_factory=list)
    wake_in_s: float | None = None  # look again after this long (None: on the next change)


def status_body(
    kind: str, obj: Mapping[str, Any], status: Any, exclude: set[str] | None = None
) -> dict[str, Any]:
    """What the controller applies to a status subresource: the object's name and its status."""
    meta = {"name": obj["metadata"]["name"]}
    if obj["metadata"].get("namespace"):
        meta["namespace"] = obj["metadata"]["namespace"]
    return {
        "apiVersion": C.API_VERSION,
        "kind": kind,
        "metadata": meta,
        "status": status.model_dump(mode="json", exclude_none=True, exclude=exclude),
    }


# --- MultiKueue: a run whose worker was lost -------------------------------------------------
MULTIKUEUE = "kueue.x-k8s.io/multikueue"


def lost_worker_release(
    job: Mapping[str, Any] | None, kw: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The status patch that lets Kueue move a manager's run off a lost worker, or None.

    Kueue (v0.19) evicts the Workload once its worker has been unreachable for the worker-lost
    timeout, then waits for the manager's Job (or RayJob) to be inactive before it gives back
    the quota and dispatches again. It runs nothing on the manager: its status is the lost
    worker's last copy, which nothing updates any more, so the run would wait for ever
    (kubernetes-sigs/kueue#15380 for RayJobs). What is true on the manager is written: a Job's
    `active`/`ready` counts zeroed, a RayJob's deployment `Suspended` (Kueue reads a RayJob as
    active unless it is Suspended or New); Kueue does the rest."""
    if job is None or kw is None:
        return None
    if (job.get("spec") or {}).get("managedBy") != MULTIKUEUE:
        return None
    patch = _inactive(job)
    if patch is None:
        return None
    conds = {c.get("type"): c for c in (kw.get("status") or {}).get("conditions") or []}
    evicted, reserved = conds.get("Evicted") or {}, conds.get("QuotaReserved") or {}
    lost = "Admitting remote" in str(evicted.get("message") or "")
    if evicted.get("status") == "True" and reserved.get("status") == "True" and lost:
        return patch
    return None


RAY_INACTIVE = ("Suspended", "New")  # what Kueue's RayJob integration reads as not running
RAY_FINISHED = ("Complete", "Failed")


def _inactive(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """The status that says a manager's copy runs nothing, or None when it says so already."""
    status = job.get("status") or {}
    kind = job.get("kind", "Job")
    if kind == "Job":
        active = status.get("active") or status.get("ready")
        return {"status": {"active": 0, "ready": 0}} if active else None
    if kind == "RayJob":
        deployment = status.get("jobDeploymentStatus") or ""
        if deployment in RAY_INACTIVE or deployment in RAY_FINISHED:
            return None
        return {"status": {"jobDeploymentStatus": "Suspended"}}
    return None


def carry_to(job: Mapping[str, Any] | None, kw: Mapping[str, Any] | None) -> str | None:
    """The worker a manager's run was dispatched to, whose pods need what they mount from this
    cluster (`companions`), or None (not a MultiKueue run, or not dispatched yet)."""
    if job is None or kw is None:
        return None
    managed = (job.get("spec") or {}).get("managedBy")
    if managed != MULTIKUEUE:
        return None
    name = (kw.get("status") or {}).get("clusterName")
    return str(name) if name else None


def companions(job: Mapping[str, Any]) -> list[str]:
    """The ConfigMaps a run's pods need (volumes, projected volumes, env and envFrom), in every
    pod template of its Job or RayJob: MultiKueue copies the Job alone to the worker, so these
    must be made there too, or its pods never start."""
    spec = job.get("spec") or {}
    templates: list[Mapping[str, Any]] = []
    if "template" in spec:  # a Job
        templates.append(spec["template"])
    ray = spec.get("rayClusterSpec") or {}
    if ray.get("headGroupSpec"):
        templates.append(ray["headGroupSpec"].get("template") or {})
    templates += [g.get("template") or {} for g in ray.get("workerGroupSpecs") or []]
    if spec.get("submitterPodTemplate"):
        templates.append(spec["submitterPodTemplate"])
    names: list[str | None] = []
    for t in templates:
        pod = t.get("spec") or {}
        for v in pod.get("volumes") or []:
            names.append((v.get("configMap") or {}).get("name"))
            for src in (v.get("projected") or {}).get("sources") or []:
                names.append((src.get("configMap") or {}).get("name"))
        for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
            names += [(e.get("configMapRef") or {}).get("name") for e in c.get("envFrom") or []]
            for e in c.get("env") or []:
                ref = ((e.get("valueFrom") or {}).get("configMapKeyRef") or {}).get("name")
                names.append(ref)
    return sorted({n for n in names if n})


def carried_copy(
    cm: Mapping[str, Any], owner: Mapping[str, Any] | None, namespace: str
) -> dict[str, Any]:
    """A ConfigMap as made on the worker: its data, labels and immutability; owned by the run's
    Job there when it is the run's own here (its garbage goes with the run), else shared."""
    meta = cm.get("metadata") or {}
    own = bool(meta.get("ownerReferences")) and owner is not None
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": meta["name"],
            "namespace": namespace,
            "labels": dict(meta.get("labels") or {}),
        },
    }
    if own and owner is not None:
        om = owner["metadata"]
        body["metadata"]["ownerReferences"] = [
            {
                "apiVersion": owner.get("apiVersion", "batch/v1"),
                "kind": owner.get("kind", "Job"),
                "name": om["name"],
                "uid": om["uid"],
            }
        ]
    for key in ("data", "binaryData", "immutable"):
        if key in cm:
            body[key] = cm[key]
    return body


# --- quota grants ---------------------------------------------------------------------------
@dataclass(frozen=True)
class QuotaObjects:
    requests: list[dict[str, Any]]
    cluster_queues: list[dict[str, Any]]
    local_queues: list[dict[str, Any]]
    flavors: list[dict[str, Any]]
    cohorts: list[dict[str, Any]]
    workspaces: list[dict[str, Any]]
    cluster: dict[str, Any] | None
    nodes: Mapping[str, dict[str, Any]]


def quota(o: QuotaObjects, now: datetime) -> Decision:
    """Every request's status and every queue's grant Cohort; the next expiry."""
    cqs = {c["metadata"]["name"]: c for c in o.cluster_queues}
    profiles = profiles_of(o.cluster)
    workspaces = {w["metadata"]["name"]: w for w in o.workspaces}
    requests = [request(r, o.local_queues, cqs, workspaces, profiles, now) for r in o.requests]
    targets = {r.target for r in requests if r.target is not None}
    flavor_labels = {
        f["metadata"]["name"]: (f.get("spec") or {}).get("nodeLabels") or {} for f in o.flavors
    }
    views = [R.node_view(b) for b in o.nodes.values()]
    alloc = {n: (b.get("status") or {}).get("allocatable") or {} for n, b in o.nodes.items()}
    capacity = {
        (t.flavor, t.resource): P.pool_capacity(
            profiles, views, alloc, flavor_labels, t.flavor, t.resource
        )
        for t in targets
    }
    plan = Q.plan(requests, P.rooms(targets, cqs, capacity), now)
    writes: list[Write] = []
    # Cohorts first (the grant), then what each request says about it.
    cohorts = {c["metadata"]["name"]: c for c in o.cohorts}
    for cq in sorted({t.cluster_queue for t in targets} | granted_queues(cohorts)):
        want = Q.cohort_quota(plan.grants, cq)
        name = naming.grant_cohort(cq)
        have = ((cohorts.get(name) or {}).get("spec") or {}).get("resourceGroups") or []
        if normal(want) != normal(have):
            body = {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Cohort",
                "metadata": {"name": name},
                "spec": {"resourceGroups": want},
            }
            writes.append(Write("apply", body, f"grant cohort {name}: {want or 'no grants'}"))
    for r in requests:
        new = plan.statuses[r.key]
        new.conditions = Q.stamp(new.conditions, now)
        if status_same(r.status, new):
            continue
        meta = {"metadata": {"name": r.name, "namespace": r.namespace}}
        # never the decision: that field is the admins' (field manager tau-quota-admin)
        writes.append(
            Write("apply_status", status_body("TauQuotaRequest", meta, new, exclude={"decision"}))
        )
    nxt = Q.next_change(plan.statuses.values())
    return Decision(writes, max(0.0, (nxt - now).total_seconds()) if nxt else None)


def request(
    raw: dict[str, Any],
    lqs: list[dict[str, Any]],
    cqs: Mapping[str, Any],
    workspaces: Mapping[str, Any],
    profiles: list[WorkloadProfile],
    now: datetime,
) -> Q.Request:
    meta = raw["metadata"]
    ns, name = meta["namespace"], meta["name"]
    spec = TauQuotaRequestSpec.model_validate(raw.get("spec") or {})
    status = model(TauQuotaRequestStatus, raw.get("status"))
    target, problem = P.resolve_target(ns, spec, lqs, cqs, workspaces, profiles)
    return Q.Request(
        namespace=ns,
        name=name,
        generation=int(meta.get("generation") or 1),
        created=parse_k8s_time(meta.get("creationTimestamp")) or now,
        spec=spec,
        status=status,
        target=target,
        problem=problem,
    )


def granted_queues(cohorts: Mapping[str, Any]) -> set[str]:
    """ClusterQueues whose grant cohort holds a grant now (so expiry can empty it)."""
    prefix = naming.grant_cohort("")
    return {
        name[len(prefix) :]
        for name, c in cohorts.items()
        if name.startswith(prefix) and (c.get("spec") or {}).get("resourceGroups")
    }


def normal(groups: Iterable[Mapping[str, Any]]) -> list[Any]:
    """resourceGroups compared by value (quantities canonical, as Kueue writes them back)."""
    out = []
    for g in groups:
        flavors = []
        for f in g.get("flavors") or []:
            res = [
                (
                    r.get("name"),
                    canonical(str(r.get("nominalQuota"))),
                    canonical(str(r.get("lendingLimit")))
                    if r.get("lendingLimit") is not None
                    else None,
                )
                for r in f.get("resources") or []
            ]
            flavors.append((f.get("name"), res))
        out.append((tuple(g.get("coveredResources") or []), flavors))
    return out


def status_same(old: TauQuotaRequestStatus, new: TauQuotaRequestStatus) -> bool:
    return old.model_dump(mode="json", exclude={"decision"}) == new.model_dump(
        mode="json", exclude={"decision"}
    )


# --- platform status ------------------------------------------------------------------------
@dataclass(frozen=True)
class PlatformObjects:
    workspaces: list[dict[str, Any]]
    local_queues: list[dict[str, Any]]
    cluster_queues: list[dict[str, Any]]
    pvcs: list[dict[str, Any]]
    cluster: dict[str, Any] | None
    nodes: Mapping[str, dict[str, Any]]


def platform(
    o: PlatformObjects, breaker: R.Verdicts | None, remediation: RemediationConfig, now: datetime
) -> Decision:
    """TauWorkspace conditions and TauCluster's live capacity and conditions, where changed."""
    writes: list[Write] = []
    cqs = {c["metadata"]["name"]: c for c in o.cluster_queues}
    for w in o.workspaces:
        spec = TauWorkspaceSpec.model_validate(w.get("spec") or {})
        old = model(TauWorkspaceStatus, w.get("status"))
        pvc = next(
            (
                p
                for p in o.pvcs
                if p["metadata"]["namespace"] == spec.namespace
                and p["metadata"]["name"] == spec.storage.pvc
            ),
            None,
        )
        present = {
            q["metadata"]["name"]: q
            for q in o.local_queues
            if q["metadata"]["namespace"] == spec.namespace
        }
        conds = P.workspace_conditions(
            spec.storage.pvc, pvc, spec.localQueues, present, cqs, old.conditions, now
        )
        new = TauWorkspaceStatus(
            phase="Ready" if all(c.status == "True" for c in conds) else "Pending",
            observedGeneration=w["metadata"].get("generation"),
            conditions=conds,
        )
        if new.model_dump(mode="json") != old.model_dump(mode="json"):
            writes.append(Write("apply_status", status_body("TauWorkspace", w, new)))
    if o.cluster is not None:
        cluster_status = _cluster_status(o, breaker, remediation, now)
        if cluster_status is not None:
            body = status_body(
                "TauCluster", o.cluster, cluster_status, exclude={"controllerHeartbeat"}
            )
            writes.append(Write("apply_status", body))
    return Decision(writes)


def _cluster_status(
    o: PlatformObjects, breaker: R.Verdicts | None, remediation: RemediationConfig, now: datetime
) -> TauClusterStatus | None:
    assert o.cluster is not None
    old: TauClusterStatus = model(TauClusterStatus, o.cluster.get("status"))
    views = [R.node_view(b) for b in o.nodes.values()]
    alloc = {n: (b.get("status") or {}).get("allocatable") or {} for n, b in o.nodes.items()}
    caps = P.profile_capacity(profiles_of(o.cluster), views, alloc, remediation)
    gpu_ok = all(c.cordonedByTau == 0 for c in caps)
    held = bool(breaker and breaker.breaker_open)
    conds = [
        P.condition(
            "GPUNodesHealthy",
            gpu_ok,
            "Healthy" if gpu_ok else "Quarantined",
            ", ".join(f"{c.name}: {c.cordonedByTau} quarantined" for c in caps if c.cordonedByTau)
            or "no node quarantined",
            old.conditions,
            now,
        ),
        P.condition(
            "RemediationHeld",
            held,
            "CircuitBreaker" if held else "Closed",
            f"at most {breaker.limit} of {breaker.gpu_nodes} GPU nodes quarantined at once"
            if breaker
            else "",
            old.conditions,
            now,
        ),
    ]
    new: TauClusterStatus = old.model_copy(
        update={
            "phase": "Ready" if gpu_ok else "Degraded",
            "profiles": caps,
            "conditions": conds,
            "observedGeneration": o.cluster["metadata"].get("generation"),
        }
    )
    if new.model_dump(mode="json", exclude={"observedAt"}) == old.model_dump(
        mode="json", exclude={"observedAt"}
    ):
        return None
    new.observedAt = k8s_time(now)
    return new


def heartbeat_body(cluster: str, now: datetime) -> dict[str, Any]:
    """The controller's heartbeat: TauCluster.status.controllerHeartbeat only."""
    return {
        "apiVersion": C.API_VERSION,
        "kind": "TauCluster",
        "metadata": {"name": cluster},
        "status": {"controllerHeartbeat": k8s_time(now)},
    }


def signature(body: Mapping[str, Any]) -> str:
    """What the reconcilers read of an object: its spec, labels and status, without the
    heartbeat and the bookkeeping that changes on every write."""
    import json

    status = {k: v for k, v in (body.get("status") or {}).items() if k != "controllerHeartbeat"}
    meta = body.get("metadata") or {}
    return json.dumps(
        [body.get("spec"), meta.get("labels"), meta.get("deletionTimestamp"), status],
        sort_keys=True,
        default=str,
    )


# --- small readers --------------------------------------------------------------------------
def model(cls: Any, raw: Any) -> Any:
    """A status model from an object's raw status (an unreadable one: empty)."""
    got, _ = read_status(cls, raw)
    return got if got is not None else cls()


def profiles_of(cluster: Mapping[str, Any] | None) -> list[WorkloadProfile]:
    if not cluster:
        return []
    try:
        return TauClusterSpec.model_validate(cluster.get("spec") or {}).workloadProfiles
    except ValueError:
        return []
