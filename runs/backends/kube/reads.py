"""What tau reads of runs on a cluster: their status (TauRun.status first, else one LIST per
kind per namespace for any number of runs, then progress off the workspace volume), the
changes that wake a watch, and their logs (the driver pod's, else the record's on the volume).
`KubeReads` is the kube backend's reading half; `KubeBackend` submits."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from taugrid.api import constants as C
from taugrid.api.errors import EXIT_PLATFORM, TauError
from taugrid.api.evidence import KubeHandle, PulumiHandle, RunRecord
from taugrid.api.observations import ClusterFacts, Observations
from taugrid.api.vocabulary import TERMINAL, Phase
from taugrid.kube.client import Forbidden, KubeAPI
from taugrid.kube.discovery import Connected
from taugrid.kube.facts import (
    admitted,
    current_status,
    heartbeat_of,
    namespace_facts,
    node_problems,
    recorded_status,
)
from taugrid.runs.evidence import RunDir

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # an Indexed Job's pod: its node


GET_EACH_UP_TO = 8  # runs of one namespace observed with a GET each (more: one LIST)


# runs observed at once whose progress is read from the volume (a status, not a list)
PROGRESS_UP_TO = 8


PROGRESS_TIMEOUT_S = 2.0  # a file server that does not answer in this long: progress "unknown"


PROGRESS_EVERY_S = 5.0  # a watched run's progress is read again at least this often (lag <= 10 s)


FOLLOW_SETTLE_S = 2.0  # after a log stream ends, at most this long until the next look


FOLLOW_FALLBACK_S = 30.0  # a look at least this often, should a watch have broken silently


def handle_of(rec: RunRecord) -> KubeHandle | PulumiHandle:
    """Where a cluster run is (a pulumi run's objects are in the same cluster)."""
    if not isinstance(rec.handle, KubeHandle | PulumiHandle):
        raise TypeError(f"run {rec.run_id} is a {rec.target} run")
    return rec.handle


class KubeReads(Connected):
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
            by_ns.setdefault(handle_of(rec).namespace, []).append(rec)
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
            try:  # a dispatched run's record is on its worker's volume (MultiKueue)
                kube = self.worker(c.placed_on) if c.placed_on else self.kube
                files = VolumeFiles(
                    kube, handle_of(rec).namespace, rec.workspace, timeout_s=PROGRESS_TIMEOUT_S
                )  # a status never waits long
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
                last_error=got.last_error,
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
            ns = handle_of(rec).namespace
            workload = "RayJob" if rec.workload_kind == "rayjob" else "Job"
            watches |= {(workload, ns), ("Workload", ns), ("Pod", ns), ("TauRun", ns)}
        return ChangeFeed(self.kube, sorted(watches))

    # --- the rest ---------------------------------------------------------------------------------
    def check_same(self, rec: RunRecord, taurun: dict[str, Any] | None = None) -> None:
        """Refuse a TauRun of the run's name that is another run than the one recorded here (a
        context that reaches another cluster, or a cluster made anew): nothing of it is shown
        or cancelled. `taurun`: the one already read (else one GET; none there: nothing to
        compare)."""
        from taugrid.kube.facts import other_run

        h = handle_of(rec)
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

    def worker_of(self, rec: RunRecord) -> str | None:
        """The MultiKueue worker cluster the run's Workload was dispatched to (None: it runs
        here, or nowhere yet)."""
        return self.worker_named(handle_of(rec).namespace, rec.run_id)

    def worker_named(self, ns: str, run_id: str) -> str | None:
        """`worker_of` a run known by its namespace and id."""
        try:
            workloads = self.kube.list("Workload", ns)
        except TauError:  # no Kueue, or not readable: the run's pods are here if anywhere
            workloads = []
        for w in workloads:
            if any(r.get("name") == run_id for r in w["metadata"].get("ownerReferences") or []):
                name = (w.get("status") or {}).get("clusterName")
                if name:
                    return str(name)
        try:  # an ended run's Workload may be gone: the worker the controller recorded
            taurun = self.kube.get("TauRun", run_id, ns) or {}
        except TauError:
            return None
        st = recorded_status(taurun)
        return st.cluster if st is not None else None

    def placed(self, rec: RunRecord) -> KubeAPI:
        """The client of the cluster whose pods run the run and whose workspace volume holds
        its record: this one, or the worker it was dispatched to."""
        worker = self.worker_of(rec)
        if worker is None:
            return self.kube
        _say(f"{rec.run_id} runs on worker cluster {worker} (MultiKueue): reading it there")
        return self.worker(worker)

    def _driver_pod(self, rec: RunRecord, kube: KubeAPI) -> tuple[str, str] | None:
        """(pod, container) that runs the entrypoint: the Job's pod, or a RayJob's head."""
        ns = handle_of(rec).namespace
        pods = kube.list("Pod", ns, {C.LABEL_RUN_ID: rec.run_id})
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
        ns = handle_of(rec).namespace
        kube = self.kube
        found = self._driver_pod(rec, kube)
        if found is None and (kube := self.placed(rec)) is not self.kube:
            found = self._driver_pod(rec, kube)
        pvc_path = f"{C.run_dir(rec.run_id)}/logs/driver.log"
        if found is None:
            if not follow and self._ended(run):
                return self._read_volume(kube, rec, pvc_path, out)
            raise TauError(
                f"no pod of {rec.run_id} runs now (not started yet, or gone): its log is "
                f"kept on the workspace PVC at {pvc_path}",
                exit_code=EXIT_PLATFORM,
                hint=f"tau run status {rec.run_id} says where it is",
            )
        pod, container = found
        n = 0
        try:
            for line in kube.log_lines(pod, ns, container, follow=follow):
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
                return self._read_volume(kube, rec, pvc_path, out)
            raise TauError(
                f"the log of pod {pod} is not available from the cluster ({_log_note(e.message)}); "
                f"the run also keeps it on the workspace PVC at {pvc_path}",
                exit_code=EXIT_PLATFORM,
            ) from None
        return max(n, skip)

    def _ended(self, run: RunDir) -> bool:
        from taugrid.runs.status import effective_phase

        return effective_phase(self.observe([run])[0])[0] in TERMINAL

    def _read_volume(self, kube: KubeAPI, rec: RunRecord, path: str, out: TextIO) -> int:
        """The launcher's copy of the log on the workspace volume, through its file server."""
        from taugrid.runs.backends.kube.volume import VolumeRecord

        source = VolumeRecord(kube, rec)
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
