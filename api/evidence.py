"""The evidence record of a run: run.json, history.jsonl rows, and the one way a run changes
phase (`transition`). Pure: the store that writes these is taugrid.runs.evidence.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from taugrid.api import constants as C
from taugrid.api.defaults import new_list
from taugrid.api.vocabulary import TERMINAL, Phase, ResolvedInput, TerminationReason


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)


class Lineage(_Model):
    run_id: str
    checkpoint: str | None = None


# --- where a run lives: one typed handle per target ---------------------------------------------
class LocalHandle(_Model):
    """A run on this machine: a supervisor process, and a process group or a local Ray job."""

    target: Literal["local"] = "local"
    supervisor_pid: int | None = None
    process_group: int | None = None
    ray_address: str | None = None
    ray_submission_id: str | None = None


class KubeHandle(_Model):
    """A run submitted to a cluster's API server (its TauRun object is the run's owner)."""

    target: Literal["kube"] = "kube"
    context: str | None = None
    namespace: str
    cluster: str | None = None
    queue: str | None = Field(None, description="The run's LocalQueue (older records: unknown)")
    sent: bool = Field(
        True,
        description="The cluster has the run (False from the record's "
        "creation until the cluster accepted it: an interrupted submission)",
    )
    uid: str | None = Field(
        None,
        description="The TauRun's metadata.uid once the cluster has it: the run is this "
        "object, whichever kubeconfig context it is looked at through (older records: none)",
    )


class PulumiHandle(_Model):
    """A run whose objects are an ephemeral Pulumi stack."""

    target: Literal["pulumi"] = "pulumi"
    stack: str
    backend_url: str | None = None
    expires_at: str | None = None
    namespace: str
    context: str | None = None
    queue: str | None = None
    sent: bool = True
    uid: str | None = None  # the TauRun's metadata.uid, as KubeHandle's


Handle = Annotated[LocalHandle | KubeHandle | PulumiHandle, Field(discriminator="target")]
Target = Literal["local", "kube", "pulumi"]
_LOCAL_FIELDS = ("supervisor_pid", "process_group", "ray_address", "ray_submission_id")


class RunRecord(_Model):
    """run.json: written when the run is created and rewritten (atomically) as it goes."""

    schema_version: Literal[1] = 1
    run_id: str
    name: str
    workspace: str
    profile: str
    experiment: str | None = None  # tau.yaml's experiment name (a label: filters and groups)
    workload_kind: Literal["job", "rayjob"]
    handle: Handle
    submitter: str
    code_folder: str
    code_revision: str
    code_digest: str
    config_hash: str
    image: str
    entrypoint: str
    created_at: str
    started_at: str | None = None
    finished_at: str | None = None
    phase: Phase = Phase.Pending
    reason: str | None = None
    termination_reason: TerminationReason | None = None
    exit_code: int | None = None
    attempt: int = 0
    max_retries: int = 0
    workers: int = 1
    gpus_per_worker: int = 0
    gpus_available: int = 0
    stall_after_seconds: int = 900
    inputs: list[ResolvedInput] = Field(default_factory=new_list)  # data, by exact version
    primary_metric: str | None = None
    metric_direction: Literal["lower", "higher"] | None = None
    checkpoint_subdir: str = C.DEFAULT_CHECKPOINT_SUBDIR
    output_subdir: str = C.DEFAULT_OUTPUT_SUBDIR
    warnings: list[str] = Field(default_factory=new_list)
    resumed_from: Lineage | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def target(self) -> Target:
        return self.handle.target

    @model_validator(mode="before")
    @classmethod
    def _older_records(cls, data: Any) -> Any:
        """Records written before the handle existed kept its fields at the top level."""
        if isinstance(data, dict) and "handle" not in data:
            data = dict(data)
            handle = {k: data.pop(k) for k in _LOCAL_FIELDS if k in data}
            data["handle"] = {"target": data.get("target", "local"), **handle}
        return data

    @property
    def local(self) -> LocalHandle:
        """The local handle (a TypeError for runs of other targets: a bug, not a user error)."""
        if not isinstance(self.handle, LocalHandle):
            raise TypeError(f"run {self.run_id} is a {self.target} run, not a local one")
        return self.handle


class HistoryEvent(_Model):
    """One line of history.jsonl: a status transition."""

    ts: str
    phase: Phase
    reason: str | None = None
    termination_reason: TerminationReason | None = None
    message: str | None = None
    attempt: int = 0


class TerminalStateError(Exception):
    """A transition out of a terminal phase: the run has ended and its record is final."""

    def __init__(self, rec: RunRecord, wanted: Phase) -> None:
        super().__init__(
            f"run {rec.run_id} has already ended ({rec.phase}); refusing to change it to {wanted}"
        )
        self.phase = rec.phase


def transition(
    rec: RunRecord,
    phase: Phase,
    reason: str | None,
    *,
    now: str,
    attempt: int | None = None,
    termination: TerminationReason | None = None,
    exit_code: int | None = None,
    **fields: Any,
) -> tuple[RunRecord, HistoryEvent | None]:
    """The record after a change of phase, and the history event that records it.

    Terminal phases are final (TerminalStateError). Times are stamped here: `started_at` at the
    first Starting/Running, `finished_at` at the end. Setting the same phase, reason and attempt
    again is no change: (rec, None), so history holds one line per change. `fields` are other
    record fields to update in the same write (e.g. the handle).
    """
    if rec.phase in TERMINAL:
        raise TerminalStateError(rec, phase)
    attempt = rec.attempt if attempt is None else attempt
    if phase in TERMINAL and termination is None:
        termination = TerminationReason.for_phase(phase)
    changed = (phase, reason, attempt) != (rec.phase, rec.reason, rec.attempt)
    update: dict[str, Any] = dict(fields)
    if changed:
        update.update(phase=phase, reason=reason, attempt=attempt)
        if termination is not None:
            update["termination_reason"] = termination
        if phase in (Phase.Starting, Phase.Running) and rec.started_at is None:
            update["started_at"] = now
        if phase in TERMINAL:
            update["finished_at"] = now
            if exit_code is not None:
                update["exit_code"] = exit_code
    if not update:
        return rec, None
    new = rec.model_copy(update=update)
    if not changed:
        return new, None
    event = HistoryEvent(
        ts=now, phase=phase, reason=reason, termination_reason=termination, attempt=attempt
    )
    return new, event
