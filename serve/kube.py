"""Services on a cluster: a RayService in the workspace's namespace, admitted by Kueue, owned
by one TauService (delete it and the garbage collector removes the RayService, its RayClusters,
pods and the code ConfigMaps: the quota is free again).

Pure: the objects for a revision. Placement is a rayjob's: the service is resolved against the
cluster's profiles as `replicas` workers of `gpus` GPUs (`placement`), so the bounds, the queue,
the image and the errors are the runs' own. Each revision has its own code ConfigMap and pins its
model in the workers' init container (`tau_inputs`, from the workspace's registry on its
volume), so a new revision is a new RayCluster: KubeRay's blue/green upgrade (`NewCluster`).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import yaml

from taugrid.api import constants as C
from taugrid.api import serve as S
from taugrid.api.errors import EXIT_PLATFORM, EXIT_USAGE, TauError
from taugrid.api.manifest import Compute, Manifest, RunSpec
from taugrid.runs.codebundle import CodeBundle
from taugrid.runs.render import RunMeta, code_configmap, ray_cluster_spec
from taugrid.runs.resolve import Resolved
from taugrid.serve.status import Observed

if TYPE_CHECKING:
    from taugrid.kube.client import KubeAPI
    from taugrid.kube.discovery import Discovery

GROUP = "replicas"  # the worker group that holds the Ray Serve replicas
MODEL_DIR = "/model"  # the init container lays the pinned model out here (an emptyDir)
SERVE_PORT = 8000


def placement(m: Manifest, spec: S.ServiceSpec, replicas: int) -> Manifest:
    """The service as the run resolution sees it: a rayjob of `replicas` workers."""
    compute: dict[str, Any] = {"gpus": spec.gpus, "workers": max(1, replicas),
                               "worker_cpus": spec.cpus}  # fmt: skip
    if spec.memory is not None:
        compute["worker_memory"] = spec.memory
    return m.model_copy(update={
        "run": RunSpec(entrypoint=spec.import_path.split(":")[0].replace(".", "/") + ".py",
                       workload_kind="rayjob"),
        "compute": Compute.model_validate(compute, strict=False),
    })  # fmt: skip


def replicas_of(scale: S.Scale) -> int:
    """Kueue admits fixed sizes (KubeRay's in-tree autoscaling off): autoscaling bounds become
    their maximum on a cluster, 0..N included."""
    if scale.autoscaling is not None:
        return scale.autoscaling.max_replicas
    return 1 if scale.replicas is None else scale.replicas


def object_name(service: str) -> str:
    return service


def labels(r: Resolved, service: str, revision: int) -> dict[str, str]:
    out = {
        C.LABEL_SERVICE: service,
        C.LABEL_SERVICE_REVISION: str(revision),
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


def serve_config(service: str, route: str, rev: S.Revision) -> dict[str, Any]:
    """Ray Serve's config (RayService `serveConfigV2`): the application and its ingress size.
    The replicas' environment comes from the pods (the model is laid out there)."""
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": "0.0.0.0", "port": SERVE_PORT},
        "applications": [{
            "name": service,
            "route_prefix": route,
            "import_path": rev.spec.import_path,
            "args": rev.spec.args,
            "runtime_env": {"env_vars": {S.REVISION_ENV: str(rev.number)}},
        }],
    }  # fmt: skip


def render(r: Resolved, service: str, route: str, rev: S.Revision, bundle: CodeBundle,
           replicas: int, strategy: str) -> list[dict[str, Any]]:  # fmt: skip
    """[TauService, code ConfigMap, RayService] for one revision; the last two get their owner
    reference (the TauService's uid) when they are sent."""
    meta = RunMeta(run_id=f"{service}-r{rev.number}", submitter=rev.created_by)
    own = labels(r, service, rev.number)
    cm, items = code_configmap(r, meta, bundle)
    cm["metadata"]["labels"] = dict(own)
    env = _env(r, service, rev)
    cluster = ray_cluster_spec(r, meta, items, env, own, group=GROUP)
    workers = cluster["workerGroupSpecs"][0]
    workers.update(replicas=replicas, minReplicas=replicas, maxReplicas=replicas)
    pod = workers["template"]["spec"]
    if rev.model is not None:
        pod["volumes"].append({"name": "model", "emptyDir": {}})
        pod["containers"][0]["volumeMounts"].append(
            {"name": "model", "mountPath": MODEL_DIR, "readOnly": True}
        )
        pinned = [{"kind": "model", "name": rev.model.name, "version": rev.model.version,
                   "path": rev.model.name}]  # fmt: skip
        pod["initContainers"] = [{
            "name": "tau-model",
            "image": r.image,
            "command": ["python", f"{C.CODE_DIR}/tau_inputs.py"],
            "env": [{"name": "TAU_INPUTS", "value": json.dumps(pinned, separators=(",", ":"))},
                    {"name": "TAU_REGISTRY_DIR", "value": f"{C.DATA_DIR}/registry"},
                    {"name": "TAU_INPUT_DIR", "value": MODEL_DIR}],
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                          "limits": {"cpu": "1", "memory": "1Gi"}},
            "volumeMounts": [{"name": "data", "mountPath": C.DATA_DIR, "readOnly": True},
                             {"name": "code", "mountPath": C.CODE_DIR, "readOnly": True},
                             {"name": "model", "mountPath": MODEL_DIR}],
        }]  # fmt: skip
    rs_labels = {**own, C.KUEUE_QUEUE_LABEL: r.queue}
    if r.priority:
        rs_labels[C.KUEUE_PRIORITY_LABEL] = r.priority
    ann = {C.ANN_CONFIG_HASH: rev.config_hash, C.ANN_SUBMITTER: rev.created_by,
           C.ANN_CODE_DIGEST: bundle.digest}  # fmt: skip
    rayservice = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {
            "name": object_name(service),
            "namespace": r.namespace,
            "labels": rs_labels,
            "annotations": ann,
        },
        "spec": {
            "serveConfigV2": yaml.safe_dump(serve_config(service, route, rev), sort_keys=False),
            "rayClusterConfig": cluster,
            # a revision changes the pods (code, model): a new RayCluster, then the switch
            "upgradeStrategy": {"type": "NewCluster"},
        },
    }
    history = [{"number": rev.number, "modelVersion": rev.model.version if rev.model else None,
                "configHash": rev.config_hash, "createdAt": rev.created_at,
                "createdBy": rev.created_by}]  # fmt: skip
    owner = {
        "apiVersion": C.API_VERSION,
        "kind": "TauService",
        "metadata": {
            "name": object_name(service),
            "namespace": r.namespace,
            "labels": dict(own),
            "annotations": {C.ANN_SUBMITTER: rev.created_by},
        },
        "spec": {
            "serviceName": service,
            "workspace": r.workspace.name,
            "profile": r.profile.name,
            "revision": rev.number,
            "modelRef": rev.model.ref if rev.model else None,
            "modelVersion": rev.model.version if rev.model else None,
            "configHash": rev.config_hash,
            "submitter": rev.created_by,
            "replicas": replicas,
            "gpusPerReplica": r.gpus,
            "strategy": strategy,
            "routePrefix": route,
            "revisions": history,
        },
    }
    return [owner, cm, rayservice]


def upgrade_gpus(replicas: int, gpus: int) -> int:
    """GPUs a new revision needs beside what the service holds: KubeRay's new RayCluster runs
    beside the old one until it serves, then the old one goes (blue/green at 200%)."""
    return replicas * gpus


# --- talking to the cluster ----------------------------------------------------------------------
class KubeServe:
    """One cluster (a kubeconfig context): a service's objects sent, observed and deleted."""

    def __init__(self, context: str | None = None, kube: KubeAPI | None = None) -> None:
        self.context = context
        self._kube = kube
        self._discovery: Discovery | None = None

    @property
    def kube(self) -> KubeAPI:
        if self._kube is None:
            from taugrid.kube.client import Kube

            self._kube = Kube(self.context)
        return self._kube

    @property
    def discovery(self) -> Discovery:
        if self._discovery is None:
            from taugrid.kube.discovery import Discovery

            self._discovery = Discovery(self.kube)
        return self._discovery

    def resolve(self, m: Manifest, spec: S.ServiceSpec, replicas: int, workspace: str | None,
                profile: str | None) -> Resolved:  # fmt: skip
        """Placed as a rayjob of `replicas` workers, in the workspace the user means."""
        from taugrid.runs.resolve import resolve

        snap = self.discovery.snapshot()
        if workspace is None and m.policy.workspace is None:
            usable = self.discovery.usable_workspaces(snap)
            if len(usable) == 1:
                workspace = usable[0].name
        return resolve(placement(m, spec, replicas), snap, workspace=workspace, profile=profile)

    def queue_room(self, r: Resolved, objects: list[dict[str, Any]]) -> tuple[str | None, str | None, dict[tuple[str, str], Decimal] | None]:  # fmt: skip
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

    def send(self, objects: list[dict[str, Any]], create: bool) -> None:
        """The TauService first (created for a new service: a name taken in the namespace is
        refused), then the code ConfigMap and the RayService, owned by it."""
        from taugrid.kube.client import Forbidden

        owner, *rest = objects
        ns, name = owner["metadata"]["namespace"], owner["metadata"]["name"]
        try:
            if create:
                got = self.kube.create(owner)
                if got is None:
                    raise TauError(f"a service {name!r} exists in namespace {ns} already",
                                   exit_code=EXIT_USAGE, hint="--name another-name")  # fmt: skip
            else:
                got = self.kube.apply(owner)
        except Forbidden as e:
            raise TauError(f"{e.message} (namespace {ns}, as {self.kube.user})",
                           exit_code=EXIT_PLATFORM, hint="tau workspaces lists the workspaces you "
                           "may use (--workspace)") from None  # fmt: skip
        ref = {"apiVersion": C.API_VERSION, "kind": "TauService", "name": name,
               "uid": got["metadata"]["uid"], "blockOwnerDeletion": True}  # fmt: skip
        for obj in rest:
            obj["metadata"]["ownerReferences"] = [ref]
            self.kube.apply(obj)

    def observe(self, rec: S.ServiceRecord) -> Observed:
        """The RayService, its Kueue workload and its pods, as the status needs them."""
        from taugrid.api.kueuewords import explain
        from taugrid.kube.facts import admitted

        ns, name = rec.namespace or "", object_name(rec.name)
        try:
            rs = self.kube.get("RayService", name, ns)
        except TauError:
            return Observed(head_up=False, exists=False)
        if rs is None:
            return Observed(head_up=True, exists=False)
        status = rs.get("status") or {}
        active = status.get("activeServiceStatus") or {}
        pending = status.get("pendingServiceStatus") or {}
        app = ((active.get("applicationStatuses") or {}).get(rec.name)) or {}
        workload = next((w for w in self.kube.list("Workload", ns)
                         if any(o.get("kind") == "RayService" and o.get("name") == name
                                for o in w["metadata"].get("ownerReferences") or [])), None)  # fmt: skip
        is_admitted, waiting = None, ""
        if workload is not None:
            is_admitted = admitted(workload)
            if not is_admitted:
                conds = (workload.get("status") or {}).get("conditions") or []
                msg = next(
                    (c.get("message", "") for c in conds if c.get("type") == "QuotaReserved"), ""
                )
                words = explain(str(msg), rec.workspace)
                waiting = words.text if words else str(msg)
        pods = self.kube.list("Pod", ns, labels={C.LABEL_SERVICE: rec.name})
        workers = [
            p for p in pods if ((p["metadata"].get("labels") or {}).get("ray.io/group") == GROUP)
        ]
        running = [p for p in workers if (p.get("status") or {}).get("phase") == "Running"]
        spec_replicas = (rs["spec"]["rayClusterConfig"]["workerGroupSpecs"] or [{}])[0].get(
            "replicas", 0
        )
        revision = (rs["metadata"].get("labels") or {}).get(C.LABEL_SERVICE_REVISION)
        serve_status = str(
            app.get("status")
            or ("DEPLOYING" if status.get("serviceStatus") != "Running" else "RUNNING")
        )
        return Observed(
            head_up=True, exists=True, status=serve_status, message=str(app.get("message") or ""),
            revision=int(revision) if revision and revision.isdigit() else None,
            wanted=int(spec_replicas or 0), running=len(running),
            starting=len(workers) - len(running), admitted=is_admitted, waiting=waiting,
            simulated=self._simulated(), upgrading=bool(pending.get("rayClusterName")),
        )  # fmt: skip

    def _simulated(self) -> bool:
        """The sandbox (stack `sandbox`) runs KWOK: pods without containers."""
        try:
            return (self.discovery.tau_cluster().get("spec") or {}).get("stack") == "sandbox"
        except TauError:
            return False

    def remove(self, rec: S.ServiceRecord) -> bool:
        """Delete the TauService: the garbage collector removes what it owns."""
        return self.kube.delete("TauService", object_name(rec.name), rec.namespace)

    def gone(self, rec: S.ServiceRecord) -> bool:
        return (self.kube.get("TauService", object_name(rec.name), rec.namespace) is None
                and self.kube.get("RayService", object_name(rec.name), rec.namespace) is None)  # fmt: skip
