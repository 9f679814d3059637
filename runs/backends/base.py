"""The backend interface: what every target (local, kube, pulumi) does, and the registry.

A backend prepares a run against its platform's profiles, submits it, gathers observations
for status (one gather for many runs), prints logs, and cancels. Everything else (reading
tau.yaml, resolve, render, the evidence store, status) is the backend-neutral engine in
`taugrid.runs`. Optional abilities are small protocols a backend may also implement; the CLI
checks for them with isinstance. Adding a backend: a module with a class that satisfies
`Backend`, and one line in `REGISTRY`; no command changes.
"""

from __future__ import annotations

import contextlib
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TextIO, runtime_checkable

from taugrid.api.errors import EXIT_USAGE, TauError
from taugrid.api.evidence import TerminalStateError
from taugrid.api.vocabulary import TERMINAL, Phase, TerminationReason

if TYPE_CHECKING:
    from taugrid.api.evidence import RunRecord
    from taugrid.api.observations import Observations
    from taugrid.runs.evidence import RunDir
    from taugrid.runs.prepare import PreparedRun, RunRequest
    from taugrid.runs.pull import RecordSource

Say = Callable[[str], None]


@dataclass(frozen=True)
class SubmitOptions:
    strict: bool = False  # fail instead of degrading (e.g. GPU work on CPU)
    ray_pip: bool = False  # local rayjob: let Ray build runtime.pip
    python: str | None = None  # local: the interpreter that runs the entrypoint


@runtime_checkable
class Backend(Protocol):
    name: str

    def prepare(self, request: RunRequest) -> PreparedRun:
        """Resolve the request against this target's profiles (invalid: TauError, exit 2)."""
        ...

    def submit(self, prepared: PreparedRun, options: SubmitOptions, say: Say) -> RunDir:
        """Record the run (its evidence record exists before anything runs) and start it."""
        ...

    def observe(self, runs: Sequence[RunDir], now: float | None = None) -> list[Observations]:
        """Observations of many runs, gathered at once (never one call per run)."""
        ...

    def logs(self, run: RunDir, out: TextIO) -> None:
        """Print what the run has logged so far."""
        ...

    def cancel(self, run: RunDir) -> Phase:
        """Stop the run; the phase it ended in."""
        ...


class Template(ABC):
    """The order of a submission and of a cancel, written once; each backend fills in the
    steps. Submit: check the options -> idempotency (the same run again returns its record) ->
    write the local record -> start. The record exists before anything is sent or started, so
    an interruption between the two leaves a record that status, cancel and attach understand.
    Cancel: a run that has ended is left as it is -> one that ended on its own is recorded so
    -> stop -> the Cancelled transition (unless the run's owner recorded its end meanwhile)."""

    name: str

    def submit(self, prepared: PreparedRun, options: SubmitOptions, say: Say) -> RunDir:
        self.check_options(prepared, options)
        again = self.already_submitted(prepared, say)
        if again is not None:
            return again
        run = self.record(prepared, options, say)
        try:
            self.start(run, prepared, options, say)
        except BaseException as e:
            self.start_failed(run, e)
            raise
        return run

    def cancel(self, run: RunDir) -> Phase:
        rec = run.read_record()
        if rec.phase in TERMINAL:
            return rec.phase
        ended = self.ended_on_its_own(run)
        if ended is not None:
            with contextlib.suppress(TerminalStateError):
                run.transition(ended, f"it ended before the cancel ({ended})")
            return run.read_record().phase
        reason = self.stop(run)
        try:
            return run.transition(
                Phase.Cancelled, reason, termination=TerminationReason.Cancelled
            ).phase
        except TerminalStateError as e:  # its owner recorded the end while it stopped
            return e.phase

    # --- the steps ----------------------------------------------------------------------------
    @abstractmethod
    def check_options(self, prepared: PreparedRun, options: SubmitOptions) -> None:
        """Refuse options this target cannot honour (TauError, exit 2), before anything."""

    def already_submitted(self, prepared: PreparedRun, say: Say) -> RunDir | None:
        """The record of this very run if it was submitted already (None: a new run)."""
        return None

    @abstractmethod
    def record(self, prepared: PreparedRun, options: SubmitOptions, say: Say) -> RunDir:
        """Write the run's local evidence record (built by `PreparedRun.new_record`)."""

    @abstractmethod
    def start(self, run: RunDir, prepared: PreparedRun, options: SubmitOptions, say: Say) -> None:
        """Send or start the recorded run."""

    def start_failed(self, run: RunDir, error: BaseException) -> None:
        """What a failed start leaves: by default the record, closed as Failed."""
        if isinstance(error, TauError):
            with contextlib.suppress(TerminalStateError, TauError):
                run.transition(
                    Phase.Failed,
                    f"could not start: {error.message}",
                    termination=TerminationReason.Failed,
                )

    @abstractmethod
    def ended_on_its_own(self, run: RunDir) -> Phase | None:
        """The terminal phase of a run that ended before the cancel (None: it has not)."""

    @abstractmethod
    def stop(self, run: RunDir) -> str:
        """Stop the run wherever it is; the reason the record keeps."""


@runtime_checkable
class Follows(Protocol):
    """Streams a run's log and transitions until it ends."""

    def follow(
        self, run: RunDir, out: TextIO, err: TextIO, *, transitions: bool = True
    ) -> Phase: ...


@runtime_checkable
class Resumes(Protocol):
    """Starts a new run from a checkpoint of an ended one."""

    def newest_checkpoint(self, run: RunDir) -> str | None: ...


@runtime_checkable
class Attaches(Protocol):
    """Gives a run whose owner died a new owner (or closes its record when nothing is left)."""

    def attach(self, run: RunDir, say: Say) -> bool: ...


@runtime_checkable
class Watches(Protocol):
    """Says when the runs' objects change (a watch), so `status --watch` need not poll."""

    def changes(self, runs: Sequence[RunDir]) -> Iterator[None]: ...


@runtime_checkable
class RecordsLineage(Protocol):
    """Keeps the lineage of a resumed run where the backend keeps runs (e.g. the parent's
    TauRun)."""

    def record_child(self, parent: RunDir, child_id: str) -> None: ...


@runtime_checkable
class ReadsRecord(Protocol):
    """Reads the record the run keeps where it runs (its pods' record on the workspace volume),
    from any machine: progress, metrics, logs after the pods are gone, `tau run pull`."""

    def record_source(self, run: RunDir) -> RecordSource: ...


# target -> "module:Class"; None: planned, not in this build.
REGISTRY: Mapping[str, str | None] = {
    "local": "taugrid.runs.backends.local.backend:LocalBackend",
    "kube": "taugrid.runs.backends.kube.backend:KubeBackend",
    "pulumi": "taugrid.runs.backends.pulumi.backend:PulumiBackend",
}
TARGET_ENV = "TAU_TARGET"
DEFAULT_TARGET = "local"


def targets() -> list[str]:
    return list(REGISTRY)


def get(target: str, **options: Any) -> Backend:
    """The backend of a target (its module is imported now, not before). `options` are the
    target's own (kube: `context`)."""
    if target not in REGISTRY:
        raise TauError(
            f"unknown target {target!r}; targets: {', '.join(REGISTRY)}", exit_code=EXIT_USAGE
        )
    ref = REGISTRY[target]
    if ref is None:
        raise TauError(
            f"the {target} backend is not part of this build yet",
            hint="run locally (--target local), or render with --dry-run --profiles SNAPSHOT",
        )
    module, _, cls = ref.partition(":")
    backend: Backend = getattr(importlib.import_module(module), cls)(**options)
    return backend


def for_record(rec: RunRecord, context: str | None = None, say: Say | None = None) -> Backend:
    """The backend that owns a recorded run. A cluster run's kubeconfig context: `context`
    (`--context`) or `TAU_CONTEXT` when given; else the one it was submitted with when the
    kubeconfig has it; else the current one (`say` is told which, and why)."""
    chosen = context_for(rec, context, say)
    return get(rec.target, **({"context": chosen} if chosen else {}))


def context_for(
    rec: RunRecord,
    context: str | None = None,
    say: Say | None = None,
    known: tuple[list[str], str | None] | None = None,
) -> str | None:
    """The kubeconfig context a recorded run is looked at through (`kubeconfig.choose_context`;
    `known`: the kubeconfig's contexts, when the caller read them already). None for a local
    run."""
    if rec.target == "local":
        return None
    import os

    from taugrid.kube import kubeconfig
    from taugrid.kube.client import CONTEXT_ENV

    explicit = context or os.environ.get(CONTEXT_ENV) or None
    recorded = getattr(rec.handle, "context", None)
    if not explicit and recorded is not None and known is None:
        known = kubeconfig.contexts()
    choice = kubeconfig.choose_context(explicit, recorded, known)
    if choice.note and say is not None:
        say(choice.note)
    return choice.context


def pick_target(explicit: str | None, environ: Mapping[str, str], say: Say) -> str:
    """--target, else $TAU_TARGET, else local (said, so nobody is surprised)."""
    if explicit:
        return explicit
    env = environ.get(TARGET_ENV)
    if env:
        if env not in REGISTRY:
            raise TauError(f"{TARGET_ENV}={env!r} is not one of: {', '.join(REGISTRY)}")
        return env
    say(f"no cluster is configured ({TARGET_ENV} / --target): running locally")
    return DEFAULT_TARGET
