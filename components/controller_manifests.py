"""The TauGrid controller's objects: its ServiceAccount and least-privilege RBAC, kopf's
peering, its settings and its Deployment (the image pinned with the other versions)."""

from __future__ import annotations

import json
from typing import Any

from taugrid.api import constants as C
from taugrid.api import gpuactive as A
from taugrid.api import multicluster as MC
from taugrid.api.platform import CHARTS, SYSTEM_NAMESPACE, PlatformConfig
from taugrid.api.quantity import format_memory, parse_memory
from taugrid.components.manifests import (
    KUEUE,
    PART_OF,
    namespace,
    object_meta,
    rbac_binding,
    rbac_role,
)
from taugrid.components.multikueue import secret_name

CONTROLLER = "taugrid-controller"  # its ServiceAccount, ClusterRole, Deployment, peering


CONTROLLER_USER = f"system:serviceaccount:{SYSTEM_NAMESPACE}:{CONTROLLER}"  # as RBAC sees it


CONTROLLER_PORT = 8080


# What the controller does, and nothing more: it reads what it watches, writes the status of
# TauGrid's objects, the quota of grant cohorts, cordons/taints of nodes, and the usage ledger.
CONTROLLER_RULES: list[dict[str, Any]] = [
    # the usage ledger (api/usage.py): rows that outlive the runs, written by no one else
    {"apiGroups": [C.GROUP], "resources": ["usages"], "verbs": ["get", "list", "create", "patch"]},
    {
        "apiGroups": [C.GROUP],
        "resources": ["runs", "quotarequests", "workspaces", "clusters", "tauservices"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": [C.GROUP],
        "resources": [
            "runs/status",
            "quotarequests/status",
            "workspaces/status",
            "clusters/status",
            "tauservices/status",
        ],
        "verbs": ["get", "patch"],
    },
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch"]},
    # a MultiKueue manager's Job whose worker was lost: its copied pod counts zeroed, so Kueue
    # can requeue it (controller/decide.lost_worker_release)
    {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["patch"]},
    {"apiGroups": ["ray.io"], "resources": ["rayjobs"], "verbs": ["get", "list", "watch"]},
    # ... and a RayJob's: its deployment status Suspended (kubernetes-sigs/kueue#15380)
    {"apiGroups": ["ray.io"], "resources": ["rayjobs/status"], "verbs": ["patch"]},
    # a MultiKueue manager's run: the ConfigMaps its pods mount are read here and made on the
    # worker it was dispatched to (controller/carry.py), with that worker's MultiKueue Secret
    # (readable by name only: `manager_access`)
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["multikueueclusters"], "verbs": ["get"]},
    # services: a new generation that serves takes over (the Service's selector; the old
    # RayService deleted), whether or not a `tau serve` command looks
    {
        "apiGroups": ["ray.io"],
        "resources": ["rayservices"],
        "verbs": ["get", "list", "watch", "delete"],
    },
    {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "patch"]},
    {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["workloads", "clusterqueues", "localqueues", "resourceflavors"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["cohorts"],
        "verbs": ["get", "list", "watch", "create", "patch"],
    },
    {
        "apiGroups": [""],
        "resources": ["pods", "persistentvolumeclaims"],
        "verbs": ["get", "list", "watch"],
    },
    # runs' pods leave a quarantined node through the Eviction API (PodDisruptionBudgets hold)
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
    # GPU use: DCGM's exporters are found through their Service's EndpointSlices (pod IPs and
    # nodes, nothing else); an idle run is requeued by deactivating its Kueue Workload
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["patch"]},
    {
        "apiGroups": [""],
        "resources": ["events"],
        "verbs": ["get", "list", "watch", "create", "patch"],
    },
    {
        "apiGroups": ["kopf.dev"],
        "resources": ["clusterkopfpeerings"],
        "verbs": ["get", "list", "watch", "patch"],
    },
    # kopf finds the kinds it watches among the cluster's CRDs (read-only)
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["get", "list", "watch"],
    },
]


def controller_rbac() -> list[dict[str, Any]]:
    """ServiceAccount, least-privilege ClusterRole and its binding."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": object_meta(CONTROLLER, SYSTEM_NAMESPACE),
        },
        rbac_role(object_meta(CONTROLLER), CONTROLLER_RULES),
        rbac_binding(
            object_meta(CONTROLLER),
            "ClusterRole",
            CONTROLLER,
            [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": SYSTEM_NAMESPACE}],
        ),
    ]


def manager_access(cfg: PlatformConfig) -> list[dict[str, Any]]:
    """On a MultiKueue manager: reading its workers' kubeconfig Secrets, each by name, in
    Kueue's namespace (a Role there; nothing else of that namespace, no other Secret)."""
    mc = cfg.multiCluster
    if mc.role != "manager" or not mc.workers:
        return []
    name = f"{CONTROLLER}-multikueue"
    rules = [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get"],
            "resourceNames": [secret_name(w.name) for w in mc.workers],
        }
    ]
    role = rbac_role(object_meta(name, MC.KUEUE_NAMESPACE), rules)
    binding = rbac_binding(
        object_meta(name, MC.KUEUE_NAMESPACE),
        "Role",
        name,
        [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": SYSTEM_NAMESPACE}],
    )
    return [role, binding]


def kopf_peering() -> list[dict[str, Any]]:
    """kopf's peering CRD (cluster-scoped) and the controller's peering object: replicas see
    each other there and only the one with the highest priority handles events."""
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": object_meta("clusterkopfpeerings.kopf.dev"),
        "spec": {
            "group": "kopf.dev",
            "scope": "Cluster",
            "names": {
                "kind": "ClusterKopfPeering",
                "plural": "clusterkopfpeerings",
                "singular": "clusterkopfpeering",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "status": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    peering = {
        "apiVersion": "kopf.dev/v1",
        "kind": "ClusterKopfPeering",
        "metadata": object_meta(CONTROLLER),
    }
    return [crd, peering]


DCGM_PORT = 9400  # the exporter's port, in both charts
OPERATOR_DCGM_SERVICE = "nvidia-dcgm-exporter"  # the GPU Operator's exporter Service


def controller_settings(cfg: PlatformConfig, exporter_url: str | None = None) -> dict[str, Any]:
    """The controller's settings file (controller/config.py reads it) from the stack: its
    remediation and GPU-use settings, and where DCGM's exporters answer (the chart that installs
    them; `exporter_url`: a URL per node instead, with `{node}`, as in the sandbox)."""
    spec = cfg.components.controller
    dcgm = cfg.components.dcgmExporter
    standalone = dcgm.source == "standalone"
    chart = CHARTS["dcgmExporter" if standalone else "gpuOperator"]
    exporters: dict[str, Any] = {
        "namespace": chart.namespace,
        "service": chart.release if standalone else OPERATOR_DCGM_SERVICE,
        "port": DCGM_PORT,
    }
    if exporter_url:
        exporters["url"] = exporter_url
    gpu_use = spec.gpuUse.model_dump(mode="json")
    # no exporter installed, none given: nothing to read
    gpu_use["enabled"] = gpu_use["enabled"] and (dcgm.enabled or exporter_url is not None)
    return {
        "remediation": spec.remediation.model_dump(mode="json"),
        "gpuUse": gpu_use,
        "exporters": exporters,
    }


def controller_deployment(cfg: PlatformConfig) -> list[dict[str, Any]]:
    """Its settings (a ConfigMap) and the Deployment: image pinned with the other versions."""
    spec = cfg.components.controller
    settings = controller_settings(cfg)
    labels = {"app.kubernetes.io/name": CONTROLLER}
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(CONTROLLER, SYSTEM_NAMESPACE),
        "data": {"controller.yaml": json.dumps(settings, indent=2, sort_keys=True)},
    }
    container = _controller_container(cfg)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(CONTROLLER, SYSTEM_NAMESPACE, labels),
        "spec": {
            "replicas": spec.replicas,
            # never two active reconcilers during a rollout; peering covers a scale-up
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": {**PART_OF, **labels}},
                "spec": {
                    "serviceAccountName": CONTROLLER,
                    "containers": [container],
                    "volumes": [{"name": "config", "configMap": {"name": CONTROLLER}}],
                    # control plane work: keep it off GPU nodes (they are tainted anyway)
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                },
            },
        },
    }
    return [config, deployment]


def _controller_container(cfg: PlatformConfig) -> dict[str, Any]:
    """The controller: its settings mounted, a liveness endpoint, unprivileged, read-only."""
    spec = cfg.components.controller
    return {
        "name": "controller",
        "image": f"{spec.image}:{cfg.components.version('controller')}",
        "args": [
            "--in-cluster",
            "--config=/etc/taugrid/controller.yaml",
            f"--liveness=http://0.0.0.0:{CONTROLLER_PORT}/healthz",
        ],
        "ports": [{"name": "health", "containerPort": CONTROLLER_PORT}],
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "health"},
            "initialDelaySeconds": 30,
            "periodSeconds": 30,
        },
        "resources": {
            "requests": {"cpu": "100m", "memory": format_memory(parse_memory(spec.memory) // 2)},
            "limits": {"cpu": "1", "memory": spec.memory},
        },
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "config", "mountPath": "/etc/taugrid", "readOnly": True}],
    }


def controller_objects(cfg: PlatformConfig) -> list[dict[str, Any]]:
    return [
        *controller_rbac(),
        *manager_access(cfg),
        *kopf_peering(),
        *controller_deployment(cfg),
    ]


def validation_objects(cfg: PlatformConfig) -> list[dict[str, Any]]:
    """Where the active tier's check Jobs run (api/gpuactive.py): their namespace (labelled as a
    workspace's, so Kueue manages its Jobs), a ClusterQueue in the declared cohort with no quota
    of its own on any GPU pool (it borrows only what the teams leave unused, and never
    preempts), its LocalQueue, and the controller's right to run and read the Jobs there."""
    if not cfg.gpuPools:
        return []
    ns = A.VALIDATION_NAMESPACE
    covered = ["cpu", "memory", C.GPU_RESOURCE]
    flavors = [
        {"name": p.name, "resources": [{"name": r, "nominalQuota": "0"} for r in covered]}
        for p in cfg.gpuPools
    ]
    cq = {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": object_meta(A.VALIDATION_CLUSTER_QUEUE),
        "spec": {
            "cohortName": cfg.queues.cohort,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never"},
            "resourceGroups": [{"coveredResources": covered, "flavors": flavors}],
        },
    }
    lq = {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": object_meta(A.VALIDATION_QUEUE, ns),
        "spec": {"clusterQueue": A.VALIDATION_CLUSTER_QUEUE},
    }
    rules = [
        {
            "apiGroups": ["batch"],
            "resources": ["jobs"],
            "verbs": ["get", "list", "create", "delete"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list"]},
    ]
    who = [{"kind": "ServiceAccount", "name": CONTROLLER, "namespace": SYSTEM_NAMESPACE}]
    return [
        namespace(ns, {C.LABEL_WORKSPACE: ns}),
        cq,
        lq,
        rbac_role(object_meta(CONTROLLER, ns), rules),
        rbac_binding(object_meta(CONTROLLER, ns), "Role", CONTROLLER, who),
    ]
