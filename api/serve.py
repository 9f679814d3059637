"""Services: a model served from a run or the registry (pure: no I/O).

`ServiceSpec` is tau.yaml's `service` block (defined with tau.yaml in manifest.py). Every deploy or
rollout is a `Revision` (number, the exact model version, the config hash, who, when); a
service's `ServiceRecord` keeps its revisions and which one takes the traffic, and its status
is a `ServiceStatus` in the same words on every target.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from taugrid.api.defaults import new_list
from taugrid.api.manifest import (
    DEFAULT_MAX_ONGOING,
    DEFAULT_MAX_QUEUED,
    DEFAULT_REQUEST_TIMEOUT_S,
)
from taugrid.api.manifest import MAX_REPLICAS as MAX_REPLICAS
from taugrid.api.manifest import STRATEGIES as STRATEGIES
from taugrid.api.manifest import Autoscaling as Autoscaling
from taugrid.api.manifest import Rollout as Rollout
from taugrid.api.manifest import ServiceSpec as ServiceSpec
from taugrid.api.manifest import Strategy as Strategy
from taugrid.api.manifest_rules import service_issues as service_issues

SERVICE_NAME_LIMIT = 40  # RayService names: KubeRay derives longer names from them
MODEL_ENV = "TAU_MODEL_DIR"  # where the app finds the model's files
MODEL_VERSION_ENV = "TAU_MODEL_VERSION"  # the version's digest (sha256:...)
SERVICE_ENV = "TAU_SERVICE"  # the service's name
REVISION_ENV = "TAU_SERVICE_REVISION"  # the revision's number

Target = Literal["local", "kube"]
SPLIT_MODULE = "tau_split"  # the canary's split (serve/split.py), as a cluster's code carries it
SPLIT_DEPLOYMENT = "Split"


def canary_app(name: str) -> str:
    """A canary revision's Ray Serve application ('.' is not in service names: no clash)."""
    return f"{name}.canary"


def split_app(name: str) -> str:
    """The application that splits a canary's traffic (it holds the service's route)."""
    return f"{name}.split"


def hidden_route(name: str, which: str) -> str:
    """Where a canary's revisions answer, behind the split (`stable`, `canary`, `split`)."""
    from taugrid.api.manifest import RESERVED_ROUTE

    return f"{RESERVED_ROUTE}/{name}/{which}"


def split_args(
    stable_url: str, canary_url: str, stable: int, canary: int, public_url: str | None = None
) -> dict[str, Any]:
    """The split's arguments: where each revision answers, and their numbers; `public_url`: the
    service's own route, where the serving revision answers once the route is handed back (a
    request that reached the split just before is sent there)."""
    out: dict[str, Any] = {
        "stable_url": stable_url,
        "canary_url": canary_url,
        "stable_revision": stable,
        "canary_revision": canary,
    }
    if public_url:
        out["public_url"] = public_url
    return out


def split_deployment(percent: int) -> dict[str, Any]:
    """The split's share of requests to the canary (a user_config: changing it reconfigures
    the running replica)."""
    return {"name": SPLIT_DEPLOYMENT, "user_config": {"canary_percent": percent}}


Phase = Literal[
    "Deploying",
    "Ready",
    "Updating",
    "Canary",
    "ScaledToZero",
    "Waiting",
    "Unhealthy",
    "Failed",
    "Deleted",
]
# The groups a command waits on, beside the run's (api.vocabulary.TERMINAL):
NOT_SERVING: tuple[Phase, ...] = ("Failed", "Unhealthy", "Waiting")  # a change that did not take
SETTLED: tuple[Phase, ...] = (
    "Ready",
    "Canary",
    "ScaledToZero",
    "Failed",
    "Deleted",
)  # a watch ends
CANARY_SETTLED: tuple[Phase, ...] = ("Canary", *NOT_SERVING)  # a canary took its share, or not


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


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


def scale_of(spec: ServiceSpec) -> Scale:
    return Scale(replicas=spec.replicas, autoscaling=spec.autoscaling)


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
    ingress: str | None = Field(
        None,
        description="Its application's ingress deployment, as importing it found (a cluster's "
        "RayService bounds its requests there); None: not known",
    )


class Event(_Model):
    at: str
    kind: str
    message: str
    revision: int | None = None
    by: str | None = None


class Canary(_Model):
    """A revision that takes a share of the traffic beside the serving one, until a promote
    gives it all or a rollback ends it."""

    revision: int
    percent: int = Field(ge=0, le=100, description="Its share of the requests")
    started_at: str
    by: str | None = None
    routed: bool = Field(False, description="The service's route goes through the split")
    promoting: bool = Field(
        False, description="A promote began: the canary becomes the serving one"
    )
    generation: int | None = Field(None, description="A cluster: the RayService that runs it")


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
    context: str | None = None  # a cluster service: the kubeconfig context, workspace, namespace
    workspace: str | None = None
    namespace: str | None = None
    profile: str | None = None
    generation: int = Field(
        0, description="A cluster service: the RayService that serves, <name>-<g>"
    )
    pending_generation: int | None = Field(None, description="The one starting beside it")
    revisions: list[Revision]
    serving: int = Field(description="The revision that takes the traffic (or is rolling out)")
    previous: int | None = Field(None, description="The revision before the last change")
    rollout_started_at: str | None = None
    rollout_done: bool = True
    strategy: Strategy = "rolling"
    scale: Scale = Field(default_factory=Scale)
    canary: Canary | None = None
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
    revisions: list[dict[str, Any]] = Field(default_factory=new_list)
    events: list[Event] = Field(default_factory=new_list)


def config_hash(spec: ServiceSpec, model: ModelPin | None, code_digest: str) -> str:
    """What makes two revisions the same: the spec without its scale (scaling is not a new
    revision) and without how the model was named, the exact model version and the code."""
    doc = spec.model_dump(
        mode="json",
        exclude={"replicas", "autoscaling", "rollout", "model", "from_run", "checkpoint"},
    )  # how the model was named does not matter: the version it resolved to does
    for key, default in (
        ("max_ongoing_requests", DEFAULT_MAX_ONGOING),
        ("max_queued_requests", DEFAULT_MAX_QUEUED),
        ("request_timeout_s", DEFAULT_REQUEST_TIMEOUT_S),
    ):
        if doc.get(key) == default:  # a revision made before these were settings: the same one
            del doc[key]
    doc["model_version"] = model.version if model else None
    doc["code"] = code_digest
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()
