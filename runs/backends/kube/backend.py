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
from typing import TYPE_CHECKING, Any, TextIO

from taugrid.api import constants as C
from taugrid.api.errors import EXIT_PLATFORM, EXIT_USAGE, TauError
from taugrid.api.evidence import KubeHandle, PulumiHandle, RunRecord, TerminalStateError
from taugrid.api.profiles import ProfileSnapshot
from taugrid.api.vocabulary import TERMINAL, Phase
from taugrid.runs.backends.base import Backend, Say, SubmitOptions
from taugrid.runs.backends.kube.client import Forbidden, Kube
from taugrid.runs.backends.kube.facts import admitted, namespace_facts, node_problems
from taugrid.runs.evidence import RunDir, ensure_writable, now_iso
from taugrid.runs.paths import runs_root, write_atomic
from taugrid.runs.status import ClusterFacts, Observations

if TYPE_CHECKING:
    from taugrid.api.profiles import WorkspaceRef
    from taugrid.runs.prepare import PreparedRun, RunRequest

CLUSTER_OBJECT = "cluster"
CONTEXT_ENV = "TAU_CONTEXT"  # the kubeconfig context (--context sets it)


class KubeBackend:
    name = "kube"

    def __init__(self, context: str | None = None) -> None:
        self._context = context or os.environ.get(CONTEXT_ENV) or None
        self._kube: Kube | None = None
        self._cluster: str | None = None
        self._tau_cluster: dict[str, Any] | None = None  # as the last snapshot() read it

    @property
    def kube(self) -> Kube:
        if self._kube is None:
            self._kube = Kube(self._context)
        return self._kube

    # --- discovery ------------------------------------------------------------------------------
    def snapshot(self) -> ProfileSnapshot:
        """The cluster's profiles and workspaces, as its TauCluster publishes them."""
        tc = self._tau_cluster = self.kube.get("TauCluster", CLUSTER_OBJECT)
        if tc is None:
            raise TauError(
                f"no TauCluster {CLUSTER_OBJECT!r} at {self.kube.server}: the TauGrid platform is "
                "not installed on this cluster",
                exit_code=EXIT_PLATFORM,
                hint="pulumi up the platform stack (or tau sandbox up)",
            )
        spec = tc.get("spec") or {}
        ann = (tc.get("metadata") or {}).get("annotations") or {}
        self._cluster = spec.get("stack")
        return ProfileSnapshot.model_validate(
            {
                "apiVersion": C.API_VERSION,
                "kind": "TauWorkloadProfileSnapshot",
                "cluster": spec.get("stack", "?"),
                "profileSetHash": ann.get(C.ANN_PROFILE_SET_HASH),
                "defaultWorkspace": spec.get("defaultWorkspace"),
                "workspaces": spec.get("workspaces") or [],
                "profiles": spec.get("workloadProfiles") or [],
            }
        )

    def capacity(self) -> dict[str, dict[str, int]]:
        """Live capacity per profile, as the controller records it on the TauCluster (empty
        when no controller runs); from the object `snapshot` read, else one GET."""
        tc = self._tau_cluster or self.kube.get("TauCluster", CLUSTER_OBJECT) or {}
        rows = ((tc.get("status") or {}).get("profiles")) or []
        return {r["name"]: {k: int(r.get(k) or 0) for k in ("nodes", "healthyNodes", "allocatableGpus",
                                                            "cordonedByTau")} for r in rows}  # fmt: skip

    def usable_workspaces(self, snap: ProfileSnapshot) -> list[WorkspaceRef]:
        """The workspaces whose namespace the user may submit runs to (one review each)."""
        return [w for w in snap.workspaces if self.kube.can("create", "TauRun", w.namespace)]

    def workspace(self, snap: ProfileSnapshot, name: str | None) -> WorkspaceRef:
        """The workspace a command means: the one named; else the only one the user may use;
        else the cluster's default if the user may use it."""
        if name is not None:
            ws = snap.workspace(name)
            if ws is None:
                raise TauError(f"no workspace {name!r}", exit_code=EXIT_USAGE,
                               hint="tau workspaces lists yours")  # fmt: skip
            return ws
        usable = self.usable_workspaces(snap)
        if len(usable) == 1:
            return usable[0]
        default = snap.workspace(snap.defaultWorkspace) if snap.defaultWorkspace else None
        if default is not None and default in usable:
            return default
        raise TauError("say which workspace with --workspace", exit_code=EXIT_USAGE,
                       hint="tau workspaces lists yours")  # fmt: skip

    # --- submitting -------------------------------------------------------------------------------
    def prepare(self, request: RunRequest) -> PreparedRun:
        from taugrid.runs.prepare import prepare

        snap = self.snapshot()
        if request.workspace is None and request.loaded.manifest.policy.workspace is None:
            usable = self.usable_workspaces(snap)
            if len(usable) == 1:  # the one workspace this user may submit to
                from dataclasses import replace

                request = replace(request, workspace=usable[0].name)
        return prepare(request, snap)

    def submit(self, prepared: PreparedRun, options: SubmitOptions, say: Say) -> RunDir:
        ns = prepared.resolved.namespace
        again = self._resubmitted(prepared, options, say)
        if again is not None:
            return again
        try:
            owner = self.kube.apply(prepared.taurun())
        except Forbidden as e:
            raise self._forbidden(e, prepared) from None
        ref = {
            "apiVersion": C.API_VERSION,
            "kind": "TauRun",
            "name": prepared.run_id,
            "uid": owner["metadata"]["uid"],
            "blockOwnerDeletion": True,
        }
        for obj in prepared.objects():
            obj["metadata"]["ownerReferences"] = [ref]
            self.kube.apply(obj)
        rd = self._record(prepared, ns)
        say(f"submitted {prepared.run_id} to {self.kube.server} (namespace {ns}, queue "
            f"{prepared.resolved.queue}); Kueue admits it when there is quota")  # fmt: skip
        return rd

    def _resubmitted(self, prepared: PreparedRun, options: SubmitOptions,
                     say: Say) -> RunDir | None:  # fmt: skip
        """What every cluster submission checks first: no local-only options; and the same
        run already submitted is not submitted again (its record is returned)."""
        if options.python or options.ray_pip:
            raise TauError("--python and --ray-pip are for local runs", exit_code=EXIT_USAGE)
        if self._submitted(prepared, say):
            return self._record(prepared, prepared.resolved.namespace)
        return None

    def _submitted(self, prepared: PreparedRun, say: Say) -> bool:
        """Idempotent by run id: whether this run is in the cluster already (the same run again
        changes nothing; the same id with another config is refused)."""
        ns = prepared.resolved.namespace
        try:
            existing = self.kube.get("TauRun", prepared.run_id, ns)
        except Forbidden as e:
            raise self._forbidden(e, prepared) from None
        if existing is None:
            return False
        if (existing.get("spec") or {}).get("configHash") != prepared.manifest.config_hash():
            raise TauError(
                f"run {prepared.run_id} already exists in namespace {ns} with another config",
                exit_code=EXIT_USAGE,
                hint="leave out --run-id to get a new run id",
            )
        say(f"{prepared.run_id} is already submitted; nothing changed")
        return True

    def _forbidden(self, e: Forbidden, prepared: PreparedRun) -> TauError:
        try:
            usable = [w.name for w in self.usable_workspaces(self.snapshot())]
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

    def _record(self, prepared: PreparedRun, namespace: str,
                handle: KubeHandle | PulumiHandle | None = None) -> RunDir:  # fmt: skip
        """The local evidence record of a cluster run: what was submitted, where."""
        from taugrid.runs.yamlio import dump_all

        root = runs_root()
        ensure_writable(root)
        rd = RunDir(root / prepared.run_id)
        if (rd.path / C.RUN_RECORD_FILENAME).is_file():
            return rd  # the same run id again: the cluster changed nothing, nor does this
        (rd.path / "config" / "manifests").mkdir(parents=True, exist_ok=True)
        (rd.path / "logs").mkdir(exist_ok=True)
        m, r = prepared.manifest, prepared.resolved
        write_atomic(rd.path / "config" / "tau.yaml", prepared.loaded.text.encode())
        submitted = [prepared.taurun(), *prepared.objects()]
        for obj in submitted:
            if obj["kind"] == "ConfigMap":  # the code: recorded by digest, not again in full
                obj["data"] = {"...": f"{len(obj.get('data', {}))} files, {prepared.bundle.digest}"}
        write_atomic(
            rd.path / "config" / "manifests" / "submitted.yaml", dump_all(submitted).encode()
        )
        rd.create(
            RunRecord(
                run_id=prepared.run_id, name=m.name, workspace=r.workspace.name,
                profile=r.profile.name, workload_kind=prepared.kind,
                handle=handle or KubeHandle(context=self.kube.context, namespace=namespace,
                                            cluster=self._cluster, queue=r.queue),
                submitter=prepared.meta.submitter, code_folder=str(prepared.loaded.folder.resolve()),
                code_revision=prepared.meta.code_revision, code_digest=prepared.bundle.digest,
                config_hash=m.config_hash(), image=r.image, entrypoint=m.entrypoint_path or "",
                created_at=now_iso(), max_retries=m.resilience.max_retries, workers=r.workers,
                gpus_per_worker=r.gpus, gpus_available=r.gpus,
                stall_after_seconds=m.metrics.stall_after_seconds, primary_metric=m.metrics.primary,
                checkpoint_subdir=m.checkpoint_subdir, output_subdir=m.output_subdir,
                warnings=list(prepared.warnings),
            ),
            reason=f"submitted to {self.kube.server}",
        )  # fmt: skip
        return rd

    # --- observing --------------------------------------------------------------------------------
    def observe(self, runs: Sequence[RunDir], now: float | None = None) -> list[Observations]:
        """One LIST per kind per namespace (and one of nodes), all at once, for any number of
        runs; then each run's facts are picked from those lists."""
        t = now if now is not None else time.time()
        records = [rd.read_record() for rd in runs]
        by_ns: dict[str, list[RunRecord]] = {}
        for rec in records:
            by_ns.setdefault(_handle(rec).namespace, []).append(rec)
        managed = {C.LABEL_MANAGED_BY: C.MANAGED_BY_VALUE}
        wanted: dict[tuple[str, str | None], dict[str, str] | None] = {("Node", None): None}
        for ns, recs in by_ns.items():
            kinds = {r.workload_kind for r in recs}
            wanted.update({("TauRun", ns): None, ("Workload", ns): None, ("Pod", ns): None,
                           ("Event", ns): None})  # fmt: skip
            if "rayjob" in kinds:
                wanted[("RayJob", ns)] = managed
            if "job" in kinds:
                wanted[("Job", ns)] = managed
        lists = self._list_all(wanted)
        nodes, nodes_visible = node_problems(lists[("Node", None)])
        # Queue positions: one visibility call per LocalQueue that has waiting runs.
        waiting = {
            (ns, str((w.get("spec") or {}).get("queueName")))
            for ns in by_ns
            for w in lists.get(("Workload", ns)) or []
            if (w.get("spec") or {}).get("queueName") and not admitted(w)
        }
        pending = {key: self.kube.pending(*key) for key in sorted(waiting)}
        facts: dict[str, ClusterFacts] = {}
        for ns, recs in by_ns.items():
            facts.update(namespace_facts(ns, recs, lists, nodes, nodes_visible, pending))
        return [
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

    def _list_all(
        self, wanted: dict[tuple[str, str | None], dict[str, str] | None]
    ) -> dict[tuple[str, str | None], list[dict[str, Any]] | None]:
        """The LISTs concurrently (each is a round trip). None: forbidden (nodes) or not
        served (Kueue's Workloads); every other failure is the command's error."""
        from concurrent.futures import ThreadPoolExecutor

        kube = self.kube

        def one(key: tuple[str, str | None]) -> list[dict[str, Any]] | None:
            kind, ns = key
            try:
                return kube.list(kind, ns, wanted[key])
            except Forbidden:
                if kind == "Node":
                    return None
                raise
            except TauError:
                if kind == "Workload":
                    return None
                raise

        with ThreadPoolExecutor(max_workers=min(8, len(wanted))) as pool:
            results = list(pool.map(one, wanted))
        return dict(zip(wanted, results, strict=True))

    def changes(self, runs: Sequence[RunDir]) -> Iterator[None]:
        """Once now, then once per burst of changes to the runs' objects (the watch API on
        workloads, Kueue Workloads, pods and TauRuns of their namespaces): no polling."""
        import queue
        import threading

        recs = [rd.read_record() for rd in runs]
        signal: queue.Queue[None] = queue.Queue()
        watches: set[tuple[str, str]] = set()
        for rec in recs:
            ns = _handle(rec).namespace
            workload = "RayJob" if rec.workload_kind == "rayjob" else "Job"
            watches |= {(workload, ns), ("Workload", ns), ("Pod", ns), ("TauRun", ns)}

        def pump(kind: str, ns: str) -> None:
            with contextlib.suppress(TauError):  # e.g. no Kueue: the others still report
                for _ in self.kube.watch(kind, ns):
                    signal.put(None)

        for kind, ns in sorted(watches):
            threading.Thread(target=pump, args=(kind, ns), daemon=True).start()
        yield None
        while True:
            signal.get()
            time.sleep(0.1)  # one recomputation per burst
            while not signal.empty():
                signal.get_nowait()
            yield None

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
        body = {"apiVersion": C.API_VERSION, "kind": "TauRun",
                "metadata": {"name": rec.run_id, "namespace": _handle(rec).namespace,
                             "annotations": {C.ANN_RESUMED_BY: child_id}}}  # fmt: skip
        with contextlib.suppress(TauError):  # the parent's TauRun may be gone: local lineage stays
            self.kube.apply(body, manager="tau-lineage")

    # --- the rest ---------------------------------------------------------------------------------
    def logs(self, run: RunDir, out: TextIO) -> None:
        self._logs(run, out, follow=False)

    def follow(self, run: RunDir, out: TextIO, err: TextIO, *, transitions: bool = True) -> Phase:
        """The driver's log as it is written (reconnecting), and each change of phase with its
        cause, until the run ends. Without a log from the cluster, the phases alone."""
        from taugrid.runs.status import compute

        seen, said, log_ok = 0, "", True
        while True:
            st = compute(self.observe([run])[0])
            line = f"[{st.phase.lower()}] {st.summary}"
            if transitions and line != said:
                err.write(line + "\n")
                err.flush()
                said = line
            if st.phase in TERMINAL:
                with contextlib.suppress(TerminalStateError):  # the local record ends too
                    run.transition(st.phase, st.summary, termination=st.termination_reason)
                return st.phase
            if log_ok and st.phase == Phase.Running:
                try:
                    seen = self._logs(run, out, follow=True, skip=seen)
                except TauError as e:
                    log_ok = False
                    err.write(f"note: {e.message}; following the status only\n")
                    err.flush()
                continue
            time.sleep(1.0)

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
                _say(f"the log of pod {pod} is not available from the cluster ({e.message})")
                return self._read_volume(rec, pvc_path, out)
            raise TauError(
                f"the log of pod {pod} is not available from the cluster ({e.message}); "
                f"the run also keeps it on the workspace PVC at {pvc_path}",
                exit_code=EXIT_PLATFORM,
            ) from None
        return max(n, skip)

    def _ended(self, run: RunDir) -> bool:
        from taugrid.runs.status import effective_phase

        return effective_phase(self.observe([run])[0])[0] in TERMINAL

    def _read_volume(self, rec: RunRecord, path: str, out: TextIO) -> int:
        from taugrid.runs.backends.kube.reader import read_file

        h = _handle(rec)
        try:
            return read_file(self.kube, rec, h.namespace, getattr(h, "queue", None) or self._queue_of(rec), path,
                             out, _say)  # fmt: skip
        except Forbidden as e:
            raise TauError(f"{e.message}: the log on the workspace volume needs a reader job",
                           exit_code=EXIT_PLATFORM, hint=f"the log is kept at {path}") from None  # fmt: skip

    def _queue_of(self, rec: RunRecord) -> str | None:
        """Records written before the handle kept the queue: its profile's LocalQueue."""
        with contextlib.suppress(TauError):
            for p in self.snapshot().profiles:
                if p.name == rec.profile:
                    return p.localQueue
        return None

    def cancel(self, run: RunDir) -> Phase:
        """Delete the TauRun (foreground): its workload and code go with it, and so does its
        quota; the local record is closed as Cancelled."""
        rec = run.read_record()
        if rec.phase in TERMINAL:
            return rec.phase
        (obs,) = self.observe([run])
        from taugrid.runs.status import effective_phase

        phase, _ = effective_phase(obs)
        if phase in TERMINAL:
            with contextlib.suppress(TerminalStateError):
                run.transition(phase, f"ended in the cluster before the cancel ({phase})")
            return phase
        self.kube.delete("TauRun", rec.run_id, _handle(rec).namespace)
        try:
            return run.transition(Phase.Cancelled, "cancelled by the user: TauRun deleted; its "
                                  "workload and quota are released").phase  # fmt: skip
        except TerminalStateError as e:
            return e.phase


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
