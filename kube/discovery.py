"""What a cluster offers its users: the TauCluster's profiles and workspaces, live capacity,
and which workspaces the current identity may use (one access review each)."""

from __future__ import annotations

from typing import Any

from taugrid.api import constants as C
from taugrid.api.errors import EXIT_PLATFORM, EXIT_USAGE, TauError
from taugrid.api.profiles import ProfileSnapshot, WorkspaceRef
from taugrid.kube.client import KubeAPI

CLUSTER_OBJECT = C.CLUSTER_OBJECT


class Discovery:
    """Reads the TauCluster once per instance (a command's lifetime) and answers from it."""

    def __init__(self, kube: KubeAPI) -> None:
        self.kube = kube
        self._tau_cluster: dict[str, Any] | None = None

    def tau_cluster(self) -> dict[str, Any]:
        if self._tau_cluster is None:
            tc = self.kube.get("TauCluster", CLUSTER_OBJECT)
            if tc is None:
                raise TauError(
                    f"no TauCluster {CLUSTER_OBJECT!r} at {self.kube.server}: the TauGrid platform "
                    "is not installed on this cluster",
                    exit_code=EXIT_PLATFORM,
                    hint="pulumi up the platform stack (or tau sandbox up)",
                )
            self._tau_cluster = tc
        return self._tau_cluster

    @property
    def cluster_name(self) -> str | None:
        return (self.tau_cluster().get("spec") or {}).get("stack")

    def snapshot(self) -> ProfileSnapshot:
        """The cluster's profiles and workspaces, as its TauCluster publishes them."""
        tc = self.tau_cluster()
        spec = tc.get("spec") or {}
        ann = (tc.get("metadata") or {}).get("annotations") or {}
        return ProfileSnapshot.model_validate(
            {
                "apiVersion": C.API_VERSION,
                "kind": "TauWorkloadProfileSnapshot",
                "cluster": spec.get("stack", "?"),
                "profileSetHash": ann.get(C.ANN_PROFILE_SET_HASH),
                "defaultWorkspace": spec.get("defaultWorkspace"),
                "workspaces": spec.get("workspaces") or [],
                "profiles": spec.get("workloadProfiles") or [],
                "imageMirrors": spec.get("imageMirrors") or [],
                "imageMirrorsOnly": bool(spec.get("imageMirrorsOnly")),
            }
        )

    def capacity(self) -> dict[str, dict[str, int]]:
        """Live capacity per profile, as the controller records it on the TauCluster (empty
        when no controller runs)."""
        rows = ((self.tau_cluster().get("status") or {}).get("profiles")) or []
        keys = ("nodes", "healthyNodes", "allocatableGpus", "cordonedByTau")
        return {r["name"]: {k: int(r.get(k) or 0) for k in keys} for r in rows}

    def usable_workspaces(self, snap: ProfileSnapshot | None = None) -> list[WorkspaceRef]:
        """The workspaces whose namespace the user may submit runs to (one review each)."""
        snap = snap or self.snapshot()
        return [w for w in snap.workspaces if self.kube.can("create", "TauRun", w.namespace)]

    def workspace(self, name: str | None, snap: ProfileSnapshot | None = None) -> WorkspaceRef:
        """The workspace a command means: the one named; else the only one the user may use;
        else the cluster's default if the user may use it."""
        snap = snap or self.snapshot()
        if name is not None:
            ws = snap.workspace(name)
            if ws is None:
                known = ", ".join(w.name for w in snap.workspaces) or "none"
                raise TauError(
                    f"no workspace {name!r} (workspaces: {known})",
                    exit_code=EXIT_USAGE,
                    hint="tau workspaces lists yours",
                )
            return ws
        usable = self.usable_workspaces(snap)
        if len(usable) == 1:
            return usable[0]
        default = snap.workspace(snap.defaultWorkspace) if snap.defaultWorkspace else None
        if default is not None and default in usable:
            return default
        raise TauError(
            "say which workspace with --workspace",
            exit_code=EXIT_USAGE,
            hint="tau workspaces lists yours",
        )


class Connected:
    """A kubeconfig context's client and what its cluster offers, each made on first use (one
    TauCluster read per instance). Set `_context` and `_kube` (a client given, e.g. a fake)
    in `__init__`."""

    _context: str | None = None
    _kube: KubeAPI | None = None
    _discovery: Discovery | None = None
    _workers: dict[str, KubeAPI] | None = None  # MultiKueue workers' clients, by name

    @property
    def kube(self) -> KubeAPI:
        if self._kube is None:
            from taugrid.kube.client import Kube

            self._kube = Kube(self._context)
        return self._kube

    def worker(self, name: str) -> KubeAPI:
        """The client of a MultiKueue worker cluster this cluster dispatched a run to: the
        kubeconfig's context of the worker's name (a test sets `_workers`)."""
        if self._workers is None:
            self._workers = {}
        if name not in self._workers:
            from taugrid.kube.client import Kube

            try:
                self._workers[name] = Kube(name)
            except TauError as e:
                raise TauError(
                    f"the run runs on worker cluster {name} (MultiKueue), which this kubeconfig "
                    f"cannot reach: {e.message}",
                    exit_code=EXIT_PLATFORM,
                    hint=f"add a context named {name} for that cluster to your kubeconfig "
                    "(your platform team has its server; `tau sandbox kubeconfig` has them all)",
                ) from None
        return self._workers[name]

    @property
    def discovery(self) -> Discovery:
        """What the cluster offers (its TauCluster read once per instance)."""
        if self._discovery is None:
            self._discovery = Discovery(self.kube)
        return self._discovery
