"""GPU use per run, read from DCGM's exporters (pure: targets, readings and runs in; statuses,
node annotations and Workload patches out; the operator does the reading and the writing).

Each pass reads every GPU node's exporter at once (`Exporters`: the pods behind the exporter's
Service, found through its EndpointSlices with the node each runs on; or a URL per node), joins
each GPU to the run whose pod holds it (the exporter's pod labels: it reads the kubelet's
pod-resources socket, not the API), and keeps per run a `GpuUseStatus` whose values are rounded
so that a steadily busy run costs no status write. A node's reading (how many GPUs, the last
XID, or why it could not be read) goes on the node as an annotation, only when it changes:
validation reads it there, from the controller or from an admin's machine alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from taugrid.api import constants as C
from taugrid.api import gpuuse as U
from taugrid.api.kubetime import k8s_time
from taugrid.controller import dcgm
from taugrid.controller.config import Exporters

RunKey = tuple[str, str]
# A Workload the controller deactivated for being idle (when; it is activated again once evicted)
IDLE_REQUEUED = f"{C.GROUP}/idle-requeued-at"


def gpu_nodes(nodes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The nodes with GPUs (allocatable nvidia.com/gpu, or a GPU pool's class label)."""
    out = []
    for name, n in nodes.items():
        st = n.get("status") or {}
        gpus = (st.get("capacity") or {}).get(C.GPU_RESOURCE) or (st.get("allocatable") or {}).get(
            C.GPU_RESOURCE
        )
        labels = (n.get("metadata") or {}).get("labels") or {}
        if (gpus and str(gpus) != "0") or C.LABEL_GPU_CLASS in labels:
            out.append(name)
    return sorted(out)


def targets(
    ex: Exporters,
    nodes: Iterable[str],
    slices: Iterable[Mapping[str, Any]] = (),
) -> dict[str, str]:
    """The exporter's URL on each GPU node: the template per node, or the Service's endpoints
    (ready ones, on a node of `nodes`; a node with two keeps the first)."""
    wanted = set(nodes)
    if ex.url:
        return {n: ex.url.format(node=n) for n in sorted(wanted)}
    out: dict[str, str] = {}
    for s in slices:
        ports = [p.get("port") for p in s.get("ports") or [] if p.get("port")]
        port = ex.port if ex.port in ports or not ports else ports[0]
        for e in s.get("endpoints") or []:
            node = e.get("nodeName")
            ready = (e.get("conditions") or {}).get("ready")
            if node not in wanted or ready is False or node in out or not e.get("addresses"):
                continue
            host = e["addresses"][0]
            host = f"[{host}]" if ":" in host else host
            out[node] = f"http://{host}:{port}{ex.path}"
    return out


@dataclass(frozen=True)
class Reading:
    """One node's exporter, read once: its GPUs, or why not."""

    node: str
    gpus: tuple[dcgm.Gpu, ...] = ()
    error: str | None = None


def read(node: str, got: str | BaseException) -> Reading:
    """A node's answer (its text, or what went wrong fetching it) as a reading."""
    if isinstance(got, BaseException):
        return Reading(node, error=f"its exporter did not answer ({_why(got)})")
    try:
        return Reading(node, gpus=tuple(dcgm.parse(got, node)))
    except dcgm.ExpositionError as e:
        return Reading(node, error=f"its exporter's answer is not usable: {e}")


def _why(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text if len(text) < 160 else text[:157] + "..."


def node_summary(r: Reading) -> dict[str, Any]:
    """What the node's annotation keeps of a reading (no time: it is written when this changes)."""
    if r.error:
        return {"error": r.error}
    xids = sorted({int(g.values[dcgm.XID]) for g in r.gpus if g.values.get(dcgm.XID)})
    out: dict[str, Any] = {"gpus": len(r.gpus)}
    if xids:
        out["xid"] = xids
    return out


def annotation_patch(node: Mapping[str, Any], r: Reading, now: datetime) -> dict[str, Any] | None:
    """The node's DCGM annotation, when the reading says something else than it does."""
    have = ((node.get("metadata") or {}).get("annotations") or {}).get(U.DCGM_ANNOTATION)
    want = node_summary(r)
    try:
        kept = json.loads(have) if have else None
    except ValueError:
        kept = None
    if isinstance(kept, dict) and {k: v for k, v in kept.items() if k != "at"} == want:
        return None
    value = json.dumps({**want, "at": k8s_time(now)}, sort_keys=True)
    return {"metadata": {"annotations": {U.DCGM_ANNOTATION: value}}}


def run_of_pods(pods_by_run: Mapping[RunKey, Iterable[Mapping[str, Any]]]) -> dict[RunKey, RunKey]:
    """(namespace, pod) -> the run that owns the pod."""
    out = {}
    for key, pods in pods_by_run.items():
        for p in pods:
            meta = p.get("metadata") or {}
            out[(str(meta.get("namespace") or key[0]), str(meta.get("name")))] = key
    return out


def nodes_of_runs(
    pods_by_run: Mapping[RunKey, Iterable[Mapping[str, Any]]],
) -> dict[RunKey, set[str]]:
    """The nodes each run's running pods are on (where its GPUs should be read)."""
    out: dict[RunKey, set[str]] = {}
    for key, pods in pods_by_run.items():
        for p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            if node and (p.get("status") or {}).get("phase") == "Running" and U.pod_gpus(p):
                out.setdefault(key, set()).add(str(node))
    return out


@dataclass
class UseTracker:
    """Each run's GPU use across passes: its status, with `since` kept while the rounded values
    hold, and `idleSince` once its SM activity stayed under the threshold for the window."""

    threshold: float
    window_s: float
    idle: dcgm.IdleWatch = field(init=False)
    now_of: dict[RunKey, U.GpuUseStatus] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.idle = dcgm.IdleWatch(threshold=self.threshold, window_s=self.window_s)

    def update(
        self,
        readings: Iterable[Reading],
        pods_by_run: Mapping[RunKey, Iterable[Mapping[str, Any]]],
        now: datetime,
        recorded: Mapping[RunKey, U.GpuUseStatus] | None = None,
    ) -> dict[RunKey, U.GpuUseStatus]:
        """The runs whose status changed this pass, each with its new `gpuUse` (`recorded`:
        what the runs' statuses hold, so a restarted controller writes nothing that holds)."""
        readings = list(readings)
        gpus = [g for r in readings for g in r.gpus]
        failed = {r.node: r.error for r in readings if r.error}
        mine, _strays = dcgm.per_run(gpus, run_of_pods(pods_by_run))
        idle = self.idle.observe(mine, now.timestamp())
        changed: dict[RunKey, U.GpuUseStatus] = {}
        for key, nodes in nodes_of_runs(pods_by_run).items():
            u = mine.get(key)
            unread = sorted(n for n in nodes if n in failed)
            if u is None and not unread:
                continue  # its GPUs are not reported yet (or it holds none): nothing to say
            values = U.rounded(
                u.gpus if u else 0,
                u.busy if u else None,
                u.fb_used_mib if u else 0.0,
                u.power_w if u else 0.0,
                list(u.nodes) if u else [],
            )
            quiet = idle.get(key)
            values["idleSince"] = (
                k8s_time(datetime.fromtimestamp(quiet, now.tzinfo)) if quiet else None
            )
            values["unread"] = "; ".join(f"{n}: {failed[n]}" for n in unread) if unread else None
            old = self.now_of.get(key) or (recorded or {}).get(key)
            if old is not None and old.model_dump(exclude={"since", "history"}) == values:
                self.now_of[key] = old
                continue
            new = U.GpuUseStatus(**values, since=k8s_time(now), history=old.history if old else [])
            self.now_of[key] = changed[key] = new.sampled()
        for key in set(self.now_of) - set(nodes_of_runs(pods_by_run)):
            del self.now_of[key]  # not running any more: its status says so, not its GPUs
        return changed


def requeue_patch(workload: Mapping[str, Any], now: datetime) -> dict[str, Any] | None:
    """Deactivate an idle run's Kueue Workload (Kueue evicts it: its pods go, its GPUs are free),
    marked so the controller activates it again once it is evicted; None if it already is."""
    meta = workload.get("metadata") or {}
    if IDLE_REQUEUED in (meta.get("annotations") or {}):
        return None
    if (workload.get("spec") or {}).get("active") is False:
        return None  # deactivated by someone else: theirs to undo
    return {
        "metadata": {"annotations": {IDLE_REQUEUED: k8s_time(now)}},
        "spec": {"active": False},
    }


def reactivate_patch(workload: Mapping[str, Any]) -> dict[str, Any] | None:
    """Activate again a Workload the controller deactivated, once Kueue has evicted it (it has
    no admission left): it queues again, behind the runs that waited meanwhile."""
    meta = workload.get("metadata") or {}
    if IDLE_REQUEUED not in (meta.get("annotations") or {}):
        return None
    st = workload.get("status") or {}
    evicted = any(
        c.get("type") == "Evicted" and c.get("status") == "True" for c in st.get("conditions") or []
    )
    if st.get("admission") and not evicted:
        return None  # not evicted yet
    return {"metadata": {"annotations": {IDLE_REQUEUED: None}}, "spec": {"active": True}}


def idle_event(
    taurun: Mapping[str, Any], use: U.GpuUseStatus, reason: str, message: str, now: datetime
) -> dict[str, Any]:
    """A Warning event on the TauRun (`kubectl describe` shows it; the run's timeline has it)."""
    meta = taurun.get("metadata") or {}
    at = use.idleSince or k8s_time(now)
    stamp = at.replace(":", "").replace("-", "").lower()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta.get('name')}.{reason.lower()}.{stamp}",
            "namespace": meta.get("namespace"),
        },
        "involvedObject": {
            "apiVersion": f"{C.GROUP}/{C.VERSION}",
            "kind": "TauRun",
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
        "reason": reason,
        "message": message,
        "type": "Warning",
        "firstTimestamp": at,
        "lastTimestamp": at,
        "count": 1,
        "source": {"component": "taugrid-controller"},
        "reportingComponent": "taugrid-controller",
    }
