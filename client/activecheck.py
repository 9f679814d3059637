"""`tau cluster validate nodes --active`: the active tier's Jobs on the idle nodes, awaited.

Each idle node of the chosen pools gets one Job per check (`api.gpuactive`), admitted by Kueue
through the validation queue; they are awaited together, with progress, for at most the
timeout. A node whose GPUs a pod holds is not touched (the check says so); a check Kueue did not
admit in time says Kueue's reason, its Job is deleted, and the node keeps its taint.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from taugrid.api import gpuactive as A
from taugrid.api.gpuhealth import Finding, PoolDeclaration
from taugrid.api.gpuuse import pod_gpus

POLL_S = 2.0
Say = Callable[[str], None]


def holders(pods: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """node -> the pods (namespace/name) that hold GPUs on it now (not the checks' own)."""
    out: dict[str, list[str]] = {}
    for p in pods:
        meta, spec = p.get("metadata") or {}, p.get("spec") or {}
        node = spec.get("nodeName")
        phase = (p.get("status") or {}).get("phase")
        if (
            not node
            or phase in ("Succeeded", "Failed")
            or meta.get("namespace") == A.VALIDATION_NAMESPACE
        ):
            continue
        if pod_gpus(p):
            out.setdefault(str(node), []).append(f"{meta.get('namespace')}/{meta.get('name')}")
    return out


def run(
    kube: Any,
    targets: list[tuple[str, PoolDeclaration]],
    timeout_s: float,
    say: Say,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, list[Finding]]:
    """Each target node's active findings (its checks, or why they did not run)."""
    from taugrid.api.kubetime import k8s_time

    busy = holders(kube.list("Pod"))
    out: dict[str, list[Finding]] = {}
    pending: dict[str, tuple[str, A.ActiveCheck, PoolDeclaration]] = {}  # job -> node, check
    stamp = k8s_time().replace(":", "").replace("-", "").lower()[-7:-1]
    for node, pool in targets:
        for check in A.ACTIVE_CHECKS:
            why = A.not_run(check, node, pool.gpusPerNode, busy)
            if why:
                out.setdefault(node, []).append(A.finding(check, "skipped", why))
                continue
            job = A.check_job(
                check, node, pool.name, pool.gpusPerNode, stamp, diag_level=pool.diagLevel
            )
            kube.create(job)
            pending[job["metadata"]["name"]] = (node, check, pool)
    if pending:
        say(
            f"active checks: {len(pending)} Job(s) in the validation queue, for up to "
            f"{timeout_s:.0f} s"
        )
    deadline = clock() + timeout_s
    while pending:
        done = _collect(kube, pending, out)
        if done:
            say(f"active checks: {sum(len(v) for v in out.values())} done, {len(pending)} to go")
        if not pending or clock() >= deadline:
            break
        sleep(POLL_S)
    _give_up(kube, pending, out, timeout_s)
    return out


def _collect(
    kube: Any,
    pending: dict[str, tuple[str, A.ActiveCheck, PoolDeclaration]],
    out: dict[str, list[Finding]],
) -> int:
    """The findings of the Jobs that ended (removed from `pending`); how many ended."""
    ns = A.VALIDATION_NAMESPACE
    jobs = {j["metadata"]["name"]: j for j in kube.list("Job", ns)}
    pods, workloads = A.by_job(kube.list("Pod", ns), kube.list("Workload", ns))
    ended = 0
    for name in list(pending):
        node, check, pool = pending[name]
        job = jobs.get(name)
        if job is None:
            out.setdefault(node, []).append(
                A.finding(check, "failed", f"its Job {name} went before it ended")
            )
            del pending[name]
            ended += 1
            continue
        state, message, ev = A.outcome(
            check, job, pods.get(name, []), workloads.get(name), pool.ncclFloorGBps
        )
        if state in ("ok", "failed"):
            out.setdefault(node, []).append(A.finding(check, state, message, ev))
            kube.delete("Job", name, ns)  # read: nothing left behind (its pod goes with it)
            del pending[name]
            ended += 1
    return ended


def _give_up(
    kube: Any,
    pending: dict[str, tuple[str, A.ActiveCheck, PoolDeclaration]],
    out: dict[str, list[Finding]],
    timeout_s: float,
) -> None:
    """The checks not done in time: each says where its Job was, and its Job is deleted."""
    if not pending:
        return
    ns = A.VALIDATION_NAMESPACE
    jobs = {j["metadata"]["name"]: j for j in kube.list("Job", ns)}
    _, workloads = A.by_job([], kube.list("Workload", ns))
    then = "run it when GPUs are free, or with a longer --timeout"
    for name, (node, check, pool) in pending.items():
        job = jobs.get(name) or {"metadata": {"name": name}}
        state, why, ev = A.outcome(check, job, [], workloads.get(name), pool.ncclFloorGBps)
        out.setdefault(node, []).append(A.late(check, state, why, timeout_s, ev, then))
        kube.delete("Job", name, ns)
