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

Pure here: placement (the service as a rayjob of `replicas` workers, resolved by the runs' own
resolution) and the objects; `KubeServe` below sends, observes and deletes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import yaml

from taugrid.api import constants as C
from taugrid.api import serve as S
from taugrid.api.crds import ServiceCanary, ServiceRevision, TauServiceSpec, read_spec
from taugrid.api.errors import EXIT_PLATFORM, EXIT_USAGE, TauError
from taugrid.api.manifest import Compute, Manifest, RunSpec
from taugrid.api.naming import owner_reference
from taugrid.kube.discovery import Connected
from taugrid.runs.codebundle import CodeBundle
from taugrid.runs.render import RunMeta, code_configmap, ray_cluster_spec
from taugrid.runs.resolve import Resolved
from taugrid.serve.status import Observed

if TYPE_CHECKING:
    from taugrid.kube.client import KubeAPI

GROUP = "replicas"  # the worker group that holds the Ray Serve replicas
MODEL_DIR = "/model"  # the init container lays the pinned model out here (an emptyDir)
SERVE_PORT = 8000
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"  # on every node KWOK simulates


def placement(m: Manifest, spec: S.ServiceSpec, replicas: int) -> Manifest:
    """The service as the run resolution sees it: a rayjob of `replicas` workers."""
    compute: dict[str, Any] = {
        "gpus": spec.gpus,
        "workers": max(1, replicas),
        "worker_cpus": spec.cpus,
    }
    if spec.memory is not None:
        compute["worker_memory"] = spec.memory
    return m.model_copy(
        update={
            "run": RunSpec(
                entrypoint=spec.import_path.split(":")[0].replace(".", "/") + ".py",
                workload_kind="rayjob",
            ),
            "compute": Compute.model_validate(compute, strict=False),
        }
    )


def replicas_of(scale: S.Scale) -> int:
    """Kueue admits fixed sizes (KubeRay's in-tree autoscaling off): autoscaling bounds become
    their maximum on a cluster, 0..N included."""
    if scale.autoscaling is not None:
        return scale.autoscaling.max_replicas
    return 1 if scale.replicas is None else scale.replicas


def object_name(service: str) -> str:
    """The TauService and the stable Service."""
    return service


def generation_name(service: str, generation: int) -> str:
    return f"{service}-{generation}"


def labels(r: Resolved, service: str, revision: int, generation: int = 0) -> dict[str, str]:
    out = {
        C.LABEL_SERVICE: service,
        C.LABEL_SERVICE_REVISION: str(revision),
        C.LABEL_SERVICE_GENERATION: str(generation),
        C.LABEL_WORKSPACE: r.workspace.name,
        C.LABEL_PROFILE: r.profile.name,
        C.LABEL_MANAGED_BY: C.MANAGED_BY_VALUE,
    }
    return out


def _env(r: Resolved, service: str, rev: S.Revision) -> list[dict[str, Any]]:
    env: dict[str, str] = {
        S.SERVICE_ENV: service,
        S.REVISION_ENV: str(rev.number),
        C.ENV_WORKSPACE: r.workspace.name,
        C.ENV_DATA_DIR: C.DATA_DIR,
        "PYTHONPATH": C.CODE_DIR,
        "PYTHONUNBUFFERED": "1",
    }
    if rev.model is not None:
        env[S.MODEL_ENV] = f"{MODEL_DIR}/{rev.model.name}"
        env[S.MODEL_VERSION_ENV] = rev.model.version
    env.update(rev.spec.env)
    return [{"name": k, "value": v} for k, v in env.items()]


@dataclass(frozen=True)
class CanaryPlan:
    """A canary generation: its RayService also runs the split, which holds the service's route
    and sends `percent`% of the requests to the canary revision (on its own proxy) and the rest
    to the serving generation's RayService (kept until the canary ends)."""

    stable_generation: int
    stable_revision: int
    percent: int


def serve_config(
    service: str, route: str, rev: S.Revision, namespace: str = "", canary: CanaryPlan | None = None
) -> dict[str, Any]:
    """Ray Serve's config (RayService `serveConfigV2`): the application and its ingress size.
    The replicas' environment comes from the pods (the model is laid out there)."""
    app: dict[str, Any] = {
        "name": service,
        "route_prefix": route,
        "import_path": rev.spec.import_path,
        "args": rev.spec.args,
        "runtime_env": {"env_vars": {S.REVISION_ENV: str(rev.number)}},
    }
    if rev.ingress:  # bounded, as locally: a burst beyond the replicas is answered 503 at once
        app["deployments"] = [
            {
                "name": rev.ingress,
                "max_ongoing_requests": rev.spec.max_ongoing_requests,
                "max_queued_requests": rev.spec.max_queued_requests,
            }
        ]
    apps = [app]
    if canary is not None:
        hidden = S.hidden_route(service, "canary")
        app.update(name=S.canary_app(service), route_prefix=hidden)
        stable = generation_name(service, canary.stable_generation)
        tail = "" if route == "/" else route
        apps.append(
            {
                "name": S.split_app(service),
                "route_prefix": route,
                "import_path": f"{S.SPLIT_MODULE}:app",
                "args": S.split_args(
                    f"http://{stable}-serve-svc.{namespace}.svc:{SERVE_PORT}{tail}",  # KubeRay's
                    f"http://127.0.0.1:{SERVE_PORT}{hidden}",
                    canary.stable_revision,
                    rev.number,
                ),
                "deployments": [S.split_deployment(canary.percent)],
            }
        )
    return {
        "proxy_location": "EveryNode",
        "http_options": {
            "host": "0.0.0.0",
            "port": SERVE_PORT,
            "request_timeout_s": rev.spec.request_timeout_s,
        },
        "applications": apps,
    }


def with_split(bundle: CodeBundle) -> CodeBundle:
    """A canary generation's code: the revision's, and the split as `tau_split.py`."""
    from pathlib import Path

    blob = Path(__file__).with_name("split.py").read_bytes()
    files = {rel: data for rel, data in bundle.files}
    files[f"{S.SPLIT_MODULE}.py"] = blob
    return replace(bundle, files=tuple(sorted(files.items())))


def render(
    r: Resolved,
    service: str,
    route: str,
    rev: S.Revision,
    bundle: CodeBundle,
    replicas: int,
    strategy: str,
    generation: int,
    canary: CanaryPlan | None = None,
) -> list[dict[str, Any]]:
    """[TauService, code ConfigMap, RayService, Service] for one generation of a revision;
    all but the TauService get their owner reference (its uid) when they are sent. With
    `canary`, the generation runs `rev` beside the serving one (see CanaryPlan), and the caller
    sets the TauService's spec with `canary_spec`."""
    if canary is not None:
        bundle = with_split(bundle)
    meta = RunMeta(run_id=f"{service}-r{rev.number}", submitter=rev.created_by)
    own = labels(r, service, rev.number, generation)
    cm, code = code_configmap(r, meta, bundle)
    cm["metadata"]["labels"] = {k: v for k, v in own.items() if k != C.LABEL_SERVICE_GENERATION}
    env = _env(r, service, rev)
    cluster = ray_cluster_spec(r, meta, code, env, own, group=GROUP)
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["ports"].append({"containerPort": SERVE_PORT, "name": "serve"})  # KubeRay's Serve Service
    workers = cluster["workerGroupSpecs"][0]
    workers.update(replicas=replicas, minReplicas=replicas, maxReplicas=replicas)
    if rev.model is not None:
        _mount_model(r, rev.model, workers["template"]["spec"])
    rayservice = _rayservice(r, service, route, rev, bundle, generation, canary, own, cluster)
    owner = _tauservice(r, service, route, rev, replicas, strategy, generation, own)
    return [owner, cm, rayservice, front_service(r.namespace, service, generation)]


def _mount_model(r: Resolved, model: S.ModelPin, pod: dict[str, Any]) -> None:
    """The pinned model, copied from the workspace's registry by an init container into an
    emptyDir the Serve workers read at MODEL_DIR."""
    pod["volumes"].append({"name": "model", "emptyDir": {}})
    pod["containers"][0]["volumeMounts"].append(
        {"name": "model", "mountPath": MODEL_DIR, "readOnly": True}
    )
    pinned = [
        {
            "kind": "model",
            "name": model.name,
            "version": model.version,
            "path": model.name,
        }
    ]
    pod["initContainers"] = [
        {
            "name": "tau-model",
            "image": r.image,
            "command": ["python", f"{C.CODE_DIR}/tau_inputs.py"],
            "env": [
                {"name": "TAU_INPUTS", "value": json.dumps(pinned, separators=(",", ":"))},
                {"name": "TAU_REGISTRY_DIR", "value": f"{C.DATA_DIR}/registry"},
                {"name": "TAU_INPUT_DIR", "value": MODEL_DIR},
            ],
            "resources": {
                "requests": {"cpu": "100m", "memory": "256Mi"},
                "limits": {"cpu": "1", "memory": "1Gi"},
            },
            "volumeMounts": [
                {"name": "data", "mountPath": C.DATA_DIR, "readOnly": True},
                {"name": "code", "mountPath": C.CODE_DIR, "readOnly": True},
                {"name": "model", "mountPath": MODEL_DIR},
            ],
        }
    ]


def _rayservice(
    r: Resolved,
    service: str,
    route: str,
    rev: S.Revision,
    bundle: CodeBundle,
    generation: int,
    canary: CanaryPlan | None,
    own: dict[str, str],
    cluster: dict[str, Any],
) -> dict[str, Any]:
    """One generation's RayService, queued in the workspace's Kueue queue."""
    rs_labels = {**own, C.KUEUE_QUEUE_LABEL: r.queue}
    if r.priority:
        rs_labels[C.KUEUE_PRIORITY_LABEL] = r.priority
    ann = {
        C.ANN_CONFIG_HASH: rev.config_hash,
        C.ANN_SUBMITTER: rev.created_by,
        C.ANN_CODE_DIGEST: bundle.digest,
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {
            "name": generation_name(service, generation),
            "namespace": r.namespace,
            "labels": rs_labels,
            "annotations": ann,
        },
        "spec": {
            "serveConfigV2": yaml.safe_dump(
                serve_config(service, route, rev, r.namespace, canary), sort_keys=False
            ),
            "rayClusterConfig": cluster,
            # never changed in place: the next change is the next generation's RayService
            "upgradeStrategy": {"type": "None"},
        },
    }


def _tauservice(
    r: Resolved,
    service: str,
    route: str,
    rev: S.Revision,
    replicas: int,
    strategy: str,
    generation: int,
    own: dict[str, str],
) -> dict[str, Any]:
    """The TauService written from its model (what the CRD's schema is made of)."""
    spec = TauServiceSpec(  # its model: what the CRD's schema is made of
        serviceName=service,
        workspace=r.workspace.name,
        profile=r.profile.name,
        revision=rev.number,
        modelRef=rev.model.ref if rev.model else None,
        modelVersion=rev.model.version if rev.model else None,
        configHash=rev.config_hash,
        submitter=rev.created_by,
        replicas=replicas,
        gpusPerReplica=r.gpus,
        strategy=strategy,
        routePrefix=route,
        generation=generation,
        revisions=[
            ServiceRevision(
                number=rev.number,
                modelVersion=rev.model.version if rev.model else None,
                configHash=rev.config_hash,
                createdAt=rev.created_at,
                createdBy=rev.created_by,
            )
        ],
    )
    owner = {
        "apiVersion": C.API_VERSION,
        "kind": "TauService",
        "metadata": {
            "name": object_name(service),
            "namespace": r.namespace,
            "labels": dict(own),
            "annotations": {C.ANN_SUBMITTER: rev.created_by},
        },
        "spec": spec.model_dump(mode="json", exclude_unset=True),
    }
    return owner


def canary_spec(
    owner: dict[str, Any],
    serving: S.Revision,
    plan: CanaryPlan,
    canary: S.Revision,
    generation: int,
    started_at: str,
) -> dict[str, Any]:
    """The TauService of a service during a canary: it still describes the serving revision
    (and its generation, which is kept), and names the canary beside it."""
    spec = owner["spec"]
    spec.update(
        revision=serving.number,
        configHash=serving.config_hash,
        modelRef=serving.model.ref if serving.model else None,
        modelVersion=serving.model.version if serving.model else None,
        generation=generation,
    )
    spec["canary"] = ServiceCanary(
        revision=canary.number,
        percent=plan.percent,
        generation=generation,
        stableGeneration=plan.stable_generation,
        modelVersion=canary.model.version if canary.model else None,
        startedAt=started_at,
    ).model_dump(mode="json", exclude_none=True)
    return owner


def front_service(namespace: str, service: str, generation: int) -> dict[str, Any]:
    """The stable endpoint: the serving generation's head (Ray Serve's proxy runs there)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": object_name(service),
            "namespace": namespace,
            "labels": {C.LABEL_SERVICE: service, C.LABEL_MANAGED_BY: C.MANAGED_BY_VALUE},
        },
        "spec": {
            "selector": {
                C.LABEL_SERVICE: service,
                C.LABEL_SERVICE_GENERATION: str(generation),
                "ray.io/node-type": "head",
            },
            "ports": [{"name": "serve", "port": SERVE_PORT, "targetPort": SERVE_PORT}],
        },
    }


def upgrade_gpus(replicas: int, gpus: int) -> int:
    """GPUs a new revision needs beside what the service holds: KubeRay's new RayCluster runs
    beside the old one until it serves, then the old one goes (blue/green at 200%)."""
    return replicas * gpus


# --- talking to the cluster ----------------------------------------------------------------------
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
