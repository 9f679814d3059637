"""Services: a model served from a run or the registry (pure: no I/O).

`ServiceSpec` is tau.yaml's `service` block (strict, in the JSON Schema). Every deploy or
rollout is a `Revision` (number, the exact model version, the config hash, who, when); a
service's `ServiceRecord` keeps its revisions and which one takes the traffic, and its status
is a `ServiceStatus` in the same words on every target.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from taugrid.api import constants as C
from taugrid.api.issues import Issue

MAX_REPLICAS = 64
MAX_GPUS_PER_REPLICA = 8
SERVICE_NAME_LIMIT = 40  # RayService names: KubeRay derives longer names from them
IMPORT_PATH = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
)
ROUTE = re.compile(r"^/[A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MODEL_ENV = "TAU_MODEL_DIR"  # where the app finds the model's files
MODEL_VERSION_ENV = "TAU_MODEL_VERSION"  # the version's digest (sha256:...)
SERVICE_ENV = "TAU_SERVICE"  # the service's name
REVISION_ENV = "TAU_SERVICE_REVISION"  # the revision's number

Strategy = Literal["rolling", "blue-green", "canary"]
STRATEGIES: tuple[Strategy, ...] = ("rolling", "blue-green", "canary")
Target = Literal["local", "kube"]
Phase = Literal[
    "Deploying", "Ready", "Updating", "ScaledToZero", "Waiting", "Unhealthy", "Failed", "Deleted"
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


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
    route_prefix: str | None = Field(None, description="HTTP route; default /<name>")
    readiness_path: str | None = Field(
        None, description="GET path (under the route) that answers when the service serves"
    )
    env: dict[str, str] = Field(default_factory=dict, description="Environment of the replicas")
    rollout: Rollout = Field(default_factory=Rollout)

    @field_validator("import_path")
    @classmethod
    def _import_path(cls, v: str) -> str:
        if not IMPORT_PATH.match(v):
            raise ValueError("must be module:attribute, e.g. serve_app:app")
        return v

    @field_validator("route_prefix", "readiness_path")
    @classmethod
    def _route(cls, v: str | None) -> str | None:
        if v is not None and v != "/" and not ROUTE.match(v):
            raise ValueError("must be a path such as /iris (letters, digits, '.', '_', '~', '-')")
        return v

    def scale(self) -> Scale:
        return Scale(replicas=self.replicas, autoscaling=self.autoscaling)


class Scale(_Model):
    """How many replicas: a fixed count, or autoscaling between two counts."""

    replicas: int | None = None
    autoscaling: Autoscaling | None = None

    def describe(self) -> str:
        a = self.autoscaling
        if a is not None:
            return f"{a.min_replicas}..{a.max_replicas} replicas (autoscaling)"
        n = 1 if self.replicas is None else self.replicas
        return f"{n} replica" + ("" if n == 1 else "s")

    def wanted_at_least(self) -> int:
        if self.autoscaling is not None:
            return self.autoscaling.min_replicas
        return 1 if self.replicas is None else self.replicas


def service_issues(spec: ServiceSpec, path: str = "service") -> Iterator[Issue]:
    """Rules that span several fields of a service block."""
    if spec.model and spec.from_run:
        yield Issue(f"{path}.from_run", spec.from_run, "contradicts service.model: serve one model",
                    "service: {model: iris@prod}")  # fmt: skip
    if spec.model and "@" not in spec.model:
        yield Issue(f"{path}.model", spec.model,
                    "needs a version or an alias: the version served is pinned at deploy time",
                    f"service: {{model: {spec.model}@prod}}")  # fmt: skip
    if spec.replicas is not None and spec.autoscaling is not None:
        yield Issue(f"{path}.replicas", spec.replicas, "contradicts service.autoscaling: keep one",
                    "service: {autoscaling: {min_replicas: 0, max_replicas: 2}}")  # fmt: skip
    a = spec.autoscaling
    if a is not None and a.min_replicas > a.max_replicas:
        yield Issue(f"{path}.autoscaling.min_replicas", a.min_replicas,
                    f"is above max_replicas={a.max_replicas}",
                    "service: {autoscaling: {min_replicas: 0, max_replicas: 2}}")  # fmt: skip
    for name in spec.env:
        if not ENV_NAME.match(name):
            yield Issue(f"{path}.env.{name}", name, "is not a valid environment variable name",
                        "service: {env: {LOG_LEVEL: info}}")  # fmt: skip
        elif name.upper().startswith(C.RESERVED_ENV_PREFIX):
            yield Issue(f"{path}.env.{name}", name,
                        "TAU_* variables belong to tau (TAU_MODEL_DIR is set for you)", None)  # fmt: skip


def name_problem(name: str) -> str | None:
    if len(name) > SERVICE_NAME_LIMIT:
        return f"is {len(name)} characters; a service name has at most {SERVICE_NAME_LIMIT}"
    if not re.match(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", name):
        return "use lower-case letters, digits and '-', starting with a letter"
    return None


class ModelPin(_Model):
    """The exact model version a revision serves, and how it was named."""

    ref: str = Field(description="As asked: iris@prod, or run:RUN (latest)")
    name: str
    version: str = Field(description="sha256:... (the registry's version)")
    from_run: str | None = None
    checkpoint: str | None = None

    @property
    def short(self) -> str:
        return f"{self.name}@{self.version[:19]}"


class Revision(_Model):
    number: int = Field(ge=1)
    created_at: str
    created_by: str
    config_hash: str
    code_digest: str
    model: ModelPin | None = None
    spec: ServiceSpec
    source: str = Field(description="The tau.yaml it came from")
    reason: str = Field("deploy", description="deploy, rollout")


class Event(_Model):
    at: str
    kind: str
    message: str
    revision: int | None = None
    by: str | None = None


class ServiceRecord(_Model):
    """$TAU_HOME/services/<name>/service.json: what the service is and has been."""

    model_config = ConfigDict(extra="forbid", strict=False, frozen=True, defer_build=True)

    schema_version: Literal[1] = 1
    name: str
    target: Target
    created_at: str
    created_by: str
    route_prefix: str
    endpoint: str | None = None
    context: str | None = None
    workspace: str | None = None
    revisions: list[Revision]
    serving: int = Field(description="The revision that takes the traffic (or is rolling out)")
    previous: int | None = Field(None, description="The revision before the last change")
    rollout_started_at: str | None = None
    rollout_done: bool = True
    strategy: Strategy = "rolling"
    scale: Scale = Field(default_factory=Scale)
    deleted_at: str | None = None

    def revision(self, number: int) -> Revision:
        for r in self.revisions:
            if r.number == number:
                return r
        known = ", ".join(str(r.number) for r in self.revisions)
        from taugrid.api.errors import TauError

        raise TauError(f"service {self.name} has no revision {number} (it has {known})")

    @property
    def current(self) -> Revision:
        return self.revision(self.serving)


class Replicas(_Model):
    ready: int
    wanted: int
    starting: int = 0
    new_ready: int | None = Field(None, description="During a rollout: ready on the new revision")


class ServiceStatus(_Model):
    """`tau serve status -o json`: the same fields on every target."""

    name: str
    target: Target
    phase: Phase
    summary: str = Field(description="One sentence: what it does, or why it waits")
    revision: int
    model: str | None
    endpoint: str | None
    replicas: Replicas
    scale: str
    healthy: bool
    serving: bool | None = Field(None, description="A request answered (None: not asked)")
    admitted: bool | None = Field(None, description="Kueue admitted it (cluster only)")
    rollout: dict[str, Any] | None = None
    revisions: list[dict[str, Any]] = Field(default_factory=list)
    events: list[Event] = Field(default_factory=list)


def config_hash(spec: ServiceSpec, model: ModelPin | None, code_digest: str) -> str:
    """What makes two revisions the same: the spec without its scale (scaling is not a new
    revision) and without how the model was named, the exact model version and the code."""
    doc = spec.model_dump(
        mode="json",
        exclude={"replicas", "autoscaling", "rollout", "model", "from_run", "checkpoint"},
    )  # how the model was named does not matter: the version it resolved to does
    doc["model_version"] = model.version if model else None
    doc["code"] = code_digest
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()
