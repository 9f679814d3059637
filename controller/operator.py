"""The controller on kopf: watches in, level-based reconcilers, server-side apply out.

Every handler is level-based: it recomputes the whole desired state of what it owns from the
objects as they are now (kopf's indexes, filled by watches, or one LIST of the few platform
objects) and writes only what differs, with field manager `taugrid-controller`. So a missed or
repeated event changes nothing, and an idle run costs no API call (watches, not polling).

Four reconcilers:
- the lifecycle recorder: TauRun.status from the run's workload, Kueue Workload, pods and
  Warning events (`recorder.py`), on any change to one of them or to a node they run on;
- quota grants: TauQuotaRequests -> each ClusterQueue's grant Cohort (`quota.py`), on any
  change to requests, queues or capacity, and when the next grant expires;
- GPU remediation: node conditions -> quarantine / release (`remediation.py`), on node changes
  and when a cleared node's wait ends;
- platform status: TauWorkspace StorageReady/QueueReady, TauCluster capacity per profile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import kopf

from taugrid.api import constants as C
from taugrid.api import gpuhealth as G
from taugrid.api.errors import TauError
from taugrid.api.kubetime import k8s_time, parse_k8s_time
from taugrid.controller import decide as D
from taugrid.controller import platform_status as P
from taugrid.controller import remediation as R
from taugrid.controller import validation as V
from taugrid.controller.activetier import ActiveTier
from taugrid.controller.carry import Carrier, NotYet
from taugrid.controller.config import FIELD_MANAGER, PEERING, ControllerConfig
from taugrid.controller.gpuwatch import GpuWatch
from taugrid.controller.kopfkit import (
    ByUid,
    NoDiffBase,
    connection_info,
    first_of,
    install_quiet_toggles,
    install_slimmed_watches,
    plain,
    reacts_to_changes,
    slim,
)
from taugrid.controller.recorder import RunObjects, compute_status, same
from taugrid.controller.turns import Turns
from taugrid.controller.usage import UsageLedger
from taugrid.kube.client import Kube
from taugrid.kube.facts import node_problems, recorded_status

log = logging.getLogger("taugrid.controller")
RunKey = tuple[str, str]  # (namespace, run id)
COALESCE_S = 0.05  # a burst of events -> one reconcile
RECORD_AFTER_S = 1.0  # a run's changes within this long -> one status write
# A run just submitted gets its first status once Kueue has its Workload, or this long after
# it was created, whichever comes first: else a burst of submissions writes every run twice
# ("no Kueue Workload yet", then "queued") while Kueue catches up. Until then `tau run status`
# computes the run's status itself (the TauRun has none).
FIRST_RECORD_WITHIN_S = 5.0
# Run status writes, all runs together, go one at a time and at most
# `ControllerConfig.status_writes_per_s` (20) a second: a restart among 1,000 runs (or a burst of
# submissions) reaches the API server as a steady trickle. (Paced starts alone were not enough:
# writes queued behind a slow answer completed together, 26 in one second.)
# The objects the quota and platform reconcilers read (and which of them a change wakes)
CARRY_RETRY_S = 10.0  # a run's ConfigMaps not made on its worker: tried again this much later
CARRY_SOON_S = 1.0  # ... because MultiKueue had not made its Job there yet
ACTIVE_POLL_S = 5.0  # how often a node's active checks are looked at while they run
RUN_INDEXES = (
    "taurun_idx",
    "job_idx",
    "rayjob_idx",
    "kueue_idx",
    "kueue_uid_idx",
    "pod_idx",
    "node_runs_idx",
    "event_idx",
)
PLATFORM_KINDS: tuple[tuple[str, str, str | None, tuple[str, ...]], ...] = (
    (C.GROUP, C.VERSION, "quotarequests", ("quota",)),
    (C.GROUP, C.VERSION, "workspaces", ("platform", "quota")),
    (C.GROUP, C.VERSION, "clusters", ("platform", "quota", "remediation")),
    ("kueue.x-k8s.io", "v1beta2", "clusterqueues", ("platform", "quota")),
    ("kueue.x-k8s.io", "v1beta2", "localqueues", ("platform", "quota")),
    ("kueue.x-k8s.io", "v1beta2", "cohorts", ("quota",)),
    ("kueue.x-k8s.io", "v1beta2", "resourceflavors", ("quota",)),
    ("v1", "persistentvolumeclaims", None, ("platform",)),
)


def now_utc() -> datetime:
    return datetime.now(UTC)


def _uid(obj: Mapping[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("uid")


def _version(obj: Mapping[str, Any]) -> int:
    """resourceVersion as a number (etcd's revision; -1 if not one: the index is trusted)."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or -1)
    except ValueError:
        return -1


def _fleeting(pod: Mapping[str, Any]) -> bool:
    """A pod about to go (evicted, preempted, failed, being deleted): what it says of why the
    run failed must be recorded before it is gone, not a second later."""
    status = pod.get("status") or {}
    if (pod.get("metadata") or {}).get("deletionTimestamp") or status.get("phase") == "Failed":
        return True
    return any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _run_key(kw: Mapping[str, Any]) -> RunKey:
    return (str(kw["namespace"]), str(kw["labels"][C.LABEL_RUN_ID]))


class Controller:
    def __init__(self, cfg: ControllerConfig, kube: Kube, clock: Callable[[], datetime] = now_utc):
        self.cfg, self.kube, self.clock = cfg, kube, clock
        self.nodes: dict[str, dict[str, Any]] = {}
        self.problems: dict[str, list[str]] = {}
        self.problem_since: dict[str, str] = {}  # node -> when its GPU problems were first seen
        # The TauRun as the controller's own last status write left it: the watch that brings
        # it back into the index can lag a burst of events of the run's other objects.
        self._written: dict[RunKey, dict[str, Any]] = {}
        self._indexes: dict[str, Any] = {}  # kind -> kopf index of the platform's objects
        self._due: dict[RunKey, asyncio.Task[None]] = {}  # runs whose status is to be recorded
        self.turns = Turns(cfg.status_writes_per_s)  # run status writes: one at a time, paced
        self._queued: set[RunKey] = set()  # runs whose status write waits for its turn
        self._due_services: dict[RunKey, asyncio.Task[None]] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._capacity_sig: tuple[Any, ...] = ()
        self.breaker: R.Verdicts | None = None
        self._run_kw: Mapping[str, Any] | None = None  # kopf's indexes of runs' objects (live)
        self.gpu = GpuWatch(self)
        self.active = ActiveTier(kube, self._io)
        self.usage = UsageLedger(kube, lambda: self.wake("usage"))
        self.carrier = Carrier(kube)  # a MultiKueue manager's runs' ConfigMaps, to their worker
        self.registry = self._build()

    # --- I/O (in a thread: lightkube is synchronous) ---------------------------------------
    async def _io(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    def run_indexes(self) -> Mapping[str, Any] | None:
        return self._run_kw

    async def record_soon(self, key: RunKey) -> None:
        if self._run_kw is not None:
            await self.record_now(key, self._run_kw)

    def wake(self, worker: str) -> None:
        ev = self._wake.get(worker)
        if ev is not None:
            ev.set()

    # --- kopf wiring -------------------------------------------------------------------------
    def _build(self) -> kopf.OperatorRegistry:
        """kopf's registry: the controller's life, the indexes, the recorder of runs, services,
        nodes, and the quota and platform objects, each wired by a method of its own."""
        reg = kopf.OperatorRegistry()
        self._wire_life(reg)
        self._wire_indexes(reg)
        self._wire_recorder(reg)
        self._wire_services(reg)
        self._wire_nodes(reg)
        # Quota and platform objects: few; their reconcilers read them whole, from kopf's
        # indexes (filled by the watches), never by listing them again on each wake.
        for group, version, plural, workers in PLATFORM_KINDS:
            self._wire(reg, group, version, plural, workers)
        return reg

    def _wire_life(self, reg: kopf.OperatorRegistry) -> None:
        """Login, startup (settings, workers) and cleanup."""
        me = self

        @kopf.on.login(registry=reg)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return connection_info(me.kube)

        @kopf.on.startup(registry=reg)
        async def startup(**kw: Any) -> None:
            me.configure(kw["settings"])
            try:  # the ledger as kept before a restart (a platform without it: no ledger)
                await me._io(me.usage.load)
            except Exception as e:
                log.warning("usage ledger not read (%s): no usage is recorded", e)
            me.start_workers()

        @kopf.on.cleanup(registry=reg)
        async def cleanup(**_: Any) -> None:
            for t in [*me._tasks, *me._due.values(), *me._due_services.values()]:
                t.cancel()
            await me.gpu.close()

    def _wire_indexes(self, reg: kopf.OperatorRegistry) -> None:
        """The indexes of a run's objects, by run (and Workloads by UID, pods by node)."""
        run_id = {C.LABEL_RUN_ID: kopf.PRESENT}

        # Indexes: kopf fills them from its watches before any handler runs, so the recorder
        # never writes a status from half a picture. (kopf calls with keywords: `**kw`.)
        @kopf.index(C.GROUP, C.VERSION, "runs", id="taurun_idx", registry=reg)
        def taurun_idx(**kw: Any) -> Any:
            return {(kw["namespace"], kw["name"]): slim(kw["body"])}

        @kopf.index("batch", "v1", "jobs", labels=run_id, id="job_idx", registry=reg)
        def job_idx(**kw: Any) -> Any:
            return {_run_key(kw): slim(kw["body"])}

        @kopf.index("ray.io", "v1", "rayjobs", labels=run_id, id="rayjob_idx", registry=reg)
        def rayjob_idx(**kw: Any) -> Any:
            return {_run_key(kw): slim(kw["body"])}

        @kopf.index("kueue.x-k8s.io", "v1beta2", "workloads", id="kueue_idx", registry=reg)
        def kueue_idx(**kw: Any) -> Any:
            owners = kw["body"].get("metadata", {}).get("ownerReferences") or []
            return {(kw["namespace"], o["name"]): slim(kw["body"]) for o in owners}

        @kopf.index("kueue.x-k8s.io", "v1beta2", "workloads", id="kueue_uid_idx", registry=reg)
        def kueue_uid_idx(**kw: Any) -> Any:
            return {kw["body"]["metadata"]["uid"]: slim(kw["body"])}

        @kopf.index("v1", "pods", labels=run_id, id="pod_idx", registry=reg)
        def pod_idx(**kw: Any) -> Any:
            return {_run_key(kw): slim(kw["body"])}

        @kopf.index("v1", "pods", labels=run_id, id="node_runs_idx", registry=reg)
        def node_runs_idx(**kw: Any) -> Any:
            node = kw["spec"].get("nodeName")
            return {node: _run_key(kw)} if node else None

        @kopf.index("v1", "events", id="event_idx", registry=reg)
        def event_idx(**kw: Any) -> Any:
            body = kw["body"]
            if body.get("type") != "Warning":
                return None
            return {(kw["namespace"], (body.get("involvedObject") or {}).get("name")): slim(body)}

    def _wire_recorder(self, reg: kopf.OperatorRegistry) -> None:
        """The recorder: any change to a run's objects records its status."""
        me = self
        run_id = {C.LABEL_RUN_ID: kopf.PRESENT}

        # The recorder: any change to a run's objects.
        @kopf.on.event(C.GROUP, C.VERSION, "runs", registry=reg)
        async def on_taurun(**kw: Any) -> None:
            if kw["type"] != "DELETED":
                await me.record((kw["namespace"], kw["name"]), kw)

        @kopf.on.event("batch", "v1", "jobs", labels=run_id, registry=reg)
        async def on_job(**kw: Any) -> None:
            await me.record(_run_key(kw), kw)

        @kopf.on.event("ray.io", "v1", "rayjobs", labels=run_id, registry=reg)
        async def on_rayjob(**kw: Any) -> None:
            await me.record(_run_key(kw), kw)

        @kopf.on.event("kueue.x-k8s.io", "v1beta2", "workloads", registry=reg)
        async def on_workload(**kw: Any) -> None:
            for o in kw["body"].get("metadata", {}).get("ownerReferences") or []:
                await me.record((kw["namespace"], o["name"]), kw)
            me.wake("quota")  # usage changed: a waiting grant may now matter

        @kopf.on.event("v1", "pods", labels=run_id, registry=reg)
        async def on_pod(**kw: Any) -> None:
            if _fleeting(kw.get("body") or {}):  # gone in a moment: recorded while it is there
                await me.record_now(_run_key(kw), kw, urgent=True)
            else:
                await me.record(_run_key(kw), kw)

        @kopf.on.event("v1", "events", registry=reg)
        async def on_event(**kw: Any) -> None:
            body = kw["body"]
            if body.get("type") != "Warning":
                return
            involved = (body.get("involvedObject") or {}).get("name") or ""
            key = me.run_of(kw["namespace"], involved, kw)
            if key is not None:
                await me.record(key, kw)

    def _wire_services(self, reg: kopf.OperatorRegistry) -> None:
        """Services: a generation that serves takes over; the TauService follows."""
        me = self

        # Services (tau serve --target kube): a new generation that serves takes over, and the
        # TauService's status follows its RayServices.
        service = {C.LABEL_SERVICE: kopf.PRESENT}

        @kopf.on.event("ray.io", "v1", "rayservices", labels=service, registry=reg)
        async def on_rayservice(**kw: Any) -> None:
            labels = kw["body"].get("metadata", {}).get("labels") or {}
            await me.service_changed((kw["namespace"], labels[C.LABEL_SERVICE]))

        @kopf.on.event(C.GROUP, C.VERSION, "tauservices", registry=reg)
        async def on_tauservice(**kw: Any) -> None:
            if kw["type"] != "DELETED":
                await me.service_changed((kw["namespace"], kw["name"]))

    def _wire_nodes(self, reg: kopf.OperatorRegistry) -> None:
        """Nodes: remediation, capacity, and the GPU signal of the runs on them."""
        me = self

        # Nodes: remediation, capacity, and the GPU signal of the runs on them.
        @kopf.on.event("v1", "nodes", registry=reg)
        async def on_node(**kw: Any) -> None:
            body = None if kw["type"] == "DELETED" else slim(kw["body"])
            await me.node_changed(kw["name"], body, kw)

    def _wire(
        self,
        reg: kopf.OperatorRegistry,
        group: str,
        version: str,
        plural: str | None,
        workers: tuple[str, ...],
    ) -> None:
        args = (group, version, plural) if plural else (group, version)
        kind = plural or version

        @kopf.index(*args, id=f"all_{kind}", registry=reg)
        def keep(**kw: Any) -> Any:
            return {(kw["namespace"], kw["name"]): plain(kw["body"])}

        seen: dict[str, str] = {}

        @kopf.on.event(*args, registry=reg)
        async def wake(**kw: Any) -> None:
            self._hold_indexes(kw)
            # The heartbeat (every 30 s) changes nothing a reconciler reads: no wake for it.
            sig = D.signature(kw.get("body") or {})
            if kw.get("type") != "DELETED" and seen.get(kw["name"]) == sig:
                return
            seen[kw["name"]] = sig
            for w in workers:
                self.wake(w)

    def _hold_indexes(self, kw: Mapping[str, Any]) -> None:
        """kopf calls a handler only once every index is filled: from the first call on, the
        reconcilers read the platform's objects from them (live views, no copies)."""
        if self._run_kw is None:
            self._run_kw = {k: kw[k] for k in RUN_INDEXES}
        if not self._indexes:
            self._indexes = {
                kind: kw[f"all_{kind}"]
                for _, version, plural, _ in PLATFORM_KINDS
                if (kind := plural or version)
            }
            for w in ("quota", "platform"):
                self.wake(w)

    def _objects(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        out = []
        for (ns, _), store in self._indexes[kind].items():
            got = first_of(store)
            if got is not None and (namespace is None or ns == namespace):
                out.append(got)
        return out

    def _object(self, kind: str, name: str) -> dict[str, Any] | None:
        return next((o for o in self._objects(kind) if o["metadata"]["name"] == name), None)

    def configure(self, settings: kopf.OperatorSettings) -> None:
        settings.peering.name = PEERING
        settings.peering.mandatory = False  # without kopf's peering CRD: standalone
        settings.peering.clusterwide = True
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.watching.connect_timeout = 10
        settings.watching.label_selectors["v1", "pods"] = C.LABEL_RUN_ID
        settings.watching.label_selectors["batch", "jobs"] = C.LABEL_RUN_ID
        settings.watching.label_selectors["ray.io", "rayjobs"] = C.LABEL_RUN_ID
        settings.watching.field_selectors["v1", "events"] = "type=Warning"
        settings.execution.max_workers = 4
        if not reacts_to_changes(self.registry):
            settings.persistence.diffbase_storage = NoDiffBase()
        # kopf's per-object workers stay unbounded (its default). A bound deadlocks a restart: a
        # worker that has indexed its object waits for every object of every kind to be indexed
        # before its handler runs, and with more objects of a kind than workers the rest never
        # get one (found with 150 runs: a restarted controller wrote nothing, ever). The API
        # calls are bounded where they are made: status writes go through the event loop's
        # thread pool (a few threads), each run's coalesced to one a second at most.

    def start_workers(self) -> None:
        for name, fn in (
            ("quota", self.reconcile_quota),
            ("remediation", self.reconcile_nodes),
            ("platform", self.reconcile_platform),
            ("heartbeat", self.heartbeat),
            ("usage", lambda: self.usage.flush(self._io)),
            *((("gpuuse", self.gpu),) if self.cfg.gpuUse.enabled else ()),
        ):
            self._wake[name] = asyncio.Event()
            self._wake[name].set()  # once at start
            self._tasks.append(asyncio.create_task(self._loop(name, fn)))

    async def _loop(self, name: str, fn: Callable[[], Awaitable[float | None]]) -> None:
        """Run `fn` when woken (coalescing bursts) or when its own deadline comes."""
        ev = self._wake[name]
        timeout: float | None = None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ev.wait(), timeout)
            await asyncio.sleep(COALESCE_S)
            ev.clear()
            try:
                timeout = await fn()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # keep going: the next event or deadline tries again
                log.warning("%s reconcile failed: %s", name, e)
                timeout = 5.0

    # --- the lifecycle recorder ----------------------------------------------------------------
    def run_of(self, namespace: str, involved: str, kw: Mapping[str, Any]) -> RunKey | None:
        if (namespace, involved) in kw["taurun_idx"]:
            return (namespace, involved)
        for key in kw["taurun_idx"]:  # a pod or workload of a run: named after the run
            if key[0] == namespace and involved.startswith(key[1]):
                return key  # type: ignore[no-any-return]
        return None

    def objects(self, key: RunKey, kw: Mapping[str, Any]) -> RunObjects | None:
        tr = first_of(kw["taurun_idx"].get(key))
        if tr is None:
            return None
        pods = [dict(p) for p in kw["pod_idx"].get(key, ())]
        kueue = first_of(kw["kueue_idx"].get(key))
        names = {key[1], *(p["metadata"]["name"] for p in pods)}
        if kueue:
            names.add(kueue["metadata"]["name"])
        events = [dict(e) for n in names for e in kw["event_idx"].get((key[0], n), ())]
        workload = first_of(kw["job_idx"].get(key)) or first_of(kw["rayjob_idx"].get(key))
        return RunObjects(
            taurun=tr,
            workload=workload,
            kueue=kueue,
            pods=pods,
            events=events,
            workloads_by_uid=ByUid(kw["kueue_uid_idx"]),
        )

    async def record(self, key: RunKey, kw: Mapping[str, Any]) -> None:
        """A change to one of the run's objects: its status is recorded RECORD_AFTER_S later,
        once for all the changes of that while (a run's steps come in bursts: queued, quota
        reserved, admitted; scheduled, started, running). kopf's indexes in `kw` are live:
        what is recorded is the run as it is then."""
        if key in self._due:
            return
        self._due[key] = asyncio.create_task(self._record_later(key, kw))

    async def _record_later(self, key: RunKey, kw: Mapping[str, Any]) -> None:
        try:
            await asyncio.sleep(RECORD_AFTER_S)
            while self._awaits_workload(key, kw):
                await asyncio.sleep(RECORD_AFTER_S)
        finally:
            self._due.pop(key, None)  # a change from here on is recorded by another pass
        try:
            await self.record_now(key, kw)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the next change of the run tries again
            log.warning("recording %s/%s failed: %s", key[0], key[1], e)

    def _awaits_workload(self, key: RunKey, kw: Mapping[str, Any]) -> bool:
        """A run with no status yet whose Kueue Workload has not come: wait for it (up to
        FIRST_RECORD_WITHIN_S after the run was created)."""
        tr = first_of(kw["taurun_idx"].get(key))
        if tr is None or key in self._written or recorded_status(tr) is not None:
            return False
        if first_of(kw["kueue_idx"].get(key)) is not None:
            return False
        created = parse_k8s_time(tr.get("metadata", {}).get("creationTimestamp"))
        if created is None:
            return False
        return (self.clock() - created).total_seconds() < FIRST_RECORD_WITHIN_S

    async def service_changed(self, key: RunKey) -> None:
        """A service's RayService or TauService changed: one pass RECORD_AFTER_S later for all
        the changes of that while (`serve.kube.KubeServe.reconcile`: switch to a generation that
        serves, then its status, written only when it differs)."""
        if key in self._due_services:
            return
        self._due_services[key] = asyncio.create_task(self._service_later(key))

    async def _service_later(self, key: RunKey) -> None:
        try:
            await asyncio.sleep(RECORD_AFTER_S)
        finally:
            self._due_services.pop(key, None)
        try:
            await self._io(self._service_pass, key)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the next change of the service tries again
            log.warning("service %s/%s: %s", key[0], key[1], e)

    def _service_pass(self, key: RunKey) -> None:
        from taugrid.serve.kube import KubeServe

        body = self.kube.get("TauService", key[1], key[0])
        if body is None:
            return
        write = KubeServe(kube=self.kube).reconcile(
            body, self.clock().isoformat().replace("+00:00", "Z")
        )
        if write is not None:
            self.kube.apply_status(write, FIELD_MANAGER)

    async def record_now(self, key: RunKey, kw: Mapping[str, Any], urgent: bool = False) -> None:
        """Write the run's status if it changed, in its turn among all runs' writes (`Turns`:
        one at a time, at most `status_writes_per_s` a second; `urgent`: before the others).
        What is written is the run as it is when its turn comes, so a run waits in the queue
        once: a change while it waits needs no second turn (at 10,000 runs, the queue held a
        turn per change, each costing a paced moment even when it had nothing left to write)."""
        await self._release_lost_worker(key, kw)
        await self._carry(key, kw)
        if self._to_write(key, kw) is None or (key in self._queued and not urgent):
            return
        self._queued.add(key)
        try:
            await self.turns.wait(urgent)
        finally:  # its turn came (a change from here on is another turn's), or it was cancelled
            self._queued.discard(key)
        try:
            if self._to_write(key, kw) is None:
                return
            await self.turns.pace()
            body = self._to_write(key, kw)  # the run as it is now
            if body is not None:
                self._written[key] = await self._io(self.kube.apply_status, body, FIELD_MANAGER)
        finally:
            self.turns.done()

    async def _release_lost_worker(self, key: RunKey, kw: Mapping[str, Any]) -> None:
        """A MultiKueue run whose worker was lost: its Job's stale pod counts zeroed (a RayJob:
        its deployment Suspended), so Kueue requeues it to another worker
        (`decide.lost_worker_release`)."""
        objs = self.objects(key, kw)
        if objs is None:
            return
        patch = D.lost_worker_release(objs.workload, objs.kueue)
        if patch is None or objs.workload is None:
            return
        meta = objs.workload["metadata"]
        log.info("run %s: its worker was lost; releasing it to Kueue for another", meta["name"])
        try:
            await self._io(
                self.kube.merge_patch,
                str(objs.workload.get("kind") or "Job"),
                meta["name"],
                meta["namespace"],
                patch,
                FIELD_MANAGER,
                True,
            )
        except TauError as e:
            log.warning("run %s: releasing it from a lost worker failed: %s", meta["name"], e)

    async def _carry(self, key: RunKey, kw: Mapping[str, Any]) -> None:
        """A MultiKueue run dispatched to a worker: the ConfigMaps its pods mount made there
        (`carry.Carrier`); again when it moves to another worker."""
        objs = self.objects(key, kw)
        if objs is None:
            self.carrier.forget(key)
            return
        worker = D.carry_to(objs.workload, objs.kueue)
        if objs.workload is None or worker is None or not self.carrier.needed(key, worker):
            return
        kind = str(objs.workload.get("kind") or "Job")
        try:
            made = await self._io(self.carrier.carry, key, kind, worker)
        except NotYet:  # MultiKueue makes the Job there in a moment
            self._tasks.append(asyncio.create_task(self._carry_later(key, CARRY_SOON_S)))
            return
        except TauError as e:  # tried again in a while (its pods wait for them, unchanged)
            log.warning("run %s: its ConfigMaps were not made on worker %s: %s", key[1], worker, e)
            self._tasks.append(asyncio.create_task(self._carry_later(key, CARRY_RETRY_S)))
            return
        if made:
            log.info("run %s: %d ConfigMap(s) made on worker %s", key[1], made, worker)

    async def _carry_later(self, key: RunKey, after: float) -> None:
        await asyncio.sleep(after)
        self._tasks = [t for t in self._tasks if not t.done()]
        await self.record_soon(key)

    def _to_write(self, key: RunKey, kw: Mapping[str, Any]) -> dict[str, Any] | None:
        """The status write the run needs now, or None (gone, or recorded already)."""
        objs = self.objects(key, kw)
        if objs is None:
            self._written.pop(key, None)
            return None
        objs = replace(objs, taurun=self._freshest(key, objs.taurun))
        new = compute_status(
            objs, self.problems, self.clock(), self.problem_since, self.gpu.use_of(key)
        )
        self.usage.note(key, objs.taurun, objs.kueue, new, self.clock())
        old = recorded_status(objs.taurun)
        if old is not None and same(old, new):
            return None
        return D.status_body("TauRun", objs.taurun, new)

    def _freshest(self, key: RunKey, indexed: dict[str, Any]) -> dict[str, Any]:
        """The index's TauRun, or the one the last status write returned while the index has
        not caught up with it (else each event of a burst computes from the status before that
        write, finds it different, and writes the same status again)."""
        mine = self._written.get(key)
        if mine is None:
            return indexed
        if _uid(mine) == _uid(indexed) and _version(mine) > _version(indexed):
            return mine
        self._written.pop(key, None)  # the index has it (or the run was made anew)
        return indexed

    # --- nodes --------------------------------------------------------------------------------
    async def node_changed(
        self, name: str, body: dict[str, Any] | None, kw: Mapping[str, Any]
    ) -> None:
        if body is None:
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = body
        before = self.problems.get(name, [])
        # a deleted node: the runs whose pods were on it are told so at once
        after = node_problems([body])[0].get(name, []) if body else [C.NODE_GONE]
        self.problems[name] = after
        if after and not before:
            self.problem_since[name] = k8s_time(self.clock())
        elif not after:
            self.problem_since.pop(name, None)
        if before != after:
            self.wake("remediation")
            for key in {tuple(k) for k in kw["node_runs_idx"].get(name, ())}:
                await self.record_now(key, kw, urgent=True)  # its pods may be moved off in a second
        elif body is not None and self._quarantine_relevant(body):
            self.wake("remediation")
        sig = self._capacity_signature()
        if sig != self._capacity_sig:
            self._capacity_sig = sig
            self.wake("platform")
            self.wake("quota")

    def _quarantine_relevant(self, body: Mapping[str, Any]) -> bool:
        view = R.node_view(body)
        return view.ours or bool(R.faults(view, self.cfg.remediation)) or V.validating(body)

    def _capacity_signature(self) -> tuple[Any, ...]:
        return tuple(
            sorted(
                (
                    n,
                    str((b.get("status") or {}).get("allocatable", {}).get(C.GPU_RESOURCE)),
                    P.healthy(R.node_view(b), self.cfg.remediation),
                    tuple(sorted((b.get("metadata") or {}).get("labels", {}).items())),
                )
                for n, b in self.nodes.items()
            )
        )

    async def reconcile_nodes(self) -> float | None:
        """Quarantine and release, as decided over every node now. Returns when to look again
        (the soonest release), or None."""
        cfg = self.cfg.remediation
        now = self.clock()
        views = {n: R.node_view(b) for n, b in self.nodes.items()}
        verdicts = R.decide(views.values(), cfg, now)
        soonest: float | None = None
        for d in verdicts.decisions:
            node = views[d.node]
            patch: dict[str, Any] | None = None
            if d.action == R.Action.quarantine:
                patch = R.quarantine_patch(node, d, now)
                log.warning(
                    "%squarantine %s: %s", "[dry-run] " if cfg.dry_run else "", d.node, d.why
                )
            elif d.action == R.Action.release:
                patch = R.release_patch(node, validate=cfg.validate_on_release)
                log.warning("%srelease %s: %s", "[dry-run] " if cfg.dry_run else "", d.node, d.why)
            elif d.action == R.Action.keep and d.mark_clear:
                patch = R.clear_seen_patch(now)
            elif d.action == R.Action.held_by_breaker:
                log.warning("hold %s: %s", d.node, d.why)
            if d.wait_s is not None:  # look again when its clear wait ends
                due = d.wait_s + 0.5
                soonest = due if soonest is None else min(soonest, due)
            if patch is None or cfg.dry_run:
                continue
            got = await self._io(self.kube.merge_patch, "Node", d.node, None, patch, FIELD_MANAGER)
            self.nodes[d.node] = slim(got)
            if d.action == R.Action.quarantine and cfg.evict_runs:
                await self.evict_runs(d.node)
        again = await self.validate_nodes(now)  # active checks under way: look again soon
        if again is not None:
            soonest = again if soonest is None else min(soonest, again)
        before = self.breaker
        self.breaker = verdicts
        if before is None or (
            before.breaker_open,
            before.limit,
            before.gpu_nodes,
            before.quarantined,
        ) != (verdicts.breaker_open, verdicts.limit, verdicts.gpu_nodes, verdicts.quarantined):
            self.wake("platform")
        return soonest

    async def validate_nodes(self, now: datetime) -> float | None:
        """Each node with the validating taint against its pool (`validation.py`): the taint
        lifted when it passes, the verdict kept on the node when it changed. Returns when to
        look again while a node's active checks run (or it waits to be tried again)."""
        tc = self._object("clusters", self.cfg.cluster_object) if self._indexes else None
        if tc is None:  # no declaration read yet: nothing to judge a node by (the next pass)
            return None
        again: float | None = None
        pools = {
            p.get("name"): G.PoolDeclaration.model_validate(p)
            for p in ((tc or {}).get("spec") or {}).get("pools") or []
        }
        xids: dict[str, list[dict[str, Any]]] = {}
        if any(V.validating(n) for n in self.nodes.values()):
            try:  # the XID events a client's validation counts too (NPD's, in default)
                events = await self._io(
                    lambda: self.kube.list(
                        "Event", "default", fields={"reason": G.XID_EVENT_REASON}
                    )
                )
                xids = G.xid_events_by_node(events)
            except TauError as e:
                log.warning(
                    "XID events not read (%s): only the XID condition is checked", e.message
                )
        for v in V.decide(self.nodes, pools, now, xids):
            pool = pools.get(v.verdict.pool or "")
            if v.verdict.passed and pool is not None and pool.active:  # the active tier next
                node = self.nodes[v.node]
                wait = self.active.retry_in(node, now) or ACTIVE_POLL_S
                found = await self.active.step(node, pool, now)
                if found is None:  # its checks run (or it waits to be tried again): taint kept
                    again = wait if again is None else min(again, wait)
                    continue
                v = V.with_active(self.nodes[v.node], v.verdict, found)
            if v.verdict.passed:
                log.warning("validated %s: %d checks passed", v.node, len(v.verdict.findings))
            elif v.patch is not None:
                said = "; ".join(f"{f.check}: {f.message}" for f in v.verdict.failed())
                log.warning("validation of %s failed (kept from work): %s", v.node, said)
            if v.patch is None or self.cfg.remediation.dry_run:
                continue
            try:
                got = await self._io(
                    self.kube.merge_patch, "Node", v.node, None, v.patch, FIELD_MANAGER
                )
            except TauError as e:  # changed meanwhile (a 409): the next pass sees it as it is
                log.warning("validation of %s not written: %s", v.node, e.message)
                continue
            self.nodes[v.node] = slim(got)
        return again

    async def evict_runs(self, node: str) -> None:
        """Evict the TauGrid runs' pods from a quarantined node (other pods are not ours)."""
        pods = await self._io(
            self.kube.list, "Pod", None, {C.LABEL_RUN_ID: None}, {"spec.nodeName": node}
        )
        for p in pods:
            meta = p["metadata"]
            if p.get("status", {}).get("phase") in ("Succeeded", "Failed") or meta.get(
                "deletionTimestamp"
            ):
                continue
            log.warning(
                "evict %s/%s from quarantined node %s", meta["namespace"], meta["name"], node
            )
            await self._io(self.kube.evict, meta["name"], meta["namespace"])

    # --- quota grants and platform status: gather -> decide (pure) -> apply -----------------------
    async def reconcile_quota(self) -> float | None:
        if not self._indexes:
            return None  # the watches have not filled the indexes yet: woken when they have
        o = self._objects
        objects = D.QuotaObjects(
            o("quotarequests"),
            o("clusterqueues"),
            o("localqueues"),
            o("resourceflavors"),
            o("cohorts"),
            o("workspaces", self.cfg.system_namespace),
            self._object("clusters", self.cfg.cluster_object),
            dict(self.nodes),
        )
        decision = D.quota(objects, self.clock())
        await self.apply(decision)
        return decision.wake_in_s

    async def reconcile_platform(self) -> float | None:
        if not self._indexes:
            return None
        o, cfg = self._objects, self.cfg
        objects = D.PlatformObjects(
            o("workspaces", cfg.system_namespace),
            o("localqueues"),
            o("clusterqueues"),
            o("persistentvolumeclaims"),
            self._object("clusters", cfg.cluster_object),
            dict(self.nodes),
        )
        decision = D.platform(objects, self.breaker, cfg.remediation, self.clock())
        await self.apply(decision)
        return decision.wake_in_s

    async def heartbeat(self) -> float | None:
        """TauCluster.status.controllerHeartbeat, every CONTROLLER_HEARTBEAT_S, with its own field
        manager: while it is recent, clients read runs' TauRun.status instead of every object."""
        body = D.heartbeat_body(self.cfg.cluster_object, self.clock())
        try:
            await self._io(self.kube.apply_status, body, C.FIELD_MANAGER_HEARTBEAT)
        except TauError as e:  # no TauCluster yet (the platform is being installed): next time
            log.debug("heartbeat not written: %s", e)
        return C.CONTROLLER_HEARTBEAT_S

    async def apply(self, decision: D.Decision) -> None:
        for w in decision.writes:
            if w.note:
                log.info("%s", w.note)
            fn = self.kube.apply if w.verb == "apply" else self.kube.apply_status
            await self._io(fn, w.body, FIELD_MANAGER)


def run(
    cfg: ControllerConfig,
    context: str | None = None,
    in_cluster: bool = False,
    standalone: bool = False,
    liveness: str | None = None,
    stop: threading.Event | None = None,
    ready: threading.Event | None = None,
) -> Controller:
    """Run until stopped (SIGINT/SIGTERM, or `stop`)."""
    kube = Kube(context, in_cluster=in_cluster)
    ctl = Controller(cfg, kube)
    install_quiet_toggles()
    install_slimmed_watches()
    # kopf says "Indexer ... succeeded" for every event of every object (5,000 lines when it
    # starts among 1,000 runs): its failures still show
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    coro = kopf.operator(
        registry=ctl.registry,
        clusterwide=True,
        standalone=standalone,
        peering_name=PEERING,
        liveness_endpoint=liveness,
        stop_flag=stop,
        ready_flag=ready,
    )
    asyncio.run(coro)
    return ctl
