"""Constants of the run contract: API group, labels, annotations, env names, /data paths."""

from __future__ import annotations

from typing import Final

GROUP: Final = "tau.azure.com"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

# --- labels (on the workload and on every pod template) ---------------------------------
LABEL_RUN_ID: Final = f"{GROUP}/run-id"
LABEL_RUN_NAME: Final = f"{GROUP}/run-name"
LABEL_WORKSPACE: Final = f"{GROUP}/workspace"
LABEL_PROFILE: Final = f"{GROUP}/profile"
LABEL_MANAGED_BY: Final = f"{GROUP}/managed-by"
LABEL_WORKLOAD_KIND: Final = f"{GROUP}/workload-kind"
LABEL_EXPERIMENT: Final = f"{GROUP}/experiment"
LABEL_SERVICE: Final = f"{GROUP}/service"  # a service's objects and pods (tau serve)
LABEL_SERVICE_REVISION: Final = f"{GROUP}/service-revision"
LABEL_SERVICE_GENERATION: Final = f"{GROUP}/service-generation"  # one RayService per change
LABEL_GPU_CLASS: Final = f"{GROUP}/gpu-class"
LABEL_POOL: Final = f"{GROUP}/pool"
# a MultiKueue worker's name on its nodes and its ResourceFlavors: a run pinned to a worker (a
# resume, whose checkpoint is on that worker's volume) selects it, and Kueue on any other worker
# finds no flavor for it
LABEL_CLUSTER: Final = f"{GROUP}/cluster"
LABEL_SHARED: Final = f"{GROUP}/shared"  # a namespace's object no run owns: "helpers" (the code)
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL: Final = "kueue.x-k8s.io/priority-class"
MANAGED_BY_VALUE: Final = "tau"

# --- the controller's heartbeat ---------------------------------------------------------------
# The controller writes TauCluster.status.controllerHeartbeat every CONTROLLER_HEARTBEAT_S (its own
# field manager); a client trusts a run's TauRun.status as current while the heartbeat is younger
# than HEARTBEAT_FRESH_S (else it computes the status from the run's objects itself).
CONTROLLER_HEARTBEAT_S: Final = 30.0
HEARTBEAT_FRESH_S: Final = 90.0
FIELD_MANAGER_HEARTBEAT: Final = "taugrid-controller-heartbeat"
CLUSTER_OBJECT: Final = "cluster"  # the TauCluster's name

# --- annotations -------------------------------------------------------------------------
ANN_CONFIG_HASH: Final = f"{GROUP}/config-hash"
ANN_SUBMITTER: Final = f"{GROUP}/submitter"
ANN_CLUSTER_USER: Final = f"{GROUP}/cluster-user"  # who submitted, as the API server knows them
ANN_CODE_REVISION: Final = f"{GROUP}/code-revision"
ANN_CODE_DIGEST: Final = f"{GROUP}/code-digest"
ANN_PROFILE_SET_HASH: Final = f"{GROUP}/profile-set-hash"
ANN_RESUME_FROM: Final = f"{GROUP}/resume-from"
ANN_RESUMED_BY: Final = f"{GROUP}/resumed-by"
# TAU_RESUME_FROM ending in this: "the newest complete checkpoint in that folder", resolved in
# the pod by tau_launch.py (which has the workspace PVC; tau on a laptop does not).
NEWEST_CHECKPOINT: Final = "@newest"

# --- a node a run's pod is on, lost: its problems say so in these words (kube/facts.py)
NODE_GONE: Final = "gone (deleted from the cluster)"
NODE_NOT_READY: Final = "NotReady"

# --- GPU node contract (set by the platform on GPU pools) --------------------------------
GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_TAINT_KEY: Final = "sku"
GPU_TAINT_VALUE: Final = "gpu"
XID_CONDITION: Final = "GPUXidError"  # node condition set by the platform's XID monitor (NPD)
# Node conditions that mean a GPU fault when True: the platform's XID monitor and AKS's GPU
# health conditions. Status shows them; the controller's remediation acts on them by default.
GPU_FAULT_CONDITIONS: Final = (
    XID_CONDITION,
    "GPUMissing",
    "XIDErrors",
    "NVLinkStatusInactive",
    "UnhealthyNvidiaDevicePlugin",
    "GPUUnhealthy",
)
GPU_UNHEALTHY_TAINT: Final = f"{GROUP}/gpu-unhealthy"  # the controller's quarantine taint
# A GPU node carries this from its registration (its pool's node taints), and again when it is
# released from quarantine, until the controller's validation against its pool passes and lifts
# it: no work lands on a node before it is proven. Not a flavor taint: nothing tolerates it but
# the GPU Operator's and NPD's agents, which must run there to prove it.
VALIDATING_TAINT: Final = f"{GROUP}/validating"
QUARANTINE_REASON_LABEL: Final = f"{GROUP}/quarantine-reason"  # the fault that quarantined it
QUARANTINED_AT_ANNOTATION: Final = f"{GROUP}/quarantined-at"  # when (a time is not a label value)

# --- /data layout --------------------------------------------------------------------------
DATA_DIR: Final = "/data"
CODE_DIR: Final = "/code"
RUNS_SUBDIR: Final = "runs"
REGISTRY_SUBDIR: Final = "registry"  # a workspace volume's data registry: /data/registry
DATASETS_SUBDIR: Final = "datasets"
DEFAULT_CHECKPOINT_SUBDIR: Final = "checkpoints"
DEFAULT_OUTPUT_SUBDIR: Final = "outputs"
METRICS_FILENAME: Final = "metrics.jsonl"
FINAL_STATUS_FILENAME: Final = "status.json"  # a cluster run's status when its end was seen
HISTORY_FILENAME: Final = "history.jsonl"
RUN_RECORD_FILENAME: Final = "run.json"
MANIFEST_FILENAME: Final = "MANIFEST.sha256"
CHECKPOINT_INDEX_FILENAME: Final = "index.json"


def run_dir(run_id: str, data_dir: str = DATA_DIR) -> str:
    return f"{data_dir}/{RUNS_SUBDIR}/{run_id}"


def run_volume_path(run_id: str) -> str:
    """A run's record on its workspace volume, relative to the volume (its file server's paths)."""
    return f"{RUNS_SUBDIR}/{run_id}"


def dataset_dir(name: str, version: str, data_dir: str = DATA_DIR) -> str:
    return f"{data_dir}/{DATASETS_SUBDIR}/{name}/{version}"


# --- env contract --------------------------------------------------------------------------
ENV_RUN_ID: Final = "TAU_RUN_ID"
ENV_RUN_NAME: Final = "TAU_RUN_NAME"
ENV_WORKSPACE: Final = "TAU_WORKSPACE"
ENV_DATA_DIR: Final = "TAU_DATA_DIR"
ENV_RUN_DIR: Final = "TAU_RUN_DIR"
ENV_CHECKPOINT_DIR: Final = "TAU_CHECKPOINT_DIR"
ENV_OUTPUT_DIR: Final = "TAU_OUTPUT_DIR"
ENV_METRICS_FILE: Final = "TAU_METRICS_FILE"
ENV_NUM_WORKERS: Final = "TAU_NUM_WORKERS"
ENV_GPUS_PER_WORKER: Final = "TAU_GPUS_PER_WORKER"
ENV_WORLD_SIZE: Final = "TAU_WORLD_SIZE"
ENV_LAUNCHER: Final = "TAU_LAUNCHER"  # torchrun: tau_launch starts torchrun
ENV_NODES: Final = "TAU_NODES"  # torchrun: the nodes (pods) of the run
ENV_NPROC_PER_NODE: Final = "TAU_NPROC_PER_NODE"  # torchrun: processes per node
ENV_RAY_FUNCTION: Final = "TAU_RAY_FUNCTION"  # ray-train/ray-tune: the entrypoint's function
ENV_TUNE: Final = "TAU_TUNE"  # ray-tune: the tune block (JSON)
ENV_RESUME_FROM: Final = "TAU_RESUME_FROM"
ENV_ATTEMPT: Final = "TAU_ATTEMPT"

CONTRACT_ENV: Final = (
    ENV_RUN_ID,
    ENV_RUN_NAME,
    ENV_WORKSPACE,
    ENV_DATA_DIR,
    ENV_RUN_DIR,
    ENV_CHECKPOINT_DIR,
    ENV_OUTPUT_DIR,
    ENV_METRICS_FILE,
    ENV_NUM_WORKERS,
    ENV_GPUS_PER_WORKER,
    ENV_WORLD_SIZE,
    ENV_RESUME_FROM,
    ENV_ATTEMPT,
)
RESERVED_ENV_PREFIX: Final = "TAU_"

# --- naming --------------------------------------------------------------------------------
KUBERAY_NAME_LIMIT: Final = 47  # RayJob names (KubeRay validation)
RUN_ID_SUFFIX_LEN: Final = 5
K8S_NAME_LIMIT: Final = 63

# --- defaults ------------------------------------------------------------------------------
DEFAULT_RAY_VERSION: Final = "2.56.0"
DEFAULT_GPU_IMAGE: Final = "mcr.microsoft.com/aks/ai-runtime/ray:py3.12-ray2.56.0-cuda13.0"
# The control-only Ray head (no GPU, no user compute).
HEAD_CPU_REQUEST: Final = "2"
HEAD_CPU_LIMIT: Final = "4"
HEAD_MEMORY_REQUEST: Final = "8Gi"
HEAD_MEMORY_LIMIT: Final = "16Gi"
JOB_TTL_SECONDS: Final = 600
CODE_BUNDLE_LIMIT_BYTES: Final = 768 * 1024
