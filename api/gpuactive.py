"""The active tier of GPU node validation (pure: Jobs out, their objects in, findings out).

Two checks run on a node that is idle (no pod holds its GPUs), each as a Job pinned to the node
and admitted by Kueue through the platform's validation queue (`VALIDATION_QUEUE` in
`VALIDATION_NAMESPACE`, a ClusterQueue with no quota of its own that borrows what the cohort
leaves unused: a check never takes a team's quota, and it waits, saying why, while none is
free):

- `dcgm-diag`: DCGM's diagnostics (`dcgmi diag -r LEVEL`) over every GPU of the node;
- `nccl`: an all-reduce across the node's GPUs (NCCL through torch), its bus bandwidth against
  the pool's floor.

Each Job's container writes its result as one line of JSON to its termination message (read
from the pod's status: no log read, no extra permission): {"passed": bool, "detail": str} for
the diagnostics, {"busbw_gbps": float} for NCCL.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from taugrid.api import constants as C
from taugrid.api.gpuhealth import Finding

ActiveCheck = Literal["dcgm-diag", "nccl"]
ACTIVE_CHECKS: tuple[ActiveCheck, ...] = ("dcgm-diag", "nccl")
VALIDATION_NAMESPACE = "taugrid-validation"
VALIDATION_QUEUE = "validation"  # its LocalQueue
VALIDATION_CLUSTER_QUEUE = "tau-validation"
LABEL_CHECK = f"{C.GROUP}/validation-check"
LABEL_NODE = f"{C.GROUP}/validation-node"
# NVIDIA's DCGM image (the standalone hostengine the GPU Operator's chart pins: upstream.md)
DCGM_IMAGE = "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04"
DEFAULT_TIMEOUT_S = 900
# Conservative floors of an 8-GPU all-reduce's bus bandwidth (GB/s), by VM size: about three
# quarters of what NVLink nodes of the size reach; PCIe sizes low. Set `ncclFloorGBps` on a pool
# from what its healthy nodes measure: a floor is only as good as the fleet it was taken on.
NCCL_FLOORS_GBPS: dict[str, float] = {
    "Standard_ND96asr_v4": 180.0,
    "Standard_ND96amsr_A100_v4": 180.0,
    "Standard_ND96isr_H100_v5": 360.0,
    "Standard_ND96isr_H200_v5": 360.0,
    "Standard_NC48ads_A100_v4": 10.0,
    "Standard_NC96ads_A100_v4": 10.0,
    "Standard_NC80adis_H100_v5": 10.0,
    "Standard_NC64as_T4_v3": 5.0,
}

_NCCL_SCRIPT = """
import json, os, time, torch, torch.distributed as dist
dist.init_process_group("nccl")
rank, n = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
x = torch.ones(256 * 2**20 // 4, device="cuda")
for _ in range(5):
    dist.all_reduce(x)
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(20):
    dist.all_reduce(x)
torch.cuda.synchronize()
took = (time.perf_counter() - t) / 20
busbw = x.numel() * 4 / took / 1e9 * 2 * (n - 1) / n
if rank == 0:
    open("/dev/termination-log", "w").write(json.dumps({"busbw_gbps": round(busbw, 1)}))
"""

_DIAG_SCRIPT = r"""
out=$(dcgmi diag -r LEVEL 2>&1); rc=$?
detail=$(printf '%s' "$out" | grep -iE 'fail|error|warn' | head -5 | tr '\n"\\' '   ' | cut -c1-600)
if [ $rc -eq 0 ]; then p=true; else p=false; fi
printf '{"passed": %s, "detail": "%s"}' "$p" "$detail" > /dev/termination-log
exit $rc
"""


class PoolValidation(BaseModel):
    """The active tier of a GPU pool's node validation (`tau cluster validate nodes --active`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    active: bool = Field(
        False,
        description="New and released nodes also pass DCGM's diagnostics and an NCCL all-reduce "
        "(Kueue-admitted Jobs in the validation queue) before the controller lifts their "
        "validating taint",
    )
    diagLevel: int = Field(2, ge=1, le=4, description="dcgmi diag -r LEVEL (1: seconds; 4: hours)")
    ncclFloorGBps: float | None = Field(
        None,
        gt=0,
        description="All-reduce bus bandwidth (GB/s) under which a node fails; default: a "
        "conservative floor per VM size (api/gpuactive.py), none for unknown sizes",
    )


def nccl_floor(vm_size: str, declared: float | None) -> float | None:
    return declared if declared is not None else NCCL_FLOORS_GBPS.get(vm_size)


def job_name(check: ActiveCheck, node: str, stamp: str) -> str:
    """`tau-<check>-<node>-<stamp>`, cut to a DNS label's 63 characters."""
    head = f"tau-{check}-{node}"[: 63 - len(stamp) - 1].rstrip("-")
    return f"{head}-{stamp}"


def check_job(
    check: ActiveCheck,
    node: str,
    pool: str,
    gpus: int,
    stamp: str,
    *,
    diag_level: int = 2,
    nccl_image: str = C.DEFAULT_GPU_IMAGE,
    timeout_s: int = DEFAULT_TIMEOUT_S,
) -> dict[str, Any]:
    """The Job of one check on one node: in the validation queue, on that node only (it tolerates
    the taints a node being validated carries), holding all its GPUs. The pool's label in its
    node selector lets Kueue give it the pool's flavor (the host name alone would not)."""
    labels = {LABEL_CHECK: check, LABEL_NODE: node, "kueue.x-k8s.io/queue-name": VALIDATION_QUEUE}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(check, node, stamp),
            "namespace": VALIDATION_NAMESPACE,
            "labels": labels,
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": timeout_s,
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": {LABEL_CHECK: check, LABEL_NODE: node}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"kubernetes.io/hostname": node, C.LABEL_POOL: pool},
                    "tolerations": [
                        {"key": C.VALIDATING_TAINT, "operator": "Exists", "effect": "NoSchedule"},
                        {"key": C.GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
                        {"key": C.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
                    ],
                    "containers": [_container(check, gpus, diag_level, nccl_image)],
                },
            },
        },
    }


def _container(check: ActiveCheck, gpus: int, diag_level: int, nccl_image: str) -> dict[str, Any]:
    """The check's container: its image and command, all the node's GPUs; DCGM's diagnostics
    need SYS_ADMIN (as its exporter does for the profiling fields)."""
    if check == "dcgm-diag":
        script = _DIAG_SCRIPT.replace("LEVEL", str(int(diag_level)))
        image, command = DCGM_IMAGE, ["sh", "-c", script]
    else:
        image = nccl_image
        nproc = f"--nproc-per-node={gpus}"
        command = ["torchrun", "--standalone", nproc, "--no-python", "python", "-c", _NCCL_SCRIPT]
    return {
        "name": check,
        "image": image,
        "command": command,
        "terminationMessagePolicy": "File",
        "resources": {
            "requests": {"cpu": "1", "memory": "4Gi", C.GPU_RESOURCE: gpus},
            "limits": {"cpu": "4", "memory": "16Gi", C.GPU_RESOURCE: gpus},
        },
        "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}} if check == "dcgm-diag" else {},
    }


def _conds(obj: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    return {
        str(c.get("type")): c
        for c in ((obj or {}).get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    }


def _message(pods: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any] | None, str]:
    """The first container's termination message as JSON (None: none, or not JSON), and the
    reason it ended with."""
    for p in pods:
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated") or {}
            if not term:
                continue
            raw = str(term.get("message") or "").strip()
            try:
                doc = json.loads(raw) if raw else None
            except ValueError:
                doc = None
            return (doc if isinstance(doc, dict) else None), str(term.get("reason") or "")
    return None, ""


Outcome = tuple[Literal["ok", "failed", "waiting", "running"], str, dict[str, str]]


def outcome(
    check: ActiveCheck,
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    workload: Mapping[str, Any] | None,
    floor_gbps: float | None,
) -> Outcome:
    """Where one check's Job is: ("ok" | "failed", what it found, evidence) once it ended;
    ("waiting", why Kueue has not admitted it) or ("running", "") meanwhile."""
    jc = _conds(job)
    name = str((job.get("metadata") or {}).get("name"))
    ev = {"job": name}
    if "Complete" in jc or "Failed" in jc:
        doc, reason = _message(pods)
        if check == "nccl":
            return _nccl(doc, "Failed" in jc, reason, floor_gbps, ev)
        if doc is None:
            why = jc["Failed"].get("message") if "Failed" in jc else "no result"
            return ("failed", f"DCGM's diagnostics left no result ({why})", ev)
        detail = str(doc.get("detail") or "").strip()
        if doc.get("passed") is True and "Complete" in jc:
            return ("ok", "DCGM's diagnostics passed" + (f" ({detail})" if detail else ""), ev)
        return ("failed", "DCGM's diagnostics failed: " + (detail or "see the Job's pod"), ev)
    if (job.get("spec") or {}).get("suspend") or not (job.get("status") or {}).get("startTime"):
        wc = _conds(workload)
        if "QuotaReserved" in wc or "Admitted" in wc:
            return ("running", "", ev)
        raw = ""
        for c in ((workload or {}).get("status") or {}).get("conditions") or []:
            if c.get("type") == "QuotaReserved" and c.get("message"):
                raw = str(c["message"])
        return ("waiting", raw or "not admitted by Kueue yet (no Workload for it yet)", ev)
    return ("running", "", ev)


def _nccl(
    doc: dict[str, Any] | None,
    failed: bool,
    reason: str,
    floor: float | None,
    ev: dict[str, str],
) -> Outcome:
    got = doc.get("busbw_gbps") if doc else None
    if not isinstance(got, int | float) or isinstance(got, bool):
        why = reason or ("the Job failed" if failed else "no result")
        return ("failed", f"the NCCL all-reduce left no bandwidth ({why})", ev)
    ev = {**ev, "busbw_gbps": str(got)}
    if floor is None:
        return ("ok", f"NCCL all-reduce: {got} GB/s bus bandwidth (no floor for this size)", ev)
    if got < floor:
        return ("failed", f"NCCL all-reduce: {got} GB/s, under the pool's floor {floor} GB/s", ev)
    return ("ok", f"NCCL all-reduce: {got} GB/s (floor {floor} GB/s)", ev)


FIXES: dict[str, str] = {
    "dcgm-diag": "drain the node and have its GPUs replaced (AKS: reimage, or redeploy the VM); "
    f"the Job's pod in namespace {VALIDATION_NAMESPACE} has DCGM's full output",
    "nccl": "check the node's NVLink/NVSwitch (nvidia-smi topo -m, nvidia-smi nvlink -s) and the "
    "fabric manager; a node under the floor slows every multi-GPU run that lands on it",
}


def finding(
    check: ActiveCheck,
    state: str,
    message: str,
    evidence: Mapping[str, str] | None = None,
    fix: str | None = None,
) -> Finding:
    """A check's finding (a failed one with its fix: `fix`, else the check's own)."""
    return Finding.model_validate(
        {
            "check": check,
            "state": state,
            "message": message,
            "fix": (fix or FIXES[check]) if state == "failed" else None,
            "evidence": dict(evidence or {}),
        }
    )


def late(
    check: ActiveCheck,
    state: str,
    why: str,
    timeout_s: float,
    evidence: Mapping[str, str],
    then: str,
) -> Finding:
    """A check not done in time: where its Job was (never admitted: Kueue's reason in TauGrid's
    words), and what happens `then`."""
    from taugrid.api.kueuewords import explain

    if state == "waiting":
        words = explain(why, VALIDATION_CLUSTER_QUEUE)
        message = f"not admitted within {timeout_s:.0f} s: {words.text if words else why}"
        fix = (
            f"the validation queue ({VALIDATION_CLUSTER_QUEUE}) borrows only what the teams leave "
            f"unused: {then}"
        )
    else:
        message = f"not done within {timeout_s:.0f} s (it ran; its Job was stopped)"
        fix = f"a diagnostic at level 3 or 4 takes long: {then}"
    return finding(check, "failed", message, evidence, fix)


def not_run(check: ActiveCheck, node: str, gpus: int, busy: Mapping[str, list[str]]) -> str:
    """Why a check is not run on a node ("" when it is)."""
    if node in busy:
        held = ", ".join(busy[node][:3]) + (" ..." if len(busy[node]) > 3 else "")
        return f"not idle: its GPUs are held by {held}; active checks run on idle nodes only"
    if check == "nccl" and gpus < 2:
        return "one GPU a node: nothing to all-reduce"
    return ""


def by_job(
    pods: Iterable[Mapping[str, Any]], workloads: Iterable[Mapping[str, Any]]
) -> tuple[dict[str, list[Mapping[str, Any]]], dict[str, Mapping[str, Any]]]:
    """The check Jobs' pods (the Job controller's `job-name` label) and Kueue Workloads (their
    owner), by Job name."""
    pods_of: dict[str, list[Mapping[str, Any]]] = {}
    for p in pods:
        job = ((p.get("metadata") or {}).get("labels") or {}).get("job-name")
        if job:
            pods_of.setdefault(str(job), []).append(p)
    workload_of: dict[str, Mapping[str, Any]] = {}
    for w in workloads:
        for o in (w.get("metadata") or {}).get("ownerReferences") or []:
            if o.get("kind") == "Job":
                workload_of[str(o.get("name"))] = w
    return pods_of, workload_of
