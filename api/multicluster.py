"""One queue across clusters (the contract, no I/O): a stack's role in MultiKueue, and what the
manager and each worker must agree on.

A `manager` cluster dispatches admitted workloads to its `workers` (Kueue's MultiKueue: a
MultiKueueCluster per worker, from a kubeconfig Secret, in one MultiKueueConfig, checked by an
AdmissionCheck on every ClusterQueue). A `worker` makes a ServiceAccount scoped to what
MultiKueue does there and publishes a kubeconfig for it as a stack output. Both come from the
same platform program, so their queues are the same declaration; `queue_signature` is what is
compared before a worker is wired (the difference named, not a silent half-dispatch).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from taugrid.api import naming
from taugrid.api.defaults import new_list
from taugrid.api.quantity import go_duration_seconds

MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
ADMISSION_CHECK = "taugrid-multikueue"
MULTIKUEUE_CONFIG = "taugrid"
WORKER_SERVICE_ACCOUNT = "taugrid-multikueue"
KUBECONFIG_KEY = "kubeconfig"  # the key MultiKueue reads in a kubeconfig Secret
KUEUE_NAMESPACE = "kueue-system"  # Kueue's own: its kubeconfig Secrets, a worker's account
KUBECONFIG_OUTPUT = "multikueueKubeconfig"  # the worker stack's output
SIGNATURE_OUTPUT = "queueSignature"  # both stacks' output: what their queues are
NAME_OUTPUT = "multikueueName"  # the worker stack's output: the name its nodes carry
# every stack's output: each workspace's data registry (a manager copies a run's inputs to its
# workers' too: the worker that runs it reads its own)
REGISTRIES_OUTPUT = "workspaceRegistries"
# what a stack reference reads in the offline plan (no other stack can be read there): the
# queues are compared at `up`
OFFLINE = "offline: compared at up"
DISPATCHERS = {
    "Incremental": "kueue.x-k8s.io/multikueue-dispatcher-incremental",
    "AllAtOnce": "kueue.x-k8s.io/multikueue-dispatcher-all-at-once",
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)


class WorkerRef(_Model):
    name: str = Field(description="The worker's name here (its MultiKueueCluster)")
    stack: str = Field(
        min_length=1,
        description="Its platform stack, as a Pulumi stack reference (org/project/stack, or a "
        "stack of this project by name)",
    )

    _n = field_validator("name")(naming.dns_label)


class MultiClusterSpec(_Model):
    role: Literal["standalone", "manager", "worker"] = Field(
        "standalone",
        description="manager: dispatches admitted runs to its workers; worker: runs them",
    )
    workers: list[WorkerRef] = Field(default_factory=new_list, description="A manager's workers")
    dispatcher: Literal["Incremental", "AllAtOnce"] = Field(
        "Incremental",
        description="Incremental: a few workers at a time, in order (not every cluster at "
        "once); AllAtOnce: every worker, the first to admit wins",
    )
    workerLostTimeout: str = Field(
        "15m", description="A worker unreachable this long: its workloads go to another"
    )
    server: str | None = Field(
        None,
        description="A worker's API server as the manager reaches it (https://...); default: "
        "the server of the kubeconfig this stack deploys with",
    )
    name: str | None = Field(
        None,
        description="A worker's name in its manager's `workers`: its nodes and flavors carry it "
        "(label tau.azure.com/cluster), so a resumed run goes back to the worker whose volume "
        "holds its checkpoint",
    )

    @field_validator("server")
    @classmethod
    def _server(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("https://"):
            raise ValueError("must be an https:// address, e.g. https://east.example.com:443")
        return v

    @field_validator("workerLostTimeout")
    @classmethod
    def _duration(cls, v: str) -> str:
        if go_duration_seconds(v) <= 0:
            raise ValueError("must be longer than 0, e.g. 15m")
        return v

    @model_validator(mode="after")
    def _workers(self) -> MultiClusterSpec:
        if self.role == "manager" and not self.workers:
            raise ValueError(
                "a manager needs workers: workers: [{name: east, stack: org/taugrid/east}]"
            )
        if self.role != "manager" and self.workers:
            raise ValueError(f"only a manager has workers (this stack is a {self.role})")
        if self.role != "worker" and self.server:
            raise ValueError("only a worker has a server for the manager to reach")
        if self.role != "worker" and self.name:
            raise ValueError("only a worker has a name (a manager names its workers)")
        if self.role == "worker" and not self.name:
            raise ValueError(
                "a worker needs its name, the one its manager's workers list gives it: "
                "multiCluster: {role: worker, name: east}"
            )
        names = [w.name for w in self.workers]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"worker names are used twice: {', '.join(dup)}")
        return self


def dispatched(clusters: list[str], worker: str | None) -> list[str]:
    """The worker clusters a manager's run was dispatched to, in order, with the one its
    Workload names now (once: a pass that sees the same worker adds nothing)."""
    if worker and (not clusters or clusters[-1] != worker):
        return [*clusters, worker]
    return list(clusters)


def queue_differences(manager: dict[str, Any], worker: dict[str, Any], name: str) -> list[str]:
    """What differs between the manager's queues and a worker's (two `queue_signature`s), one
    line each, naming the worker: empty when they match."""
    out = []
    for q in sorted(set(manager) | set(worker)):
        if q not in worker:
            out.append(f"worker {name} has no ClusterQueue {q}")
        elif q not in manager:
            out.append(f"worker {name} has ClusterQueue {q}, which the manager does not")
        elif manager[q] != worker[q]:
            m, w = manager[q], worker[q]
            keys = sorted(k for k in set(m) | set(w) if m.get(k) != w.get(k))
            for k in keys:
                out.append(
                    f"worker {name}: ClusterQueue {q} {k} is {w.get(k)!r}, the manager's "
                    f"{m.get(k)!r}"
                )
    return out
