"""The evidence record of a run: run.json, history.jsonl rows, and the status signals. Pure."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Phase = Literal["Pending", "Starting", "Running", "Retrying", "Succeeded", "Failed", "Cancelled"]
TERMINAL: frozenset[str] = frozenset({"Succeeded", "Failed", "Cancelled"})
SignalState = Literal["true", "false", "pending", "unknown"]
SIGNALS = ("Admitted", "Scheduled", "GPUHealthy", "Progressing", "Completed", "ArtifactSaved")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)


class Lineage(_Model):
    run_id: str
    checkpoint: str | None = None


class RunRecord(_Model):
    """run.json: written when the run is created and rewritten (atomically) as it goes."""

    schema_version: Literal[1] = 1
    run_id: str
    name: str
    workspace: str
    profile: str
    workload_kind: Literal["job", "rayjob"]
    target: Literal["local", "kube", "pulumi"]
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
    phase: Phase = "Pending"
    reason: str | None = None
    exit_code: int | None = None
    attempt: int = 0
    max_retries: int = 0
    workers: int = 1
    gpus_per_worker: int = 0
    gpus_available: int = 0
    stall_after_seconds: int = 900
    primary_metric: str | None = None
    warnings: list[str] = Field(default_factory=list)
    resumed_from: Lineage | None = None
    supervisor_pid: int | None = None
    process_group: int | None = None
    ray_address: str | None = None
    ray_submission_id: str | None = None


class HistoryEvent(_Model):
    """One line of history.jsonl: a status transition."""

    ts: str
    phase: Phase
    reason: str | None = None
    message: str | None = None
    attempt: int = 0


class Signal(_Model):
    name: str
    state: SignalState
    since: str | None = None
    reason: str = ""
    evidence: str = ""


class RunStatus(_Model):
    run_id: str
    name: str
    phase: Phase
    target: str
    workload_kind: str
    attempt: int
    created_at: str
    finished_at: str | None
    signals: list[Signal]
    summary: str
    exit_code: int | None = None
