"""tau.yaml, schema_version 1: the researcher's run declaration.

Compatible with TauGrid's "managed workflow manifest" (every key it accepts keeps its meaning),
but strict: unknown keys and wrong types are errors, never warnings. Field-level rules live in
the models; rules that relate several fields live in api/manifest_rules.py (`semantic_issues`),
which reports each problem with its key path so the CLI can print one clear message per problem.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from taugrid.api import constants as C
from taugrid.api import naming
from taugrid.api.defaults import new_list
from taugrid.api.quantity import cpu_field, memory_with_unit
from taugrid.api.vocabulary import DEFAULT_RETRY_ON, RetryReason

DNS_LABEL = naming.DNS_LABEL
DNS_1035 = naming.DNS_1035
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
MIG_PROFILE = re.compile(r"^\d+g\.\d+gb$")
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
MAX_GPUS_PER_WORKER = 8
MAX_WORKERS = 256
MAX_RETRIES = 20

WorkloadKind = Literal["job", "rayjob"]
Launcher = Literal["python", "torchrun", "ray-train", "ray-tune"]
RAY_LAUNCHERS = ("ray-train", "ray-tune")
DEFAULT_FUNCTION = {"ray-train": "train_loop_per_worker", "ray-tune": "objective"}
SEARCH_DOMAINS = {  # tune.search_space: {key: {domain: [args]}} -> ray.tune's sampler
    "uniform": 2,
    "loguniform": 2,
    "quniform": 3,
    "randint": 2,
    "randn": 2,
    "choice": None,
    "grid_search": None,
}
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_PROCS_PER_NODE = 64
TORCHRUN_PORT = 29500  # the c10d rendezvous on node 0
CpuAmount = Annotated[int | float | str, Field(description="cores: 4, 0.5 or 500m")]
# Numbers are accepted by the type only to be refused with the reason (a unit is missing).
Memory = Annotated[
    str | int | float,
    WithJsonSchema({"type": "string", "description": "Kubernetes memory quantity, e.g. 64Gi"}),
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


def _rel_path(v: str | None) -> str | None:
    if v is None:
        return v
    parts = v.split("/")
    if v != v.strip() or not v or v.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError("must be a relative path without '.', '..' or empty segments")
    return v


class RunSpec(_Model):
    entrypoint: str | None = Field(
        None, description="Script to run, relative to tau.yaml (.py or .sh)"
    )
    script: str | None = Field(None, description="Alias of entrypoint (TauGrid compatibility)")
    main_script: str | None = Field(
        None, description="Overrides entrypoint (TauGrid compatibility)"
    )
    workload_kind: WorkloadKind | None = Field(
        None, description="rayjob | job; inferred when omitted"
    )
    args: list[str] = Field(
        default_factory=new_list, description="Arguments passed to the entrypoint"
    )
    launcher: Launcher | None = Field(
        None,
        description="python (default) | torchrun: compute.workers nodes x nproc_per_node | "
        "ray-train: a Ray Train trainer over compute.workers | ray-tune: a sweep (tune block)",
    )
    function: str | None = Field(
        None,
        description="ray-train: the per-worker training function (default "
        "train_loop_per_worker); ray-tune: the trainable (default objective)",
    )
    nproc_per_node: int | None = Field(
        None,
        ge=1,
        le=MAX_PROCS_PER_NODE,
        description="torchrun: processes per node (default: compute.gpus, or 1 on CPU)",
    )
    image: str | None = Field(None, description="Alias of runtime.image (lowest priority)")
    name: str | None = Field(None, description="Ignored: the run name is the top-level name")
    smoke_pairs: int | None = Field(None, ge=0, description="Forwarded as TAU_SMOKE_PAIRS")


class Tune(_Model):
    """A Ray Tune sweep (run.launcher: ray-tune): the trainable is run.function of the
    entrypoint; each trial is recorded under the run's record, and the record names the best."""

    metric: str | None = Field(None, description="What the trainable reports and the sweep ranks")
    mode: Literal["min", "max"] = "min"
    num_samples: int = Field(1, ge=1, le=10_000, description="Trials (x the grid's points)")
    max_concurrent: int | None = Field(
        None, ge=1, le=1_000, description="Trials at once (default: compute.workers)"
    )
    search_space: dict[str, Any] = Field(
        default_factory=dict,
        description="key: a value, or {uniform|loguniform|randint|randn: [a, b]}, "
        "{quniform: [a, b, q]}, {choice: [...]}, {grid_search: [...]}",
    )
    scheduler: Literal["fifo", "asha"] = "fifo"
    max_t: int = Field(100, ge=1, description="asha: the most iterations a trial runs")
    grace_period: int = Field(1, ge=1, description="asha: iterations before a trial may stop")


class Execution(_Model):
    """The original TauGrid's spellings of the launcher settings (aliases of run.launcher,
    run.nproc_per_node, compute.workers and the tune block; run.* and tune.* win)."""

    launcher: Launcher | None = Field(None, description="Alias of run.launcher")
    processes_per_node: int | None = Field(
        None, ge=1, le=MAX_PROCS_PER_NODE, description="Alias of run.nproc_per_node"
    )
    nodes: int | None = Field(None, ge=1, le=256, description="Alias of compute.workers (torchrun)")
    metric: str | None = Field(None, description="Alias of tune.metric")
    mode: Literal["min", "max"] | None = Field(None, description="Alias of tune.mode")
    num_samples: int | None = Field(None, ge=1, le=10_000, description="Alias of tune.num_samples")
    max_concurrent_trials: int | None = Field(
        None, ge=1, le=1_000, description="Alias of tune.max_concurrent"
    )
    configs: dict[str, Any] | None = Field(None, description="Alias of tune.search_space")


class ResourceNaming(_Model):
    prefix: str | None = Field(None, description="Prefix of the run id: <prefix>-<name>-<5 chars>")

    @field_validator("prefix")
    @classmethod
    def _dns(cls, v: str | None) -> str | None:
        if v is not None and (problem := naming.name_problem(v.strip())):
            raise ValueError(problem)
        return v.strip() if v else v


class Compute(_Model):
    gpus: int = Field(0, ge=0, le=MAX_GPUS_PER_WORKER, description="GPUs per worker; 0 = CPU-only")
    workers: int = Field(
        1, ge=1, le=MAX_WORKERS, description="Worker pods (a RayJob adds a CPU-only head)"
    )
    cpus: CpuAmount | None = Field(None, description="CPU of the Job pod; default of worker_cpus")
    cpu_limit: CpuAmount | None = None
    memory: Memory | None = Field(
        None, description="Memory of the Job pod; default of worker_memory"
    )
    memory_limit: Memory | None = None
    worker_cpus: CpuAmount | None = None
    worker_cpu_limit: CpuAmount | None = None
    worker_memory: Memory | None = None
    worker_memory_limit: Memory | None = None
    workload_kind: WorkloadKind | None = Field(None, description="Alias of run.workload_kind")
    gpu_resource_mode: Literal["device-plugin", "mig"] | None = None
    mig_profile: str | None = Field(None, description="MIG slice such as 1g.10gb (forces mig mode)")

    _v_cpu = field_validator("cpus", "cpu_limit", "worker_cpus", "worker_cpu_limit")(cpu_field)
    _v_mem = field_validator("memory", "memory_limit", "worker_memory", "worker_memory_limit")(
        memory_with_unit
    )

    @field_validator("mig_profile")
    @classmethod
    def _mig(cls, v: str | None) -> str | None:
        if v is not None and not MIG_PROFILE.match(v):
            raise ValueError("must look like 1g.10gb")
        return v


class SecretKeyRef(_Model):
    name: str
    key: str


class ValueFrom(_Model):
    secretKeyRef: SecretKeyRef


class EnvVar(_Model):
    name: str
    value: str | None = None
    valueFrom: ValueFrom | None = None


def _secret_ref_problem(name: str, ref: str) -> str | None:
    secret, sep, key = ref.partition(":")
    if not sep:
        return f"{name}: {ref!r} has no ':'; write <secret-name>:<key>, e.g. '{ref}:token'"
    if not secret or not key:
        part = "Secret name before" if not secret else "key after"
        return f"{name}: {ref!r}: the {part} ':' is empty; write <secret-name>:<key>"
    problem = naming.name_problem(secret, first_letter=False, limit=253)
    if problem:
        fixed = naming.suggest_name(secret, first_letter=False, limit=253)
        return (
            f"{name}: the Secret name {secret!r} {problem.split('; try')[0]}; try '{fixed}:{key}'"
        )
    if not SECRET_KEY.match(key):
        return f"{name}: the key {key!r} may hold only letters, digits, '-', '_' and '.'"
    return None


# Requirements in their common forms (a name, extras, PEP 440 version clauses), which are valid
# by construction; anything else goes to `packaging` (slower to import), which decides.
_REQ_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_N = r"[0-9]+"
_REQ_VERSION = rf"{_N}(?:\.{_N})*(?:(?:a|b|rc){_N})?(?:\.post{_N})?(?:\.dev{_N})?"
_REQ_CLAUSE = (
    rf"(?:(?:==|!=) ?{_N}(?:\.{_N})*\.\*|~= ?{_N}(?:\.{_N})+(?:(?:a|b|rc){_N})?"
    rf"|(?:==|!=|<=|>=|<|>) ?{_REQ_VERSION})"
)
SIMPLE_REQUIREMENT = re.compile(
    rf"{_REQ_NAME} ?(?:\[{_REQ_NAME}(?:, ?{_REQ_NAME})*\])? ?(?:{_REQ_CLAUSE}(?:, "
    rf"?{_REQ_CLAUSE})*)?"
)


class Runtime(_Model):
    image: str | None = Field(None, description="Container image (a Ray image for rayjob)")
    pip: list[str] = Field(default_factory=new_list, description="pip requirements of the run")
    env: list[EnvVar] | dict[str, str] = Field(
        default_factory=new_list, description="Env as a list of {name, value} or a map NAME: value"
    )
    env_from_secret: dict[str, str] = Field(
        default_factory=dict, description="NAME: <secret>:<key> (values never enter the record)"
    )
    python: str | None = Field(
        None,
        description="Local runs only: the Python that runs the entrypoint, e.g. .venv/bin/python "
        "(relative to tau.yaml) or python3.12 (on PATH). On a cluster the image's Python runs it.",
    )

    @field_validator("pip")
    @classmethod
    def _pip(cls, v: list[str]) -> list[str]:
        problems = []
        for i, item in enumerate(v):
            if not item.strip():
                problems.append(f"item {i} is blank")
            elif "\n" in item or item != item.strip():
                problems.append(f"item {i} ({item!r}) must be one requirement on one line")
            elif item.startswith("-"):
                problems.append(f"item {i} ({item!r}) is a pip option, not a requirement")
            elif not SIMPLE_REQUIREMENT.fullmatch(item):  # the common forms need no parser
                from packaging.requirements import InvalidRequirement, Requirement

                try:
                    Requirement(item)
                except InvalidRequirement as e:
                    why = str(e).splitlines()[0]
                    problems.append(
                        f"item {i} ({item!r}) is not a valid requirement ({why}); write a name"
                        " and optional version, like 'torch>=2.4' or 'numpy==2.1.*'"
                    )
        if problems:
            raise ValueError("; ".join(problems))
        return v

    @field_validator("env_from_secret")
    @classmethod
    def _secret_refs(cls, v: dict[str, str]) -> dict[str, str]:
        problems = [p for name, ref in v.items() if (p := _secret_ref_problem(name, ref))]
        if problems:
            raise ValueError("; ".join(problems))
        return v

    def env_items(self) -> list[EnvVar]:
        if isinstance(self.env, dict):
            return [EnvVar(name=k, value=v) for k, v in self.env.items()]
        return list(self.env)


class Mount(_Model):
    name: str
    mountPath: str
    pvc: str
    readOnly: bool = False


class Storage(_Model):
    data_pvc: str | None = Field(
        None, description="PVC mounted at /data (default: the workspace's)"
    )
    checkpoint: str | None = Field(None, description="Checkpoint folder, relative to the run dir")
    output: str | None = Field(None, description="Output folder, relative to the run dir")
    mounts: list[Mount] = Field(default_factory=new_list)

    _v_rel = field_validator("checkpoint", "output")(_rel_path)

    @field_validator("data_pvc")
    @classmethod
    def _pvc(cls, v: str | None) -> str | None:
        if v is not None and (problem := naming.name_problem(v, first_letter=False, limit=253)):
            raise ValueError(f"is not a PVC name: it {problem}")
        return v


class Artifacts(_Model):
    checkpoint: str | None = Field(None, description="Same as storage.checkpoint (compatibility)")
    _v_rel = field_validator("checkpoint")(_rel_path)


class Policy(_Model):
    workspace: str | None = None
    profile: str | None = Field(None, description="Workload profile; default: the single match")
    priority: str | None = Field(None, description="WorkloadPriorityClass allowed by the profile")
    namespace: str | None = None
    queue: str | None = Field(None, description="Must agree with the profile's LocalQueue")
    team: str | None = None
    lane: str | None = None


def _default_retry_on() -> list[RetryReason]:
    return list(DEFAULT_RETRY_ON)


class Resilience(_Model):
    max_retries: int = Field(0, ge=0, le=MAX_RETRIES)
    retry_on: list[RetryReason] = Field(default_factory=_default_retry_on)
    auto_resume: bool = Field(
        True, description="Retries resume from the newest complete checkpoint"
    )


class Metrics(_Model):
    stall_after_seconds: int = Field(900, ge=30, le=7 * 24 * 3600)
    primary: str | None = None
    direction: Literal["lower", "higher"] | None = None


class Experiment(_Model):
    project: str | None = None
    name: str | None = None
    group: str | None = None
    title: str | None = None


class Research(_Model):
    experiment: str | None = None


class DataInputSpec(_Model):
    ref: str = Field(
        description="A dataset or model version: NAME, NAME@ALIAS or NAME@sha256:VERSION "
        "(`tau data`), resolved to an exact version at submit"
    )
    kind: Literal["dataset", "model"] = "dataset"
    path: str | None = Field(
        None, description="Where the run sees it, under $TAU_INPUT_DIR (default: the name)"
    )


class DataSpec(_Model):
    inputs: list[DataInputSpec] = Field(
        default_factory=new_list, description="Datasets and models the run reads, by reference"
    )


class ModelInfo(_Model):
    name: str | None = None
    base: str | None = None
    task: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    primary_metric: str | None = None
    metric_direction: Literal["lower", "higher"] | None = None


# --- the service block (tau serve; the records and status are in api/serve.py) ---------------
MAX_REPLICAS = 64
MAX_GPUS_PER_REPLICA = 8
DEFAULT_MAX_ONGOING = 5  # Ray Serve's own default: a replica works on five requests at once
DEFAULT_MAX_QUEUED = 100  # Ray Serve's default is unbounded: a burst then waits without end
DEFAULT_REQUEST_TIMEOUT_S = 300.0  # Ray Serve's default has none: a stuck request never ends
IMPORT_PATH = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
)
RESERVED_ROUTE = "/_tau"  # a local canary's revisions answer under it
ROUTE = re.compile(r"^/[A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*$")
SERVICE_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
Strategy = Literal["rolling", "blue-green", "canary"]
STRATEGIES: tuple[Strategy, ...] = ("rolling", "blue-green", "canary")


class Autoscaling(_Model):
    min_replicas: int = Field(1, ge=0, le=MAX_REPLICAS, description="0: scale to zero when idle")
    max_replicas: int = Field(ge=1, le=MAX_REPLICAS)
    target_ongoing_requests: float | int = Field(
        2, gt=0, le=10_000, description="Requests in flight per replica the autoscaler aims at"
    )
    upscale_delay_s: float | int | None = Field(None, ge=0, le=3600)
    downscale_delay_s: float | int | None = Field(
        None, ge=0, le=24 * 3600, description="Idle time before a replica is removed (Ray: 600)"
    )


class Rollout(_Model):
    strategy: Strategy = Field(
        "rolling",
        description="rolling: replace replicas a few at a time, the new started first; "
        "blue-green: start all new replicas, then move all traffic; canary: a traffic share",
    )
    step: int = Field(20, ge=1, le=99, description="canary: the new revision's traffic share, %")


class ServiceSpec(_Model):
    """tau.yaml `service`: a Ray Serve application, the model it serves, and its size."""

    import_path: str = Field(description="The Ray Serve application: module:attribute")
    args: dict[str, Any] = Field(
        default_factory=dict, description="Arguments of an application builder function"
    )
    model: str | None = Field(None, description="NAME@ALIAS or NAME@sha256:VERSION (tau data)")
    from_run: str | None = Field(None, description="A run whose checkpoint is the model")
    checkpoint: Literal["latest", "best"] = Field("latest", description="With from_run")
    replicas: int | None = Field(None, ge=0, le=MAX_REPLICAS, description="Fixed replica count")
    autoscaling: Autoscaling | None = None
    gpus: int = Field(0, ge=0, le=MAX_GPUS_PER_REPLICA, description="GPUs per replica")
    cpus: float | int = Field(1, gt=0, le=256, description="CPUs per replica")
    memory: Memory | None = Field(None, description="Memory per replica on a cluster (e.g. 8Gi)")
    route_prefix: str | None = Field(None, description="HTTP route; default /<name>")
    readiness_path: str | None = Field(
        None, description="GET path (under the route) that answers when the service serves"
    )
    env: dict[str, str] = Field(default_factory=dict, description="Environment of the replicas")
    rollout: Rollout = Field(default_factory=Rollout)
    max_ongoing_requests: int = Field(
        DEFAULT_MAX_ONGOING,
        ge=1,
        le=10_000,
        description="Requests one replica works on at once (Ray Serve's max_ongoing_requests)",
    )
    max_queued_requests: int = Field(
        DEFAULT_MAX_QUEUED,
        ge=1,
        le=1_000_000,
        description="Requests that may wait for a replica; beyond them Ray Serve answers 503 at "
        "once instead of letting a request wait without end (max_queued_requests)",
    )
    request_timeout_s: float = Field(
        DEFAULT_REQUEST_TIMEOUT_S,
        gt=0,
        le=86_400,
        description="Seconds a request may take end to end before Ray Serve's proxy answers 408 "
        "(its request_timeout_s; local services share one proxy: the first one's holds)",
    )

    @field_validator("import_path")
    @classmethod
    def _import_path(cls, v: str) -> str:
        if not IMPORT_PATH.match(v):
            raise ValueError("must be module:attribute, e.g. serve_app:app")
        return v

    _v_mem = field_validator("memory")(memory_with_unit)

    @field_validator("route_prefix", "readiness_path")
    @classmethod
    def _route(cls, v: str | None) -> str | None:
        if v is not None and v != "/" and not ROUTE.match(v):
            raise ValueError("must be a path such as /iris (letters, digits, '.', '_', '~', '-')")
        return v

    @field_validator("route_prefix")
    @classmethod
    def _not_reserved(cls, v: str | None) -> str | None:
        if v is not None and (v == RESERVED_ROUTE or v.startswith(RESERVED_ROUTE + "/")):
            raise ValueError(f"routes under {RESERVED_ROUTE} are TauGrid's (a canary's revisions)")
        return v


class Manifest(_Model):
    """tau.yaml, schema_version 1."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        defer_build=True,
        title="tau.yaml",
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
    )

    schema_version: Literal[1]
    name: str = Field(description="Run name: lowercase alphanumerics and internal hyphens")
    run: RunSpec = Field(default_factory=RunSpec)
    entrypoint: str | None = Field(None, description="Alias of run.entrypoint (compatibility)")
    script: str | None = Field(None, description="Alias of run.entrypoint (compatibility)")
    image: str | None = Field(None, description="Alias of runtime.image (compatibility)")
    resource_naming: ResourceNaming = Field(default_factory=ResourceNaming)
    execution: Execution = Field(default_factory=Execution)
    tune: Tune | None = Field(None, description="A Ray Tune sweep (run.launcher: ray-tune)")
    compute: Compute = Field(default_factory=Compute)
    runtime: Runtime = Field(default_factory=Runtime)
    storage: Storage = Field(default_factory=Storage)
    artifacts: Artifacts = Field(default_factory=Artifacts)
    policy: Policy = Field(default_factory=Policy)
    resilience: Resilience = Field(default_factory=Resilience)
    metrics: Metrics = Field(default_factory=Metrics)
    experiment: Experiment = Field(default_factory=Experiment)
    research: Research = Field(default_factory=Research)
    model: ModelInfo = Field(default_factory=ModelInfo)
    data: DataSpec = Field(default_factory=DataSpec)
    service: ServiceSpec | None = Field(
        None, description="Serve a model with Ray Serve (tau serve deploy); see docs/serve.md"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        problem = naming.name_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    # --- derived views (no I/O) ----------------------------------------------------------
    @property
    def entrypoint_path(self) -> str | None:
        return (
            self.run.main_script
            or self.run.entrypoint
            or self.run.script
            or self.entrypoint
            or self.script
        )

    @property
    def image_ref(self) -> str | None:
        return self.runtime.image or self.run.image or self.image

    @property
    def checkpoint_subdir(self) -> str:
        return self.storage.checkpoint or self.artifacts.checkpoint or C.DEFAULT_CHECKPOINT_SUBDIR

    @property
    def output_subdir(self) -> str:
        return self.storage.output or C.DEFAULT_OUTPUT_SUBDIR

    @property
    def run_id_stem(self) -> str:
        return naming.run_id_stem(self.resource_naming.prefix, self.name)

    def config_hash(self) -> str:
        """sha256 of the validated config (canonical JSON): stamps every submission."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()

    @property
    def launcher(self) -> Launcher:
        return self.run.launcher or self.execution.launcher or "python"

    @property
    def nodes(self) -> int:
        """Worker pods: a torchrun job's nodes, or a RayJob's workers."""
        return self.execution.nodes or self.compute.workers

    @property
    def nproc_per_node(self) -> int:
        """torchrun's processes per node: as set, else one per GPU, else one."""
        return (
            self.run.nproc_per_node
            or self.execution.processes_per_node
            or max(1, self.compute.gpus)
        )

    @property
    def function(self) -> str:
        """ray-train/ray-tune: the entrypoint's function the driver calls."""
        return self.run.function or DEFAULT_FUNCTION.get(self.launcher, "main")

    def sweep(self) -> Tune:
        """The tune block with the original's execution.* spellings folded in."""
        t, e = self.tune or Tune(), self.execution
        update: dict[str, Any] = {}
        for mine, theirs in (
            ("metric", e.metric),
            ("mode", e.mode),
            ("num_samples", e.num_samples),
            ("max_concurrent", e.max_concurrent_trials),
            ("search_space", e.configs),
        ):
            if theirs is not None and mine not in t.model_fields_set:
                update[mine] = theirs
        return t.model_copy(update=update) if update else t

    def workload_kind(self) -> WorkloadKind:
        """Explicit kind, else TauGrid's inference: CPU-only or multi-worker -> rayjob, else job;
        torchrun is a job (one pod per node), Ray Train and Tune run on a RayJob."""
        if not (self.run.workload_kind or self.compute.workload_kind):
            if self.launcher == "torchrun":
                return "job"
            if self.launcher in RAY_LAUNCHERS:
                return "rayjob"
        kind = naming.infer_workload_kind(
            self.run.workload_kind or self.compute.workload_kind,
            self.compute.gpus,
            self.compute.workers,
        )
        return "rayjob" if kind == "rayjob" else "job"


max_name_length = naming.max_name_length


# Good examples per key path, for error messages (api/issues.py picks the closest).
EXAMPLES: dict[str, str] = {
    "schema_version": "schema_version: 1",
    "name": "name: my-run",
    "run": "run: {entrypoint: train.py, workload_kind: rayjob}",
    "run.entrypoint": "run: {entrypoint: train.py}",
    "run.workload_kind": "run: {workload_kind: rayjob}   # rayjob | job",
    "run.args": "run: {args: ['--epochs', '3']}",
    "run.launcher": "run: {launcher: torchrun}   # python | torchrun",
    "run.nproc_per_node": "run: {launcher: torchrun, nproc_per_node: 4}",
    "execution": "execution: {launcher: torchrun, nodes: 2, processes_per_node: 4}",
    "run.function": "run: {launcher: ray-tune, function: objective}",
    "tune": "tune: {metric: loss, mode: min, num_samples: 8, search_space: {lr: {loguniform: "
    "[0.0001, 0.1]}}}",
    "tune.metric": "tune: {metric: accuracy, mode: max}",
    "tune.mode": "tune: {mode: max}   # min | max",
    "tune.num_samples": "tune: {num_samples: 8}",
    "tune.scheduler": "tune: {scheduler: asha}   # fifo | asha",
    "tune.search_space": "tune: {search_space: {lr: {loguniform: [0.0001, 0.1]}, layers: {choice: "
    "[1, 2, 3]}}}",
    "compute": "compute: {gpus: 1, workers: 1, cpus: 16, memory: 64Gi}",
    "compute.gpus": "compute: {gpus: 1}   # per worker, 0..8",
    "compute.workers": "compute: {workers: 2}   # worker pods, 1..256",
    "compute.cpus": "compute: {cpus: 8}   # or 0.5, or 500m",
    "compute.memory": "compute: {memory: 64Gi}",
    "compute.worker_cpus": "compute: {worker_cpus: 8}",
    "compute.worker_memory": "compute: {worker_memory: 32Gi}",
    "compute.cpu_limit": "compute: {cpus: 8, cpu_limit: 16}",
    "compute.memory_limit": "compute: {memory: 64Gi, memory_limit: 128Gi}",
    "compute.mig_profile": "compute: {mig_profile: 1g.10gb}",
    "runtime": "runtime: {image: rayproject/ray:2.56.0-py312, pip: ['torch>=2.4.0']}",
    "runtime.image": "runtime: {image: rayproject/ray:2.56.0-py312}",
    "runtime.pip": "runtime: {pip: ['torch>=2.4.0', 'transformers']}",
    "runtime.env": "runtime: {env: [{name: MY_FLAG, value: '1'}]}",
    "runtime.env_from_secret": "runtime: {env_from_secret: {HF_TOKEN: 'hf-secret:token'}}",
    "runtime.python": "runtime: {python: .venv/bin/python}   # local runs",
    "storage": "storage: {checkpoint: checkpoints, output: outputs}",
    "storage.data_pvc": "storage: {data_pvc: team-a-data}",
    "storage.checkpoint": "storage: {checkpoint: checkpoints}",
    "storage.output": "storage: {output: outputs}",
    "policy": "policy: {workspace: team-a, profile: a100x1, priority: normal}",
    "policy.profile": "policy: {profile: a100x1}",
    "policy.workspace": "policy: {workspace: team-a}",
    "resilience": "resilience: {max_retries: 2, retry_on: [Preempted, Evicted]}",
    "resilience.max_retries": "resilience: {max_retries: 2}   # 0..20",
    "resilience.retry_on": "resilience: {retry_on: [Preempted, Evicted, NodeFailure]}",
    "metrics.stall_after_seconds": "metrics: {stall_after_seconds: 900}",
    "resource_naming.prefix": "resource_naming: {prefix: tau}",
    "service": "service: {import_path: serve_app:app, model: iris@prod, replicas: 1}",
    "service.import_path": "service: {import_path: serve_app:app}",
    "service.model": "service: {model: iris@prod}",
    "service.replicas": "service: {replicas: 2}   # 0..64",
    "service.autoscaling": "service: {autoscaling: {min_replicas: 0, max_replicas: 2}}",
    "service.gpus": "service: {gpus: 1}   # per replica, 0..8",
    "service.cpus": "service: {cpus: 0.5}",
    "service.route_prefix": "service: {route_prefix: /iris}",
    "service.rollout": "service: {rollout: {strategy: blue-green}}",
}
