"""The platform declaration: stack config `taugrid:platform`, validated; versions; invariants.

One structured object per stack (stacks/Pulumi.<stack>.yaml) declares the cluster, its GPU and
CPU pools, the components and their pinned versions, Kueue queues and priorities, and the
workspaces. Everything the Pulumi program creates is derived from it. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from taugrid.api import constants as C
from taugrid.api import naming
from taugrid.api.defaults import new_list
from taugrid.api.gpuactive import PoolValidation
from taugrid.api.gpuuse import GpuUseConfig
from taugrid.api.issues import Issue
from taugrid.api.multicluster import MultiClusterSpec
from taugrid.api.profiles import (
    HeadSize,
    ImageMirror,
    Toleration,
    WorkerSize,
    WorkloadProfile,
)
from taugrid.api.quantity import (
    QuantityError,
    parse_memory,
)
from taugrid.api.teams import FairSharingSpec, Prices, Team

CONFIG_KEY = "taugrid:platform"
SYSTEM_NAMESPACE = "taugrid-system"
PLATFORM_ADMINS = "taugrid-platform-admins"  # the default group of platform admins
AKS_POOL_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")  # AKS Linux agent pool names


# --- pinned versions: the one place chart locations and versions live -------------------------
class Chart(BaseModel):
    model_config = ConfigDict(frozen=True)
    chart: str
    repo: str | None  # None: `chart` is an oci:// reference
    version: str
    namespace: str
    release: str  # the Helm release's name (what `tau cluster validate installation` looks for)


CHARTS: dict[str, Chart] = {
    "gpuOperator": Chart(
        chart="gpu-operator",
        repo="https://helm.ngc.nvidia.com/nvidia",
        version="v26.7.0",
        namespace="gpu-operator",
        release="gpu-operator",
    ),
    "dcgmExporter": Chart(
        chart="dcgm-exporter",
        repo="https://nvidia.github.io/dcgm-exporter/helm-charts",
        version="4.8.2",
        namespace="gpu-operator",
        release="dcgm-exporter",
    ),
    "nodeProblemDetector": Chart(
        chart="oci://ghcr.io/deliveryhero/helm-charts/node-problem-detector",
        repo=None,
        version="2.4.1",
        namespace="node-problem-detector",
        release="node-problem-detector",
    ),
    "kueue": Chart(
        chart="oci://registry.k8s.io/kueue/charts/kueue",
        repo=None,
        version="0.19.2",
        namespace="kueue-system",
        release="kueue",
    ),
    "kuberay": Chart(
        chart="kuberay-operator",
        repo="https://ray-project.github.io/kuberay-helm/",
        version="1.7.0",
        namespace="kuberay-system",
        release="kuberay-operator",
    ),
}
CONTROLLER_VERSION = "0.1.0"  # the image tag of controller/Dockerfile (taugrid's version)
CONTROLLER_IMAGE = "ghcr.io/taugrid/taugrid-controller"
NPD_IMAGE_TAG = "v1.36.0"  # the chart's appVersion is v1.35.1; match Kubernetes 1.36

# Azure VM sizes: vCPUs, memory (GiB), GPUs, GPU class. Allocatable is derived (see below).
VM_SIZES: dict[str, tuple[int, int, int, str | None]] = {
    "Standard_D4s_v5": (4, 16, 0, None),
    "Standard_D8s_v5": (8, 32, 0, None),
    "Standard_D16s_v5": (16, 64, 0, None),
    "Standard_D32s_v5": (32, 128, 0, None),
    "Standard_D4ds_v5": (4, 16, 0, None),
    "Standard_D8ds_v5": (8, 32, 0, None),
    "Standard_NC4as_T4_v3": (4, 28, 1, "t4-16gb"),
    "Standard_NC8as_T4_v3": (8, 56, 1, "t4-16gb"),
    "Standard_NC16as_T4_v3": (16, 110, 1, "t4-16gb"),
    "Standard_NC64as_T4_v3": (64, 440, 4, "t4-16gb"),
    "Standard_NV36ads_A10_v5": (36, 440, 1, "a10-24gb"),
    "Standard_NC24ads_A100_v4": (24, 220, 1, "a100-80gb"),
    "Standard_NC48ads_A100_v4": (48, 440, 2, "a100-80gb"),
    "Standard_NC96ads_A100_v4": (96, 880, 4, "a100-80gb"),
    "Standard_ND96asr_v4": (96, 900, 8, "a100-40gb"),
    "Standard_ND96amsr_A100_v4": (96, 1900, 8, "a100-80gb"),
    "Standard_NC40ads_H100_v5": (40, 320, 1, "h100-94gb"),
    "Standard_NC80adis_H100_v5": (80, 640, 2, "h100-94gb"),
    "Standard_ND96isr_H100_v5": (96, 1900, 8, "h100-80gb"),
    "Standard_ND96isr_H200_v5": (96, 1850, 8, "h200-141gb"),
}


def derived_allocatable(vm_size: str) -> WorkerSize | None:
    """What one node of a known size leaves for pods: AKS reserves CPU and ~10% of memory."""
    spec = VM_SIZES.get(vm_size)
    if spec is None:
        return None
    vcpu, mem_gib, _, _ = spec
    cpu = vcpu - max(1, vcpu // 12)
    mem = int(mem_gib * 0.9)
    return WorkerSize(cpu=cpu, memory=f"{mem}Gi")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)


# --- cluster -------------------------------------------------------------------------------------
class SystemPool(_Model):
    vmSize: str = "Standard_D4s_v5"
    minCount: int = Field(2, ge=1, le=100)
    maxCount: int = Field(3, ge=1, le=100)


class ApiServerSpec(_Model):
    private: bool = Field(False, description="A private API server (no public endpoint)")
    authorizedIpRanges: list[str] = Field(
        default_factory=new_list, description="CIDRs that may reach a public API server"
    )

    @field_validator("authorizedIpRanges")
    @classmethod
    def _cidrs(cls, v: list[str]) -> list[str]:
        import ipaddress

        for cidr in v:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"{cidr!r} is not a CIDR (e.g. 203.0.113.0/24)") from None
        return v


class AksClusterSpec(_Model):
    provider: Literal["aks"]
    name: str
    location: str
    resourceGroup: str | None = Field(None, description="Default: <name>-rg")
    kubernetesVersion: str = Field(
        pattern=r"^1\.\d+(\.\d+)?$", json_schema_extra={"promotable": True}
    )
    systemPool: SystemPool = Field(default_factory=SystemPool)
    apiServer: ApiServerSpec = Field(default_factory=ApiServerSpec)
    tags: dict[str, str] = Field(default_factory=dict)

    _v = field_validator("name")(naming.dns_label)


class ExistingClusterSpec(_Model):
    provider: Literal["existing"]
    name: str
    kubeconfigSecret: str | None = Field(
        None,
        description="Name of a secret stack config key holding the kubeconfig (pulumi config set "
        "--secret)",
    )
    context: str | None = Field(None, description="A context of the default kubeconfig")

    _v = field_validator("name")(naming.dns_label)

    @model_validator(mode="after")
    def _one(self) -> ExistingClusterSpec:
        if (self.kubeconfigSecret is None) == (self.context is None):
            raise ValueError("set exactly one of kubeconfigSecret or context")
        return self


ClusterSpec = Annotated[AksClusterSpec | ExistingClusterSpec, Field(discriminator="provider")]


# --- pools ----------------------------------------------------------------------------------------
class Taint(_Model):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"

    def render(self) -> str:
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


class PoolBase(_Model):
    name: str = Field(description="AKS agent pool name: a-z0-9, starts with a letter, at most 12")
    vmSize: str
    minCount: int = Field(0, ge=0, le=1000)
    maxCount: int = Field(ge=1, le=1000)
    spot: bool = False
    zones: list[str] = Field(default_factory=new_list)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=new_list)
    allocatable: WorkerSize | None = Field(None, description="Per node; derived for known VM sizes")
    osDiskSizeGB: int = Field(128, ge=30, le=4096)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not AKS_POOL_NAME.match(v):
            raise ValueError(
                "must be 1-12 lowercase letters/digits starting with a letter (AKS pool name)"
            )
        return v

    @model_validator(mode="after")
    def _counts(self) -> PoolBase:
        if self.minCount > self.maxCount:
            raise ValueError(f"minCount={self.minCount} is above maxCount={self.maxCount}")
        return self

    def node_allocatable(self) -> WorkerSize | None:
        return self.allocatable or derived_allocatable(self.vmSize)


class GpuPool(PoolBase):
    gpuClass: str | None = Field(
        None, description="tau.azure.com/gpu-class label; derived for known sizes"
    )
    gpusPerNode: int | None = Field(None, ge=1, le=16, description="Derived for known VM sizes")
    migProfile: str | None = Field(
        None, description="AKS MIG instance profile: MIG1g|MIG2g|MIG3g|MIG4g|MIG7g"
    )
    gpuDriver: Literal["install", "none"] | None = Field(
        None,
        description="AKS driver install; default: none when the GPU Operator installs the driver",
    )
    validation: PoolValidation = Field(default_factory=PoolValidation)

    @field_validator("migProfile")
    @classmethod
    def _mig(cls, v: str | None) -> str | None:
        if v is not None and v not in ("MIG1g", "MIG2g", "MIG3g", "MIG4g", "MIG7g"):
            raise ValueError("must be one of MIG1g, MIG2g, MIG3g, MIG4g, MIG7g")
        return v

    def gpu_class(self) -> str | None:
        return self.gpuClass or (VM_SIZES.get(self.vmSize, (0, 0, 0, None))[3])

    def gpus(self) -> int | None:
        return self.gpusPerNode or (VM_SIZES[self.vmSize][2] if self.vmSize in VM_SIZES else None)


class CpuPool(PoolBase):
    pass


# --- components -----------------------------------------------------------------------------------
class ComponentBase(_Model):
    enabled: bool = True
    version: str | None = Field(
        None,
        description="Chart version; default: the pinned one",
        json_schema_extra={"promotable": True},
    )
    install: Literal["helm", "external"] = Field(
        "helm",
        description="helm: this stack installs the chart; external: it is installed otherwise "
        "(e.g. the sandbox runs it out of cluster): no release, but what uses it is still created",
    )


class GpuOperatorSpec(ComponentBase):
    installDriver: bool = Field(
        True, description="The operator installs the driver (AKS pools skip it)"
    )
    migStrategy: Literal["single", "mixed"] = "single"


class DcgmExporterSpec(ComponentBase):
    source: Literal["operator", "standalone"] = Field(
        "operator", description="The GPU Operator's exporter, or the standalone chart (never both)"
    )


class NodeProblemDetectorSpec(ComponentBase):
    enabled: bool = False
    fatalXids: list[int] = Field(default_factory=lambda: [48, 63, 64, 74, 79, 92, 94, 95, 119, 120])


class KueueSpec(ComponentBase):
    waitForPodsReadyTimeout: str = Field("30m", pattern=r"^\d+[smh]$")


class RemediationConfig(_Model):
    """GPU remediation by the controller (NVSentinel / medik8s NodeHealthCheck style)."""

    conditions: list[str] = Field(
        default_factory=lambda: list(C.GPU_FAULT_CONDITIONS),
        min_length=1,
        description="Node condition types that mean a GPU fault when True",
    )
    max_unhealthy_share: float = Field(
        0.5, gt=0, le=1, description="Circuit breaker: most GPU nodes quarantined at once"
    )
    clear_after_seconds: int = Field(
        600, ge=0, description="How long conditions must stay clear before a release"
    )
    dry_run: bool = Field(False, description="Decide and report, change no node")
    validate_on_release: bool = Field(
        True,
        description="A released node gets the validating taint until its validation against its "
        "pool passes (the controller lifts it); false: released straight to work",
    )
    evict_runs: bool = Field(
        True,
        description="Evict TauGrid runs' pods from a quarantined node (they get DisruptionTarget:"
        " a Job retries per resilience.retry_on, a RayCluster replaces its worker elsewhere)",
    )


def memory_at_least(v: str, floor: str, who: str) -> str:
    """A memory limit of a platform component, refused below what it needs to run."""
    if parse_memory(v) < parse_memory(floor):
        raise ValueError(f"{v} is too little for {who}: at least {floor}")
    return v


class ControllerSpec(ComponentBase):
    """The TauGrid controller (install: helm means this stack deploys it; external: it runs
    elsewhere, e.g. out of cluster in the sandbox)."""

    image: str = Field(CONTROLLER_IMAGE, description="Image repository (controller/Dockerfile)")
    replicas: int = Field(
        1, ge=1, le=5, description="Peers; kopf peering keeps one handling events"
    )
    remediation: RemediationConfig = Field(default_factory=RemediationConfig)
    gpuUse: GpuUseConfig = Field(default_factory=GpuUseConfig)
    memory: str = Field(
        "512Mi",
        description="The controller's memory limit (it requests half). It holds what it watches "
        "of every run that exists: size it by the runs a cluster keeps (docs/scale.md)",
    )

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: str) -> str:
        return memory_at_least(v, "256Mi", "the controller")


class Components(_Model):
    gpuOperator: GpuOperatorSpec = Field(default_factory=GpuOperatorSpec)
    dcgmExporter: DcgmExporterSpec = Field(default_factory=DcgmExporterSpec)
    nodeProblemDetector: NodeProblemDetectorSpec = Field(default_factory=NodeProblemDetectorSpec)
    kueue: KueueSpec = Field(default_factory=KueueSpec)
    kuberay: ComponentBase = Field(default_factory=ComponentBase)
    controller: ControllerSpec = Field(default_factory=ControllerSpec)

    def version(self, name: str) -> str:
        spec: ComponentBase = getattr(self, name)
        if spec.version is not None:
            return spec.version
        return CONTROLLER_VERSION if name == "controller" else CHARTS[name].version


# --- queues ---------------------------------------------------------------------------------------
Quantity = int | str


class FlavorQuota(_Model):
    pool: str = Field(description="A pool name: the ResourceFlavor")
    nominalQuota: dict[str, Quantity] = Field(
        description="resource -> quantity (cpu, memory, nvidia.com/gpu)"
    )
    borrowingLimit: dict[str, Quantity] | None = None
    lendingLimit: dict[str, Quantity] | None = None


class Preemption(_Model):
    withinClusterQueue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = (
        "LowerPriority"
    )
    reclaimWithinCohort: Literal["Never", "LowerPriority", "Any"] = "Any"
    borrowWithinCohort: Literal["Never", "LowerPriority"] = "Never"


class ClusterQueueSpec(_Model):
    name: str
    flavors: list[FlavorQuota] = Field(min_length=1)
    cohort: str | None = Field(None, description="Default: queues.cohort")
    preemption: Preemption = Field(default_factory=Preemption)
    queueingStrategy: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"

    _v = field_validator("name")(naming.dns_label)


class Queues(_Model):
    cohort: str = "taugrid"
    clusterQueues: list[ClusterQueueSpec] = Field(default_factory=new_list)
    fairSharing: FairSharingSpec = Field(
        default_factory=lambda: FairSharingSpec(),
        description="How Kueue shares between teams (used when teams are declared)",
    )

    _v = field_validator("cohort")(naming.dns_label)


class PriorityClass(_Model):
    name: str
    value: int = Field(ge=-2147483648, le=1000000000)
    description: str = ""

    _v = field_validator("name")(naming.dns_label)


def _default_priorities() -> list[PriorityClass]:
    return [
        PriorityClass(name="low", value=100, description="opportunistic; preempted first"),
        PriorityClass(name="normal", value=1000, description="default"),
        PriorityClass(name="high", value=10000, description="deadlines and interactive work"),
    ]


# --- workspaces -----------------------------------------------------------------------------------
class Member(_Model):
    kind: Literal["User", "Group", "ServiceAccount"]
    name: str = Field(min_length=1)
    namespace: str | None = None


class WorkspaceStorage(_Model):
    size: str = "1Ti"
    storageClass: str | None = Field(
        "azurefile-csi-premium", description="null: the cluster default"
    )
    accessMode: Literal["ReadWriteMany", "ReadWriteOnce"] = "ReadWriteMany"
    registry: str | None = Field(
        None,
        description="The workspace's data registry (`tau data`) as researchers reach it: the "
        "same bytes its runs read at /data/registry. az://ACCOUNT/CONTAINER/PREFIX when the "
        "volume is that Blob container (a Blob CSI storage class), or file:///FOLDER. Inputs of "
        "a run are copied there at submit when absent. Default: none (runs read what is on "
        "the volume already)",
    )

    @field_validator("registry")
    @classmethod
    def _registry(cls, v: str | None) -> str | None:
        from taugrid.api.data import registry_problem

        problem = registry_problem(v) if v is not None else None
        if problem:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _reachable(self) -> WorkspaceStorage:
        if (self.registry or "").startswith("az://") and (self.storageClass or "").startswith(
            "azurefile"
        ):
            raise ValueError(
                f"registry {self.registry} is a Blob container, but the volume is Azure Files "
                f"({self.storageClass}): runs would not see it at /data/registry. Use a Blob CSI "
                "storage class (e.g. azureblob-nfs-premium) for this volume, or leave registry out"
            )
        return self

    @field_validator("size")
    @classmethod
    def _size(cls, v: str) -> str:
        try:
            parse_memory(v)
        except QuantityError as e:
            raise ValueError(
                str(e).replace(
                    "memory quantity like 512Mi or 64Gi", "storage size like 500Gi or 1Ti"
                )
            ) from None
        return v


class WorkspaceSpec(_Model):
    name: str
    namespace: str | None = Field(None, description="Default: the workspace name")
    members: list[Member] = Field(default_factory=new_list)
    queues: list[str] = Field(min_length=1, description="ClusterQueues this workspace submits to")
    storage: WorkspaceStorage = Field(default_factory=WorkspaceStorage)
    team: str | None = Field(None, description="The team it belongs to (teams[].name)")

    _v = field_validator("name")(naming.dns_label)

    @property
    def ns(self) -> str:
        return self.namespace or self.name


# --- the whole declaration ------------------------------------------------------------------------
class WorkspaceFiles(_Model):
    """Each workspace's file server (`tau-files`): its volume, read-only, to its members through
    the API server (progress, metrics, logs, checkpoints and outputs of cluster runs;
    docs/cluster.md)."""

    enabled: bool = True
    image: str | None = Field(
        None,
        description="An image with python3 (the server is stdlib-only, carried in a ConfigMap); "
        "default: the controller's image at its version",
    )
    cpu: str = "10m"
    memory: str = Field("128Mi", description="Its memory limit (it requests half)")
    nodeSelector: dict[str, str] = Field(
        default_factory=dict,
        description="Where its pod runs (e.g. the system pool); default: anywhere",
    )

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: str) -> str:
        return memory_at_least(v, "64Mi", "the file server")


class PlatformConfig(_Model):
    cluster: ClusterSpec
    gpuPools: list[GpuPool] = Field(default_factory=new_list)
    cpuPools: list[CpuPool] = Field(default_factory=new_list)
    components: Components = Field(default_factory=Components)
    queues: Queues = Field(default_factory=Queues)
    priorityClasses: list[PriorityClass] = Field(default_factory=_default_priorities)
    defaultPriority: str | None = "normal"
    workspaces: list[WorkspaceSpec] = Field(default_factory=new_list)
    teams: list[Team] = Field(
        default_factory=new_list,
        description="Teams: each owns ClusterQueues and shares the cohort by its weight",
    )
    prices: Prices | None = Field(
        None, description="Price of a node-hour per VM size: what `tau usage` costs runs at"
    )
    multiCluster: MultiClusterSpec = Field(
        default_factory=lambda: MultiClusterSpec(),
        description="This cluster's role in one queue across clusters (MultiKueue)",
    )
    profiles: list[WorkloadProfile] | None = Field(
        None, description="Explicit profiles; default: derived"
    )
    promotesTo: str | None = Field(
        None, description="The stack this one's tested versions go to next"
    )
    defaultWorkspace: str | None = Field(
        None, description="The workspace of runs that name none (when there are several)"
    )
    admins: list[Member] = Field(
        default_factory=lambda: [Member(kind="Group", name=PLATFORM_ADMINS)],
        description="Platform admins: may approve or deny quota requests",
    )
    imageMirrors: list[ImageMirror] = Field(
        default_factory=new_list,
        description="Images runs name, run as others (the first match): a registry mirror",
    )
    imageMirrorsOnly: bool = Field(
        False,
        description="The cluster's nodes pull no image (air-gapped; the sandbox's real nodes): a "
        "run whose image no mirror covers is refused at submission, naming the images it has",
    )
    workspaceFiles: WorkspaceFiles = Field(default_factory=WorkspaceFiles)
    rayHead: HeadSize = Field(
        default_factory=lambda: HeadSize(),
        description="The Ray head pod of every RayJob and RayService (it runs no tasks)",
    )

    def pool(self, name: str) -> GpuPool | CpuPool | None:
        pools: list[GpuPool | CpuPool] = [*self.gpuPools, *self.cpuPools]
        return next((p for p in pools if p.name == name), None)

    def cluster_queue(self, name: str) -> ClusterQueueSpec | None:
        return next((q for q in self.queues.clusterQueues if q.name == name), None)

    def team_of_queue(self, name: str) -> Team | None:
        return next((t for t in self.teams if name in t.owned()), None)


# --- derived: pools -> node labels/taints -> profiles ---------------------------------------------
SPOT_TAINT = Taint(key="kubernetes.azure.com/scalesetpriority", value="spot", effect="NoSchedule")
GPU_TAINT = Taint(key=C.GPU_TAINT_KEY, value=C.GPU_TAINT_VALUE, effect="NoSchedule")


def pool_labels(pool: GpuPool | CpuPool) -> dict[str, str]:
    labels = {C.LABEL_POOL: pool.name, **pool.labels}
    if isinstance(pool, GpuPool):
        cls = pool.gpu_class()
        if cls:
            labels[C.LABEL_GPU_CLASS] = cls
    return labels


def pool_taints(pool: GpuPool | CpuPool) -> list[Taint]:
    """Taints TauGrid sets on the pool (AKS adds the spot taint itself on spot pools)."""
    taints = [GPU_TAINT] if isinstance(pool, GpuPool) else []
    return [*taints, *pool.taints]


VALIDATING = Taint(key=C.VALIDATING_TAINT, value="passive", effect="NoSchedule")


def registration_taints(pool: GpuPool | CpuPool) -> list[Taint]:
    """Taints a pool's nodes register with and the controller lifts (not the flavor's: a
    workload never tolerates them): a GPU node is validated before it takes work."""
    return [VALIDATING] if isinstance(pool, GpuPool) else []


def pool_tolerations(pool: GpuPool | CpuPool) -> list[Toleration]:
    tols = [
        Toleration(key=t.key, operator="Equal", value=t.value or None, effect=t.effect)
        for t in pool_taints(pool)
    ]
    if isinstance(pool, GpuPool):
        tols.append(Toleration(key=C.GPU_RESOURCE, operator="Exists", effect="NoSchedule"))
    if pool.spot:
        tols.append(
            Toleration(
                key=SPOT_TAINT.key, operator="Equal", value=SPOT_TAINT.value, effect="NoSchedule"
            )
        )
    return tols


def gpu_driver(cfg: PlatformConfig, pool: GpuPool) -> Literal["install", "none"]:
    if pool.gpuDriver is not None:
        return pool.gpuDriver
    op = cfg.components.gpuOperator
    return "none" if op.enabled and op.installDriver else "install"


def workspace_names_for_queue(cfg: PlatformConfig, queue: str) -> list[str]:
    return [w.name for w in cfg.workspaces if queue in w.queues]


def profile_queues(cfg: PlatformConfig) -> list[ClusterQueueSpec]:
    """The queues that get profiles: a queue no workspace submits to (one that only lends, as
    the teams' spare queue) gets none."""
    return [
        cq
        for cq in cfg.queues.clusterQueues
        if not cfg.workspaces or workspace_names_for_queue(cfg, cq.name)
    ]


def derive_profiles(cfg: PlatformConfig) -> list[WorkloadProfile]:
    """One profile per (ClusterQueue, pool) it has quota on; named after the pool (or
    pool-queue)."""
    if cfg.profiles is not None:
        return list(cfg.profiles)

    def serving(cq: ClusterQueueSpec) -> list[str]:
        """Pools that get a profile in this queue (a CPU flavor in a GPU queue only hosts heads)."""
        gpu_queue = any(C.GPU_RESOURCE in fq.nominalQuota for fq in cq.flavors)
        return [
            fq.pool for fq in cq.flavors if not gpu_queue or isinstance(cfg.pool(fq.pool), GpuPool)
        ]

    queues = profile_queues(cfg)
    pool_queue_count: dict[str, int] = {}
    for cq in queues:
        for name in serving(cq):
            pool_queue_count[name] = pool_queue_count.get(name, 0) + 1
    prios = [p.name for p in cfg.priorityClasses]
    out: list[WorkloadProfile] = []
    for cq in queues:
        for pool_name in serving(cq):
            pool = cfg.pool(pool_name)
            if pool is None:
                continue
            alloc = pool.node_allocatable()
            assert alloc is not None  # guaranteed by invariants()
            gpus = (pool.gpus() or 0) if isinstance(pool, GpuPool) else 0
            name = pool.name if pool_queue_count[pool.name] == 1 else f"{pool.name}-{cq.name}"
            desc = (
                f"{pool.vmSize}"
                + (f", {gpus}x {pool.gpu_class()}" if isinstance(pool, GpuPool) and gpus else "")
                + (", spot" if pool.spot else "")
            )
            out.append(
                WorkloadProfile(
                    name=name,
                    description=desc,
                    gpuClass=pool.gpu_class() if isinstance(pool, GpuPool) else None,
                    gpusPerWorker=gpus,
                    gpuResource=C.GPU_RESOURCE,
                    allocatable=alloc,
                    maxWorkers=pool.maxCount,
                    nodeSelector={
                        k: v
                        for k, v in pool_labels(pool).items()
                        if k in (C.LABEL_POOL, C.LABEL_GPU_CLASS)
                    },
                    tolerations=pool_tolerations(pool),
                    flavor=pool.name,
                    clusterQueue=cq.name,
                    localQueue=cq.name,
                    priorityClasses=prios,
                    defaultPriority=cfg.defaultPriority,
                    workspaces=workspace_names_for_queue(cfg, cq.name),
                    head=cfg.rayHead,
                )
            )
    return out


def parse_platform(data: Any) -> PlatformConfig:
    return PlatformConfig.model_validate(data)


# --- validation: schema and cross-component invariants, every problem at once -----------------
PLATFORM_EXAMPLES = {
    "cluster": "cluster: {provider: aks, name: prod, location: eastus2, kubernetesVersion: '1.36'}",
    "gpuPools": "gpuPools: [{name: a100x1, vmSize: Standard_NC24ads_A100_v4, maxCount: 8}]",
    "cpuPools": "cpuPools: [{name: cpu, vmSize: Standard_D16s_v5, maxCount: 4}]",
    "queues.clusterQueues": "clusterQueues: [{name: gpu, flavors: [{pool: a100x1, nominalQuota: "
    "{nvidia.com/gpu: 8}}]}]",
    "workspaces": "workspaces: [{name: research, queues: [gpu], members: [{kind: Group, name: "
    "team}]}]",
    "workspaces.storage.size": "storage: {size: 1Ti}",
    "components": "components: {gpuOperator: {installDriver: true}, nodeProblemDetector: {enabled: "
    "true}}",
}


class PlatformConfigError(Exception):
    """The stack config is invalid; `issues` has every problem (paths below CONFIG_KEY)."""

    def __init__(self, issues: list[Issue]) -> None:
        self.issues = issues
        lines = [
            f"{CONFIG_KEY}.{i.path} = {i.value!r}: {i.message}"
            + (f"\n  example: {i.example}" if i.example else "")
            for i in issues
        ]
        super().__init__("\n".join(lines))


def validate_platform(data: Any) -> PlatformConfig:
    """Validate the stack config; every problem (schema or cross-component) at once."""
    from pydantic import ValidationError

    from taugrid.api.issues import issues_from_validation

    try:
        cfg = parse_platform(data)
    except ValidationError as e:
        raise PlatformConfigError(
            issues_from_validation(PlatformConfig, e, PLATFORM_EXAMPLES, None)
        ) from None
    from taugrid.api.platform_rules import invariants

    problems = invariants(cfg)
    if problems:
        raise PlatformConfigError(problems)
    return with_cluster_label(cfg)


def with_cluster_label(cfg: PlatformConfig) -> PlatformConfig:
    """A named MultiKueue worker's pools carry its name (label tau.azure.com/cluster) on their
    nodes and flavors: a run that must run there (a resume) selects it, and Kueue on any other
    worker finds no flavor for it. Unchanged for any other cluster."""
    mc = cfg.multiCluster
    if mc.role != "worker" or not mc.name:
        return cfg
    mark = {C.LABEL_CLUSTER: mc.name}

    def labelled(pool: Any) -> Any:
        return pool.model_copy(update={"labels": {**pool.labels, **mark}})

    return cfg.model_copy(
        update={
            "gpuPools": [labelled(p) for p in cfg.gpuPools],
            "cpuPools": [labelled(p) for p in cfg.cpuPools],
        }
    )
