"""What a cluster offers the user: workspaces they may submit to, and workload profiles."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from taugrid.api import constants as C

if TYPE_CHECKING:
    from taugrid.api.gpuhealth import NodeVerdict
    from taugrid.api.installation import Finding as InstallFinding
    from taugrid.api.installation import Seen as InstallSeen
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


def gpu_nodes(context: str | None = None, pool: str | None = None) -> list[NodeRow]:
    """GPU nodes by pool (`pool`: one pool's, which the platform must declare or a node carry):
    ready, quarantined by the controller, and each GPU fault condition."""
    from taugrid.api.crds import TauClusterSpec, read_spec
    from taugrid.kube.fleet import gpu_node_rows

    disc = discovery(context)
    rows = gpu_node_rows(disc.kube.list("Node"))
    if pool is None:
        return rows
    known = {r.pool for r in rows if r.pool}
    if pool not in known:
        known |= {p.name for p in read_spec(TauClusterSpec, disc.tau_cluster()).pools}
        _check_pool(pool, known)
    return [r for r in rows if r.pool == pool]


def _check_pool(pool: str, known: set[str]) -> None:
    from taugrid.api.errors import EXIT_USAGE, TauError

    if pool not in known:
        raise TauError(
            f"--pool {pool}: the cluster's platform declares no GPU pool {pool!r}",
            exit_code=EXIT_USAGE,
            hint=f"GPU pools: {', '.join(sorted(known)) or 'none'}",
        )


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


@dataclass(frozen=True)
class NodesReport:
    """A validation of GPU nodes: each checked node's verdict, the nodes no declared GPU pool
    holds (with why they were not checked), and whether the verdicts were kept on the nodes."""

    verdicts: list[NodeVerdict]
    unchecked: dict[str, str]
    kept: bool
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(v.passed for v in self.verdicts)

    def doc(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "nodes": [{**v.model_dump(mode="json"), "passed": v.passed} for v in self.verdicts],
            "unchecked": self.unchecked,
            "kept": self.kept,
            "notes": self.notes,
        }


def validate_nodes(
    context: str | None = None,
    pool: str | None = None,
    keep: bool = True,
    active: bool = False,
    timeout_s: float = 900,
    say: Callable[[str], None] | None = None,
) -> NodesReport:
    """The passive tier on every node of the declared GPU pools (`pool`: one of them): each
    node against its pool's declaration (`api.gpuhealth.check_node`); with `active`, the active
    tier on the idle ones too (`client.activecheck`). With `keep`, each verdict is added to the
    node's history (an annotation; a platform admin's right: without it the report says so and
    nothing is kept)."""
    import time

    from taugrid.api import gpuhealth as G
    from taugrid.api.crds import TauClusterSpec, read_spec
    from taugrid.api.kubetime import k8s_time

    disc = discovery(context)
    declared = {p.name: p for p in read_spec(TauClusterSpec, disc.tau_cluster()).pools}
    if pool is not None:
        _check_pool(pool, set(declared))
    kube = disc.kube
    nodes = kube.list("Node")
    notes: list[str] = []
    xids = _xid_events(kube, notes)
    now, at = time.time(), k8s_time()
    verdicts, unchecked = [], {}
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name, belongs = node["metadata"]["name"], G.pool_of(node)
        if belongs in declared and (pool is None or belongs == pool):
            verdicts.append(G.check_node(node, declared[belongs], now, xids.get(name, []), at))
        elif pool is None and C.GPU_RESOURCE in ((node.get("status") or {}).get("capacity") or {}):
            unchecked[name] = f"has GPUs but is in no declared GPU pool (pool label: {belongs})"
    if active and verdicts:
        from taugrid.client import activecheck

        targets = [(v.node, declared[str(v.pool)]) for v in verdicts]
        found = activecheck.run(kube, targets, timeout_s, say or (lambda _: None))
        verdicts = [
            v.model_copy(
                update={"findings": [*v.findings, *found.get(v.node, [])], "tier": "active"}
            )
            for v in verdicts
        ]
    kept = False
    if keep and verdicts:
        kept = _keep(kube, nodes, verdicts, notes)
    return NodesReport(verdicts, unchecked, kept, notes)


def _keep(kube: Any, nodes: list[Any], verdicts: list[NodeVerdict], notes: list[str]) -> bool:
    """Each verdict added to its node's history, and a node that failed kept from new work
    (the validating taint, which the controller lifts once it passes); a node deleted or
    changed meanwhile is said, not fatal."""
    from taugrid.api import gpuhealth as G
    from taugrid.api.errors import TauError
    from taugrid.kube.client import FIELD_MANAGER, Forbidden

    by_name = {n["metadata"]["name"]: n for n in nodes}
    for v in verdicts:
        node = by_name[v.node]
        meta = node.get("metadata") or {}
        body: dict[str, Any] = {
            "metadata": {"annotations": {G.VALIDATION_ANNOTATION: G.with_verdict(node, v)}}
        }
        taints = list((node.get("spec") or {}).get("taints") or [])
        if not v.passed and not any(t.get("key") == C.VALIDATING_TAINT for t in taints):
            # kept from new work until it passes: the controller validates a node that carries
            # the taint at every pass and lifts it then (its running pods stay: NoSchedule)
            taints.append({"key": C.VALIDATING_TAINT, "value": "failed", "effect": "NoSchedule"})
            body["spec"] = {"taints": taints}
            if meta.get("resourceVersion"):  # a taint added meanwhile is not lost by this write
                body["metadata"]["resourceVersion"] = meta["resourceVersion"]
        try:
            kube.merge_patch("Node", v.node, None, body, FIELD_MANAGER)
        except Forbidden:
            notes.append("verdicts not kept: you may not annotate nodes (a platform admin may)")
            return False
        except TauError as e:
            notes.append(f"{v.node}: its verdict not kept (the node went meanwhile? {e.message})")
    return True


def _xid_events(kube: Any, notes: list[str]) -> dict[str, list[dict[str, Any]]]:
    """NPD's XID events by node (NPD records a node's events in namespace default), each with
    its time as epoch seconds under "at"; an unreadable list is a note, not an error."""
    from taugrid.api import gpuhealth as G
    from taugrid.api.errors import TauError

    try:
        events = kube.list("Event", "default", fields={"reason": G.XID_EVENT_REASON})
    except TauError as err:
        notes.append(f"XID events not read ({err.message}): only the XID condition was checked")
        return {}
    return G.xid_events_by_node(events)


@dataclass(frozen=True)
class InstallationReport:
    """The cluster's installation against its declaration: one finding per item."""

    server: str
    findings: list[InstallFinding]

    @property
    def passed(self) -> bool:
        return all(f.state != "failed" for f in self.findings)

    def doc(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "passed": self.passed,
            "findings": [f.model_dump(mode="json") for f in self.findings],
        }


def validate_installation(context: str | None = None) -> InstallationReport:
    """Read-only: what the cluster shows against what its TauCluster declares (see
    `api.installation`). What this identity may not read is a failed finding that says so."""
    from taugrid.api import installation as I
    from taugrid.api.errors import TauError

    kube = discovery(context).kube
    denied: list[InstallFinding] = []

    def read(what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except TauError as e:
            denied.append(
                I.Finding(
                    item=f"read {what}",
                    state="failed",
                    message=e.message,
                    fix="run it as a platform admin (it reads cluster-wide objects)",
                )
            )
            return []

    seen = _installation_seen(kube, read)
    return InstallationReport(kube.server, [*denied, *I.check(seen)])


def _installation_seen(kube: Any, read: Any) -> InstallSeen:
    """What `validate_installation` reads, once each: the TauCluster, the CRDs, each Helm
    component's release Secrets and workloads, the node agents' pods, Kueue's queues and
    flavors, and which nodes have GPUs."""
    import time

    from taugrid.api import installation as I
    from taugrid.api.platform import CHARTS

    tc = read("the TauCluster", kube.get, "TauCluster", "cluster") or None
    spec = (tc or {}).get("spec") or {}
    helm = [n for n, how in (spec.get("installedBy") or {}).items() if how == "helm"]
    nodes = read("nodes", kube.list, "Node")
    seen = I.Seen(
        version=read("the version", kube.server_version) or "?",
        tau_cluster=tc,
        crds=read("CRDs", kube.list, "CustomResourceDefinition"),
        releases={
            n: read(
                f"{n}'s release",
                kube.list,
                "Secret",
                CHARTS[n].namespace,
                labels={"owner": "helm", "name": CHARTS[n].release},
            )
            for n in helm
            if n in CHARTS
        },
        workloads={
            n: [
                *read(f"{n}'s Deployments", kube.list, "Deployment", CHARTS[n].namespace),
                *read(f"{n}'s DaemonSets", kube.list, "DaemonSet", CHARTS[n].namespace),
            ]
            for n in helm
            if n in CHARTS
        },
        agents={
            n: read(f"{n}'s pods", kube.list, "Pod", CHARTS[n].namespace)
            for n in ("nodeProblemDetector", "dcgmExporter")
            if n in (spec.get("components") or {})
        },
        cluster_queues=read("ClusterQueues", kube.list, "ClusterQueue"),
        flavors=read("ResourceFlavors", kube.list, "ResourceFlavor"),
        local_queues=read("LocalQueues", kube.list, "LocalQueue"),
        gpu_nodes=sorted(
            n["metadata"]["name"]
            for n in nodes
            if C.GPU_RESOURCE in ((n.get("status") or {}).get("capacity") or {})
        ),
        workers=read("MultiKueueClusters", kube.list, "MultiKueueCluster")
        if (spec.get("multiCluster") or {}).get("role") == "manager"
        else [],
        now=time.time(),
    )
    return seen
