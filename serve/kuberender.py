"""A cluster service's objects, pure: the service placed as a rayjob of `replicas` workers
(resolved by the runs' own resolution), and for one generation its TauService, code ConfigMap,
RayService and stable Service (the generations themselves: serve/kube.py's docstring).
`serve/kube.py`'s `KubeServe` sends, observes and deletes them."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import yaml

from taugrid.api import constants as C
from taugrid.api import serve as S
from taugrid.api.crds import ServiceCanary, ServiceRevision, TauServiceSpec
from taugrid.api.manifest import Compute, Manifest, RunSpec
from taugrid.runs.codebundle import CodeBundle
from taugrid.runs.render import RunMeta, code_configmap, ray_cluster_spec
from taugrid.runs.resolve import Resolved

GROUP = "replicas"  # the worker group that holds the Ray Serve replicas


MODEL_DIR = "/model"  # the init container lays the pinned model out here (an emptyDir)


SERVE_PORT = 8000


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
