"""MultiKueue's objects (pure: dicts a component creates): on a manager, a kubeconfig Secret and a
MultiKueueCluster per worker, one MultiKueueConfig, the AdmissionCheck every ClusterQueue names;
on a worker, the ServiceAccount MultiKueue acts as there, scoped to what it does (the kinds runs
use: Jobs and RayJobs, Kueue's Workloads), and a token for it; the kubeconfig the manager reads
is made from that token (`worker_kubeconfig`)."""

from __future__ import annotations

from typing import Any

import yaml

from taugrid.api import multicluster as MC
from taugrid.api.platform import PlatformConfig

KUEUE = "kueue.x-k8s.io/v1beta2"
KUEUE_NAMESPACE = MC.KUEUE_NAMESPACE
RBAC = "rbac.authorization.k8s.io/v1"
PART_OF = {"app.kubernetes.io/part-of": "taugrid", "app.kubernetes.io/managed-by": "pulumi"}


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, "labels": dict(PART_OF)}
    if namespace:
        m["namespace"] = namespace
    return m


def secret_name(worker: str) -> str:
    return f"multikueue-{worker}"


def kueue_multikueue(cfg: PlatformConfig) -> dict[str, Any]:
    """A manager's part of Kueue's configuration (empty elsewhere)."""
    mc = cfg.multiCluster
    if mc.role != "manager":
        return {}
    return {
        "multiKueue": {
            "dispatcherName": MC.DISPATCHERS[mc.dispatcher],
            "workerLostTimeout": mc.workerLostTimeout,
        }
    }


def admission_checks(cfg: PlatformConfig) -> dict[str, Any]:
    """A manager's ClusterQueues admit through MultiKueue (empty elsewhere)."""
    if cfg.multiCluster.role != "manager":
        return {}
    return {"admissionChecksStrategy": {"admissionChecks": [{"name": MC.ADMISSION_CHECK}]}}


def manager_objects(cfg: PlatformConfig, kubeconfigs: dict[str, Any]) -> list[dict[str, Any]]:
    """Secrets (a worker's kubeconfig, from its stack), MultiKueueClusters, the config and the
    AdmissionCheck, in dependency order. `kubeconfigs`: worker name -> its kubeconfig text (a
    Pulumi Output in a program)."""
    workers = cfg.multiCluster.workers
    secrets = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": _meta(secret_name(w.name), KUEUE_NAMESPACE),
            "type": "Opaque",
            "stringData": {MC.KUBECONFIG_KEY: kubeconfigs[w.name]},
        }
        for w in workers
    ]
    clusters = [
        {
            "apiVersion": KUEUE,
            "kind": "MultiKueueCluster",
            "metadata": _meta(w.name),
            "spec": {
                "clusterSource": {
                    "kubeConfig": {"locationType": "Secret", "location": secret_name(w.name)}
                }
            },
        }
        for w in workers
    ]
    config = {
        "apiVersion": KUEUE,
        "kind": "MultiKueueConfig",
        "metadata": _meta(MC.MULTIKUEUE_CONFIG),
        "spec": {"clusters": [w.name for w in workers]},
    }
    check = {
        "apiVersion": KUEUE,
        "kind": "AdmissionCheck",
        "metadata": _meta(MC.ADMISSION_CHECK),
        "spec": {
            "controllerName": MC.MULTIKUEUE_CONTROLLER,
            "parameters": {
                "apiGroup": "kueue.x-k8s.io",
                "kind": "MultiKueueConfig",
                "name": MC.MULTIKUEUE_CONFIG,
            },
        },
    }
    return [*secrets, *clusters, config, check]


# What MultiKueue does on a worker: creates, watches and deletes the run's Job or RayJob (or a
# RayCluster, RayService) and its Workload (and the Workload's status), reads the queues it lands
# in; and what TauGrid's controller adds there for a run (its ConfigMaps). Nothing else.
WORKER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["batch"],
        "resources": ["jobs"],
        "verbs": ["create", "delete", "get", "list", "watch"],
    },
    {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]},
    {
        "apiGroups": ["ray.io"],
        "resources": ["rayjobs"],
        "verbs": ["create", "delete", "get", "list", "watch"],
    },
    {"apiGroups": ["ray.io"], "resources": ["rayjobs/status"], "verbs": ["get"]},
    # MultiKueue watches every kind Kueue integrates (the sandbox's and the chart's: RayClusters
    # and RayServices too): a worker it may not watch them on never becomes Active
    {
        "apiGroups": ["ray.io"],
        "resources": ["rayclusters", "rayservices"],
        "verbs": ["create", "delete", "get", "list", "watch"],
    },
    {
        "apiGroups": ["ray.io"],
        "resources": ["rayclusters/status", "rayservices/status"],
        "verbs": ["get"],
    },
    {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["workloads"],
        "verbs": ["create", "delete", "get", "list", "watch", "update", "patch"],
    },
    {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["workloads/status"],
        "verbs": ["get", "patch", "update"],
    },
    {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["clusterqueues", "localqueues"],
        "verbs": ["get", "list", "watch"],
    },
    # TauGrid's controller on the manager, with the same Secret: the ConfigMaps a run's pods
    # mount (its code, TauGrid's helpers), made beside the Job MultiKueue copied
    # (controller/carry.py). Create only: never read, changed or deleted (the run's own go
    # with its Job, whose owner reference they carry)
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
]


def worker_objects(cfg: PlatformConfig) -> list[dict[str, Any]]:
    """A worker's ServiceAccount for the manager's MultiKueue, its role, and a token Secret the
    API server fills (empty for a cluster that is not a worker)."""
    if cfg.multiCluster.role != "worker":
        return []
    sa = MC.WORKER_SERVICE_ACCOUNT
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(sa, KUEUE_NAMESPACE),
        },
        {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": _meta(sa), "rules": WORKER_RULES},
        {
            "apiVersion": RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": _meta(sa),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": sa},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": KUEUE_NAMESPACE}],
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                **_meta(f"{sa}-token", KUEUE_NAMESPACE),
                "annotations": {
                    "kubernetes.io/service-account.name": sa,
                    # the API server's token controller fills it a moment after: Pulumi's
                    # Kubernetes provider waits for that before the stack reads it
                    "pulumi.com/waitFor": "jsonpath={.data.token}",
                    "pulumi.com/timeoutSeconds": "120",
                },
            },
            "type": "kubernetes.io/service-account-token",
        },
    ]


def worker_kubeconfig(cluster: str, server: str, ca_b64: str, token: str) -> str:
    """The kubeconfig the manager's MultiKueue uses for one worker: its API server, its CA, the
    ServiceAccount's token (no client certificate, no exec plugin: MultiKueue refuses those)."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": cluster, "cluster": {"server": server, "certificate-authority-data": ca_b64}}
        ],
        "users": [{"name": MC.WORKER_SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [
            {"name": cluster, "context": {"cluster": cluster, "user": MC.WORKER_SERVICE_ACCOUNT}}
        ],
        "current-context": cluster,
    }
    return str(yaml.safe_dump(doc, sort_keys=False))
