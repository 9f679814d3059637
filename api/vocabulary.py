"""The run vocabulary, defined once: phases, why a run ended, and the six status signals.

The run record (run.json), its history, the TauRun CRD's status, the status engine and the CLI
all use these words and nothing else. Pure: no I/O.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from taugrid.api.defaults import new_list
from taugrid.api.gpuuse import GpuUseStatus


class Phase(StrEnum):
    """Where a run is in its life. The last three are terminal: a run never leaves them."""

    Pending = "Pending"  # recorded; not started (on a cluster: not yet admitted by Kueue)
    Queued = "Queued"  # on a cluster: admitted to a queue, waiting for quota or nodes
    Starting = "Starting"  # owned by a supervisor/controller; processes or pods are starting
    Running = "Running"
    Retrying = "Retrying"  # an attempt ended in a retryable way; the next one is on its way
    Succeeded = "Succeeded"
    Failed = "Failed"
    Cancelled = "Cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL: frozenset[Phase] = frozenset({Phase.Succeeded, Phase.Failed, Phase.Cancelled})

# The reasons `resilience.retry_on` may name (tau.yaml). A Literal, so that the tau.yaml schema
# lists them; TerminationReason below is the full set and classifies itself against this one.
RetryReason = Literal["Preempted", "Evicted", "NodeFailure", "OOMKilled", "Failed"]
RETRYABLE: frozenset[str] = frozenset(get_args(RetryReason))
DEFAULT_RETRY_ON: tuple[RetryReason, ...] = ("Preempted", "Evicted", "NodeFailure")


class TerminationReason(StrEnum):
    """Why an attempt (or the run) ended."""

    Completed = "Completed"  # exit code 0
    Failed = "Failed"  # the run's own code failed (non-zero exit, killed by a signal)
    OOMKilled = "OOMKilled"
    NodeFailure = "NodeFailure"  # the machine under the run failed (a local Ray head died, a node)
    Preempted = "Preempted"  # Kueue preempted the workload for a higher priority one
    Evicted = "Evicted"  # Kueue evicted it (e.g. pods not ready in time)
    Cancelled = "Cancelled"  # a person cancelled it
    SupervisorLost = "SupervisorLost"  # the process that owned the run died without an end

    @property
    def retryable(self) -> bool:
        """Whether `resilience.retry_on` may name this reason at all."""
        return self.value in RETRYABLE

    def retried_by(self, retry_on: list[str] | tuple[str, ...] | frozenset[str]) -> bool:
        """Whether a run whose `resilience.retry_on` is `retry_on` retries after this."""
        return self.retryable and self.value in retry_on

    @classmethod
    def for_phase(cls, phase: Phase) -> TerminationReason | None:
        """The reason a terminal phase implies when nothing more specific is known."""
        return {
            Phase.Succeeded: cls.Completed,
            Phase.Failed: cls.Failed,
            Phase.Cancelled: cls.Cancelled,
        }.get(phase)


class SignalName(StrEnum):
    Admitted = "Admitted"  # Kueue admitted the workload (locally: always)
    Scheduled = "Scheduled"  # its pods (or processes) were placed and started
    GPUHealthy = "GPUHealthy"  # the GPUs under it are healthy
    Progressing = "Progressing"  # metrics or logs advance (stall detection)
    Completed = "Completed"  # the workload ended well (false: failed or cancelled)
    ArtifactSaved = "ArtifactSaved"  # a complete checkpoint or an output exists


SIGNALS: tuple[SignalName, ...] = tuple(SignalName)


class SignalState(StrEnum):
    true = "true"
    false = "false"
    pending = "pending"
    unknown = "unknown"


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)


class Signal(_Model):
    """One of the six answers to "where is it, and why", with the evidence it came from."""

    name: SignalName
    state: SignalState
    since: str | None = Field(None, json_schema_extra={"format": "date-time"})
    reason: str = ""
    evidence: str = ""
    detail: str | None = Field(
        None, description="What the source said, as it said it (e.g. Kueue's message)"
    )


class TimelineEntry(_Model):
    """One line of a run's condensed timeline (repeats fold into `count` and `last`)."""

    at: str = Field(json_schema_extra={"format": "date-time"})
    reason: str = Field(min_length=1)
    message: str = ""
    count: int = Field(1, ge=1)
    last: str | None = Field(None, json_schema_extra={"format": "date-time"})


class ResolvedInput(_Model):
    """A run's input as resolved at submit: exact version, and where the run sees it."""

    kind: Literal["dataset", "model"] = "dataset"
    name: str
    version: str
    path: str  # under $TAU_INPUT_DIR
    ref: str | None = None  # what tau.yaml said (e.g. fineweb@prod)


class RunStatus(_Model):
    """What `tau run status` reports: the phase, one-sentence cause, and the six signals."""

    run_id: str
    name: str
    phase: Phase
    target: str
    workload_kind: str
    attempt: int
    workspace: str | None = None
    experiment: str | None = None
    created_at: str
    finished_at: str | None
    termination_reason: TerminationReason | None = None
    signals: list[Signal]
    summary: str
    exit_code: int | None = None
    started_at: str | None = None
    duration_s: float | None = None  # from start (else creation) to the end, or to now
    last_step: int | None = None
    latest_metrics: dict[str, float | int | str] = Field(default_factory=dict)
    last_error: str | None = None  # the last error line the run logged (failed runs)
    evidence: str | None = None  # where the run's evidence record is
    timeline: list[TimelineEntry] = Field(
        default_factory=new_list
    )  # cluster runs: the controller's
    inputs: list[ResolvedInput] = Field(default_factory=new_list)  # data it reads, by exact version
    gpu_use: GpuUseStatus | None = None  # cluster runs: its GPUs as DCGM reports them (running)
    # a MultiKueue manager's run: the worker clusters it was dispatched to (the last runs it)
    clusters: list[str] = Field(default_factory=new_list)
