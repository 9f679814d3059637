"""Runs: submit, status, list, logs, follow, cancel, resume, attach, verify, metrics, pull.

Every function returns models of `taugrid.api` (a `RunRecord`, a `RunStatus`, metric rows) and
raises `TauError` (with the exit code the CLI uses); nothing here prints or asks. A run is named
by its id, a unique prefix of one, or its name (the newest run of that name).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from taugrid.api import constants as C
from taugrid.api.errors import EXIT_NOT_ADMITTED, EXIT_RUN_FAILED, EXIT_USAGE, TauError
from taugrid.client.records import Verified as Verified
from taugrid.client.records import check_folder as check_folder
from taugrid.client.records import check_metrics, verify_where_it_lies

if TYPE_CHECKING:
    from taugrid.api.evidence import RunRecord
    from taugrid.api.vocabulary import Phase, RunStatus
    from taugrid.runs.backends.base import Backend
    from taugrid.runs.evidence import RunDir as RunDir  # (a run's evidence folder: the CLI's type)
    from taugrid.runs.pull import Checked, Pulled, RecordSource

Say = Callable[[str], None]


def _quiet(_: str) -> None:
    """The default `say`: the API says nothing unless the caller asks."""


@dataclass(frozen=True)
class Submitted:
    """A submitted run: its record, and where its evidence is kept on this machine."""

    record: RunRecord
    evidence: Path

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def run_dir(self) -> RunDir:
        """Its evidence folder on this machine (what `follow`, `wait` and `follows` take)."""
        from taugrid.runs.evidence import RunDir

        return RunDir(self.evidence)


def _backend(target: str | None, context: str | None, say: Say) -> Backend:
    import os

    from taugrid.runs.backends import base

    chosen = base.pick_target(target, os.environ, say)
    return base.get(chosen, **({"context": context} if context else {}))


def submit(
    file: str | Path | None = None,
    *,
    target: str | None = None,
    context: str | None = None,
    workspace: str | None = None,
    profile: str | None = None,
    run_id: str | None = None,
    strict: bool = False,
    ray_pip: bool = False,
    python: str | None = None,
    say: Say = _quiet,
) -> Submitted:
    """Submit the run of a tau.yaml (or a folder holding one) to a target (local, kube or
    pulumi; default `TAU_TARGET`, else local). Returns at once; `follow` or `wait` for its end."""
    from taugrid.runs import load
    from taugrid.runs.backends import base
    from taugrid.runs.prepare import RunRequest

    backend = _backend(target, context, say)
    loaded = load.load_manifest(None if file is None else str(file))
    request = RunRequest(loaded, workspace=workspace, profile=profile, run_id=run_id)
    prepared = backend.prepare(request)
    options = base.SubmitOptions(strict=strict, ray_pip=ray_pip, python=python)
    rd = backend.submit(prepared, options, say)
    return Submitted(rd.read_record(), rd.path)


def render(
    file: str | Path | None = None,
    *,
    profiles: str | Path | None,
    workspace: str | None = None,
    profile: str | None = None,
    run_id: str | None = None,
    say: Say = _quiet,
) -> list[dict[str, Any]]:
    """The Kubernetes objects `submit --target kube` would send for a tau.yaml, placed by a
    profile snapshot (a TauWorkloadProfileSnapshot file); nothing is sent. What the code bundle
    leaves out is said through `say`."""
    from taugrid.runs import load
    from taugrid.runs.prepare import RunRequest, prepare

    loaded = load.load_manifest(None if file is None else str(file))
    if profiles is None:
        raise TauError(
            "rendering for a cluster needs the cluster's workload profiles",
            hint="pass --profiles FILE (a TauWorkloadProfileSnapshot, e.g. examples/profiles.yaml)",
        )
    request = RunRequest(loaded, workspace=workspace, profile=profile, run_id=run_id)
    prepared = prepare(request, load.load_snapshot(profiles))
    note = prepared.bundle.left_out_summary()
    if note:
        say(f"note: {note}")
    return prepared.objects()


def follows(rd: RunDir, context: str | None = None, say: Say = _quiet) -> bool:
    """Whether the run's target can follow it to its end (`follow`); else it is looked at."""
    from taugrid.runs.backends.base import Follows

    return isinstance(backend_of(rd, context, say), Follows)


def gc(say: Say = _quiet) -> list[str]:
    """Destroy the Pulumi stacks of runs that ended (`--target pulumi`) and every expired run
    stack; their evidence stays. The stacks destroyed."""
    from taugrid.runs.backends.pulumi.backend import gc as pulumi_gc
    from taugrid.runs.index import list_runs as recorded

    return pulumi_gc(recorded(), say)


@dataclass(frozen=True)
class Validated:
    """A tau.yaml that `tau run` would accept: the manifest, its code bundle, its data inputs
    as exact versions, and (with a profile snapshot) where a cluster would place it."""

    loaded: Any  # runs.load.LoadedManifest
    bundle: Any  # runs.codebundle.Bundle
    inputs: tuple[Any, ...]  # api.vocabulary.ResolvedInput
    placed: Any | None  # runs.resolve.Resolved


def validate(
    file: str | Path | None = None,
    *,
    profiles: str | Path | None = None,
    workspace: str | None = None,
    profile: str | None = None,
    run_id: str | None = None,
) -> Validated:
    """Every check `submit` makes that needs no cluster, in its order: the manifest, the code
    bundle (its size), the run id, where the profiles place it (with `profiles`), each data
    input resolved to an exact version in the registry (TAU_REGISTRY, else this machine's;
    with `profiles`, the workspace's registry too), and `runtime.python` found and working.
    TauError (exit 2) on the first problem, as `submit` would raise it."""
    from taugrid.runs import codebundle, load

    loaded = load.load_manifest(None if file is None else str(file))
    m = loaded.manifest
    bundle = codebundle.collect(loaded.folder)  # over the size limit: an error here too
    if run_id:
        from taugrid.runs.prepare import check_run_id

        check_run_id(run_id)
    placed = None
    if profiles is not None:
        from taugrid.runs import resolve

        placed = resolve.resolve(
            m, load.load_snapshot(Path(profiles)), workspace=workspace, profile=profile
        )
    inputs: tuple[Any, ...] = ()
    if m.data.inputs:  # (the registry's code is imported only for a manifest that reads data)
        from taugrid.runs.prepare import resolve_inputs

        inputs = resolve_inputs(m, placed.workspace.registry if placed is not None else None)
    if m.runtime.python:
        from taugrid.runs.backends.local.backend import interpreter

        interpreter(m.runtime.python, loaded.folder, from_cli=False)
    return Validated(loaded, bundle, inputs, placed)


@dataclass(frozen=True)
class SubmitRequest:
    """One run of `submit_many`: a tau.yaml (or its folder) and where it goes."""

    file: str | Path
    workspace: str | None = None
    profile: str | None = None
    run_id: str | None = None


def submit_many(
    requests: list[SubmitRequest],
    *,
    target: str | None = None,
    context: str | None = None,
    workers: int = 8,
    say: Say = _quiet,
) -> list[Submitted | TauError]:
    """Submit many runs from one process, `workers` at a time, each worker with one connection
    and one read of what the cluster offers for all its runs (a sweep, a benchmark). The
    results are in the order of `requests`: a run that could not be submitted has its
    `TauError` there, and the others are submitted all the same."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from taugrid.runs import load
    from taugrid.runs.backends import base
    from taugrid.runs.prepare import RunRequest

    local = threading.local()
    options = base.SubmitOptions()

    def one(req: SubmitRequest) -> Submitted | TauError:
        try:
            if getattr(local, "backend", None) is None:
                local.backend = _backend(target, context, say)
            backend = local.backend
            loaded = load.load_manifest(str(req.file))
            prepared = backend.prepare(
                RunRequest(loaded, workspace=req.workspace, profile=req.profile, run_id=req.run_id)
            )
            rd = backend.submit(prepared, options, say)
            return Submitted(rd.read_record(), rd.path)
        except TauError as e:
            return e

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, requests))


def find(run: str, *, context: str | None = None) -> RunDir:
    """A run's local record: from this machine's runs, else (a cluster run submitted from
    another machine) made from its TauRun in the workspaces the user may read."""
    from taugrid.runs.index import check_run_ref, find_run

    check_run_ref(run)  # never sent to a cluster when it cannot name a run
    try:
        return find_run(run)
    except TauError as local_miss:
        from taugrid.runs.backends.kube.backend import adopt_remote

        try:
            found = adopt_remote(run, context)
        except TauError as e:  # say both: not here, and why the cluster could not be asked
            local_miss.hint = f"{local_miss.hint}; the cluster could not be asked: {e.message}"
            raise local_miss from None
        if found is None:
            raise local_miss from None
        return found


def record(run: str, *, context: str | None = None) -> RunRecord:
    return find(run, context=context).read_record()


def backend_of(rd: RunDir, context: str | None = None, say: Say = _quiet) -> Backend:
    """The backend of a recorded run, through the kubeconfig context `base.context_for` picks
    (`context` or TAU_CONTEXT first; `say` hears when the recorded one is not used)."""
    from taugrid.runs.backends import base

    return base.for_record(rd.read_record(), context, say)


def statuses(runs: list[str], *, context: str | None = None, say: Say = _quiet) -> list[RunStatus]:
    """The status of several runs (one gather per backend: never one call per run)."""
    dirs = [find(r, context=context) for r in runs]
    return _statuses(dirs, context=context, say=say, tolerate=False)


def _statuses(
    dirs: list[RunDir], say: Say = _quiet, context: str | None = None, tolerate: bool = True
) -> list[RunStatus]:
    """Each run's status: an ended and sealed cluster run from its record (no cluster needed),
    the others with one gather per backend and kubeconfig context (`base.context_for`: an
    explicit `context` or TAU_CONTEXT, else the recorded one the kubeconfig has, else the
    current one, said once). With `tolerate`, a cluster that does not answer is said, and its
    runs are shown from their local records (else its error is raised)."""
    from taugrid.api.observations import Observations
    from taugrid.kube import kubeconfig
    from taugrid.runs import status as engine
    from taugrid.runs.backends import base

    done: dict[str, RunStatus] = {}
    groups: dict[tuple[str, str | None], list[RunDir]] = {}
    known: tuple[list[str], str | None] | None = None
    notes: set[str] = set()
    for rd in dirs:
        rec = rd.read_record()
        if _ended_here(rd, rec):  # its end is recorded and sealed: no cluster needed
            done[rd.run_id] = rd.final_status() or engine.compute(_offline(rd, rec))
            continue
        if rec.target != "local" and known is None:
            known = kubeconfig.contexts()  # read once for all the runs
        chosen = base.context_for(rec, context, notes.add, known)
        groups.setdefault((rec.target, chosen), []).append(rd)
    for note in sorted(notes):
        say(note)
    for (target, chosen), group in groups.items():  # one backend per target and context
        backend = base.get(target, **({"context": chosen} if chosen else {}))
        try:
            observed = backend.observe(group)
        except TauError as e:
            if not tolerate:
                raise
            say(f"note: {len(group)} {target} run(s) shown from their local records: {e.message}")
            observed = [
                Observations(
                    record=rd.read_record(),
                    history=rd.read_history(),
                    now=time.time(),
                    owner_alive=None,
                    evidence=str(rd.path),
                )
                for rd in group
            ]
        for rd, obs in zip(group, observed, strict=True):
            done[rd.run_id] = engine.compute(obs)
            _seal_if_ended(rd, done[rd.run_id])
    return [done[rd.run_id] for rd in dirs]


def _ended_here(rd: RunDir, rec: RunRecord) -> bool:
    from taugrid.api.vocabulary import TERMINAL

    return rec.target != "local" and rec.phase in TERMINAL and rd.sealed


def _offline(rd: RunDir, rec: RunRecord) -> Any:
    from taugrid.api.observations import Observations

    return Observations(
        record=rec,
        history=rd.read_history(),
        now=time.time(),
        owner_alive=None,
        sealed=True,
        evidence=str(rd.path),
    )


def _seal_if_ended(rd: RunDir, st: RunStatus) -> None:
    """A cluster run's local record learns the run's end the first time it is seen, wherever
    from (a detached run included), and is sealed once. (A local run's end is recorded by its
    supervisor, or by `attach` when the supervisor died.)"""
    from taugrid.api.vocabulary import TERMINAL

    if st.target != "local" and st.phase in TERMINAL:
        rd.record_end(st)


def status(run: str, *, context: str | None = None, say: Say = _quiet) -> RunStatus:
    """Where the run is and, if it is stuck, why: the phase, six signals, one sentence."""
    return statuses([run], context=context, say=say)[0]


def watch(
    run: str, *, context: str | None = None, poll_s: float = 1.0, say: Say = _quiet
) -> Iterator[RunStatus]:
    """The run's status each time it changes (a watch where the backend has one), until it
    ends; the first status at once."""
    from taugrid.api.vocabulary import TERMINAL
    from taugrid.runs import status as engine
    from taugrid.runs.backends import base

    rd = find(run, context=context)
    backend = backend_of(rd, context, say)
    ticks = backend.changes([rd]) if isinstance(backend, base.Watches) else None
    last: dict[str, Any] | None = None
    while True:
        if ticks is not None:
            next(ticks)
        st = engine.compute(backend.observe([rd])[0])
        doc = st.model_dump(mode="json", exclude={"duration_s"})
        if doc != last:
            yield st
        last = doc
        if st.phase in TERMINAL:
            _seal_if_ended(rd, st)
            return
        if ticks is None:
            time.sleep(poll_s)


class StatusCache:
    """The statuses of ended runs, kept between calls by a long-lived caller (the portal): an
    ended run's status changes only when its record does (a sealed cluster run's end, say),
    so a run whose record file is unchanged is not read or computed again."""

    def __init__(self) -> None:
        self._by_id: dict[str, tuple[tuple[int, int], RunStatus]] = {}

    def get(self, run_id: str, stamp: tuple[int, int]) -> RunStatus | None:
        hit = self._by_id.get(run_id)
        return hit[1] if hit is not None and hit[0] == stamp else None

    def put(self, run_id: str, stamp: tuple[int, int], st: RunStatus) -> None:
        from taugrid.api.vocabulary import TERMINAL

        if st.phase in TERMINAL:
            self._by_id[run_id] = (stamp, st)


def list_runs(
    *, context: str | None = None, say: Say = _quiet, cache: StatusCache | None = None
) -> list[RunStatus]:
    """The runs submitted from this machine, newest last, each with its status: the ended ones
    from their sealed records, the others from their backends (a cluster that does not answer:
    its runs from their local records, and `say` says so). With `cache`, an ended run whose
    record is unchanged since the last call is taken from it."""
    from taugrid.runs.evidence import RunDir
    from taugrid.runs.index import list_runs as local_runs
    from taugrid.runs.index import record_stamps
    from taugrid.runs.paths import runs_root

    known: dict[str, RunStatus] = {}
    stamps: dict[str, tuple[int, int]] = {}
    if cache is not None:  # one scan and a stat per run; only what changed is read
        root = runs_root()
        todo = []
        for run_id, stamp in record_stamps():
            hit = cache.get(run_id, stamp)
            if hit is not None:
                known[run_id] = hit
            else:
                stamps[run_id] = stamp
                todo.append(RunDir(root / run_id))
    else:
        todo = local_runs()
    dirs = []
    for rd in todo:
        try:
            rd.read_record()
        except TauError:  # an unreadable record is not listed (verify says why)
            continue
        dirs.append(rd)
    for rd, st in zip(dirs, _statuses(dirs, say, context), strict=True):
        known[rd.run_id] = st
        if cache is not None:
            cache.put(rd.run_id, stamps[rd.run_id], st)
    return sorted(known.values(), key=lambda s: s.created_at)


def cluster_runs(
    *, workspace: str | None = None, mine: bool = False, context: str | None = None
) -> list[RunStatus]:
    """The runs of a cluster's workspace (every TauRun the user may read, whoever submitted
    it, from any machine), from what the controller recorded on each."""
    from taugrid.runs.backends.kube.backend import KubeBackend

    return KubeBackend(context).workspace_runs(workspace, mine=mine)


def logs(
    run: str, out: TextIO | None = None, *, context: str | None = None, say: Say = _quiet
) -> None:
    """Write what the run has logged so far to `out` (default stdout)."""
    rd = find(run, context=context)
    backend_of(rd, context, say).logs(rd, out or sys.stdout)


def follow(
    run: str | RunDir,
    out: TextIO | None = None,
    err: TextIO | None = None,
    *,
    transitions: bool = True,
    context: str | None = None,
    say: Say = _quiet,
) -> Phase:
    """Stream the run's log (and, with `transitions`, each change of phase to `err`) until it
    ends; its final phase. A backend that cannot stream: waits for the end."""
    from taugrid.runs.backends import base

    rd = find(run, context=context) if isinstance(run, str) else run
    backend = backend_of(rd, context, say)
    if isinstance(backend, base.Follows):
        phase = backend.follow(rd, out or sys.stdout, err or sys.stderr, transitions=transitions)
        _settle(rd, phase)
        return phase
    return wait(rd.run_id, context=context)


def _settle(rd: RunDir, phase: Phase) -> None:
    """A run seen ended: its record's end is written and sealed before the caller hears of it
    (`verify` right after `follow` or `wait` finds the seal)."""
    from taugrid.api.vocabulary import TERMINAL

    if phase in TERMINAL:
        rd.settled()


def wait(
    run: str, *, context: str | None = None, timeout_s: float | None = None, say: Say = _quiet
) -> Phase:
    """Block until the run ends (or `timeout_s` passes: TauError, exit 3); its final phase."""
    from taugrid.api.errors import EXIT_NOT_ADMITTED

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    st = None
    for st in watch(run, context=context, say=say):
        if deadline is not None and time.monotonic() > deadline:
            raise TauError(
                f"{run} did not end within {timeout_s:.0f}s ({st.phase})",
                exit_code=EXIT_NOT_ADMITTED,
            )
    assert st is not None
    _settle(find(run, context=context), st.phase)
    return st.phase


@dataclass(frozen=True)
class Cancelled:
    run_id: str
    phase: Phase  # the phase it ended in
    had_ended: bool  # it had ended before the cancel


def cancel(run: str, *, context: str | None = None, say: Say = _quiet) -> Cancelled:
    """Stop a run (a run that had ended is left as it is)."""
    from taugrid.api.vocabulary import TERMINAL

    rd = find(run, context=context)
    before = rd.read_record().phase
    return Cancelled(rd.run_id, backend_of(rd, context, say).cancel(rd), before in TERMINAL)


def attach(run: str, *, context: str | None = None, say: Say = _quiet) -> RunDir:
    """Give a run whose owner died a new one (local: a new supervisor adopts it, or its record
    is closed as Failed; cluster: an interrupted submission is sent again). TauError exit 1
    when it had ended or nothing is left of it; the run's record otherwise (then `follow`)."""
    from taugrid.api.vocabulary import TERMINAL
    from taugrid.runs.backends import base

    rd = find(run, context=context)
    rec = rd.read_record()
    backend = backend_of(rd, context, say)
    if rec.phase in TERMINAL:
        raise TauError(
            f"{rd.run_id} has already ended: {rec.phase}",
            exit_code=0 if rec.phase == "Succeeded" else EXIT_RUN_FAILED,
        )
    if not isinstance(backend, base.Attaches):
        raise TauError(f"runs on {rec.target} cannot be re-attached by this build")
    if not backend.attach(rd, say):
        now = rd.read_record()
        raise TauError(f"{rd.run_id}: {now.phase}: {now.reason}", exit_code=EXIT_RUN_FAILED)
    return rd


def resume(
    run: str,
    *,
    context: str | None = None,
    ray_pip: bool = False,
    python: str | None = None,
    say: Say = _quiet,
) -> Submitted:
    """A new run from the newest complete checkpoint of an ended one (lineage kept in both)."""
    from taugrid.api.vocabulary import TERMINAL
    from taugrid.runs import load
    from taugrid.runs import status as engine
    from taugrid.runs.backends import base
    from taugrid.runs.prepare import RunRequest

    parent = find(run, context=context)
    rec = parent.read_record()
    backend = backend_of(parent, context, say)
    phase, _ = engine.effective_phase(backend.observe([parent])[0])
    if phase not in TERMINAL:
        raise TauError(
            f"{parent.run_id} is still {phase.lower()}",
            hint=f"tau run cancel {parent.run_id} first",
        )
    if not isinstance(backend, base.Resumes):
        raise TauError(f"runs on {rec.target} cannot be resumed by this build")
    ckpt = backend.newest_checkpoint(parent)
    if ckpt is None:
        raise TauError(
            f"{parent.run_id} has no complete checkpoint to resume from: nothing was submitted",
            exit_code=EXIT_NOT_ADMITTED,
            hint=f"`tau run submit` starts it again from step 0; `tau run status {parent.run_id}` "
            "shows what it saved",
        )
    folder = Path(rec.code_folder)
    if not folder.is_dir():
        raise TauError(
            f"{parent.run_id}'s code folder {folder} is not on this machine",
            hint="resume it from the machine that submitted it",
        )
    loaded = load.load_manifest(folder)
    if loaded.manifest.config_hash() != rec.config_hash:
        say("note: tau.yaml changed since the original run; the current one is used")
    say(f"resuming {parent.run_id} from {ckpt}")
    # the versions the parent read, even if an alias moved since
    pinned = tuple(rec.inputs) if rec.inputs else None
    request = RunRequest(loaded, resume_from=ckpt, parent=parent.run_id, inputs=pinned)
    options = base.SubmitOptions(ray_pip=ray_pip, python=python)
    rd = backend.submit(backend.prepare(request), options, say)
    parent.record_child(rd.run_id, ckpt)
    if isinstance(backend, base.RecordsLineage):
        backend.record_child(parent, rd.run_id)
    return Submitted(rd.read_record(), rd.path)


def verify(run: str, *, context: str | None = None, say: Say = _quiet) -> Verified:
    """Check a run's sealed evidence record against its MANIFEST.sha256 (a cluster run that
    ended but whose local record was not sealed yet is sealed first, from its status)."""
    rd = find(run, context=context)
    if not rd.settled():  # an end being recorded right now is waited for
        from contextlib import suppress

        with suppress(TauError):  # the cluster may be gone: then "not sealed yet" is the truth
            _statuses([rd], say, context, tolerate=False)
    return verify_where_it_lies(rd, lambda: _record_source(rd, context))


@dataclass(frozen=True)
class Artifacts:
    """What a run left in its evidence record: complete checkpoints (newest last), output
    files (relative paths, at most `limit`), and the runs resumed from it. A cluster run's are
    read from its record on the workspace volume; `note` says why they could not be."""

    checkpoint_dir: str
    checkpoints: list[dict[str, Any]]
    output_dir: str
    outputs: list[str]
    more_outputs: int
    children: list[str]
    note: str | None = None


def artifacts(run: str, *, context: str | None = None, limit: int = 200) -> Artifacts:
    """A run's checkpoints (complete ones), outputs (the first `limit`) and the runs that
    resumed it; a cluster run's read off its workspace volume (`note` says why not)."""
    import json

    rd = find(run, context=context)
    rec = rd.read_record()
    children = _resumed_by(rd)
    if rec.target == "local":
        out_dir = rd.path / rec.output_subdir
        files = (
            sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file())
            if out_dir.is_dir()
            else []
        )
        return Artifacts(
            str(rd.checkpoint_dir(rec.checkpoint_subdir)),
            rd.complete_checkpoints(rec.checkpoint_subdir),
            str(out_dir),
            files[:limit],
            max(0, len(files) - limit),
            children,
        )
    volume = f"{C.run_dir(rec.run_id)} on the volume of workspace {rec.workspace}"
    ckpt_dir, out_prefix = rec.checkpoint_subdir.strip("/"), rec.output_subdir.strip("/") + "/"
    try:
        source = _record_source(rd, context)
        tree = source.tree()
        index = (
            json.loads(source.text(f"{ckpt_dir}/{C.CHECKPOINT_INDEX_FILENAME}"))
            if any(f.path == f"{ckpt_dir}/{C.CHECKPOINT_INDEX_FILENAME}" for f in tree)
            else {}
        )
    except (TauError, ValueError) as e:
        note = e.message if isinstance(e, TauError) else f"its checkpoint index is not JSON ({e})"
        return Artifacts(
            f"{volume}/{ckpt_dir}", [], f"{volume}/{out_prefix}", [], 0, children, note
        )
    folders = {
        f.path.split("/")[1]
        for f in tree
        if f.path.startswith(ckpt_dir + "/") and f.path.count("/") >= 2
    }
    entries = index.get("complete") if isinstance(index, dict) else None
    done = [e for e in entries or [] if isinstance(e, dict) and e.get("path") in folders]
    files = sorted(f.path.removeprefix(out_prefix) for f in tree if f.path.startswith(out_prefix))
    return Artifacts(
        f"{volume}/{ckpt_dir}",
        done,
        f"{volume}/{out_prefix}",
        files[:limit],
        max(0, len(files) - limit),
        children,
    )


def _resumed_by(rd: RunDir) -> list[str]:
    """The runs that resumed this one, from its lineage."""
    import json

    children = []
    try:
        for line in (rd.path / "lineage.jsonl").read_text(encoding="utf-8").splitlines():
            try:
                child = json.loads(line).get("resumed_by")
            except (ValueError, AttributeError):
                continue
            if isinstance(child, str):
                children.append(child)
    except FileNotFoundError:
        pass
    return children


def metrics(run: str, *, context: str | None = None, say: Say = _quiet) -> list[dict[str, Any]]:
    """Metric rows (`{"step", "ts", <name>: number, "run_id"}`) across the run's resume
    lineage: a resumed run continues its parents' curves. A cluster run's are read from its
    record on the workspace volume (while it runs, and after its pods are gone). Rows of a
    sealed record whose metrics file is no longer what its manifest says are shown, and that
    is said through `say` (the numbers are not the run's own)."""
    from taugrid.runs.evidence import parse_metric_rows
    from taugrid.runs.index import lineage_metric_rows
    from taugrid.runs.pull import RecordMissing

    def rows_of(rd: RunDir) -> list[dict[str, Any]]:
        source = _record_source(rd, context)  # a local run's folder, a cluster run's volume
        try:
            rows = parse_metric_rows(source.text(C.METRICS_FILENAME))
        except RecordMissing:
            return []  # no metric logged yet
        check_metrics(rd.run_id, source, say)
        return rows

    return lineage_metric_rows(find(run, context=context), rows_of)


def _record_source(rd: RunDir, context: str | None) -> RecordSource:
    from taugrid.runs.backends.base import ReadsRecord

    backend = backend_of(rd, context)
    if not isinstance(backend, ReadsRecord):
        raise TauError(
            f"the {rd.read_record().target} target cannot read a run's record", exit_code=EXIT_USAGE
        )
    return backend.record_source(rd)


def check_in_place(run: str, folder: str, *, context: str | None = None) -> Checked:
    """Every file of `folder` (under the run's record, e.g. checkpoints/step-9) hashed where the
    run keeps it (a cluster run's: by its workspace's file server, the bytes stay in the
    cluster) and checked against the sealed manifest; raises naming what is not."""
    from taugrid.runs.pull import check_in_place as check

    rd = find(run, context=context)
    return check(_record_source(rd, context), folder)


def pull(
    run: str,
    *,
    to: str | Path | None = None,
    kinds: Iterable[str] = (),
    force: bool = False,
    context: str | None = None,
    progress: Callable[[int, str], None] | None = None,
    total: Callable[[int, int], None] | None = None,
) -> Pulled:
    """Copy a run's record (or only its outputs, checkpoints, metrics, logs) from where the run
    keeps it (a cluster run: its workspace volume, from any machine that may read the workspace,
    after its pods are gone) into `to` (default: ./RUN-ID), each file checked against the
    sealed MANIFEST.sha256; a cut-off pull resumes; local edits are kept unless `force`.
    `Pulled.ok` is False when a file is not what the manifest says, or is missing."""
    from taugrid.runs.pull import pull as pull_record

    if to is not None:
        check_folder(to, "--to")
    rd = find(run, context=context)
    dest = Path(to) if to is not None else check_folder(Path.cwd() / rd.run_id, "the folder")
    source = _record_source(rd, context)
    return pull_record(source, rd.read_record(), dest, set(kinds), force, progress, total)
