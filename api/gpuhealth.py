"""GPU nodes checked against their pool's declaration (pure: objects in, verdicts out).

The platform declaration says what each GPU pool is (VM size, GPUs per node, GPU class, MIG,
who installs the driver); the TauCluster carries it to the cluster as `pools`. The passive tier
reads only what the cluster already shows of a node: its conditions and allocatable, the labels
NVIDIA's GPU feature discovery and MIG manager set, NPD's conditions and XID events, and the
controller's quarantine. One `Finding` per check, each with the fix when it fails; a node passes
when no check fails (a check that could not be made is `skipped`, with why).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from taugrid.api import constants as C
from taugrid.api.defaults import new_list
from taugrid.api.gpuuse import DCGM_ANNOTATION

# Labels NVIDIA's GPU feature discovery (GFD) and MIG manager set on a GPU node.
GFD_PRODUCT = "nvidia.com/gpu.product"  # e.g. NVIDIA-A100-SXM4-80GB, Tesla-T4
GFD_COUNT = "nvidia.com/gpu.count"
GFD_DRIVER_MAJOR = "nvidia.com/cuda.driver.major"
GFD_DRIVER_FULL = "nvidia.com/cuda.driver-version.full"  # newer GFD
MIG_CONFIG_STATE = "nvidia.com/mig.config.state"  # success | pending | rebooting | failed
AKS_POOL_LABEL = "kubernetes.azure.com/agentpool"
XID_EVENT_REASON = "GPUXid"  # NPD's event for any XID (the platform's XID monitor)
XID_RECENT_S = 24 * 3600  # an XID within this long is "recent"
VALIDATION_ANNOTATION = f"{C.GROUP}/validation"  # a node's last verdicts, newest last (JSON)
HISTORY_KEEP = 10
# MIG instances per GPU of an AKS MIG profile (A100/H100: 7 slices)
MIG_SLICES = {"MIG1g": 7, "MIG2g": 3, "MIG3g": 2, "MIG4g": 1, "MIG7g": 1}
# A GPU class's family, as GFD spells it in the product label (a100-80gb -> A100)
_FAMILY = re.compile(r"^([a-z]+\d+)")
_MEMORY = re.compile(r"(\d+)GB\b")

Check = Literal[
    "pool",
    "ready",
    "gpus",
    "product",
    "driver",
    "mig",
    "conditions",
    "xid",
    "dcgm",
    "quarantine",
    "dcgm-diag",  # the active tier (api/gpuactive.py)
    "nccl",
]
# the passive tier's checks, in the order a verdict lists them ("pool" is said only when a node
# is in no declared pool; the active tier's are api/gpuactive.py's)
CHECKS: tuple[Check, ...] = get_args(Check)[1:-2]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PoolDeclaration(_Model):
    """What one GPU pool's nodes should be (from the platform declaration)."""

    name: str
    vmSize: str
    gpusPerNode: int = Field(ge=0)
    gpuClass: str | None = None
    migProfile: str | None = None
    # who is expected to label and drive the GPUs: the GPU Operator (its feature discovery and,
    # unless AKS installs it, its driver) or nothing TauGrid can check
    gpuOperator: bool = True
    driverByOperator: bool = True
    # the active tier (api/gpuactive.py): whether the controller runs it before lifting the
    # validating taint, the DCGM diagnostics' level, the NCCL bus bandwidth floor (GB/s)
    active: bool = False
    diagLevel: int = Field(2, ge=1, le=4)
    ncclFloorGBps: float | None = Field(None, gt=0)


class Finding(_Model):
    check: Check
    state: Literal["ok", "failed", "skipped"]
    message: str
    fix: str | None = None
    evidence: dict[str, str] = Field(default_factory=dict)


class NodeVerdict(_Model):
    node: str
    pool: str | None
    checkedAt: str
    tier: Literal["passive", "active"] = "passive"
    findings: list[Finding] = Field(default_factory=new_list)

    @property
    def passed(self) -> bool:
        return all(f.state != "failed" for f in self.findings)

    def failed(self) -> list[Finding]:
        return [f for f in self.findings if f.state == "failed"]


def pool_of(node: Mapping[str, Any]) -> str | None:
    """The pool a node belongs to: TauGrid's pool label, else AKS's agent pool label."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return labels.get(C.LABEL_POOL) or labels.get(AKS_POOL_LABEL)


def check_node(
    node: Mapping[str, Any],
    pool: PoolDeclaration,
    now: float,
    xid_events: Iterable[Mapping[str, Any]] = (),
    checked_at: str = "",
) -> NodeVerdict:
    """Every passive check of one node against its pool. `xid_events`: NPD's XID events of this
    node (reason GPUXid), with their times as epoch seconds under "at"."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name", "?"))
    labels: Mapping[str, str] = meta.get("labels") or {}
    status = node.get("status") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or []}
    findings = [
        _ready(conds),
        _gpus(status.get("allocatable") or {}, labels, pool),
        _product(labels, pool),
        _driver(labels, pool),
        _mig(status.get("allocatable") or {}, labels, pool),
        _conditions(conds),
        _xid(conds, xid_events, now),
        _dcgm(meta.get("annotations") or {}, pool),
        _quarantine((node.get("spec") or {}).get("taints") or []),
    ]
    return NodeVerdict(node=name, pool=pool.name, checkedAt=checked_at, findings=findings)


def _ok(check: Check, message: str, **evidence: str) -> Finding:
    return Finding(check=check, state="ok", message=message, evidence=evidence)


def _skip(check: Check, why: str) -> Finding:
    return Finding(check=check, state="skipped", message=why)


def _fail(check: Check, message: str, fix: str, **evidence: str) -> Finding:
    return Finding(check=check, state="failed", message=message, fix=fix, evidence=evidence)


def _ready(conds: Mapping[Any, Mapping[str, Any]]) -> Finding:
    ready = conds.get("Ready")
    if ready is None:
        return _fail(
            "ready",
            "the node reports no Ready condition (its kubelet has not reported)",
            "check the node's kubelet; AKS repairs a node NotReady for 10 minutes",
        )
    if ready.get("status") != "True":
        why = ready.get("reason") or ready.get("message") or ready.get("status")
        return _fail(
            "ready",
            f"NotReady ({why})",
            "check the node's kubelet; AKS repairs a node NotReady for 10 minutes",
            since=str(ready.get("lastTransitionTime", "")),
        )
    return _ok("ready", "Ready")


def _gpus(
    allocatable: Mapping[str, Any], labels: Mapping[str, str], pool: PoolDeclaration
) -> Finding:
    if pool.migProfile:
        return _skip("gpus", "a MIG pool: its GPUs are counted as MIG instances (check mig)")
    want = pool.gpusPerNode
    raw = allocatable.get(C.GPU_RESOURCE)
    if raw is None:
        return _fail(
            "gpus",
            f"offers no {C.GPU_RESOURCE}; the pool declares {want} per node ({pool.vmSize})",
            "the NVIDIA device plugin does not run or sees no GPU: check the GPU Operator's pods "
            "on this node (nvidia-device-plugin, nvidia-driver)",
        )
    have = _int(raw)
    seen = labels.get(GFD_COUNT)
    if have == want:
        return _ok("gpus", f"{have} of {want} GPUs allocatable", allocatable=str(have))
    where = (
        f"; GPU feature discovery counts {seen}: the device plugin holds "
        f"{_int(seen) - have} back as unhealthy"
        if seen is not None and _int(seen) > have
        else ""
    )
    return _fail(
        "gpus",
        f"{have} of the {want} GPUs the pool declares ({pool.vmSize}) are allocatable{where}",
        "cordon and drain the node, then restart it; if a GPU is still missing, reimage it or "
        "replace the VM (a GPU that fell off the bus)",
        allocatable=str(have),
        declared=str(want),
        **({"gfdCount": str(seen)} if seen is not None else {}),
    )


def _product(labels: Mapping[str, str], pool: PoolDeclaration) -> Finding:
    product = labels.get(GFD_PRODUCT)
    if not pool.gpuClass:
        return _skip("product", "the pool declares no GPU class to compare with")
    if product is None:
        if not pool.gpuOperator:
            return _skip("product", "no GPU Operator: nothing labels the GPU's product")
        return _fail(
            "product",
            f"not labelled {GFD_PRODUCT} yet: the GPU Operator's feature discovery has not run "
            "on it",
            "check the gpu-feature-discovery pod on this node",
        )
    if product_matches(product, pool.gpuClass):
        return _ok("product", f"{product} ({pool.gpuClass})", product=product)
    return _fail(
        "product",
        f"the GPU is {product}; the pool declares {pool.gpuClass} ({pool.vmSize})",
        f"correct the pool's vmSize or gpuClass in the stack, or move the node out of pool "
        f"{pool.name}",
        product=product,
    )


def product_matches(product: str, gpu_class: str) -> bool:
    """Whether GFD's product label (NVIDIA-A100-SXM4-80GB) is the GPU class (a100-80gb): the
    family must appear in it, and a memory size it names must be the class's."""
    fam = _FAMILY.match(gpu_class.lower())
    if fam is None:
        return True  # a class of another shape: nothing to compare
    words = re.split(r"[-_ ]", product.upper())
    if fam.group(1).upper() not in words:
        return False
    mem = _MEMORY.search(product.upper())
    want = re.search(r"(\d+)gb", gpu_class.lower())
    return mem is None or want is None or mem.group(1) == want.group(1)


def _driver(labels: Mapping[str, str], pool: PoolDeclaration) -> Finding:
    if not pool.gpuOperator:
        return _skip("driver", "no GPU Operator: the driver's version is not labelled")
    version = labels.get(GFD_DRIVER_FULL) or labels.get(GFD_DRIVER_MAJOR)
    if version:
        return _ok("driver", f"driver {version}", driver=version)
    who = "the GPU Operator's driver" if pool.driverByOperator else "AKS's driver"
    return _fail(
        "driver",
        f"no driver version labelled: {who} is not loaded, or feature discovery has not run",
        "check the nvidia-driver-daemonset and gpu-feature-discovery pods on this node",
    )


def _mig(
    allocatable: Mapping[str, Any], labels: Mapping[str, str], pool: PoolDeclaration
) -> Finding:
    if not pool.migProfile:
        return _skip("mig", "not a MIG pool")
    state = labels.get(MIG_CONFIG_STATE)
    if state is not None and state != "success":
        return _fail(
            "mig",
            f"MIG manager's configuration is {state}",
            "check the nvidia-mig-manager pod on this node (a failed layout needs a reboot)",
            state=state,
        )
    slices = MIG_SLICES.get(pool.migProfile, 1) * pool.gpusPerNode
    have = sum(
        _int(v)
        for k, v in allocatable.items()
        if k == C.GPU_RESOURCE or str(k).startswith("nvidia.com/mig-")
    )
    if have == slices:
        return _ok("mig", f"{have} MIG instances ({pool.migProfile})", instances=str(have))
    return _fail(
        "mig",
        f"{have} MIG instances allocatable; {pool.gpusPerNode} GPU(s) in {pool.migProfile} "
        f"make {slices}",
        "check the nvidia-mig-manager and device plugin pods on this node",
        instances=str(have),
        declared=str(slices),
    )


def _conditions(conds: Mapping[Any, Mapping[str, Any]]) -> Finding:
    bad = [
        c
        for t, c in conds.items()
        if t in C.GPU_FAULT_CONDITIONS and t != C.XID_CONDITION and c.get("status") == "True"
    ]
    if not bad:
        return _ok("conditions", "no GPU fault condition")
    said = ", ".join(f"{c['type']} ({c.get('reason') or c.get('message') or 'True'})" for c in bad)
    return _fail(
        "conditions",
        f"GPU fault condition(s) True: {said}",
        "the controller quarantines such a node; see tau cluster nodes for its state",
        **{str(c["type"]): str(c.get("lastTransitionTime", "")) for c in bad},
    )


def _xid(
    conds: Mapping[Any, Mapping[str, Any]], events: Iterable[Mapping[str, Any]], now: float
) -> Finding:
    fatal = conds.get(C.XID_CONDITION)
    if fatal is not None and fatal.get("status") == "True":
        return _fail(
            "xid",
            f"a fatal GPU XID ({fatal.get('message') or fatal.get('reason') or C.XID_CONDITION})",
            "the controller quarantines the node; a fatal XID usually needs a reboot or a new VM",
            since=str(fatal.get("lastTransitionTime", "")),
        )
    # a reset clears what came before it: the fatal XID condition's going back to False (the
    # GPU reset, or the node rebooted) is when its earlier XIDs stop counting
    reset_at = (
        str(fatal.get("lastTransitionTime") or "")
        if fatal is not None and fatal.get("status") == "False"
        else ""
    )
    reset = _epoch(reset_at) if reset_at else None
    recent = sorted(
        (
            e
            for e in events
            if now - float(e.get("at") or 0) <= XID_RECENT_S
            and (reset is None or float(e.get("at") or 0) > reset)
        ),
        key=lambda e: float(e.get("at") or 0),
    )
    if not recent:
        return _ok(
            "xid",
            "no XID in the last 24 hours"
            if reset is None
            else f"no XID since its last reset ({reset_at})",
        )
    last = recent[-1]
    return _fail(
        "xid",
        f"{len(recent)} GPU XID event(s) in the last 24 hours"
        + (" since its last reset" if reset is not None else "")
        + "; the last: "
        f"{str(last.get('message', '')).strip()[:200]}",
        "look the XID up in NVIDIA's XID catalog; a fatal one sets GPUXidError and the "
        "controller quarantines the node",
        count=str(len(recent)),
    )


def _dcgm(annotations: Mapping[str, str], pool: PoolDeclaration) -> Finding:
    """The controller's last reading of the node's DCGM exporter (kept on the node)."""
    raw = annotations.get(DCGM_ANNOTATION)
    try:
        got = json.loads(raw) if raw else None
    except ValueError:
        got = None
    if not isinstance(got, dict):
        return _skip(
            "dcgm",
            "the controller has not read its DCGM exporter yet (a new node, or gpuUse is off)",
        )
    at = str(got.get("at") or "")
    fix = (
        "the DCGM exporter pod on the node (the GPU Operator's namespace): its logs, and that "
        "the controller can reach its port 9400"
    )
    if got.get("error"):
        return _fail("dcgm", str(got["error"]), fix, read=at)
    seen = int(got.get("gpus") or 0)
    if pool.gpusPerNode and seen < pool.gpusPerNode:
        return _fail(
            "dcgm",
            f"DCGM sees {seen} of the {pool.gpusPerNode} GPUs the pool declares",
            "a GPU fell off the bus or its driver failed: reboot the node, or replace the VM",
            read=at,
        )
    xids = [int(x) for x in got.get("xid") or []]
    if xids:
        return _fail(
            "dcgm",
            f"DCGM reports XID {', '.join(map(str, xids))} as a GPU's last error",
            "look the XID up in NVIDIA's XID catalog; reset the GPU or reboot the node",
            read=at,
        )
    return _ok("dcgm", f"DCGM sees {seen} GPU(s), no XID", read=at)


def _quarantine(taints: Iterable[Mapping[str, Any]]) -> Finding:
    held = [t for t in taints if t.get("key") == C.GPU_UNHEALTHY_TAINT]
    if not held:
        return _ok("quarantine", "not quarantined")
    return _fail(
        "quarantine",
        f"quarantined by the controller ({held[0].get('value') or 'gpu-unhealthy'})",
        "the controller releases it once its faults stay clear (remediation.clear_after_seconds)",
    )


def _int(v: Any) -> int:
    try:
        return int(str(v))
    except ValueError:
        return 0


class VerdictSummary(_Model):
    """A verdict as a node keeps it in its history: when, which tier, and what failed."""

    at: str
    tier: Literal["passive", "active"] = "passive"
    passed: bool
    failed: dict[str, str] = Field(default_factory=dict)  # check -> message


def summary(v: NodeVerdict) -> VerdictSummary:
    return VerdictSummary(
        at=v.checkedAt,
        tier=v.tier,
        passed=v.passed,
        failed={f.check: f.message[:300] for f in v.failed()},
    )


def history_of(node: Mapping[str, Any]) -> list[VerdictSummary]:
    """A node's kept verdicts, oldest first (an annotation this tau cannot read: none)."""
    import json

    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(VALIDATION_ANNOTATION)
    if not raw:
        return []
    try:
        items = json.loads(raw)
        return [VerdictSummary.model_validate(i) for i in items if isinstance(i, dict)]
    except ValueError:  # not JSON, or an entry of another shape (pydantic's error is one)
        return []


def with_verdict(node: Mapping[str, Any], v: NodeVerdict) -> str:
    """The node's history annotation with `v` added (the last HISTORY_KEEP kept)."""
    import json

    kept = [*history_of(node), summary(v)][-HISTORY_KEEP:]
    return json.dumps([k.model_dump(mode="json") for k in kept], separators=(",", ":"))


def _epoch(stamp: str) -> float | None:
    from taugrid.api.kubetime import parse_k8s_time

    when = parse_k8s_time(stamp) if stamp else None
    return when.timestamp() if when is not None else None


def xid_events_by_node(events: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """NPD's XID events (Events with reason XID_EVENT_REASON) by node, each with its time as
    epoch seconds under "at": what `check_node` takes, for the controller and a client alike."""
    out: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        meta = e.get("metadata") or {}
        at = _epoch(
            str(e.get("lastTimestamp") or e.get("eventTime") or meta.get("creationTimestamp") or "")
        )
        node = (e.get("involvedObject") or {}).get("name")
        if node and at is not None:
            out.setdefault(node, []).append({**e, "at": at})
    return out
