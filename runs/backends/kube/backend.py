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
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taugrid.api import constants as C
from taugrid.api.errors import EXIT_NOT_ADMITTED, EXIT_PLATFORM, EXIT_USAGE, TauError
from taugrid.api.evidence import KubeHandle, PulumiHandle
from taugrid.api.naming import owner_reference
from taugrid.api.observations import ClusterFacts, Observations
from taugrid.api.vocabulary import TERMINAL, Phase
from taugrid.kube.client import CONTEXT_ENV, Forbidden, KubeAPI
from taugrid.kube.discovery import Discovery
from taugrid.runs.backends.base import Backend, Say, SubmitOptions, Template
from taugrid.runs.backends.kube.reads import KubeReads, handle_of
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


class KubeBackend(KubeReads, Template):
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
        from dataclasses import replace

        from taugrid.runs.prepare import prepare

        snap = self.discovery.snapshot()
        if request.workspace is None and request.loaded.manifest.policy.workspace is None:
            usable = self.discovery.usable_workspaces(snap)
            if len(usable) == 1:  # the one workspace this user may submit to
                request = replace(request, workspace=usable[0].name)
        prepared = prepare(request, snap)
        if request.parent is None:
            return prepared
        # a resume runs where its parent's checkpoint is: on a MultiKueue manager, the worker
        # the parent ran on (its pods select that worker; Kueue elsewhere finds no flavor)
        worker = self.worker_named(prepared.resolved.workspace.namespace, request.parent)
        if worker is None:
            return prepared
        return replace(prepared, meta=replace(prepared.meta, cluster=worker))

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

    # --- the record on the workspace volume --------------------------------------------------
    def record_source(self, run: RunDir) -> VolumeRecord:
        from taugrid.runs.backends.kube.volume import VolumeRecord

        rec = run.read_record()
        return VolumeRecord(self.placed(rec), rec)

    # --- resume ---------------------------------------------------------------------------------
    resume_patience_s = 10.0  # for a workspace's file server being replaced to answer

    def newest_checkpoint(self, run: RunDir) -> str | None:
        """The parent's newest complete checkpoint as its workspace's file server sees it on the
        volume (None: it has none, so nothing is sent). Where the file server cannot answer from
        here, "the newest complete one" that the child's pod resolves when it starts
        (tau_launch.py, which fails clearly if there is none)."""
        from taugrid.kube.files import NotOnVolume, VolumeFiles

        rec = run.read_record()
        base = f"{C.run_dir(rec.run_id)}/{rec.checkpoint_subdir}"
        ns = handle_of(rec).namespace
        files = VolumeFiles(self.placed(rec), ns, rec.workspace, self.resume_patience_s)
        try:
            got = files.progress(
                C.run_volume_path(rec.run_id), rec.checkpoint_subdir, rec.output_subdir
            )
        except NotOnVolume:
            return None  # its pods never wrote a record: no checkpoint
        except TauError:
            return f"{base}/{C.NEWEST_CHECKPOINT}"
        return f"{base}/{got.newest_checkpoint}" if got.newest_checkpoint else None

    def record_child(self, parent: RunDir, child_id: str) -> None:
        """Lineage in the parent's TauRun too (an annotation with its own field manager, so
        tau's apply of the parent's spec is untouched)."""
        rec = parent.read_record()
        body = {
            "apiVersion": C.API_VERSION,
            "kind": "TauRun",
            "metadata": {
                "name": rec.run_id,
                "namespace": handle_of(rec).namespace,
                "annotations": {C.ANN_RESUMED_BY: child_id},
            },
        }
        with contextlib.suppress(TauError):  # the parent's TauRun may be gone: local lineage stays
            self.kube.apply(body, manager="tau-lineage")

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
        gone = self.kube.delete("TauRun", rec.run_id, handle_of(rec).namespace)
        with contextlib.suppress(FileNotFoundError):
            submitting(run.path).unlink()
        if not gone and not handle_of(rec).sent:
            return "cancelled by the user before the cluster received it"
        return "cancelled by the user: TauRun deleted; its workload and quota are released"

    def attach(self, run: RunDir, say: Say) -> bool:
        """A submission interrupted before the cluster had all of it is sent again (the same
        objects, idempotent); a sent run is followed as it is."""
        rec = run.read_record()
        if rec.phase in TERMINAL:
            return False
        if not handle_of(rec).sent:
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
