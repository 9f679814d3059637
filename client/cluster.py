"""What a cluster offers the user: workspaces they may submit to, and workload profiles."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from taugrid.api.profiles import WorkloadProfile, WorkspaceRef
    from taugrid.kube.discovery import Discovery
    from taugrid.kube.fleet import NodeRow, PendingRow, QueueRow


def discovery(context: str | None = None) -> Discovery:
    """What the cluster of `context` (default `TAU_CONTEXT`, else the kubeconfig's current
    one) offers, read once."""
    from taugrid.kube.client import Kube
    from taugrid.kube.discovery import Discovery

    return Discovery(Kube(context))


@dataclass(frozen=True)
class Workspace:
    ref: WorkspaceRef
    default: bool
    queues: list[str]
    profiles: list[str]

    def doc(self) -> dict[str, Any]:
        return {
            **self.ref.model_dump(mode="json", exclude_none=True),
            "default": self.default,
            "queues": self.queues,
            "profiles": self.profiles,
        }


@dataclass(frozen=True)
class Workspaces:
    cluster: str
    usable: list[Workspace]
    all_names: list[str] = field(default_factory=list)


def workspaces(context: str | None = None) -> Workspaces:
    """The workspaces the user may submit runs to (namespace, queues, profiles, /data PVC)."""
    disc = discovery(context)
    snap = disc.snapshot()
    rows = []
    for w in disc.usable_workspaces(snap):
        mine = [p for p in snap.profiles if p.applies_to(w.name)]
        rows.append(
            Workspace(
                w,
                w.name == snap.defaultWorkspace,
                sorted({p.localQueue for p in mine}),
                [p.name for p in mine],
            )
        )
    return Workspaces(snap.cluster, rows, [w.name for w in snap.workspaces])


@dataclass(frozen=True)
class Profile:
    profile: WorkloadProfile
    live: dict[str, int] | None  # the controller's count of nodes and GPUs now

    def doc(self) -> dict[str, Any]:
        d = self.profile.model_dump(mode="json", exclude_none=True)
        return {**d, **({"live": self.live} if self.live is not None else {})}


def profiles(context: str | None = None) -> list[Profile]:
    """The cluster's workload profiles (placement, the bounds of one worker, live capacity)."""
    disc = discovery(context)
    live = disc.capacity()
    return [Profile(p, live.get(p.name)) for p in disc.snapshot().profiles]


def queues(context: str | None = None) -> list[QueueRow]:
    """Kueue's ClusterQueues: quota per flavor and resource, what is used and borrowed now,
    pending and admitted workloads (what the user may read)."""
    from taugrid.kube.fleet import queue_rows

    return queue_rows(discovery(context).kube.list("ClusterQueue"))


def gpu_nodes(context: str | None = None) -> list[NodeRow]:
    """GPU nodes by pool: ready, quarantined by the controller, and each GPU fault condition."""
    from taugrid.kube.fleet import gpu_node_rows

    return gpu_node_rows(discovery(context).kube.list("Node"))


def pending(context: str | None = None) -> tuple[list[PendingRow], list[str]]:
    """The runs waiting in the LocalQueues of the workspaces the user may use, in Kueue's
    order (its visibility API), and a note for each queue it could not tell."""
    from taugrid.kube.fleet import pending_rows

    disc = discovery(context)
    snap = disc.snapshot()
    rows: list[PendingRow] = []
    notes: list[str] = []
    for w in disc.usable_workspaces(snap):
        queues = sorted({p.localQueue for p in snap.profiles if p.applies_to(w.name)})
        for q in queues:
            got = disc.kube.pending(w.namespace, q)
            if isinstance(got, str):
                notes.append(f"{w.name}/{q}: {got}")
            else:
                rows += pending_rows(w.name, q, got)
    return rows, list(dict.fromkeys(notes))


def health(context: str | None = None) -> list[dict[str, Any]]:
    """The controller's view of the fleet (the TauCluster's conditions): GPUNodesHealthy,
    RemediationHeld (the circuit breaker that caps how many GPU nodes are quarantined at once)."""
    status = discovery(context).tau_cluster().get("status") or {}
    return [dict(c) for c in status.get("conditions") or []]
