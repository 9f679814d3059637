"""The active tier for a node being validated, run by the controller where its pool asks for it
(`active: true`): after the passive tier passes, one Job per check in the validation queue
(`api.gpuactive`); their findings join the node's verdict, and only then is the taint lifted.

A check Kueue does not admit within `timeout_s` fails with Kueue's reason and its Job is
deleted; the node keeps its taint and its verdict says why. A failed node is tried again
`RETRY_S` after its last verdict (not at every pass).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from taugrid.api import gpuactive as A
from taugrid.api import gpuhealth as G
from taugrid.api.errors import TauError
from taugrid.api.kubetime import k8s_time, parse_k8s_time
from taugrid.controller.config import FIELD_MANAGER

log = logging.getLogger("taugrid.controller")
RETRY_S = 600.0
Io = Callable[..., Awaitable[Any]]


class ActiveTier:
    def __init__(self, kube: Any, io: Io, timeout_s: float = A.DEFAULT_TIMEOUT_S) -> None:
        self.kube, self.io, self.timeout_s = kube, io, timeout_s

    async def step(
        self, node: dict[str, Any], pool: G.PoolDeclaration, now: datetime
    ) -> list[G.Finding] | None:
        """The node's active findings once its checks ended (or gave up); None while they run,
        or while a failed node waits to be tried again."""
        name = node["metadata"]["name"]
        ns = A.VALIDATION_NAMESPACE
        if self.retry_in(node, now) is not None:
            return None
        jobs = await self.io(self.kube.list, "Job", ns, {A.LABEL_NODE: name})
        if not jobs:
            await self._start(name, pool, now)
            return None
        pods = await self.io(self.kube.list, "Pod", ns, {A.LABEL_NODE: name})
        pods_of, workload_of = A.by_job(pods, await self.io(self.kube.list, "Workload", ns))
        out: list[G.Finding] = []
        then = "the controller tries again in 10 minutes"
        for job in jobs:
            check, jname = job["metadata"]["labels"][A.LABEL_CHECK], job["metadata"]["name"]
            state, message, ev = A.outcome(
                check, job, pods_of.get(jname, []), workload_of.get(jname), pool.ncclFloorGBps
            )
            started = parse_k8s_time(job["metadata"].get("creationTimestamp")) or now
            if state in ("ok", "failed"):
                out.append(A.finding(check, state, message, ev))
            elif (now - started).total_seconds() > self.timeout_s:
                out.append(A.late(check, state, message, self.timeout_s, ev, then))
            else:
                return None  # still waiting or running
        for job in jobs:  # all ended: the next validation of this node starts afresh
            await self._delete(job["metadata"]["name"])
        if pool.gpusPerNode < 2:
            out.append(A.finding("nccl", "skipped", A.not_run("nccl", name, 1, {})))
        return out

    def retry_in(self, node: dict[str, Any], now: datetime) -> float | None:
        """Seconds until a node whose active checks failed last is tried again (None: now; a
        failure of the passive tier is no reason to wait)."""
        kept = G.history_of(node)
        if not kept or kept[-1].passed or kept[-1].tier != "active":
            return None
        last = parse_k8s_time(kept[-1].at)
        left = RETRY_S - (now - last).total_seconds() if last is not None else 0.0
        return left if left > 0 else None

    async def _start(self, name: str, pool: G.PoolDeclaration, now: datetime) -> None:
        stamp = k8s_time(now).replace(":", "").replace("-", "").lower()[-7:-1]
        for check in A.ACTIVE_CHECKS:
            if check == "nccl" and pool.gpusPerNode < 2:
                continue
            job = A.check_job(
                check,
                name,
                pool.name,
                pool.gpusPerNode,
                stamp,
                diag_level=pool.diagLevel,
                timeout_s=int(self.timeout_s),
            )
            try:
                await self.io(self.kube.create, job, FIELD_MANAGER)
                log.warning("active check %s of %s: Job %s", check, name, job["metadata"]["name"])
            except TauError as e:
                log.warning("active check %s of %s not started: %s", check, name, e.message)

    async def _delete(self, job: str) -> None:
        try:
            await self.io(self.kube.delete, "Job", job, A.VALIDATION_NAMESPACE)
        except TauError as e:
            log.info("Job %s not deleted: %s", job, e.message)
