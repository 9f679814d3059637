"""What a backend observes of one run at one moment: the inputs of status (runs/status.py).

Pure data (no I/O): the kube layer (taugrid.kube.facts) fills `ClusterFacts` from the cluster's
objects, the backends fill `Observations`, and `runs.status.compute` turns them into a RunStatus.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from taugrid.api.crds import TauRunStatus
from taugrid.api.defaults import new_list
from taugrid.api.evidence import HistoryEvent, RunRecord


class RunProgress(BaseModel):
    """A run's progress as its record on a volume says it (`tau_evidence.progress`, served by
    the workspace's file server): read from outside, so checked."""

    model_config = ConfigDict(extra="ignore")

    metric_rows: int = 0
    last_step: int | None = None
    latest_metrics: dict[str, float | int | str | None] = Field(default_factory=dict)
    last_metric_ts: float | None = None  # the reader's clock (unix seconds)
    last_log_ts: float | None = None
    checkpoints: int = 0
    newest_checkpoint: str | None = None
    newest_checkpoint_step: int | None = None
    outputs: int = 0
    sealed: bool = False
    last_error: str | None = None  # the driver log's last error-looking line (else its last)
    now: float | None = None  # the reader's clock when it read

    def skewed(self, now: float) -> RunProgress:
        """The same, its times moved to this machine's clock (`now`): "seconds since the last
        report" then means the same on both sides, whatever the clocks say."""
        if self.now is None:
            return self
        d = now - self.now
        return self.model_copy(
            update={
                "last_metric_ts": self.last_metric_ts + d if self.last_metric_ts else None,
                "last_log_ts": self.last_log_ts + d if self.last_log_ts else None,
                "now": now,
            }
        )


class VolumeFile(BaseModel):
    """A file on a workspace volume, as its file server lists it."""

    model_config = ConfigDict(extra="ignore")

    path: str
    size: int
    mtime: float


@dataclass(frozen=True)
class PodFact:
    name: str
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    node: str | None
    unschedulable: str | None = None  # PodScheduled=False: the scheduler's message
    waiting: str | None = None  # a container stuck: "ImagePullBackOff: ...", "CrashLoopBackOff"
    since: str | None = None
    node_rank: int | None = None  # a multi-node torchrun job's node (its Indexed Job's index)
    # how it ended, where not on its own: its node lost (the pod's status reason), a disruption
    # (DisruptionTarget's reason: "PreemptionByScheduler", "EvictionByEvictionAPI", ...), a
    # container the kernel killed over its memory limit (its name, and the limit if it had one)
    node_lost: bool = False
    disruption: str | None = None
    oom_killed: str | None = None
    memory_limit: str | None = None


@dataclass(frozen=True)
class ClusterFacts:
    """What a cluster says about one run (from one LIST per kind, shared by every run)."""

    taurun: bool  # the TauRun (the run's owner) exists
    workload: bool  # the RayJob / Job exists
    suspended: bool | None = None
    finished: str | None = None  # "Succeeded" | "Failed" when the workload says so
    finished_at: str | None = None  # when the workload says it ended
    started_at: str | None = None  # when the workload says it started
    workload_message: str | None = None
    kueue: list[dict[str, str]] | None = None  # the Kueue Workload's conditions; None: none yet
    cluster_queue: str | None = None
    queue: str | None = None  # the LocalQueue
    # MultiKueue (a manager's Workload): the worker that runs it, or those offered it so far
    worker: str | None = None
    nominated: list[str] = field(default_factory=new_list)
    # a dispatched run's pods are the worker's: how many are ready there, as the workload's
    # status (MultiKueue copies it back) says (None: not said)
    remote_ready: int | None = None
    remote_succeeded: int | None = None  # and how many ended well (a Job's copied status)
    remote_active: int | None = None  # and how many have not ended
    was_running: bool = False  # its status was recorded Running (never "starting" again after)
    position: int | None = None
    position_note: str | None = None  # why the position is unknown
    pods: list[PodFact] = field(default_factory=new_list)
    warnings: list[tuple[str, str, str]] = field(default_factory=new_list)  # (reason, message, ts)
    node_problems: dict[str, list[str]] = field(default_factory=dict)  # node -> bad conditions
    nodes_visible: bool = True
    recorded: TauRunStatus | None = None  # TauRun.status, as the controller recorded it
    ran_on: list[str] = field(default_factory=new_list)  # nodes it was recorded on (pods gone)
    retries: int = 0  # attempts the cluster itself made again (a Job's failed pods, retried)
    # TauRun.status is current (the controller is alive, or the run ended): it is the answer,
    # nothing else was read; `heartbeat` is when the controller last said it is alive.
    current: bool = False
    heartbeat: str | None = None
    # the run's record on the workspace volume, read through its file server (None: not read,
    # and `progress_note` says why)
    progress: RunProgress | None = None
    progress_note: str | None = None

    @property
    def from_record(self) -> bool:
        """Only the controller's record explains the run: it is current, or the run's workload
        and pods are gone."""
        gone = not self.workload and not self.pods
        return bool(self.recorded and self.recorded.phase and (self.current or gone))

    @property
    def placed_on(self) -> str | None:
        """The MultiKueue worker whose pods and volume hold the run: its Workload's, else the
        one the controller recorded (an ended run's Workload may be gone or no longer say)."""
        return self.worker or (self.recorded.cluster if self.recorded else None)


@dataclass(frozen=True)
class Observations:
    """Everything status needs about one run, gathered by its backend at one moment."""

    record: RunRecord
    history: list[HistoryEvent]
    now: float  # unix seconds
    owner_alive: bool | None  # the process that owns the run (local supervisor); None: n/a
    orphans: int = 0  # processes of the run still alive while its owner is gone
    last_metric_ts: float | None = None  # mtime of metrics.jsonl
    last_log_ts: float | None = None  # mtime of the newest log
    metric_rows: int = 0
    last_step: int | None = None
    checkpoints: int = 0
    newest_checkpoint: str | None = None
    sealed: bool = False
    outputs: int = 0  # files under the run's storage.output folder
    latest_metrics: dict[str, float | int | str] = field(default_factory=dict)  # the last row
    last_error: str | None = None  # the last error-looking line of the log
    evidence: str | None = None  # where the evidence record is
    cluster: ClusterFacts | None = None  # runs on a cluster: what it says
    extra: dict[str, str] = field(default_factory=dict)
