"""Workload profiles: the placement and bounds a platform offers, and the snapshot file format.

A profile fixes placement (node selector, tolerations, Kueue flavor and queues, priority
classes) and the bounds of one worker (GPUs per node, allocatable CPU and memory). The platform
publishes profiles in the `TauCluster` object; offline rendering reads a snapshot file.
Field names are camelCase because the same models are the CRD schema.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from taugrid.api import constants as C
from taugrid.api import naming
from taugrid.api.defaults import new_list
from taugrid.api.quantity import cpu_field, memory_field, parse_cpu, parse_memory


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Toleration(_Model):
    key: str | None = None
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None

    def to_k8s(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class WorkerSize(_Model):
    cpu: int | float | str = Field(description="cores: 4, 0.5 or 500m")
    memory: str = Field(description="Kubernetes memory quantity")

    _v_cpu = field_validator("cpu")(cpu_field)
    _v_mem = field_validator("memory")(memory_field)


class HeadSize(_Model):
    """The Ray head's pod (the driver, GCS, dashboard; no tasks: it has num-cpus 0)."""

    cpu: int | float | str = Field(C.HEAD_CPU_REQUEST, description="requested cores")
    memory: str = Field(C.HEAD_MEMORY_REQUEST, description="requested memory")
    cpuLimit: int | float | str = Field(C.HEAD_CPU_LIMIT, description="cores at most")
    memoryLimit: str = Field(C.HEAD_MEMORY_LIMIT, description="memory at most (OOMKilled above)")

    _v_cpu = field_validator("cpu", "cpuLimit")(cpu_field)
    _v_mem = field_validator("memory", "memoryLimit")(memory_field)

    @model_validator(mode="after")
    def _limits(self) -> HeadSize:
        if parse_cpu(self.cpuLimit) < parse_cpu(self.cpu):
            raise ValueError(f"cpuLimit {self.cpuLimit} is below the request {self.cpu}")
        if parse_memory(self.memoryLimit) < parse_memory(self.memory):
            raise ValueError(f"memoryLimit {self.memoryLimit} is below the request {self.memory}")
        return self

    def resources(self) -> dict[str, dict[str, str]]:
        return {
            "requests": {"cpu": str(self.cpu), "memory": self.memory},
            "limits": {"cpu": str(self.cpuLimit), "memory": self.memoryLimit},
        }


class WorkloadProfile(_Model):
    name: str = Field(description="Profile name, e.g. a100x1")
    description: str = ""
    gpuClass: str | None = Field(
        None, description="GPU class label value of the pool, e.g. a100-80gb"
    )
    gpusPerWorker: int = Field(
        ge=0, le=16, description="GPUs one worker may request (GPUs per node)"
    )
    gpuResource: str = Field(C.GPU_RESOURCE, description="Extended resource name of a GPU")
    allocatable: WorkerSize = Field(
        description="Largest worker: allocatable CPU and memory of one node"
    )
    workerDefaults: WorkerSize | None = Field(
        None,
        description="Size of a worker when tau.yaml does not set one (default: a GPU-share of "
        "allocatable)",
    )
    maxWorkers: int | None = Field(None, ge=1, description="Most workers one run may ask for")
    nodeSelector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=new_list)
    headNodeSelector: dict[str, str] = Field(
        default_factory=dict, description="Where the CPU-only Ray head goes"
    )
    headTolerations: list[Toleration] = Field(default_factory=new_list)
    head: HeadSize = Field(default_factory=lambda: HeadSize(), description="The Ray head's size")
    flavor: str = Field(description="Kueue ResourceFlavor of the pool")
    clusterQueue: str = Field(description="Kueue ClusterQueue")
    localQueue: str = Field(description="LocalQueue name in every workspace namespace")
    priorityClasses: list[str] = Field(
        default_factory=new_list, description="WorkloadPriorityClasses a run may pick"
    )
    defaultPriority: str | None = Field(
        None, description="WorkloadPriorityClass when tau.yaml names none"
    )
    workspaces: list[str] = Field(
        default_factory=new_list, description="Workspaces allowed (empty: all)"
    )
    image: str | None = Field(None, description="Default image for runs on this profile")

    @field_validator("name", "flavor", "clusterQueue", "localQueue")
    @classmethod
    def _dns(cls, v: str) -> str:
        if not naming.is_dns_label(v):
            raise ValueError("must be a DNS label (lowercase alphanumerics and hyphens)")
        return v

    @model_validator(mode="after")
    def _priorities(self) -> WorkloadProfile:
        if (
            self.defaultPriority
            and self.priorityClasses
            and self.defaultPriority not in self.priorityClasses
        ):
            raise ValueError(
                f"defaultPriority {self.defaultPriority!r} is not in priorityClasses "
                f"{self.priorityClasses}"
            )
        return self

    def applies_to(self, workspace: str) -> bool:
        return not self.workspaces or workspace in self.workspaces


class ImageMirror(_Model):
    """An image a run names, run as another one: a registry the cluster can reach (ACR in an air-
    gapped AKS), or, in the sandbox, the runtime image built on this machine."""

    match: str = Field(
        min_length=1,
        max_length=512,
        description="The image a run names, as a glob: rayproject/ray:*, python:3.*",
        examples=["rayproject/ray:*"],
    )
    image: str = Field(min_length=1, max_length=512, description="The image run instead")

    def applies(self, image: str) -> bool:
        from fnmatch import fnmatchcase

        bare = image.removeprefix("docker.io/").removeprefix("library/")
        return fnmatchcase(image, self.match) or fnmatchcase(bare, self.match)


def mirrored(image: str, mirrors: list[ImageMirror]) -> str:
    """The image a run runs as: the first mirror that matches, else the one it names."""
    return next((m.image for m in mirrors if m.applies(image)), image)


class WorkspaceRef(_Model):
    """What a run needs to know about a workspace: where it runs and where /data comes from."""

    name: str
    namespace: str
    pvc: str = Field(description="PVC mounted at /data")
    serviceAccount: str | None = None
    registry: str | None = Field(
        None,
        description="The data registry its runs read at /data/registry, as reached from "
        "outside (az://... or file://...): a run's inputs are copied there at submit",
    )
    team: str | None = Field(None, description="The team it belongs to")
    workerRegistries: dict[str, str] | None = Field(
        None,
        description="On a MultiKueue manager: the same workspace's data registry on each "
        "worker (worker name -> registry); a run's inputs are copied to each, since the worker "
        "that runs it reads its own",
    )

    def registries(self) -> list[str]:
        """Every registry a run's inputs go to: the workspace's, then its workers' (each once)."""
        found = [self.registry, *(self.workerRegistries or {}).values()]
        return list(dict.fromkeys(r for r in found if r))

    @field_validator("name", "namespace", "pvc")
    @classmethod
    def _dns(cls, v: str) -> str:
        if not naming.is_dns_label(v):
            raise ValueError("must be a DNS label (lowercase alphanumerics and hyphens)")
        return v


def profile_set_hash(profiles: list[WorkloadProfile]) -> str:
    """sha256 over the canonical JSON of the profiles, order-independent. A default Ray head is
    left out: a snapshot taken before the head was a setting keeps its hash."""
    default_head = HeadSize()

    def canonical(p: WorkloadProfile) -> dict[str, Any]:
        return p.model_dump(mode="json", exclude={"head"} if p.head == default_head else None)

    canon = sorted((canonical(p) for p in profiles), key=lambda d: d["name"])
    blob = json.dumps(canon, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()


class ProfileSnapshot(_Model):
    """Offline copy of what a cluster's TauCluster publishes (`kind:
    TauWorkloadProfileSnapshot`)."""

    apiVersion: Literal["tau.azure.com/v1alpha1"] = "tau.azure.com/v1alpha1"
    kind: Literal["TauWorkloadProfileSnapshot"] = "TauWorkloadProfileSnapshot"
    cluster: str = Field(description="Name of the cluster (stack) the snapshot was taken from")
    profileSetHash: str | None = Field(
        None, description="Recomputed and checked on load when present"
    )
    profiles: list[WorkloadProfile]
    workspaces: list[WorkspaceRef] = Field(default_factory=new_list)
    defaultWorkspace: str | None = Field(None, description="Workspace of runs that name none")
    imageMirrors: list[ImageMirror] = Field(
        default_factory=new_list, description="Images run as others (the first match)"
    )
    imageMirrorsOnly: bool = Field(
        False,
        description="The cluster's nodes pull no image (air-gapped; the sandbox's real nodes): a "
        "run whose image no mirror covers is refused at submission, naming the images it has",
    )

    @model_validator(mode="after")
    def _consistent(self) -> ProfileSnapshot:
        if self.defaultWorkspace and self.workspace(self.defaultWorkspace) is None:
            raise ValueError(
                f"defaultWorkspace {self.defaultWorkspace!r} is not one of the workspaces"
            )
        names = [p.name for p in self.profiles]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"profile names must be unique; repeated: {sorted(dup)}")
        wnames = [w.name for w in self.workspaces]
        wdup = {n for n in wnames if wnames.count(n) > 1}
        if wdup:
            raise ValueError(f"workspace names must be unique; repeated: {sorted(wdup)}")
        if self.profileSetHash is not None:
            actual = profile_set_hash(self.profiles)
            if actual != self.profileSetHash:
                raise ValueError(
                    f"profileSetHash {self.profileSetHash} does not match the profiles ({actual}); "
                    "the snapshot was edited or is corrupt: take a new one"
                )
        return self

    def profile(self, name: str) -> WorkloadProfile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def workspace(self, name: str) -> WorkspaceRef | None:
        return next((w for w in self.workspaces if w.name == name), None)
