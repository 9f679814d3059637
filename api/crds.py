"""TauGrid's own custom resources and the generator of their CustomResourceDefinitions.

The pydantic models are the single source: the CRD schemas, the CLI's parsing of objects read
from a cluster, and the Pulumi components that create them all come from here. The generator
turns pydantic's JSON Schema into a *structural* OpenAPI v3 schema (inlined, every node typed,
no `additionalProperties: false`, no null branches) as `apiextensions.k8s.io/v1` requires.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from taugrid.api import constants as C
from taugrid.api.defaults import new_list
from taugrid.api.gpuhealth import PoolDeclaration
from taugrid.api.gpuuse import GpuUseStatus
from taugrid.api.profiles import ImageMirror, WorkloadProfile, WorkspaceRef
from taugrid.api.teams import PriceTable, TeamRef
from taugrid.api.usage import UsageRow
from taugrid.api.vocabulary import Phase, ResolvedInput, Signal, TerminationReason, TimelineEntry


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class Condition(_Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(min_length=1)
    message: str = ""
    lastTransitionTime: str = Field(json_schema_extra={"format": "date-time"})
    observedGeneration: int | None = Field(None, ge=0)


def _list_map(key: str) -> dict[str, Any]:
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]}


_CONDITIONS_LIST: dict[str, Any] = _list_map("type")


# --- TauCluster ----------------------------------------------------------------------------
class MultiClusterRef(_Model):
    role: Literal["manager", "worker"]
    workers: list[str] = Field(
        default_factory=new_list, description="A manager's workers (their MultiKueueClusters)"
    )


class TauClusterSpec(_Model):
    stack: str = Field(description="The Pulumi stack that declared this cluster")
    workloadProfiles: list[WorkloadProfile] = Field(
        default_factory=new_list,
        json_schema_extra=_list_map("name"),
    )
    components: dict[str, str] = Field(
        default_factory=dict, description="Installed component -> version"
    )
    installedBy: dict[str, str] = Field(
        default_factory=dict,
        description="Component -> helm (its own release), external (outside the stack), or the "
        "component whose release brings it",
    )
    defaultWorkspace: str | None = Field(None, description="Workspace of runs that name none")
    workspaces: list[WorkspaceRef] = Field(
        default_factory=new_list,
        description="Every workspace (namespace, /data PVC): what `tau` resolves runs against",
        json_schema_extra=_list_map("name"),
    )
    imageMirrors: list[ImageMirror] = Field(
        default_factory=new_list,
        description="Images a run names, run as others (the first match): a registry mirror",
    )
    imageMirrorsOnly: bool = Field(
        False,
        description="The cluster's nodes pull no image (air-gapped; the sandbox's real nodes): a "
        "run whose image no mirror covers is refused at submission, naming the images it has",
    )
    pools: list[PoolDeclaration] = Field(
        default_factory=new_list,
        description="What each GPU pool's nodes should be: what `tau cluster validate` checks",
        json_schema_extra=_list_map("name"),
    )
    teams: list[TeamRef] = Field(
        default_factory=new_list,
        description="Teams: their weights, queues and workspaces (`tau usage`, `tau quota status`)",
        json_schema_extra=_list_map("name"),
    )
    prices: PriceTable | None = Field(
        None, description="Price of a node-hour per pool (from the stack's per-VM-size table)"
    )
    multiCluster: MultiClusterRef | None = Field(
        None, description="Its MultiKueue role, and a manager's workers (absent: standalone)"
    )


class ProfileCapacity(_Model):
    """Live capacity of one workload profile's pool (written by the controller)."""

    name: str
    nodes: int = Field(0, ge=0, description="Nodes of the pool now")
    healthyNodes: int = Field(0, ge=0, description="Ready, schedulable, no GPU problem")
    allocatableGpus: int = Field(0, ge=0, description="GPUs the healthy nodes offer")
    cordonedByTau: int = Field(0, ge=0, description="Nodes the controller cordoned (GPU faults)")


class TauClusterStatus(_Model):
    phase: Literal["Pending", "Ready", "Degraded"] | None = None
    observedGeneration: int | None = None
    profileSetHash: str | None = None
    observedAt: str | None = Field(None, json_schema_extra={"format": "date-time"})
    controllerHeartbeat: str | None = Field(
        None,
        description="When the TauGrid controller last said it is alive (every 30 s); runs' "
        "TauRun.status is current while this is recent",
        json_schema_extra={"format": "date-time"},
    )
    profiles: list[ProfileCapacity] = Field(
        default_factory=new_list, json_schema_extra=_list_map("name")
    )
    conditions: list[Condition] = Field(
        default_factory=new_list, json_schema_extra=_CONDITIONS_LIST
    )


# --- TauWorkspace --------------------------------------------------------------------------
class Subject(_Model):
    kind: Literal["User", "Group", "ServiceAccount"]
    name: str = Field(min_length=1)
    namespace: str | None = None


class WorkspaceStorage(_Model):
    pvc: str
    size: str = Field(description="Requested size, e.g. 1Ti")
    storageClass: str | None = None


class TauWorkspaceSpec(_Model):
    namespace: str
    members: list[Subject] = Field(default_factory=new_list)
    localQueues: list[str] = Field(
        default_factory=new_list, description="LocalQueues in the namespace"
    )
    profiles: list[str] = Field(
        default_factory=new_list, description="Workload profiles this workspace may use"
    )
    storage: WorkspaceStorage
    serviceAccount: str | None = None


class TauWorkspaceStatus(_Model):
    phase: Literal["Pending", "Ready", "Degraded"] | None = None
    observedGeneration: int | None = None
    conditions: list[Condition] = Field(
        default_factory=new_list, json_schema_extra=_CONDITIONS_LIST
    )


# --- TauQuotaRequest -------------------------------------------------------------------------
QuotaPhase = Literal["Pending", "Approved", "Active", "Expired", "Denied"]
DURATION_PATTERN = r"^[1-9][0-9]*[smhd]$"


class TauQuotaRequestSpec(_Model):
    workspace: str
    flavor: str = Field(description="Kueue ResourceFlavor the quota is for")
    resource: str = Field(C.GPU_RESOURCE, description="Resource name, e.g. nvidia.com/gpu")
    requested: int | str = Field(description="Extra nominal quota requested")
    reason: str = Field(min_length=1)
    duration: str = Field(
        pattern=DURATION_PATTERN,
        description="How long the grant lasts once active: 30m, 48h, 7d",
    )
    profile: str | None = Field(None, description="Workload profile the quota is for")
    clusterQueue: str | None = Field(
        None, description="ClusterQueue to raise (default: the one the workspace's queues use)"
    )
    requestedBy: str | None = Field(None, description="Who asked (as tau saw the identity)")


class QuotaDecision(_Model):
    """A platform admin's verdict (tau quota approve|deny): written through the status
    subresource, which researchers' RBAC does not grant."""

    verdict: Literal["Approved", "Denied"]
    by: str = Field(min_length=1)
    at: str = Field(json_schema_extra={"format": "date-time"})
    note: str = ""
    generation: int | None = Field(None, ge=0, description="The spec generation decided on")


class TauQuotaRequestStatus(_Model):
    decision: QuotaDecision | None = None
    phase: QuotaPhase | None = None
    clusterQueue: str | None = None
    granted: int | str | None = Field(None, description="Quota added now (may be capped)")
    activeSince: str | None = Field(None, json_schema_extra={"format": "date-time"})
    expiresAt: str | None = Field(None, json_schema_extra={"format": "date-time"})
    message: str | None = None
    observedGeneration: int | None = None
    conditions: list[Condition] = Field(
        default_factory=new_list, json_schema_extra=_CONDITIONS_LIST
    )


# --- TauRun ----------------------------------------------------------------------------------
class TauRunSpec(_Model):
    runId: str
    runName: str
    workspace: str
    profile: str
    workloadKind: Literal["job", "rayjob"]
    configHash: str
    submitter: str | None = None
    codeRevision: str | None = None
    resumeFrom: str | None = Field(None, description="Checkpoint path the run resumes from")
    parentRun: str | None = Field(None, description="Run id this run resumes or retries")
    attempt: int = Field(0, ge=0)
    workers: int = Field(1, ge=1)
    gpusPerWorker: int = Field(0, ge=0)
    inputs: list[ResolvedInput] = Field(
        default_factory=new_list,
        description="Its data inputs at their exact versions, as resolved at submit (a model "
        "registered from the run on any machine names them in its lineage)",
    )
    manifest: dict[str, Any] = Field(
        default_factory=dict,
        description="The tau.yaml as submitted (secrets are references only)",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class TauRunStatus(_Model):
    phase: Phase | None = None
    attempt: int = Field(0, ge=0)
    terminationReason: TerminationReason | None = None
    startTime: str | None = Field(None, json_schema_extra={"format": "date-time"})
    completionTime: str | None = Field(None, json_schema_extra={"format": "date-time"})
    runDir: str | None = None
    summary: str | None = None
    nodes: list[str] = Field(default_factory=new_list, description="Nodes the run's pods ran on")
    observedAt: str | None = Field(None, json_schema_extra={"format": "date-time"})
    signals: list[Signal] = Field(
        default_factory=new_list,
        json_schema_extra=_list_map("name"),
    )
    timeline: list[TimelineEntry] = Field(default_factory=new_list)
    conditions: list[Condition] = Field(
        default_factory=new_list, json_schema_extra=_CONDITIONS_LIST
    )
    gpuUse: GpuUseStatus | None = Field(
        None, description="Its GPUs' use now, from DCGM (the controller reads it while it runs)"
    )
    clusters: list[str] = Field(
        default_factory=new_list,
        description="The MultiKueue worker clusters it was dispatched to, in order (the last "
        "runs it); empty on a cluster that runs its own",
    )
    cluster: str | None = Field(
        None, description="The worker cluster it is on now (the last of `clusters`: a column)"
    )


# --- TauService ------------------------------------------------------------------------------
class ServiceRevision(_Model):
    number: int = Field(ge=1)
    modelVersion: str | None = None
    configHash: str
    createdAt: str = Field(json_schema_extra={"format": "date-time"})
    createdBy: str | None = None


class ServiceCanary(_Model):
    revision: int = Field(ge=1, description="The revision on trial")
    percent: int = Field(ge=0, le=100, description="Its share of the requests")
    generation: int = Field(
        ge=1, description="Its RayService, <name>-<generation> (with the split)"
    )
    stableGeneration: int = Field(ge=1, description="The serving RayService, kept meanwhile")
    modelVersion: str | None = None
    startedAt: str = Field(json_schema_extra={"format": "date-time"})


class TauServiceSpec(_Model):
    serviceName: str
    workspace: str
    profile: str
    revision: int = Field(ge=1, description="The revision that serves (or is rolling out)")
    modelRef: str | None = Field(None, description="As asked: iris@prod")
    modelVersion: str | None = Field(None, description="The exact version it serves")
    configHash: str
    submitter: str | None = None
    replicas: int = Field(ge=0)
    gpusPerReplica: int = Field(0, ge=0)
    strategy: Literal["rolling", "blue-green", "canary"] = "rolling"
    routePrefix: str
    generation: int = Field(
        1, ge=1, description="The RayService <name>-<generation> that is to serve (the newest)"
    )
    revisions: list[ServiceRevision] = Field(default_factory=new_list)
    canary: ServiceCanary | None = Field(None, description="A revision on trial beside it")


class TauServiceStatus(_Model):
    phase: str | None = None
    summary: str | None = None
    revision: int | None = None
    replicasReady: int | None = None
    admitted: bool | None = None
    observedAt: str | None = Field(None, json_schema_extra={"format": "date-time"})
    timeline: list[TimelineEntry] = Field(default_factory=new_list)
    conditions: list[Condition] = Field(
        default_factory=new_list, json_schema_extra=_CONDITIONS_LIST
    )


# --- TauUsage ------------------------------------------------------------------------------
class TauUsageSpec(_Model):
    """A part of a workspace's usage ledger: the rows of the runs created in one month whose id
    falls in one bucket (api/usage.py). Written by the controller only; readers of the
    workspace read it (`tau usage`)."""

    month: str = Field(pattern=r"^[0-9]{4}-[0-9]{2}$")
    runs: dict[str, UsageRow] = Field(default_factory=dict, description="Run id -> its row")


class TauUsageStatus(_Model):
    pass


# --- generator -------------------------------------------------------------------------------
@dataclass(frozen=True)
class CrdType:
    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    scope: Literal["Cluster", "Namespaced"]
    spec: type[BaseModel]
    status: type[BaseModel]
    columns: tuple[tuple[str, str, str], ...] = field(default=())  # (name, type, jsonPath)
    # Printer columns of priority 1 (`kubectl get -o wide`): what a listing reads, so that a
    # Table request brings it without the rest of each object (see `row_columns`)
    wide: tuple[tuple[str, str, str], ...] = field(default=())


AGE = ("Age", "date", ".metadata.creationTimestamp")


M = TypeVar("M", bound=BaseModel)


def read_status(cls: type[M], raw: Any) -> tuple[M | None, str | None]:
    """An object's status (or spec) as its model: (the model, None), or (None, why it cannot be
    read: the first problem pydantic found, with its path), e.g. a status written by a newer
    controller. No status at all is (None, None). The one place a cluster object's status is
    read into its model."""
    if not raw:
        return None, None
    try:
        return cls.model_validate(raw), None
    except ValueError as e:
        errors: list[Any] = list(getattr(e, "errors", list)())
        if errors:
            where = ".".join(str(p) for p in errors[0].get("loc") or ()) or "status"
            return None, f"{where}: {errors[0].get('msg')}"
        return None, str(e)


def _known(cls: Any, raw: Any) -> Any:
    """`raw` with only what the model type `cls` declares (through lists, optionals and dicts
    of models): what a newer tau added is left out, what this one knows is kept as it is."""
    import typing

    origin = typing.get_origin(cls)
    if origin is not None:  # X | None, list[X], dict[str, X]
        args = typing.get_args(cls)
        if isinstance(raw, list) and origin is list:
            return [_known(args[0], item) for item in raw]
        if isinstance(raw, dict) and origin is dict:
            return {k: _known(args[1], v) for k, v in raw.items()}
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        return _known(models[0], raw) if len(models) == 1 else raw
    if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or not isinstance(raw, dict):
        return raw
    fields = cls.model_fields
    if cls.model_config.get("extra") == "allow":
        return raw
    return {k: _known(fields[k].annotation, v) for k, v in raw.items() if k in fields}


def read_spec(cls: type[M], obj: dict[str, Any], missing: dict[str, Any] | None = None) -> M:
    """A TauGrid object's spec as its model: the one way the code reads a TauRun's or a
    TauService's spec (written from the same model). Fields a newer tau added are left out;
    `missing` gives what a field reads as when the object does not carry it (a listing from
    printer columns carries a few); a spec this tau cannot read (another version's CRD) is a
    TauError that names the object, the field and the fix."""
    from taugrid.api.errors import EXIT_PLATFORM, TauError

    md = obj.get("metadata") or {}
    try:
        return cls.model_validate(_known(cls, {**(missing or {}), **(obj.get("spec") or {})}))
    except ValueError as e:
        errors: list[Any] = list(getattr(e, "errors", list)())
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc") or ())
        raise TauError(
            f"{obj.get('kind') or cls.__name__.removesuffix('Spec')} "
            f"{md.get('namespace', '')}/{md.get('name', '?')}: "
            f"spec.{where}: {first.get('msg', e)}",
            exit_code=EXIT_PLATFORM,
            hint="this tau and the cluster's TauGrid CRDs are of different versions: use the "
            "tau the platform was deployed with (tau version; the stack's lock pins it), or "
            "upgrade the platform",
        ) from None


def escape_key(key: str) -> str:
    """A map key as one step of a JSONPath (`tau.azure.com/x` -> `tau\\.azure\\.com/x`)."""
    return key.replace(".", "\\.")


CRD_TYPES: tuple[CrdType, ...] = (
    CrdType(
        "TauCluster",
        "clusters",
        "cluster",
        ("tc",),
        "Cluster",
        TauClusterSpec,
        TauClusterStatus,
        (
            ("Stack", "string", ".spec.stack"),
            ("Phase", "string", ".status.phase"),
            ("Profiles", "string", ".status.profileSetHash"),
        ),
    ),
    CrdType(
        "TauWorkspace",
        "workspaces",
        "workspace",
        ("tw",),
        "Namespaced",
        TauWorkspaceSpec,
        TauWorkspaceStatus,
        (
            ("Namespace", "string", ".spec.namespace"),
            ("PVC", "string", ".spec.storage.pvc"),
            ("Phase", "string", ".status.phase"),
        ),
    ),
    CrdType(
        "TauQuotaRequest",
        "quotarequests",
        "quotarequest",
        ("tqr",),
        "Namespaced",
        TauQuotaRequestSpec,
        TauQuotaRequestStatus,
        (
            ("Workspace", "string", ".spec.workspace"),
            ("Resource", "string", ".spec.resource"),
            ("Requested", "string", ".spec.requested"),
            ("Phase", "string", ".status.phase"),
        ),
    ),
    CrdType(
        "TauRun",
        "runs",
        "run",
        ("tr",),
        "Namespaced",
        TauRunSpec,
        TauRunStatus,
        (
            ("Run", "string", ".spec.runName"),
            ("Kind", "string", ".spec.workloadKind"),
            ("Profile", "string", ".spec.profile"),
            ("Phase", "string", ".status.phase"),
        ),
        (  # what `tau run list --cluster` shows of each run (runs.backends.kube.workspace_runs)
            ("Id", "string", ".spec.runId"),
            ("Workspace", "string", ".spec.workspace"),
            ("Submitted-Attempt", "integer", ".spec.attempt"),
            ("Attempt", "integer", ".status.attempt"),
            ("Workers", "integer", ".spec.workers"),
            ("GPUs", "integer", ".spec.gpusPerWorker"),
            ("Experiment", "string", ".spec.manifest.experiment.name"),
            ("Research-Experiment", "string", ".spec.manifest.research.experiment"),
            ("User", "string", ".metadata.annotations." + escape_key(C.ANN_CLUSTER_USER)),
            # times as "string": the server shows a "date" column as an age ("6m58s")
            ("Created", "string", AGE[2]),
            ("Started", "string", ".status.startTime"),
            ("Ended", "string", ".status.completionTime"),
            ("Reason", "string", ".status.terminationReason"),
            ("Summary", "string", ".status.summary"),
            ("Observed", "string", ".status.observedAt"),
            # its GPU use (the list's GPU column: "8×65%", "8×idle")
            ("GPU-Count", "integer", ".status.gpuUse.gpus"),
            ("SM-Active", "number", ".status.gpuUse.smActive"),
            ("GPU-Since", "string", ".status.gpuUse.since"),
            ("GPU-Idle-Since", "string", ".status.gpuUse.idleSince"),
            # a MultiKueue manager's: the worker cluster it is on (the list's WORKER column)
            ("Worker-Cluster", "string", ".status.cluster"),
        ),
    ),
    CrdType(
        "TauUsage",
        "usages",
        "usage",
        ("tu",),
        "Namespaced",
        TauUsageSpec,
        TauUsageStatus,
        (("Month", "string", ".spec.month"),),
    ),
    CrdType(
        "TauService",
        "tauservices",
        "tauservice",
        ("tsvc",),
        "Namespaced",
        TauServiceSpec,
        TauServiceStatus,
        (
            ("Revision", "integer", ".spec.revision"),
            ("Model", "string", ".spec.modelVersion"),
            ("Replicas", "integer", ".spec.replicas"),
            ("Phase", "string", ".status.phase"),
        ),
    ),
)

_DROP = {"title", "$schema", "examples"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    """Rewrite one pydantic JSON-Schema node into a structural OpenAPI v3 node."""
    if isinstance(node, list):
        return [_structural(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    out: dict[str, Any] = {}
    branches = node.get("anyOf")
    if branches is not None:
        non_null = [b for b in branches if b.get("type") != "null"]
        types = {b.get("type") for b in non_null}
        if len(non_null) == 1:
            inner = _structural(non_null[0], defs)
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            return _structural({**rest, **inner}, defs) if rest else inner
        if types <= {"integer", "number", "string"} and "string" in types:
            out["x-kubernetes-int-or-string"] = True
        else:
            raise ValueError(f"cannot express union {types} structurally")
    for key, value in node.items():
        if key in _DROP or key in ("anyOf", "$defs"):
            continue
        if key == "default" and value is None:
            continue
        if key == "additionalProperties" and value is False:
            continue
        if key == "const":
            out["enum"] = [value]
            continue
        if key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            # JSON Schema's number (pydantic's `gt`/`lt`) is OpenAPI v3's bound plus a flag
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
            continue
        if key == "properties":
            if value:  # none: left out, as the API server stores it (else every apply differs)
                out["properties"] = {k: _structural(v, defs) for k, v in value.items()}
            continue
        if key in ("items", "additionalProperties"):
            out[key] = _structural(value, defs)
            continue
        out[key] = value
    if out.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("type", "object")
        # `additionalProperties: true` (pydantic's dict[str, Any]) is a schema for every value
        # to the API server, an empty one, and pruning by it empties every nested map: the
        # TauRun's tau.yaml reached the cluster with only its top-level scalars.
        if out.get("additionalProperties") is True:
            del out["additionalProperties"]
    return out


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(mode="validation")
    defs = raw.pop("$defs", {})
    return _structural(raw, defs)  # type: ignore[no-any-return]


def row_columns(kind: str) -> dict[str, str]:
    """A kind's printer columns that show a field as it is, name -> JSONPath: what a Table
    request answers with (a "date" column is shown as an age, and left out here)."""
    t = next(t for t in CRD_TYPES if t.kind == kind)
    return {n: p for n, ty, p in (*t.columns, *t.wide) if ty != "date"}


@functools.cache
def path_keys(path: str) -> tuple[str, ...]:
    """The keys of a printer column's simple JSONPath (`.a.b\\.c/d` -> ("a", "b.c/d"))."""
    keys: list[str] = []
    key, i = "", 1 if path.startswith(".") else 0
    while i < len(path):
        ch = path[i]
        if ch == "\\" and i + 1 < len(path):
            key, i = key + path[i + 1], i + 2
            continue
        if ch == ".":
            keys.append(key)
            key = ""
        else:
            key += ch
        i += 1
    keys.append(key)
    return tuple(keys)


def column_value(obj: dict[str, Any], path: str) -> Any:
    """What a printer column shows of an object (None: the field is not there)."""
    cur: Any = obj
    for key in path_keys(path):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur


def from_columns(values: dict[str, Any]) -> dict[str, Any]:
    """An object holding only the given JSONPath -> value fields (None: left out)."""
    return nested((path_keys(path), value) for path, value in values.items())


def thin(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    """What a Table request answers of a whole object: its name, namespace and the fields of
    its kind's row columns (what `KubeAPI.list_columns` returns)."""
    meta = obj.get("metadata") or {}
    out = from_columns({p: column_value(obj, p) for p in row_columns(kind).values()})
    out.setdefault("metadata", {}).update(name=meta.get("name"), namespace=meta.get("namespace"))
    return out


def nested(fields: Iterable[tuple[tuple[str, ...], Any]]) -> dict[str, Any]:
    """An object holding only the given fields, by their keys (a None value: left out)."""
    obj: dict[str, Any] = {}
    for keys, value in fields:
        if value is None:
            continue
        cur = obj
        for key in keys[:-1]:
            cur = cur[key] if key in cur else cur.setdefault(key, {})
        cur[keys[-1]] = value
    return obj


def render_crd(t: CrdType) -> dict[str, Any]:
    root = {
        "type": "object",
        "description": f"{t.kind} ({C.GROUP}). Generated from taugrid.api.crds.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": openapi_schema(t.spec),
            "status": openapi_schema(t.status),
        },
        "required": ["spec"],
    }
    columns: list[dict[str, Any]] = [
        {"name": n, "type": ty, "jsonPath": p} for n, ty, p in t.columns
    ]
    columns += [{"name": n, "type": ty, "jsonPath": p, "priority": 1} for n, ty, p in t.wide]
    columns.append({"name": "Age", "type": "date", "jsonPath": AGE[2]})
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{t.plural}.{C.GROUP}",
            "labels": {
                "app.kubernetes.io/part-of": "taugrid",
                "app.kubernetes.io/managed-by": "taugrid",
            },
        },
        "spec": {
            "group": C.GROUP,
            "names": {
                "kind": t.kind,
                "listKind": f"{t.kind}List",
                "plural": t.plural,
                "singular": t.singular,
                "shortNames": list(t.short_names),
                "categories": ["taugrid"],
            },
            "scope": t.scope,
            "versions": [
                {
                    "name": C.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def render_crds() -> list[dict[str, Any]]:
    return [render_crd(t) for t in CRD_TYPES]
