"""The GPU-use worker: each pass reads every GPU node's DCGM exporter at once, keeps each node's
reading on it, records the runs whose GPU use changed, and applies the stack's idle policy.

The decisions are `gpuuse.py`'s (pure); this module does the reading (aiohttp, bounded:
`CONCURRENCY` exporters at a time, `MAX_BYTES` of each answer, the configured timeout) and the
writes, through the controller it serves (`Host`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from taugrid.api import gpuuse as U
from taugrid.api.errors import TauError
from taugrid.controller import gpuuse as GU
from taugrid.controller.config import FIELD_MANAGER, ControllerConfig
from taugrid.kube.client import Kube

log = logging.getLogger("taugrid.controller")

CONCURRENCY = 32
MAX_BYTES = 8 << 20  # an 8-GPU node's full answer is ~100 KiB
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
RunKey = tuple[str, str]


class Host(Protocol):
    """What the worker needs of the controller."""

    cfg: ControllerConfig
    kube: Kube
    nodes: dict[str, dict[str, Any]]
    clock: Callable[[], datetime]

    async def _io(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def run_indexes(self) -> Mapping[str, Any] | None: ...

    def record_soon(self, key: RunKey) -> Awaitable[None]: ...


class GpuWatch:
    def __init__(self, host: Host) -> None:
        self.host = host
        g = host.cfg.gpuUse
        self.tracker = GU.UseTracker(g.idleBelow, float(g.idleAfterSeconds))
        self._warned: set[tuple[RunKey, str]] = set()  # (run, idleSince) said once
        self._session: Any = None

    def use_of(self, key: RunKey) -> U.GpuUseStatus | None:
        return self.tracker.now_of.get(key)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __call__(self) -> float | None:
        """One pass; returns when to look again."""
        h = self.host
        every = float(h.cfg.gpuUse.scrapeSeconds)
        kw = h.run_indexes()
        nodes = GU.gpu_nodes(h.nodes)
        if kw is None or not nodes:
            return every
        readings = await self.read(nodes)
        now = h.clock()
        await self._annotate(readings, now)
        pods = {key: [dict(p) for p in got] for key, got in kw["pod_idx"].items()}
        changed = self.tracker.update(readings, pods, now, _recorded(kw["taurun_idx"]))
        await asyncio.gather(*(h.record_soon(key) for key in changed))
        await self._idle_policy(kw, now)
        return every

    # --- reading ---------------------------------------------------------------------------
    async def read(self, nodes: list[str]) -> list[GU.Reading]:
        """Every node's reading (a node whose exporter was not found says so)."""
        h = self.host
        ex = h.cfg.exporters
        slices: list[dict[str, Any]] = []
        if not ex.url:
            try:
                slices = await h._io(
                    h.kube.list, "EndpointSlice", ex.namespace, {SERVICE_NAME_LABEL: ex.service}
                )
            except TauError as e:
                log.warning("DCGM exporters not found: %s", e.message)
        where = GU.targets(ex, nodes, slices)
        got = await self._fetch(where, ex.timeout_s)
        out = [GU.read(n, got[n]) for n in sorted(where)]
        missing = f"no DCGM exporter runs on it (Service {ex.namespace}/{ex.service})"
        out += [GU.Reading(n, error=missing) for n in nodes if n not in where]
        return out

    async def _fetch(
        self, where: Mapping[str, str], timeout: float
    ) -> dict[str, str | BaseException]:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=timeout),
                connector=aiohttp.TCPConnector(limit=CONCURRENCY),
            )
        session = self._session

        async def one(url: str) -> str | BaseException:
            try:
                async with session.get(url) as r:
                    if r.status != 200:
                        return RuntimeError(f"HTTP {r.status} from {url}")
                    body: bytes = await r.content.read(MAX_BYTES + 1)
                    if len(body) > MAX_BYTES:
                        return RuntimeError(f"its answer is over {MAX_BYTES >> 20} MiB")
                    return body.decode("utf-8", errors="replace")
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
                return RuntimeError(f"{type(e).__name__} {e}".strip() + f" ({url})")

        names = list(where)
        answers = await asyncio.gather(*(one(where[n]) for n in names))
        return dict(zip(names, answers, strict=True))

    # --- writing ---------------------------------------------------------------------------
    async def _annotate(self, readings: list[GU.Reading], now: datetime) -> None:
        """Each node's reading on it, when it changed (validation reads it there)."""
        h = self.host
        for r in readings:
            node = h.nodes.get(r.node)
            patch = GU.annotation_patch(node, r, now) if node is not None else None
            if patch is None or h.cfg.remediation.dry_run:
                continue
            try:
                got = await h._io(h.kube.merge_patch, "Node", r.node, None, patch, FIELD_MANAGER)
            except TauError as e:  # gone meanwhile (deleted): nothing to keep
                log.warning("DCGM reading of %s not kept: %s", r.node, e.message)
                continue
            if r.node in h.nodes:
                h.nodes[r.node] = {**h.nodes[r.node], "metadata": got.get("metadata") or {}}

    async def _idle_policy(self, kw: Mapping[str, Any], now: datetime) -> None:
        """warn: a Warning event once per idle stretch; requeue: also deactivate its Workload
        (and activate again the Workloads evicted so, once Kueue has evicted them)."""
        h = self.host
        action = h.cfg.gpuUse.idleAction
        for key, use in list(self.tracker.now_of.items()):
            if action == "none" or not use.idleSince or (key, use.idleSince) in self._warned:
                continue
            self._warned.add((key, use.idleSince))
            tr = _first(kw["taurun_idx"].get(key))
            if tr is None:
                continue
            await self._event(GU.idle_event(tr, use, "GPUsIdle", U.describe(use), now))
            if action == "requeue":
                await self._requeue(key, tr, _first(kw["kueue_idx"].get(key)), use, now)
        if action == "requeue":
            for wl in [_first(s) for s in kw["kueue_uid_idx"].values()]:
                patch = GU.reactivate_patch(wl) if wl else None
                if patch is not None and wl is not None:
                    meta = wl["metadata"]
                    log.warning(
                        "activate again %s/%s (requeued idle)", meta["namespace"], meta["name"]
                    )
                    await self._patch_workload(meta["name"], meta["namespace"], patch)

    async def _requeue(
        self,
        key: RunKey,
        taurun: Mapping[str, Any],
        wl: Mapping[str, Any] | None,
        use: U.GpuUseStatus,
        now: datetime,
    ) -> None:
        patch = GU.requeue_patch(wl, now) if wl else None
        if wl is None or patch is None:
            return
        meta = wl["metadata"]
        log.warning("requeue idle run %s/%s (%s)", key[0], key[1], U.describe(use))
        if await self._patch_workload(meta["name"], meta["namespace"], patch):
            why = (
                f"its GPUs stayed idle ({U.describe(use)}): Kueue evicts it and it queues again "
                "(gpuUse.idleAction: requeue); it resumes from its last checkpoint"
            )
            await self._event(GU.idle_event(taurun, use, "RequeuedIdle", why, now))

    async def _patch_workload(self, name: str, namespace: str, patch: dict[str, Any]) -> bool:
        h = self.host
        if h.cfg.remediation.dry_run:
            return False
        try:
            await h._io(h.kube.merge_patch, "Workload", name, namespace, patch, FIELD_MANAGER)
            return True
        except TauError as e:
            log.warning("Workload %s/%s not changed: %s", namespace, name, e.message)
            return False

    async def _event(self, body: dict[str, Any]) -> None:
        h = self.host
        try:
            await h._io(h.kube.create, body, FIELD_MANAGER)
        except TauError as e:  # said already (the same name), or the namespace is going
            log.info("event %s not posted: %s", body["metadata"]["name"], e.message)


def _recorded(taurun_idx: Mapping[RunKey, Any]) -> dict[RunKey, U.GpuUseStatus]:
    """The GPU use the runs' statuses hold (what a restarted controller starts from)."""
    out = {}
    for key, store in taurun_idx.items():
        got = ((_first(store) or {}).get("status") or {}).get("gpuUse")
        if got:
            try:
                out[key] = U.GpuUseStatus.model_validate(got)
            except ValueError:
                continue  # written by another version: started again
    return out


def _first(store: Any) -> dict[str, Any] | None:
    for item in store or ():
        return dict(item)
    return None
