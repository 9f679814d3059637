"""Services on a cluster: a RayService in the workspace's namespace, admitted by Kueue, owned
by one TauService (delete it and the garbage collector removes everything it owns: the quota is
free again).

Each change (a revision, a new size) is a new **generation**: its own RayService, `<name>-<g>`,
admitted by Kueue as its own workload beside the serving one, and a stable Service `<name>`
(owned by the TauService) whose selector moves to the new generation's head once it serves; the
old RayService is deleted then. So Kueue accounts both while they overlap (the room is checked
before), nothing is updated in place (KubeRay 1.5 applies neither replica changes nor Kueue's
suspend to a running RayCluster), and the endpoint never changes. Scale to zero deletes the
serving RayService and keeps the TauService and the Service: the GPUs go back to the queue.

The objects are rendered by serve/kuberender.py (pure); `KubeServe` here sends, observes and
deletes them.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from taugrid.api import constants as C
from taugrid.api import serve as S
from taugrid.api.crds import TauServiceSpec, read_spec
from taugrid.api.errors import EXIT_PLATFORM, EXIT_USAGE, TauError
from taugrid.api.manifest import Manifest
from taugrid.api.naming import owner_reference
from taugrid.kube.discovery import Connected
from taugrid.runs.resolve import Resolved
from taugrid.serve.kuberender import (
    GROUP,
    SERVE_PORT,
    front_service,
    generation_name,
    object_name,
    placement,
)
from taugrid.serve.status import Observed

if TYPE_CHECKING:
    from taugrid.kube.client import KubeAPI

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"  # on every node KWOK simulates


class KubeServe(Connected):
    """One cluster (a kubeconfig context): a service's objects sent, observed and deleted."""

    def __init__(self, context: str | None = None, kube: KubeAPI | None = None) -> None:
        self._context = context
        self._kube = kube

    def resolve(
        self,
        m: Manifest,
        spec: S.ServiceSpec,
        replicas: int,
        workspace: str | None,
        profile: str | None,
    ) -> Resolved:
        """Placed as a rayjob of `replicas` workers, in the workspace the user means."""
        from taugrid.runs.resolve import resolve

        snap = self.discovery.snapshot()
        if workspace is None and m.policy.workspace is None:
            usable = self.discovery.usable_workspaces(snap)
            if len(usable) == 1:
                workspace = usable[0].name
        return resolve(placement(m, spec, replicas), snap, workspace=workspace, profile=profile)

    def queue_room(
        self, r: Resolved, objects: list[dict[str, Any]]
    ) -> tuple[str | None, str | None, dict[tuple[str, str], Decimal] | None]:
        """(never: why Kueue could never admit these objects, the ClusterQueue, its room now);
        Nones when the queues cannot be read (Kueue then says it in the status)."""
        from taugrid.kube import ceiling

        try:
            local = self.kube.get("LocalQueue", r.queue, r.namespace)
            cqs, cohorts = self.kube.list("ClusterQueue"), self.kube.list("Cohort")
        except TauError:
            return None, None, None
        cq = ((local or {}).get("spec") or {}).get("clusterQueue")
        limits = ceiling.ceilings(cq, cqs, cohorts) if cq else None
        if cq is None or limits is None:
            return None, cq, None
        never = ceiling.never_admittable(ceiling.podsets(objects), limits, cq)
        return never, cq, ceiling.room(cq, cqs, cohorts)

    def send(self, objects: list[dict[str, Any]], create: bool) -> dict[str, Any]:
        """The TauService first (created for a new service: a name taken in the namespace is
        refused), then the objects after it, each owned by it. Returns the owner reference."""
        from taugrid.kube.client import Forbidden

        owner, *rest = objects
        ns, name = owner["metadata"]["namespace"], owner["metadata"]["name"]
        try:
            if create:
                got = self.kube.create(owner)
                if got is None:
                    raise TauError(
                        f"a service {name!r} exists in namespace {ns} already",
                        exit_code=EXIT_USAGE,
                        hint="--name another-name",
                    )
            else:
                got = self.kube.apply(owner)
        except Forbidden as e:
            raise TauError(
                f"{e.message} (namespace {ns}, as {self.kube.user})",
                exit_code=EXIT_PLATFORM,
                hint="tau workspaces lists the workspaces you may use (--workspace)",
            ) from None
        ref = owner_reference("TauService", name, got["metadata"]["uid"])
        for obj in rest:
            self.owned(obj, ref)
        return ref

    def owned(self, obj: dict[str, Any], ref: dict[str, Any]) -> None:
        obj["metadata"]["ownerReferences"] = [ref]
        self.kube.apply(obj)

    def owner_ref(self, rec: S.ServiceRecord) -> dict[str, Any] | None:
        got = self.kube.get("TauService", object_name(rec.name), rec.namespace)
        if got is None:
            return None
        return owner_reference("TauService", rec.name, got["metadata"]["uid"])

    def generations(self, rec: S.ServiceRecord) -> dict[int, dict[str, Any]]:
        """The service's RayServices by generation."""
        out = {}
        for rs in self.kube.list("RayService", rec.namespace, labels={C.LABEL_SERVICE: rec.name}):
            if rs["metadata"].get("deletionTimestamp"):
                continue  # going: it serves no more
            g = (rs["metadata"].get("labels") or {}).get(C.LABEL_SERVICE_GENERATION, "")
            if g.isdigit():
                out[int(g)] = rs
        return out

    def highest_generation(self, rec: S.ServiceRecord) -> int:
        """The newest generation the cluster has (one being deleted included: its name is
        not free until it is gone, so a new generation never reuses it)."""
        out = 0
        for rs in self.kube.list("RayService", rec.namespace, labels={C.LABEL_SERVICE: rec.name}):
            g = (rs["metadata"].get("labels") or {}).get(C.LABEL_SERVICE_GENERATION, "")
            out = max(out, int(g) if g.isdigit() else 0)
        return out

    def switch(self, rec: S.ServiceRecord, to: int, keep: int | None = None) -> None:
        """The stable Service to generation `to`'s head, then every other generation but `keep`
        (a canary's serving one) deleted (its pods go, and Kueue gives their quota back)."""
        ref = self.owner_ref(rec)
        if ref is None:
            raise TauError(
                f"service {rec.name} is gone from namespace {rec.namespace}",
                exit_code=EXIT_PLATFORM,
            )
        self.owned(front_service(rec.namespace or "", rec.name, to), ref)
        for g in self.generations(rec):
            if g not in (to, keep):
                self.kube.delete("RayService", generation_name(rec.name, g), rec.namespace)

    def drop(self, rec: S.ServiceRecord, keep: int | None = None) -> None:
        """Delete the service's RayServices but `keep` (scale to zero: none)."""
        for g in self.generations(rec):
            if g != keep:
                self.kube.delete("RayService", generation_name(rec.name, g), rec.namespace)

    def ready(self, rs: dict[str, Any]) -> bool:
        """KubeRay says the RayService runs and each of its applications does."""
        status = rs.get("status") or {}
        apps = (status.get("activeServiceStatus") or {}).get("applicationStatuses") or {}
        return (
            status.get("serviceStatus") == "Running"
            and bool(apps)
            and all((a or {}).get("status") == "RUNNING" for a in apps.values())
        )

    def observe(self, rec: S.ServiceRecord) -> Observed:
        """The serving generation's RayService, its Kueue workload and pods; and the one
        starting beside it, if any."""
        try:
            if self.kube.get("TauService", object_name(rec.name), rec.namespace) is None:
                return Observed(head_up=True, exists=False)
            gens = self.generations(rec)
            pods = self.kube.list("Pod", rec.namespace, labels={C.LABEL_SERVICE: rec.name})
            workloads = self.kube.list("Workload", rec.namespace)
        except TauError:
            return Observed(head_up=False, exists=False)
        serving = gens.get(rec.generation)
        pending = gens.get(rec.pending_generation) if rec.pending_generation else None
        canary_rs = (
            gens.get(rec.canary.generation) if rec.canary and rec.canary.generation else None
        )

        def kueue(rs: dict[str, Any] | None) -> tuple[bool | None, str]:
            return (None, "") if rs is None else self._admission(rs, workloads, rec.workspace)

        simulated = self._simulated(pods)
        if serving is None and pending is None:  # scaled to zero: nothing holds GPUs
            return Observed(True, True, "RUNNING", revision=rec.serving, simulated=simulated)
        main = serving or pending
        assert main is not None
        admitted, waiting = kueue(main)
        revision = (main["metadata"].get("labels") or {}).get(C.LABEL_SERVICE_REVISION, "")
        status = "RUNNING" if self.ready(main) else "DEPLOYING"
        new_running = None
        if serving is not None and pending is not None:
            status = "DEPLOYING"  # a new generation starts beside the serving one
            new_running = _running(pods, rec.pending_generation)
            p_admitted, p_waiting = kueue(pending)
            if p_admitted is False:
                waiting = f"the new RayService waits: {p_waiting}"
        canary = self._canary_observed(rec, canary_rs, pods, workloads, simulated)
        return Observed(
            head_up=True,
            exists=True,
            status=status,
            revision=int(revision) if revision.isdigit() else None,
            wanted=_replicas(main),
            running=_running(pods, rec.generation if serving else rec.pending_generation),
            admitted=admitted,
            waiting=waiting,
            simulated=simulated,
            upgrading=pending is not None and serving is not None,
            new_running=new_running,
            canary=canary,
            split=canary.status if canary else "",
        )

    def _canary_observed(
        self,
        rec: S.ServiceRecord,
        rs: dict[str, Any] | None,
        pods: list[dict[str, Any]],
        workloads: list[dict[str, Any]],
        simulated: bool,
    ) -> Observed | None:
        """The canary's generation, as the serving one is observed."""
        if rs is None or rec.canary is None:
            return None
        admitted, waiting = self._admission(rs, workloads, rec.workspace)
        return Observed(
            head_up=True,
            exists=True,
            status="RUNNING" if self.ready(rs) else "DEPLOYING",
            revision=rec.canary.revision,
            wanted=_replicas(rs),
            running=_running(pods, rec.canary.generation),
            admitted=admitted,
            waiting=waiting,
            simulated=simulated,
        )

    def _admission(
        self, rs: dict[str, Any], workloads: list[dict[str, Any]], queue_owner: str | None
    ) -> tuple[bool | None, str]:
        from taugrid.api.kueuewords import explain
        from taugrid.kube.facts import admitted

        name = rs["metadata"]["name"]
        w = next(
            (
                w
                for w in workloads
                if any(
                    o.get("kind") == "RayService" and o.get("name") == name
                    for o in w["metadata"].get("ownerReferences") or []
                )
            ),
            None,
        )
        if w is None:
            return None, ""
        if admitted(w):
            return True, ""
        conds = (w.get("status") or {}).get("conditions") or []
        reserved = next((c for c in conds if c.get("type") == "QuotaReserved"), None)
        if reserved is None or reserved.get("status") != "False":
            # Kueue has not looked at it yet, or it is being admitted: not a refusal (a wait
            # that ends on "Waiting" would give up on a service about to be admitted)
            return None, ""
        msg = str(reserved.get("message") or "")
        words = explain(msg, queue_owner)
        return False, words.text if words else (msg or "it waits in its queue")

    def _simulated(self, pods: list[dict[str, Any]]) -> bool:
        """The service's pods run on KWOK's nodes (the sandbox's simulated pools): no container
        runs there. On the sandbox's real nodes (and any real cluster) they answer."""
        nodes = {
            str((p.get("spec") or {}).get("nodeName"))
            for p in pods
            if (p.get("spec") or {}).get("nodeName")
        }
        if not nodes:
            return False
        for name in sorted(nodes):
            try:
                node = self.kube.get("Node", name)
            except TauError:
                return False  # nodes may not be readable: say nothing rather than guess
            if (
                ((node or {}).get("metadata") or {})
                .get("annotations", {})
                .get(KWOK_NODE_ANNOTATION)
            ):
                return True
        return False

    def serving_generation(self, rec: S.ServiceRecord) -> int | None:
        """The generation the stable Service selects now."""
        svc = self.kube.get("Service", object_name(rec.name), rec.namespace)
        selector = ((svc or {}).get("spec") or {}).get("selector") or {}
        g = str(selector.get(C.LABEL_SERVICE_GENERATION, ""))
        return int(g) if g.isdigit() else None

    def switch_if_ready(self, rec: S.ServiceRecord, target: int, keep: int | None = None) -> bool:
        """The one rule, for the CLI and the controller alike (idempotent): when generation
        `target`'s RayService serves and the Service selects another, switch to it (and delete
        the others, but `keep`: a canary's serving generation)."""
        gens = self.generations(rec)
        new = gens.get(target)
        if new is None or not self.ready(new):
            return False
        if self.serving_generation(rec) != target or set(gens) - {target, keep}:
            self.switch(rec, target, keep)
            return True
        return False

    def reconcile(self, tauservice: dict[str, Any], now: str) -> dict[str, Any] | None:
        """The controller's pass over one service: a pending generation that serves takes
        over; returns the TauService status to write when it changed (None: nothing to write)."""
        from taugrid.serve.status import compute

        spec = read_spec(TauServiceSpec, tauservice)
        target = spec.generation
        keep = spec.canary.stableGeneration if spec.canary else None
        rec = record_of(tauservice, None)
        serving = self.serving_generation(rec)
        if target and target != serving and self.switch_if_ready(rec, target, keep):
            serving = target
        rec = record_of(tauservice, serving)
        st = compute(rec, self.observe(rec))
        return status_body(tauservice, st, now)

    def remove(self, rec: S.ServiceRecord) -> bool:
        """Delete the TauService: the garbage collector removes what it owns."""
        return self.kube.delete("TauService", object_name(rec.name), rec.namespace)

    def gone(self, rec: S.ServiceRecord) -> bool:
        return self.kube.get(
            "TauService", object_name(rec.name), rec.namespace
        ) is None and not self.generations(rec)


def record_of(tauservice: dict[str, Any], serving: int | None) -> S.ServiceRecord:
    """What the status needs of a service, from its TauService (the controller has no local
    record): its serving revision, model version and size; `serving`: the generation the
    Service selects (the TauService's newest one is pending until it serves)."""
    md, spec = tauservice["metadata"], read_spec(TauServiceSpec, tauservice)
    ref, version = spec.modelRef, spec.modelVersion
    pin = (
        S.ModelPin(ref=ref or version, name=(ref or "model").split("@")[0], version=version)
        if version
        else None
    )
    created = str(md.get("creationTimestamp") or "")
    rev = S.Revision(
        number=spec.revision,
        created_at=created,
        created_by=spec.submitter or "",
        config_hash=spec.configHash,
        code_digest="",
        model=pin,
        spec=S.ServiceSpec(import_path="cluster:app"),
        source="",
    )
    name, ns = spec.serviceName, str(md["namespace"])
    common: dict[str, Any] = {
        "name": name,
        "target": "kube",
        "created_at": created,
        "created_by": rev.created_by,
        "route_prefix": spec.routePrefix,
        "namespace": ns,
        "workspace": spec.workspace,
        "profile": spec.profile,
        "revisions": [rev],
        "serving": rev.number,
        "endpoint": f"http://{object_name(name)}.{ns}.svc:{SERVE_PORT}{spec.routePrefix}",
        "scale": S.Scale(replicas=spec.replicas),
    }
    c = spec.canary
    if c:  # the Service selects the canary's generation once it runs (its split holds the route)
        canary = S.Canary(
            revision=c.revision,
            percent=c.percent,
            started_at=c.startedAt or created,
            routed=serving == spec.generation,
            generation=c.generation,
        )
        return S.ServiceRecord(**common, generation=c.stableGeneration, canary=canary)
    return S.ServiceRecord(
        **common,
        generation=serving or 0,
        pending_generation=spec.generation if spec.generation != serving else None,
    )


def status_body(tauservice: dict[str, Any], st: S.ServiceStatus, now: str) -> dict[str, Any] | None:
    """TauService.status for `st` (a timeline line per phase change), or None when what it
    says has not changed (a quiet controller writes only differences)."""
    old = tauservice.get("status") or {}
    new = {
        "phase": st.phase,
        "summary": st.summary,
        "revision": st.revision,
        "replicasReady": st.replicas.ready,
        "admitted": st.admitted,
    }
    if all(old.get(k) == v for k, v in new.items()):
        return None
    timeline = list(old.get("timeline") or [])
    if old.get("phase") != st.phase:
        timeline.append({"at": now, "reason": st.phase, "message": st.summary})
    md = tauservice["metadata"]
    return {
        "apiVersion": C.API_VERSION,
        "kind": "TauService",
        "metadata": {"name": md["name"], "namespace": md["namespace"]},
        "status": {**new, "observedAt": now, "timeline": timeline[-30:]},
    }


def _running(pods: list[dict[str, Any]], generation: int | None) -> int:
    """A generation's Serve workers that run."""
    return sum(
        1
        for p in pods
        if (p["metadata"].get("labels") or {}).get(C.LABEL_SERVICE_GENERATION) == str(generation)
        and (p["metadata"].get("labels") or {}).get("ray.io/group") == GROUP
        and (p.get("status") or {}).get("phase") == "Running"
    )


def _replicas(rs: dict[str, Any] | None) -> int:
    """The Serve workers a RayService asks for."""
    spec = (rs or {}).get("spec") or {}
    groups = spec.get("rayClusterConfig", {}).get("workerGroupSpecs") or [{}]
    return int(groups[0].get("replicas") or 0)
