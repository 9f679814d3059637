"""The kube backend: direct submission to a cluster's API server.

`prepare` resolves the run against the cluster's own profiles (the TauCluster object) and the
workspaces the user may use. `submit` server-side applies (field manager `tau`) a TauRun first
(the run's record in the cluster and the owner of everything else), then the code ConfigMap and
the RayJob/Job, each owned by the TauRun, so deleting the TauRun garbage-collects them; the
workload stays suspended until Kueue admits it. Re-applying the same run id changes nothing.
A local evidence record (with a `KubeHandle`) keeps what was submitted. `observe` reads one LIST
per kind per namespace for any number of runs, and status is computed from that.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from taugrid.api import constants as C
from taugrid.api.errors import EXIT_NOT_ADMITTED, EXIT_PLATFORM, EXIT_USAGE, TauError
from taugrid.api.evidence import KubeHandle, PulumiHandle, RunRecord
from taugrid.api.naming import owner_reference
from taugrid.api.observations import ClusterFacts, Observations
from taugrid.api.vocabulary import TERMINAL, Phase
from taugrid.kube.client import CONTEXT_ENV, Forbidden, KubeAPI
from taugrid.kube.discovery import Connected, Discovery
from taugrid.kube.facts import (
    admitted,
    current_status,
    heartbeat_of,
    namespace_facts,
    node_problems,
)
from taugrid.runs.backends.base import Backend, Say, SubmitOptions, Template
from taugrid.runs.evidence import RunDir, ensure_writable, now_iso
from taugrid.runs.paths import runs_root, write_atomic

if TYPE_CHECKING:
    from taugrid.api.profiles import WorkspaceRef
    from taugrid.api.vocabulary import RunStatus
    from taugrid.runs.backends.kube.volume import VolumeRecord
    from taugrid.runs.prepare import PreparedRun, RunRequest

SUBMITTING = "submitting.jsonl"  # config/manifests/: the full objects until the cluster has them


def submitting(run: Path) -> Path:
    """A run's objects kept until the cluster has them (an older tau's YAML name, if that is
    the one there)."""
    manifests = run / "config" / "manifests"
    new = manifests / SUBMITTING
    old = manifests / "submitting.yaml"
    return old if not new.exists() and old.exists() else new


class KubeBackend(Connected, Template):
    name = "kube"

    # TauGrid's helpers in one shared ConfigMap per namespace, not in every run's (~40 KB a run
    # less for the API server and etcd); a backend whose objects are owned by something that
    # deletes them (a run's stack) carries its own copy
    shared_helpers = True

    def __init__(self, context: str | None = None, kube: KubeAPI | None = None) -> None:
        self._context = context or os.environ.get(CONTEXT_ENV) or None
        self._kube = kube
        self._discovery: Discovery | None = None
        self._sent_owner = False  # this submission's TauRun (or stack) reached the cluster
        self._shared_sent: set[tuple[str, str]] = set()  # shared objects this process made sure of
        self._kept: dict[tuple[str, ...], Any] = {}  # read once per backend (see _prefetch)

    def workspace(self, name: str | None) -> WorkspaceRef:
        return self.discovery.workspace(name)

    # --- submitting -------------------------------------------------------------------------------
    def prepare(self, request: RunRequest) -> PreparedRun:
        from taugrid.runs.prepare import prepare

        snap = self.discovery.snapshot()
        if request.workspace is None and request.loaded.manifest.policy.workspace is None:
            usable = self.discovery.usable_workspaces(snap)
            if len(usable) == 1:  # the one workspace this user may submit to
                from dataclasses import replace

                request = replace(request, workspace=usable[0].name)
        return prepare(request, snap)

    def check_options(self, prepared: PreparedRun, options: SubmitOptions) -> None:
        if options.python or options.ray_pip:
            raise TauError("--python and --ray-pip are for local runs", exit_code=EXIT_USAGE)
        self._prefetch(prepared)
        self.check_fits(prepared)

    def _prefetch(self, prepared: PreparedRun) -> None:
        """What the next steps read, in one round trip (each step still runs in its order): the
        queue objects (check_fits), the run's TauRun (already_submitted) and who the user is
        (the TauRun's stamp)."""
        from concurrent.futures import ThreadPoolExecutor

        kube, ns = self.kube, prepared.resolved.namespace
        calls: dict[str, Any] = {
            "LocalQueue": lambda: kube.list("LocalQueue", ns),
            "ClusterQueue": lambda: kube.list("ClusterQueue"),
            "Cohort": lambda: kube.list("Cohort"),
            "TauRun": lambda: kube.get("TauRun", prepared.run_id, ns),
            "whoami": kube.whoami,
        }
        if prepared.request.run_id is None:
            del calls["TauRun"]  # an id drawn for this submission: nothing can have it yet
        # Who the user is and the queues' definitions hold for all the runs this backend
        # submits (one for `tau run`; one per worker of `submit_many`): read once.
        kept = self._kept
        keys = {
            "LocalQueue": ("LocalQueue", ns),
            "ClusterQueue": ("ClusterQueue",),
            "Cohort": ("Cohort",),
            "whoami": ("whoami",),
        }
        todo = [name for name in calls if keys.get(name) not in kept]

        def one(name: str) -> Any:
            try:
                return calls[name]()
            except TauError as e:  # Forbidden included: the step that needs it raises it
                return e

        if len(todo) > 1:
            with ThreadPoolExecutor(max_workers=len(todo)) as pool:
                got = dict(zip(todo, pool.map(one, todo), strict=True))
        else:
            got = {name: one(name) for name in todo}
        for name, value in got.items():
            if name in keys and not isinstance(value, BaseException):
                kept[keys[name]] = value
        self._pre = {name: got[name] if name in got else kept[keys[name]] for name in calls}

    def _prefetched(self, name: str, fetch: Any) -> Any:
        """A prefetched answer (raised again if it was an error), else fetched now."""
        pre = getattr(self, "_pre", {})
        if name not in pre:
            return fetch()
        got = pre.pop(name)
        if isinstance(got, BaseException):
            raise got
        return got

    def check_fits(self, prepared: PreparedRun) -> None:
        """Refuse, before anything is written, a run its queue can never admit (above what the
        ClusterQueue may use at most: nominal quota plus borrowing), with the numbers. Skipped
        when the queue or its cohorts cannot be read: Kueue then says it in the run's status."""
        from taugrid.kube import ceiling

        ns, lq = prepared.resolved.namespace, prepared.resolved.queue
        read: dict[str, list[dict[str, Any]]] = {}
        for kind, ns_ in (("LocalQueue", ns), ("ClusterQueue", None), ("Cohort", None)):
            try:
                read[kind] = self._prefetched(kind, lambda k=kind, n=ns_: self.kube.list(k, n))
            except TauError:
                return  # not readable (or not served): Kueue says it in the run's status
        local = next((q for q in read["LocalQueue"] if q["metadata"]["name"] == lq), None)
        cq = ((local or {}).get("spec") or {}).get("clusterQueue")
        limits = ceiling.ceilings(cq, read["ClusterQueue"], read["Cohort"]) if cq else None
        if cq is None or limits is None:
            return
        why = ceiling.never_admittable(ceiling.podsets(prepared.objects()), limits, cq)
        if why is not None:
            raise TauError(
                f"{prepared.run_id} is not submitted: {why}",
                exit_code=EXIT_NOT_ADMITTED,
                hint=f"tau quota request --workspace {prepared.resolved.workspace.name}"
                " (ask for more), or lower compute in tau.yaml",
            )

    def already_submitted(self, prepared: PreparedRun, say: Say) -> RunDir | None:
        """Idempotent by run id: the same run again changes nothing (its record is returned;
        made here if it was submitted from another machine); the same id with another config
        is refused."""
        if prepared.request.run_id is None:
            return None  # an id drawn for this submission: `send` creates it, never merges
        ns = prepared.resolved.namespace
        try:
            existing = self._prefetched(
                "TauRun", lambda: self.kube.get("TauRun", prepared.run_id, ns)
            )
        except Forbidden as e:
            raise self._forbidden(e, prepared) from None
        if existing is None:
            return None
        from taugrid.api.crds import TauRunSpec, read_spec

        if read_spec(TauRunSpec, existing).configHash != prepared.manifest.config_hash():
            raise TauError(
                f"run {prepared.run_id} already exists in namespace {ns} with another config",
                exit_code=EXIT_USAGE,
                hint="leave out --run-id to get a new run id",
            )
        say(f"{prepared.run_id} is already submitted; nothing changed")
        rd = RunDir(runs_root() / prepared.run_id)
        if rd.record_path.is_file():
            return rd
        handle = self.handle(prepared, sent=True)
        handle = handle.model_copy(update={"uid": (existing.get("metadata") or {}).get("uid")})
        return self._write_record(prepared, handle, with_objects=False)

    def handle(self, prepared: PreparedRun, sent: bool) -> KubeHandle | PulumiHandle:
        """Where the run is (the pulumi backend's handle names its stack too)."""
        cluster = self.discovery.cluster_name
        return KubeHandle(
            context=self.kube.context,
            namespace=prepared.resolved.namespace,
            cluster=cluster,
            queue=prepared.resolved.queue,
            sent=sent,
        )

    def record(self, prepared: PreparedRun, options: SubmitOptions, say: Say) -> RunDir:
        self._sent_owner = False
        if (runs_root() / prepared.run_id / "run.json").is_file():  # never written over
            raise TauError(
                f"run {prepared.run_id} exists on this machine already: nothing was sent",
                exit_code=EXIT_USAGE,
                hint="submit again (a new id is drawn)"
                if prepared.request.run_id is None
                else f"choose another --run-id (tau run status {prepared.run_id} shows that one)",
            )
        return self._write_record(prepared, self.handle(prepared, sent=False), with_objects=True)

    def start(self, run: RunDir, prepared: PreparedRun, options: SubmitOptions, say: Say) -> None:
        from taugrid.runs.prepare import publish_inputs

        publish_inputs(prepared, say)  # before anything is sent: the run finds its inputs
        self.send(run, prepared)
        say(
            f"submitted {prepared.run_id} to {self.kube.server} (namespace "
            f"{prepared.resolved.namespace}, queue {prepared.resolved.queue}); Kueue admits it "
            "when there is quota"
        )

    def send(self, run: RunDir, prepared: PreparedRun | None = None) -> None:
        """Server-side apply the TauRun, then its objects, each owned by it; then the record
        says the cluster has the run. From `prepared`, or (a resent interrupted submission)
        from the objects the record kept."""
        from taugrid.api.yamlio import load_all

        if prepared is not None:
            taurun, objects = (
                prepared.taurun(),
                prepared.objects(shared_helpers=self.shared_helpers),
            )
        else:
            taurun, *objects = load_all(submitting(run.path).read_text())
        fresh = prepared is not None and prepared.request.run_id is None
        try:
            if fresh:
                assert prepared is not None
                owner = self._create(taurun, prepared)
            else:
                owner = self.kube.apply(self.stamped(taurun))
        except Forbidden as e:
            if prepared is None:
                raise
            raise self._forbidden(e, prepared) from None
        self._sent_owner = True
        ref = owner_reference("TauRun", taurun["metadata"]["name"], owner["metadata"]["uid"])
        from taugrid.runs.render import is_shared

        shared = [o for o in objects if is_shared(o)]
        objects = [o for o in objects if not is_shared(o)]
        for obj in objects:
            obj["metadata"]["ownerReferences"] = [ref]
        for obj in shared:  # before the run's: a pod finds what it mounts (once per process)
            self._ensure_shared(obj)
        # a run created just now has no objects yet: they are created (a plain POST costs the
        # API server less than a server-side apply); one found there all the same (a resent
        # submission's) is applied over
        put = self._create_or_apply if fresh else self.kube.apply
        if len(objects) > 1:  # independent of each other (the workload waits, suspended): at once
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=len(objects)) as pool:
                list(pool.map(put, objects))
        else:
            for obj in objects:
                put(obj)
        run.update_handle(sent=True, uid=owner["metadata"].get("uid"))
        with contextlib.suppress(FileNotFoundError):
            submitting(run.path).unlink()

    def _ensure_shared(self, obj: dict[str, Any]) -> None:
        """A namespace's shared object (the helpers ConfigMap, named by its content): created
        if it is not there yet; found there, it is the same (immutable), and left as it is."""
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if key not in self._shared_sent:
            self.kube.create(obj)  # None: it is there already
            self._shared_sent.add(key)

    def _create_or_apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.kube.create(obj) or self.kube.apply(obj)

    def _create(self, taurun: dict[str, Any], prepared: PreparedRun) -> dict[str, Any]:
        """A run whose id was drawn for this submission is created, not applied: one round trip
        fewer than looking first, and a clash of drawn ids (one in tens of millions) is refused
        instead of merged into another run."""
        owner = self.kube.create(self.stamped(taurun))
        if owner is None:
            raise TauError(
                f"run id {prepared.run_id} is taken in namespace "
                f"{prepared.resolved.namespace} (two drawn ids clashed): nothing was "
                "sent",
                exit_code=EXIT_PLATFORM,
                hint="submit again: a new id is drawn",
            )
        return owner

    def stamped(self, taurun: dict[str, Any]) -> dict[str, Any]:
        """The TauRun with who submits it, as the cluster knows them (`--mine`, from any
        machine: the local user@host says nothing there)."""
        ann = taurun["metadata"].setdefault("annotations", {})
        ann[C.ANN_CLUSTER_USER] = self._prefetched("whoami", self.kube.whoami)
        return taurun

    def start_failed(self, run: RunDir, error: BaseException) -> None:
        """Nothing reached the cluster: the record goes too (the error says why). Part of it
        did: the record stays, not sent, and the error says how to finish or drop it."""
        if not self._sent_owner:
            import shutil

            shutil.rmtree(run.path, ignore_errors=True)
            return
        if isinstance(error, TauError):
            error.hint = (
                f"{run.run_id} is recorded but not completely sent: `tau run attach "
                f"{run.run_id}` sends it again, `tau run cancel {run.run_id}` drops it"
            )

    def _forbidden(self, e: Forbidden, prepared: PreparedRun) -> TauError:
        try:
            usable = [w.name for w in self.discovery.usable_workspaces()]
        except TauError:
            usable = []
        hint = (
            f"workspaces you may use: {', '.join(usable)} (policy.workspace or --workspace)"
            if usable
            else "you may use no workspace here: ask the platform team to add you to one"
        )
        return TauError(
            f"{e.message} (workspace {prepared.resolved.workspace.name}, as {self.kube.user})",
            exit_code=EXIT_PLATFORM,
            hint=hint,
        )

    def _write_record(
        self, prepared: PreparedRun, handle: KubeHandle | PulumiHandle, with_objects: bool
    ) -> RunDir:
        """The local evidence record of a cluster run: what is submitted, where (and, until the
        cluster has it, the objects in full, so an interrupted submission can be sent again)."""
        from taugrid.api.yamlio import dump_all, dump_json_lines
        from taugrid.runs.render import is_shared

        root = runs_root()
        ensure_writable(root)
        rd = RunDir(root / prepared.run_id)
        (rd.path / "config" / "manifests").mkdir(parents=True, exist_ok=True)
        (rd.path / "logs").mkdir(exist_ok=True)
        write_atomic(rd.path / "config" / "tau.yaml", prepared.loaded.text.encode())
        submitted = [prepared.taurun(), *prepared.objects(shared_helpers=self.shared_helpers)]
        if with_objects:
            write_atomic(
                rd.path / "config" / "manifests" / SUBMITTING, dump_json_lines(submitted).encode()
            )
        for obj in submitted:
            if obj["kind"] == "ConfigMap":  # the code: recorded by digest, not again in full
                what = (
                    obj["metadata"]["name"]
                    if is_shared(obj)  # TauGrid's helpers
                    else prepared.bundle.digest
                )
                obj["data"] = {"...": f"{len(obj.get('data', {}))} files, {what}"}
        write_atomic(
            rd.path / "config" / "manifests" / "submitted.yaml", dump_all(submitted).encode()
        )
        rd.create(
            prepared.new_record(handle, created_at=now_iso()),
            reason=f"submitted to {self.kube.server}",
        )
        return rd

    # --- observing --------------------------------------------------------------------------------
    def observe(self, runs: Sequence[RunDir], now: float | None = None) -> list[Observations]:
        """TauRun.status first: one LIST of TauRuns per namespace and the controller's heartbeat
        (one GET), at once; a run whose TauRun.status is current (`facts.current_status`) is
        answered from it. For the others, one LIST per kind per namespace (and one of nodes),
        all at once, for any number of runs; then each run's facts are picked from those lists."""
        t = now if now is not None else time.time()
        records = [rd.read_record() for rd in runs]
        by_ns: dict[str, list[RunRecord]] = {}
        for rec in records:
            by_ns.setdefault(_handle(rec).namespace, []).append(rec)
        lists, beat = self._tauruns_and_heartbeat(by_ns)
        facts: dict[str, ClusterFacts] = {}
        for ns, recs in by_ns.items():
            tauruns = {o["metadata"]["name"]: o for o in lists[("TauRun", ns)] or []}
            for rec in recs:
                obj = tauruns.get(rec.run_id)
                if obj is not None:
                    self.check_same(rec, obj)
                st = current_status(obj, beat, t) if obj is not None else None
                if st is not None:
                    facts[rec.run_id] = ClusterFacts(
                        taurun=True, workload=True, recorded=st, current=True, heartbeat=beat
                    )
        rest: dict[str, list[RunRecord]] = {}
        for ns, recs in by_ns.items():
            todo = [r for r in recs if r.run_id not in facts]
            if todo:
                rest[ns] = todo
        if rest:
            facts.update(self._observe_objects(rest, lists))
        seen = [
            Observations(
                record=rec,
                history=rd.read_history(),
                now=t,
                owner_alive=None,
                cluster=facts[rec.run_id],
                evidence=str(rd.path),
            )
            for rd, rec in zip(runs, records, strict=True)
        ]
        if len(seen) > PROGRESS_UP_TO:  # a listing: the cluster's facts only
            return seen
        return self._with_progress(seen)

    def _tauruns_and_heartbeat(
        self, by_ns: dict[str, list[RunRecord]]
    ) -> tuple[dict[tuple[str, str | None], list[dict[str, Any]] | None], str | None]:
        """The runs' TauRuns (as ("TauRun", namespace) lists) and the controller's heartbeat,
        read at once."""
        # A few runs of a namespace: a GET each (what one run's status costs does not grow
        # with the namespace's runs); more: one LIST of the namespace's TauRuns.
        first: dict[tuple[str, str | None], dict[str, str] | None] = {}
        for ns, recs in by_ns.items():
            if len(recs) <= GET_EACH_UP_TO:
                first.update({(f"TauRun/{r.run_id}", ns): None for r in recs})
            else:
                first[("TauRun", ns)] = None
        first[("TauCluster", None)] = None
        lists = self._list_all(first)
        beat = heartbeat_of(next(iter(lists.pop(("TauCluster", None)) or []), None))
        got: dict[str, list[dict[str, Any]]] = {}
        for (kind, where), items in list(lists.items()):
            if kind.startswith("TauRun/"):
                del lists[(kind, where)]
                got.setdefault(str(where), []).extend(items or [])
        for where, items in got.items():
            lists[("TauRun", where)] = items
        return lists, beat

    def _with_progress(self, seen: list[Observations]) -> list[Observations]:
        """Runs that run or ended: their progress from their record on the workspace volume
        (one GET each through its file server, at once): metrics, the last step, checkpoints,
        outputs, sealed. A read that fails says why in the signals; it fails nothing else."""
        from concurrent.futures import ThreadPoolExecutor
        from dataclasses import replace

        from taugrid.kube.files import VolumeFiles
        from taugrid.runs.status import effective_phase

        def read(o: Observations) -> Observations:
            rec, c = o.record, o.cluster
            assert c is not None
            phase, _ = effective_phase(o)
            if phase != Phase.Running and phase not in TERMINAL:
                return o  # nothing ran yet
            files = VolumeFiles(
                self.kube, _handle(rec).namespace, rec.workspace, timeout_s=PROGRESS_TIMEOUT_S
            )  # a status never waits long
            try:
                got = files.progress(
                    C.run_volume_path(rec.run_id), rec.checkpoint_subdir, rec.output_subdir
                ).skewed(o.now)
            except TauError as e:
                return replace(o, cluster=replace(c, progress_note=_note(e)))
            return replace(
                o,
                cluster=replace(c, progress=got),
                metric_rows=got.metric_rows,
                last_step=got.last_step,
                last_metric_ts=got.last_metric_ts,
                last_log_ts=got.last_log_ts,
                checkpoints=got.checkpoints,
                newest_checkpoint=got.newest_checkpoint,
                sealed=got.sealed,
                outputs=got.outputs,
                latest_metrics={k: v for k, v in got.latest_metrics.items() if v is not None},
            )

        with ThreadPoolExecutor(max_workers=min(8, len(seen)) or 1) as pool:
            return list(pool.map(read, seen))

    def _observe_objects(
        self,
        by_ns: dict[str, list[RunRecord]],
        lists: dict[tuple[str, str | None], list[dict[str, Any]] | None],
    ) -> dict[str, ClusterFacts]:
        """The runs' facts from their objects (`lists` holds the TauRuns already read)."""
        managed = {C.LABEL_MANAGED_BY: C.MANAGED_BY_VALUE}
        wanted: dict[tuple[str, str | None], dict[str, str] | None] = {("Node", None): None}
        for ns, recs in by_ns.items():
            kinds = {r.workload_kind for r in recs}
            wanted.update({("Workload", ns): None, ("Pod", ns): None, ("Event", ns): None})
            if "rayjob" in kinds:
                wanted[("RayJob", ns)] = managed
            if "job" in kinds:
                wanted[("Job", ns)] = managed
        # Queue positions: one visibility call per LocalQueue, asked with the LISTs for the
        # queues the records name (a run not admitted yet is the common reason to be here).
        queues = {
            (ns, r.handle.queue)
            for ns, recs in by_ns.items()
            for r in recs
            if isinstance(r.handle, KubeHandle) and r.handle.queue
        }
        wanted.update({(f"Pending/{q}", ns): None for ns, q in queues})
        lists = {**lists, **self._list_all(wanted)}
        pending: dict[tuple[str, str], list[dict[str, Any]] | str] = {
            (str(ns), kind.partition("/")[2]): got if isinstance(got, (list, str)) else []
            for (kind, ns), got in lists.items()
            if kind.startswith("Pending/")
        }
        nodes, nodes_visible = node_problems(lists[("Node", None)])
        # ... and for waiting workloads of another queue (older records name none).
        waiting = {
            (ns, str((w.get("spec") or {}).get("queueName")))
            for ns in by_ns
            for w in lists.get(("Workload", ns)) or []
            if (w.get("spec") or {}).get("queueName") and not admitted(w)
        }
        pending.update({key: self.kube.pending(*key) for key in sorted(waiting - set(pending))})
        facts: dict[str, ClusterFacts] = {}
        for ns, recs in by_ns.items():
            facts.update(namespace_facts(ns, recs, lists, nodes, nodes_visible, pending))
        return facts

    def _list_all(
        self,
        wanted: dict[tuple[str, str | None], dict[str, str] | None],
        tolerate: bool = False,
    ) -> dict[tuple[str, str | None], list[dict[str, Any]] | None]:
        """The LISTs concurrently (each is a round trip; ("TauCluster", None) is a GET of the
        TauCluster and ("TauRun/ID", ns) one of a TauRun, each as a list of at most one). None:
        forbidden (nodes, the TauCluster) or not
        served (Kueue's Workloads); every other failure is the command's error."""
        from concurrent.futures import ThreadPoolExecutor

        kube = self.kube

        def one(key: tuple[str, str | None]) -> list[dict[str, Any]] | None:
            kind, ns = key
            try:
                if kind.startswith("Pending/"):
                    return kube.pending(str(ns), kind.partition("/")[2])  # type: ignore[return-value]
                if kind == "TauCluster" or kind.startswith("TauRun/"):
                    kind, _, name = kind.partition("/")
                    got = kube.get(kind, name or C.CLUSTER_OBJECT, ns)
                    return [got] if got is not None else []
                return kube.list(kind, ns, wanted[key])
            except Forbidden:
                if tolerate or kind in ("Node", "TauCluster"):
                    return None
                raise
            except TauError:
                if kind == "Workload":
                    return None
                raise

        if os.environ.get("TAU_EXP_SEQ") and len(wanted) <= 2:
            results = [one(k) for k in wanted]
        else:
            with ThreadPoolExecutor(max_workers=min(8, len(wanted))) as pool:
                results = list(pool.map(one, wanted))
        return dict(zip(wanted, results, strict=True))

    def changes(self, runs: Sequence[RunDir]) -> Iterator[None]:
        """Once now, then once per burst of changes to the runs' objects (the watch API on
        workloads, Kueue Workloads, pods and TauRuns of their namespaces), and at least every
        PROGRESS_EVERY_S: a run's progress is in its record on the volume, which no watch sees."""
        feed = self.feed(runs)
        yield None
        while True:
            feed.wait(PROGRESS_EVERY_S)
            yield None

    def feed(self, runs: Sequence[RunDir]) -> ChangeFeed:
        watches: set[tuple[str, str]] = set()
        for rec in (rd.read_record() for rd in runs):
            ns = _handle(rec).namespace
            workload = "RayJob" if rec.workload_kind == "rayjob" else "Job"
            watches |= {(workload, ns), ("Workload", ns), ("Pod", ns), ("TauRun", ns)}
        return ChangeFeed(self.kube, sorted(watches))

    # --- the record on the workspace volume --------------------------------------------------
    def record_source(self, run: RunDir) -> VolumeRecord:
        from taugrid.runs.backends.kube.volume import VolumeRecord

        return VolumeRecord(self.kube, run.read_record())

    # --- resume ---------------------------------------------------------------------------------
    def newest_checkpoint(self, run: RunDir) -> str | None:
        """The parent's checkpoints are on the workspace PVC, which tau cannot read from here: the
        child's pod resolves "the newest complete one" when it starts (tau_launch.py), and fails
        clearly if there is none."""
        rec = run.read_record()
        return f"{C.run_dir(rec.run_id)}/{rec.checkpoint_subdir}/{C.NEWEST_CHECKPOINT}"

    def record_child(self, parent: RunDir, child_id: str) -> None:
        """Lineage in the parent's TauRun too (an annotation with its own field manager, so
        tau's apply of the parent's spec is untouched)."""
        rec = parent.read_record()
        body = {
            "apiVersion": C.API_VERSION,
            "kind": "TauRun",
            "metadata": {
                "name": rec.run_id,
                "namespace": _handle(rec).namespace,
                "annotations": {C.ANN_RESUMED_BY: child_id},
            },
        }
        with contextlib.suppress(TauError):  # the parent's TauRun may be gone: local lineage stays
            self.kube.apply(body, manager="tau-lineage")

    # --- the rest ---------------------------------------------------------------------------------
    def check_same(self, rec: RunRecord, taurun: dict[str, Any] | None = None) -> None:
        """Refuse a TauRun of the run's name that is another run than the one recorded here (a
        context that reaches another cluster, or a cluster made anew): nothing of it is shown
        or cancelled. `taurun`: the one already read (else one GET; none there: nothing to
        compare)."""
        from taugrid.kube.facts import other_run

        h = _handle(rec)
        if taurun is None:
            taurun = self.kube.get("TauRun", rec.run_id, h.namespace)
            if taurun is None:
                return
        why = other_run(rec, taurun)
        if why is None:
            return
        here = f"context {self.kube.context!r} ({self.kube.server})"
        was = f"context {h.context!r}" if h.context else "another context"
        cluster = getattr(h, "cluster", None)
        if cluster:
            was += f", cluster {cluster}"
        raise TauError(
            f"{rec.run_id}: the TauRun of that name in namespace {h.namespace} through {here} "
            f"is another run ({why}); this run was submitted with {was}",
            exit_code=EXIT_PLATFORM,
            hint="pass --context with a kubeconfig context that reaches the cluster it was "
            "submitted to",
        )

    def logs(self, run: RunDir, out: TextIO) -> None:
        self.check_same(run.read_record())
        self._logs(run, out, follow=False)

    def follow(self, run: RunDir, out: TextIO, err: TextIO, *, transitions: bool = True) -> Phase:
        """The driver's log as it is written (reconnecting), and each change of phase with its
        cause, until the run ends. Without a log from the cluster, the phases alone."""
        from taugrid.runs.status import compute

        seen, said, log_ok = 0, "", True
        feed = self.feed([run])  # look again when the run's objects change, not every second
        while True:
            st = compute(self.observe([run])[0])
            line = f"[{st.phase.lower()}] {st.summary}"
            if transitions and line != said:
                err.write(line + "\n")
                err.flush()
                said = line
            if st.phase in TERMINAL:
                run.record_end(st)  # the local record ends too, sealed
                return st.phase
            if log_ok and st.phase == Phase.Running:
                try:
                    seen = self._logs(run, out, follow=True, skip=seen)
                except TauError as e:
                    log_ok = False
                    err.write(f"note: {_log_note(e.message)}; following the status only\n")
                    err.flush()
                feed.wait(FOLLOW_SETTLE_S)  # the log ended: its pod's end is the next change
                continue
            feed.wait(FOLLOW_FALLBACK_S)

    def _driver_pod(self, rec: RunRecord) -> tuple[str, str] | None:
        """(pod, container) that runs the entrypoint: the Job's pod, or a RayJob's head."""
        ns = _handle(rec).namespace
        pods = self.kube.list("Pod", ns, {C.LABEL_RUN_ID: rec.run_id})
        if rec.workload_kind == "rayjob":
            pods = [
                p
                for p in pods
                if (p["metadata"].get("labels") or {}).get("ray.io/node-type") == "head"
            ]
        # a multi-node torchrun job's driver is node 0 (rank 0 prints; its pods start together)
        first = [
            p for p in pods if (p["metadata"].get("labels") or {}).get(COMPLETION_INDEX) == "0"
        ]
        pods = first or pods
        pods.sort(key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
        if not pods:
            return None
        pod = pods[-1]
        return pod["metadata"]["name"], pod["spec"]["containers"][0]["name"]

    def _logs(self, run: RunDir, out: TextIO, follow: bool, skip: int = 0) -> int:
        """The driver pod's log; once the run has ended and its pods are gone (or their logs are),
        the copy the launcher kept on the workspace volume, through a reader job."""
        rec = run.read_record()
        ns = _handle(rec).namespace
        found = self._driver_pod(rec)
        pvc_path = f"{C.run_dir(rec.run_id)}/logs/driver.log"
        if found is None:
            if not follow and self._ended(run):
                return self._read_volume(rec, pvc_path, out)
            raise TauError(
                f"no pod of {rec.run_id} runs now (not started yet, or gone): its log is "
                f"kept on the workspace PVC at {pvc_path}",
                exit_code=EXIT_PLATFORM,
                hint=f"tau run status {rec.run_id} says where it is",
            )
        pod, container = found
        n = 0
        try:
            for line in self.kube.log_lines(pod, ns, container, follow=follow):
                n += 1
                if n > skip:
                    out.write(line if line.endswith("\n") else line + "\n")
                    out.flush()
        except TauError as e:
            if n == 0 and not follow and self._ended(run):
                _say(
                    f"the log of pod {pod} is not available from the cluster "
                    f"({_log_note(e.message)})"
                )
                return self._read_volume(rec, pvc_path, out)
            raise TauError(
                f"the log of pod {pod} is not available from the cluster ({_log_note(e.message)}); "
                f"the run also keeps it on the workspace PVC at {pvc_path}",
                exit_code=EXIT_PLATFORM,
            ) from None
        return max(n, skip)

    def _ended(self, run: RunDir) -> bool:
        from taugrid.runs.status import effective_phase

        return effective_phase(self.observe([run])[0])[0] in TERMINAL

    def _read_volume(self, rec: RunRecord, path: str, out: TextIO) -> int:
        """The launcher's copy of the log on the workspace volume, through its file server."""
        from taugrid.runs.backends.kube.volume import VolumeRecord

        source = VolumeRecord(self.kube, rec)
        _say(f"reading {path} from {source.where}")
        rel = path.removeprefix(C.run_dir(rec.run_id) + "/")
        n, rest = 0, b""
        with source.open(rel) as (_size, chunks):
            for chunk in chunks:
                *lines, rest = (rest + chunk).split(b"\n")
                for line in lines:
                    out.write(line.decode("utf-8", "replace") + "\n")
                n += len(lines)
        if rest:
            out.write(rest.decode("utf-8", "replace") + "\n")
            n += 1
        out.flush()
        return n

    # --- runs from any machine ---------------------------------------------------------------
    def find_taurun(self, ref: str) -> dict[str, Any] | None:
        """A TauRun by run id (GET) or run name (the newest with that label), in the namespaces of
        the workspaces the user may read."""
        for ws in self.discovery.snapshot().workspaces:
            with contextlib.suppress(Forbidden):
                got = self.kube.get("TauRun", ref, ws.namespace)
                if got is not None:
                    return got
        named: list[dict[str, Any]] = []
        for ws in self.discovery.snapshot().workspaces:
            with contextlib.suppress(Forbidden):
                named += self.kube.list("TauRun", ws.namespace, {C.LABEL_RUN_NAME: ref})
        named.sort(key=lambda o: str(o["metadata"].get("creationTimestamp") or ""))
        return named[-1] if named else None

    def workspace_runs(self, workspace: str | None, mine: bool = False) -> list[RunStatus]:
        """Every TauRun of a workspace (or of every workspace the user may read), whoever
        submitted it, with the status the controller recorded on it; newest last."""
        from taugrid.kube.facts import record_from_taurun, recorded_status
        from taugrid.runs.status import compute

        snap = self.discovery.snapshot()
        spaces = [self.discovery.workspace(workspace, snap)] if workspace else snap.workspaces
        me = self.kube.whoami() if mine else None
        now = time.time()
        out = []

        def runs_of(namespace: str) -> list[dict[str, Any]] | Forbidden:
            try:
                return self.kube.list_columns("TauRun", namespace)  # what a listing reads
            except Forbidden as e:
                return e

        from concurrent.futures import ThreadPoolExecutor

        if len(spaces) == 1:
            listed = [runs_of(spaces[0].namespace)]
        else:
            with ThreadPoolExecutor(max_workers=min(len(spaces), 8)) as pool:
                listed = list(pool.map(runs_of, [ws.namespace for ws in spaces]))
        root = runs_root()
        here = set(os.listdir(root)) if root.is_dir() else set()
        for items in listed:
            if isinstance(items, Forbidden):
                if workspace:
                    raise items
                continue
            for obj in items:
                ann = (obj.get("metadata") or {}).get("annotations") or {}
                if me is not None and ann.get(C.ANN_CLUSTER_USER) != me:
                    continue
                rec = record_from_taurun(obj, self.kube.context)
                evidence = None
                recorded = recorded_status(obj)
                local = RunDir(root / rec.run_id) if rec.run_id in here else None
                if local is not None and local.record_path.is_file():  # this machine's record
                    evidence = str(local.path)
                    if recorded is None:  # no controller's word: what this machine recorded
                        with contextlib.suppress(TauError):
                            rec = local.read_record()
                facts = ClusterFacts(taurun=True, workload=False, recorded=recorded)
                out.append(
                    compute(
                        Observations(
                            record=rec,
                            history=[],
                            now=now,
                            owner_alive=None,
                            cluster=facts,
                            evidence=evidence,
                        )
                    )
                )
        out.sort(key=lambda s: s.created_at)
        return out

    def ended_on_its_own(self, run: RunDir) -> Phase | None:
        from taugrid.runs.status import effective_phase

        phase, _ = effective_phase(self.observe([run])[0])
        return phase if phase in TERMINAL else None

    def stop(self, run: RunDir) -> str:
        """Delete the TauRun (foreground): its workload and code go with it, and so does its
        quota (a submission interrupted before the cluster had it: nothing to delete)."""
        rec = run.read_record()
        gone = self.kube.delete("TauRun", rec.run_id, _handle(rec).namespace)
        with contextlib.suppress(FileNotFoundError):
            submitting(run.path).unlink()
        if not gone and not _handle(rec).sent:
            return "cancelled by the user before the cluster received it"
        return "cancelled by the user: TauRun deleted; its workload and quota are released"

    def attach(self, run: RunDir, say: Say) -> bool:
        """A submission interrupted before the cluster had all of it is sent again (the same
        objects, idempotent); a sent run is followed as it is."""
        rec = run.read_record()
        if rec.phase in TERMINAL:
            return False
        if not _handle(rec).sent:
            if not submitting(run.path).is_file():
                raise TauError(
                    f"{run.run_id} was not completely sent, and its objects are not "
                    "in the record any more",
                    exit_code=EXIT_PLATFORM,
                    hint=f"tau run cancel {run.run_id}, then submit again",
                )
            self.send(run)
            say(f"{run.run_id}: the interrupted submission is sent to {self.kube.server}")
        return True


COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # an Indexed Job's pod: its node
GET_EACH_UP_TO = 8  # runs of one namespace observed with a GET each (more: one LIST)
# runs observed at once whose progress is read from the volume (a status, not a list)
PROGRESS_UP_TO = 8
PROGRESS_TIMEOUT_S = 2.0  # a file server that does not answer in this long: progress "unknown"
PROGRESS_EVERY_S = 5.0  # a watched run's progress is read again at least this often (lag <= 10 s)
FOLLOW_SETTLE_S = 2.0  # after a log stream ends, at most this long until the next look
FOLLOW_FALLBACK_S = 30.0  # a look at least this often, should a watch have broken silently


class ChangeFeed:
    """Watches on some (kind, namespace) pairs; `wait` returns at the next burst of changes
    (True) or when `timeout` passes (False). The watches reconnect by themselves."""

    def __init__(self, kube: KubeAPI, watches: Sequence[tuple[str, str]]) -> None:
        import queue
        import threading

        self._signal: queue.Queue[None] = queue.Queue()
        self._kube = kube
        for kind, ns in watches:
            threading.Thread(target=self._pump, args=(kind, ns), daemon=True).start()

    def _pump(self, kind: str, ns: str) -> None:
        with contextlib.suppress(TauError):  # e.g. no Kueue: the others still report
            for _ in self._kube.watch(kind, ns):
                self._signal.put(None)

    def wait(self, timeout: float | None) -> bool:
        import queue

        try:
            self._signal.get(timeout=timeout)
        except queue.Empty:
            return False
        time.sleep(0.1)  # one recomputation per burst
        while not self._signal.empty():
            self._signal.get_nowait()
        return True


def _log_note(message: str) -> str:
    """Why no log comes, in words: the node's kubelet that serves a container's log did not
    answer (a KWOK node of the sandbox runs no containers, so it never does)."""
    if "containerLogs" in message or "10250" in message:
        return (
            "the node's kubelet does not serve this pod's log (on the sandbox: KWOK nodes run "
            "no containers; on a cluster: is the node up?)"
        )
    return message


def _note(e: TauError) -> str:
    """Why a run's progress was not read, in a phrase (with the fix)."""
    return e.message + (f" ({e.hint})" if getattr(e, "hint", None) else "")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _handle(rec: RunRecord) -> KubeHandle | PulumiHandle:
    """Where a cluster run is (a pulumi run's objects are in the same cluster)."""
    if not isinstance(rec.handle, KubeHandle | PulumiHandle):
        raise TypeError(f"run {rec.run_id} is a {rec.target} run")
    return rec.handle


if TYPE_CHECKING:  # mypy proves the class has the whole interface (the registry finds it by name)

    def _is_a_backend(b: KubeBackend) -> Backend:
        return b


# --- runs from any machine --------------------------------------------------------------------
def adopt_remote(
    ref: str, context: str | None, backend: KubeBackend | None = None
) -> RunDir | None:
    """A cluster run this machine has no record of (a teammate's, or this user's from another
    machine): its TauRun, found by run id or run name in the workspaces the user may read,
    becomes a local record (sent, not sealed). None when no cluster is configured or no TauRun
    matches."""
    if backend is None:
        from taugrid.kube.kubeconfig import kubeconfig_path

        if not (context or os.environ.get(CONTEXT_ENV) or kubeconfig_path().is_file()):
            return None
        backend = KubeBackend(context)
    found = backend.find_taurun(ref)
    if found is None:
        return None
    from taugrid.kube.facts import record_from_taurun

    rec = record_from_taurun(found, backend.kube.context)
    rd = RunDir(runs_root() / rec.run_id)
    if not rd.record_path.is_file():
        (rd.path / "logs").mkdir(parents=True, exist_ok=True)
        rd.create(
            rec,
            reason=f"found in the cluster at {backend.kube.server} (submitted by "
            f"{rec.submitter} from another machine)",
        )
    return rd
