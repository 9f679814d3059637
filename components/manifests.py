"""Pure functions: validated platform config -> the Kubernetes objects and Helm values.

No Pulumi here: the Pulumi components wrap these, and tests, the CLI and the e2e suite call them
directly. Every object is a plain dict as the API server would receive it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from taugrid.api import constants as C
from taugrid.api import naming
from taugrid.api.crds import render_crds
from taugrid.api.platform import (
    SPOT_TAINT,
    SYSTEM_NAMESPACE,
    ClusterQueueSpec,
    CpuPool,
    GpuPool,
    Member,
    PlatformConfig,
    PriorityClass,
    WorkspaceFiles,
    WorkspaceSpec,
    derive_profiles,
    pool_taints,
)
from taugrid.api.profiles import profile_set_hash
from taugrid.api.published import pool_declarations, price_table, team_refs, workspace_refs
from taugrid.api.quantity import canonical, format_memory, parse_memory
from taugrid.components import multikueue as MK

KUEUE = "kueue.x-k8s.io/v1beta2"
PART_OF = {"app.kubernetes.io/part-of": "taugrid", "app.kubernetes.io/managed-by": "pulumi"}
WORKSPACE_SELECTOR = {"matchExpressions": [{"key": C.LABEL_WORKSPACE, "operator": "Exists"}]}
RESEARCHER_ROLE = "tau-researcher"
RESEARCHER_READ_CLUSTERROLE = "tau-researcher-read"


def object_meta(
    name: str, namespace: str | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, "labels": {**PART_OF, **(labels or {})}}
    if namespace:
        m["namespace"] = namespace
    return m


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": object_meta(name, labels=labels)}


RBAC = "rbac.authorization.k8s.io/v1"


def rbac_binding(
    meta: dict[str, Any], role_kind: str, role: str, subjects: list[dict[str, Any]]
) -> dict[str, Any]:
    """A RoleBinding (`meta` has a namespace) or ClusterRoleBinding of `role` to `subjects`."""
    return {
        "apiVersion": RBAC,
        "kind": "RoleBinding" if "namespace" in meta else "ClusterRoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": subjects,
    }


def rbac_role(meta: dict[str, Any], rules: list[dict[str, Any]]) -> dict[str, Any]:
    """A Role (`meta` has a namespace) or ClusterRole of `rules`."""
    kind = "Role" if "namespace" in meta else "ClusterRole"
    return {"apiVersion": RBAC, "kind": kind, "metadata": meta, "rules": rules}


# --- Kueue ----------------------------------------------------------------------------------------
def resource_flavor(pool: GpuPool | CpuPool) -> dict[str, Any]:
    """One flavor per pool. GPU pools carry their taints, so only pods that tolerate them
    (the workers) are admitted to the GPU flavor; a Ray head lands on a CPU flavor."""
    taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in pool_taints(pool)]
    if pool.spot:
        taints.append(
            {"key": SPOT_TAINT.key, "value": SPOT_TAINT.value, "effect": SPOT_TAINT.effect}
        )
    spec: dict[str, Any] = {"nodeLabels": {C.LABEL_POOL: pool.name}}
    if C.LABEL_CLUSTER in pool.labels:  # a MultiKueue worker's (api.platform.with_cluster_label)
        spec["nodeLabels"][C.LABEL_CLUSTER] = pool.labels[C.LABEL_CLUSTER]
    if taints:
        spec["nodeTaints"] = taints
    return {
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": object_meta(pool.name),
        "spec": spec,
    }


def cohort(name: str, parent: str | None = None) -> dict[str, Any]:
    spec = {"parentName": parent} if parent else {}
    return {"apiVersion": KUEUE, "kind": "Cohort", "metadata": object_meta(name), "spec": spec}


def grant_cohort(cfg: PlatformConfig, cq: ClusterQueueSpec) -> dict[str, Any]:
    """The queue's grant cohort: Pulumi owns its parent (and its team's weight there: it is the
    member of the declared cohort); the controller its quota (grants)."""
    obj = cohort(naming.grant_cohort(cq.name), cq.cohort or cfg.queues.cohort)
    obj["spec"].update(fair_sharing(cfg, cq))
    return obj


def fair_sharing(cfg: PlatformConfig, cq: ClusterQueueSpec) -> dict[str, Any]:
    """The team's weight on its queue (and its grant cohort); none for a queue of no team."""
    team = cfg.team_of_queue(cq.name)
    return {"fairSharing": {"weight": canonical(team.weight)}} if team else {}


def kueue_settings(cfg: PlatformConfig) -> dict[str, Any]:
    """What the stack adds to Kueue's configuration: fair sharing for teams, MultiKueue on a
    manager (the sandbox's Kueue gets the same)."""
    return {**kueue_fair_sharing(cfg), **MK.kueue_multikueue(cfg)}


def kueue_fair_sharing(cfg: PlatformConfig) -> dict[str, Any]:
    """Kueue's configuration for teams (empty without teams): fair sharing between the cohort's
    members by weight, admission fair sharing between a queue's LocalQueues by decayed usage."""
    if not cfg.teams:
        return {}
    fs = cfg.queues.fairSharing
    return {
        "fairSharing": {"preemptionStrategies": list(fs.preemption)},
        "admissionFairSharing": {
            "usageHalfLifeTime": fs.usageHalfLife,
            "usageSamplingInterval": fs.usageSamplingInterval,
        },
    }


def cluster_queue(cfg: PlatformConfig, cq: ClusterQueueSpec) -> dict[str, Any]:
    covered: list[str] = []
    for fq in cq.flavors:
        for res in fq.nominalQuota:
            if res not in covered:
                covered.append(res)
    flavors = []
    for fq in cq.flavors:
        resources = []
        for res in covered:
            # canonical strings: Kueue re-writes the spec, and any other form changes hands
            r: dict[str, Any] = {
                "name": res,
                "nominalQuota": canonical(fq.nominalQuota.get(res, 0)),
            }
            if fq.borrowingLimit and res in fq.borrowingLimit:
                r["borrowingLimit"] = canonical(fq.borrowingLimit[res])
            if fq.lendingLimit and res in fq.lendingLimit:
                r["lendingLimit"] = canonical(fq.lendingLimit[res])
            resources.append(r)
        flavors.append({"name": fq.pool, "resources": resources})
    p = cq.preemption
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": object_meta(cq.name),
        "spec": {
            # its grant cohort (child of the declared one): quota grants live there
            "cohortName": naming.grant_cohort(cq.name),
            "namespaceSelector": WORKSPACE_SELECTOR,
            "queueingStrategy": cq.queueingStrategy,
            "preemption": {
                "withinClusterQueue": p.withinClusterQueue,
                "reclaimWithinCohort": p.reclaimWithinCohort,
                "borrowWithinCohort": {"policy": p.borrowWithinCohort},
            },
            "resourceGroups": [{"coveredResources": covered, "flavors": flavors}],
            **fair_sharing(cfg, cq),
            **MK.admission_checks(cfg),
            # with teams, a queue's workspaces are admitted by their decayed past usage
            **(
                {"admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"}}
                if cfg.teams
                else {}
            ),
        },
    }


def workload_priority_class(p: PriorityClass) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "WorkloadPriorityClass",
        "metadata": object_meta(p.name),
        "value": p.value,
        "description": p.description,
    }


def local_queue(ws: WorkspaceSpec, queue: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": object_meta(queue, ws.ns),
        "spec": {"clusterQueue": queue},
    }


def kueue_objects(cfg: PlatformConfig) -> list[dict[str, Any]]:
    """Everything Kueue needs, in dependency order (flavors and cohorts before queues)."""
    cohorts = sorted({cq.cohort or cfg.queues.cohort for cq in cfg.queues.clusterQueues})
    pools: list[GpuPool | CpuPool] = [*cfg.gpuPools, *cfg.cpuPools]
    return [
        *(resource_flavor(p) for p in pools),
        *(cohort(c) for c in cohorts),
        *(grant_cohort(cfg, cq) for cq in cfg.queues.clusterQueues),
        *(workload_priority_class(p) for p in cfg.priorityClasses),
        *(cluster_queue(cfg, cq) for cq in cfg.queues.clusterQueues),
    ]


def kueue_values(cfg: PlatformConfig) -> dict[str, Any]:
    manager = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": WORKSPACE_SELECTOR,
        "waitForPodsReady": {
            "timeout": cfg.components.kueue.waitForPodsReadyTimeout,
            "blockAdmission": False,
        },
        "integrations": {
            "frameworks": ["batch/job", "ray.io/rayjob", "ray.io/raycluster", "ray.io/rayservice"]
        },
        **kueue_settings(cfg),
    }
    return {
        "managerConfig": {"controllerManagerConfigYaml": json.dumps(manager, indent=2)},
        "enablePrometheus": False,
    }


# --- GPU stack ------------------------------------------------------------------------------------
def gpu_operator_values(cfg: PlatformConfig) -> dict[str, Any]:
    op = cfg.components.gpuOperator
    dcgm = cfg.components.dcgmExporter
    return {
        "driver": {"enabled": op.installDriver},
        "toolkit": {"enabled": True},
        "devicePlugin": {"enabled": True},
        "dcgmExporter": {"enabled": dcgm.enabled and dcgm.source == "operator"},
        "migManager": {"enabled": any(p.migProfile for p in cfg.gpuPools)},
        "mig": {"strategy": op.migStrategy},
        "daemonsets": {
            "tolerations": [
                {"key": C.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
                {
                    "key": C.GPU_TAINT_KEY,
                    "operator": "Equal",
                    "value": C.GPU_TAINT_VALUE,
                    "effect": "NoSchedule",
                },
                {
                    "key": SPOT_TAINT.key,
                    "operator": "Equal",
                    "value": SPOT_TAINT.value,
                    "effect": "NoSchedule",
                },
                # a node being validated: its driver, device plugin, feature discovery and
                # exporter are what prove it
                {"key": C.VALIDATING_TAINT, "operator": "Exists", "effect": "NoSchedule"},
            ]
        },
        "node-feature-discovery": {
            "worker": {"tolerations": [{"operator": "Exists", "effect": "NoSchedule"}]},
        },
    }


def dcgm_exporter_values(cfg: PlatformConfig) -> dict[str, Any]:
    return {
        "tolerations": gpu_operator_values(cfg)["daemonsets"]["tolerations"],
        "nodeSelector": {},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": C.LABEL_GPU_CLASS, "operator": "Exists"}]}
                    ]
                }
            }
        },
    }


XID_MONITOR_FILE = "gpu-xid-monitor.json"


def xid_monitor(fatal_xids: list[int]) -> dict[str, Any]:
    """An NPD kernel-log monitor: every XID makes an event; fatal XIDs set the GPUXidError
    condition."""
    fatal = "|".join(str(x) for x in sorted(set(fatal_xids)))
    return {
        "plugin": "kmsg",
        "logPath": "/dev/kmsg",
        "lookback": "5m",
        "bufferSize": 10,
        "source": "gpu-xid-monitor",
        "metricsReporting": True,
        "conditions": [
            {"type": C.XID_CONDITION, "reason": "NoGPUXidError", "message": "no fatal GPU XID seen"}
        ],
        "rules": [
            {
                "type": "temporary",
                "reason": "GPUXid",
                "pattern": r"NVRM: Xid \(PCI:[^)]*\): \d+,.*",
            },
            {
                "type": "permanent",
                "condition": C.XID_CONDITION,
                "reason": "GPUXidFatal",
                "pattern": rf"NVRM: Xid \(PCI:[^)]*\): ({fatal}),.*",
            },
        ],
    }


def npd_values(cfg: PlatformConfig) -> dict[str, Any]:
    from taugrid.api.platform import NPD_IMAGE_TAG

    npd = cfg.components.nodeProblemDetector
    return {
        "image": {"tag": NPD_IMAGE_TAG},
        "settings": {
            # Only our GPU monitor: AKS already runs NPD for the general conditions.
            "log_monitors": [f"/custom-config/{XID_MONITOR_FILE}"],
            "custom_monitor_definitions": {
                XID_MONITOR_FILE: json.dumps(xid_monitor(npd.fatalXids), indent=2)
            },
        },
        "nodeSelector": {},
        "affinity": dcgm_exporter_values(cfg)["affinity"],
        "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
    }


def kuberay_values(cfg: PlatformConfig) -> dict[str, Any]:
    return {
        "batchScheduler": {"enabled": False},
        "featureGates": [{"name": "RayJobDeletionPolicy", "enabled": True}],
    }


# --- TauGrid objects ------------------------------------------------------------------------------
def tau_crds() -> list[dict[str, Any]]:
    return render_crds()


def tau_cluster(
    cfg: PlatformConfig,
    stack: str,
    worker_registries: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """The TauCluster `tau` reads: profiles, workspaces (on a manager, with each worker's
    registry of the same workspace), components, pools, teams, prices."""
    profiles = derive_profiles(cfg)
    versions = {
        name: cfg.components.version(name)
        for name in type(cfg.components).model_fields
        if getattr(cfg.components, name).enabled
    }
    return {
        "apiVersion": C.API_VERSION,
        "kind": "TauCluster",
        "metadata": {
            **object_meta("cluster"),
            "annotations": {C.ANN_PROFILE_SET_HASH: profile_set_hash(profiles)},
        },
        "spec": {
            "stack": stack,
            "workloadProfiles": [p.model_dump(mode="json", exclude_none=True) for p in profiles],
            "components": versions,
            "installedBy": {name: installed_by(cfg, name) for name in versions},
            **({"defaultWorkspace": cfg.defaultWorkspace} if cfg.defaultWorkspace else {}),
            "workspaces": [
                w.model_dump(mode="json", exclude_none=True)
                for w in workspace_refs(cfg, worker_registries)
            ],
            **(
                {"imageMirrors": [m.model_dump(mode="json") for m in cfg.imageMirrors]}
                if cfg.imageMirrors
                else {}
            ),
            **({"imageMirrorsOnly": True} if cfg.imageMirrorsOnly else {}),
            "pools": [p.model_dump(mode="json", exclude_none=True) for p in pool_declarations(cfg)],
            **({"teams": [t.model_dump(mode="json") for t in team_refs(cfg)]} if cfg.teams else {}),
            **({"prices": prices.model_dump(mode="json")} if (prices := price_table(cfg)) else {}),
            **(
                {"multiCluster": {"role": mc.role, "workers": [w.name for w in mc.workers]}}
                if (mc := cfg.multiCluster).role != "standalone"
                else {}
            ),
        },
    }


def installed_by(cfg: PlatformConfig, name: str) -> str:
    """How an enabled component is installed: helm (a release of its own), external, or by
    another component's release (DCGM's exporter from the GPU Operator)."""
    comp = getattr(cfg.components, name)
    if comp.install == "external":
        return "external"
    if name == "dcgmExporter" and cfg.components.dcgmExporter.source == "operator":
        return "gpuOperator"
    return "helm"


def researcher_read_clusterrole() -> dict[str, Any]:
    """Cluster-wide reads a researcher needs: profiles, queue state, node health for status."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": object_meta(RESEARCHER_READ_CLUSTERROLE),
        "rules": [
            {"apiGroups": [C.GROUP], "resources": ["clusters"], "verbs": ["get", "list", "watch"]},
            {
                "apiGroups": ["kueue.x-k8s.io"],
                "resources": [
                    "clusterqueues",
                    "cohorts",
                    "resourceflavors",
                    "workloadpriorityclasses",
                ],
                "verbs": ["get", "list", "watch"],
            },
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        ],
    }


RESEARCHER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["ray.io"],
        "resources": ["rayjobs", "rayservices"],
        "verbs": ["create", "get", "list", "watch", "patch", "update", "delete"],
    },
    {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": ["batch"],
        "resources": ["jobs"],
        "verbs": ["create", "get", "list", "watch", "patch", "update", "delete"],
    },
    {
        "apiGroups": [""],
        "resources": ["configmaps", "services"],
        "verbs": ["create", "get", "list", "watch", "patch", "update", "delete"],
    },
    {
        "apiGroups": [""],
        "resources": ["pods", "pods/log", "events", "persistentvolumeclaims"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["workloads", "localqueues"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": [C.GROUP],
        "resources": ["runs", "quotarequests", "tauservices"],
        "verbs": ["create", "get", "list", "watch", "patch", "update", "delete"],
    },
    {"apiGroups": [C.GROUP], "resources": ["runs/status"], "verbs": ["get", "patch", "update"]},
    # the workspace's usage ledger: read, never written (the controller keeps it; `tau usage`)
    {"apiGroups": [C.GROUP], "resources": ["usages"], "verbs": ["get", "list"]},
    # the workspace's Services through the API server: its volume's file server (tau run pull,
    # metrics, progress) and its model services (tau serve invoke); members may run pods that
    # reach them anyway, so this opens nothing new to them
    {"apiGroups": [""], "resources": ["services/proxy"], "verbs": ["get", "create"]},
]


def _subjects(ws: WorkspaceSpec) -> list[dict[str, Any]]:
    subjects = []
    for m in ws.members:
        s: dict[str, Any] = {"kind": m.kind, "name": m.name}
        if m.kind == "ServiceAccount":
            s["namespace"] = m.namespace or ws.ns
        else:
            s["apiGroup"] = "rbac.authorization.k8s.io"
        subjects.append(s)
    return subjects


def _runlib_sources(modules: tuple[str, ...]) -> dict[str, str]:
    """The stdlib-only modules' source, as a ConfigMap carries them (found, not imported)."""
    from importlib.util import find_spec

    out = {}
    for module in modules:
        spec = find_spec(module)
        assert spec is not None and spec.origin, f"{module} is part of this distribution"
        out[f"{module}.py"] = Path(spec.origin).read_text(encoding="utf-8")
    return out


def workspace_files(cfg: PlatformConfig, ws: WorkspaceSpec) -> list[dict[str, Any]]:
    """The workspace's file server: its volume mounted read-only, served over HTTP to the API
    server's service proxy (members may `get services/proxy` of this Service only). Its code is
    runlib's (a ConfigMap); its image needs only python3. No service account token, no writes."""
    spec = cfg.workspaceFiles
    if not spec.enabled:
        return []
    ns = ws.ns
    name = naming.FILES_SERVICE
    labels = {C.LABEL_WORKSPACE: ws.name, "app.kubernetes.io/name": name}
    image = (
        spec.image or f"{cfg.components.controller.image}:{cfg.components.version('controller')}"
    )
    sources = _runlib_sources(naming.FILES_MODULES)
    code = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(name, ns, labels),
        "data": sources,
    }
    deployment = _files_deployment(ws, spec, labels, _files_container(spec, image), sources)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(name, ns, labels),
        "spec": {
            "selector": labels,
            # unnamed: the proxy's path then names no port, and RBAC's resourceNames is the
            # Service's name alone (a named port must be asked for as tau-files:http)
            "ports": [{"port": naming.FILES_PORT, "targetPort": "http"}],
        },
    }
    return [code, deployment, service]


def _files_deployment(
    ws: WorkspaceSpec,
    spec: WorkspaceFiles,
    labels: dict[str, str],
    container: dict[str, Any],
    sources: dict[str, str],
) -> dict[str, Any]:
    """One file server pod, no service account token, the volume read-only; a new code
    ConfigMap rolls it."""
    name, ns = naming.FILES_SERVICE, ws.ns
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(name, ns, labels),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                # a new code ConfigMap rolls the pod (its content's digest)
                "metadata": {
                    "labels": {**PART_OF, **labels},
                    "annotations": {f"{C.GROUP}/code": _digest(sources)},
                },
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    **({"nodeSelector": dict(spec.nodeSelector)} if spec.nodeSelector else {}),
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "data",
                            "persistentVolumeClaim": {
                                "claimName": naming.workspace_pvc(ws.name),
                                "readOnly": True,
                            },
                        },
                        {"name": "code", "configMap": {"name": name}},
                    ],
                },
            },
        },
    }


def _files_container(spec: WorkspaceFiles, image: str) -> dict[str, Any]:
    """The file server's container: runlib's tau_files.py over the read-only volume, as an
    unprivileged process with a read-only root."""
    return {
        "name": "files",
        "image": image,
        "command": [
            "python3",
            "/opt/tau/tau_files.py",
            "--root",
            "/data",
            "--port",
            str(naming.FILES_PORT),
        ],
        "env": [
            {"name": "PYTHONPATH", "value": "/opt/tau"},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        ],
        "ports": [{"name": "http", "containerPort": naming.FILES_PORT}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
        "resources": {
            "requests": {"cpu": spec.cpu, "memory": format_memory(parse_memory(spec.memory) // 2)},
            "limits": {"memory": spec.memory},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "data", "mountPath": "/data", "readOnly": True},
            {"name": "code", "mountPath": "/opt/tau", "readOnly": True},
        ],
    }


def _digest(data: dict[str, str]) -> str:
    import hashlib

    h = hashlib.sha256()
    for k in sorted(data):
        h.update(k.encode() + b"\0" + data[k].encode() + b"\0")
    return h.hexdigest()[:16]


def workspace_objects(cfg: PlatformConfig, ws: WorkspaceSpec) -> list[dict[str, Any]]:
    """Namespace, LocalQueues, ServiceAccount, researcher RBAC, the /data PVC, and the
    TauWorkspace."""
    ns = ws.ns
    labels = {C.LABEL_WORKSPACE: ws.name}
    subjects = _subjects(ws)
    pvc_spec: dict[str, Any] = {
        "accessModes": [ws.storage.accessMode],
        "resources": {"requests": {"storage": ws.storage.size}},
    }
    if ws.storage.storageClass:
        pvc_spec["storageClassName"] = ws.storage.storageClass
    objs: list[dict[str, Any]] = [
        namespace(ns, labels),
        *(local_queue(ws, q) for q in ws.queues),
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": object_meta(naming.RUN_SERVICE_ACCOUNT, ns, labels),
        },
        rbac_role(object_meta(RESEARCHER_ROLE, ns, labels), RESEARCHER_RULES),
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": object_meta(naming.workspace_pvc(ws.name), ns, labels),
            "spec": pvc_spec,
        },
        _tau_workspace(cfg, ws, labels),
        *workspace_files(cfg, ws),
    ]
    if subjects:
        objs += _member_rbac(ws, subjects, labels)
    return objs


def _member_rbac(
    ws: WorkspaceSpec, subjects: list[dict[str, Any]], labels: dict[str, str]
) -> list[dict[str, Any]]:
    """What a workspace's members may do: the researcher Role in its namespace, a read of
    their TauWorkspace (by name) and the cluster-wide reads status needs."""
    return [
        rbac_binding(
            object_meta(RESEARCHER_ROLE, ws.ns, labels), "Role", RESEARCHER_ROLE, subjects
        ),
        rbac_role(
            object_meta(f"tau-workspace-{ws.name}", SYSTEM_NAMESPACE, labels),
            [
                {
                    "apiGroups": [C.GROUP],
                    "resources": ["workspaces"],
                    "resourceNames": [ws.name],
                    "verbs": ["get", "watch"],
                }
            ],
        ),
        rbac_binding(
            object_meta(f"tau-workspace-{ws.name}", SYSTEM_NAMESPACE, labels),
            "Role",
            f"tau-workspace-{ws.name}",
            subjects,
        ),
        rbac_binding(
            object_meta(f"{RESEARCHER_READ_CLUSTERROLE}-{ws.name}", labels=labels),
            "ClusterRole",
            RESEARCHER_READ_CLUSTERROLE,
            subjects,
        ),
    ]


def _tau_workspace(
    cfg: PlatformConfig, ws: WorkspaceSpec, labels: dict[str, str]
) -> dict[str, Any]:
    """The TauWorkspace: what tau reads of a workspace (members, queues, profiles, storage)."""
    ns = ws.ns
    return {
        "apiVersion": C.API_VERSION,
        "kind": "TauWorkspace",
        "metadata": object_meta(ws.name, SYSTEM_NAMESPACE, labels),
        "spec": {
            "namespace": ns,
            "members": [m.model_dump(mode="json", exclude_none=True) for m in ws.members],
            "localQueues": list(ws.queues),
            "profiles": [p.name for p in derive_profiles(cfg) if p.applies_to(ws.name)],
            "storage": {
                "pvc": naming.workspace_pvc(ws.name),
                "size": ws.storage.size,
                **({"storageClass": ws.storage.storageClass} if ws.storage.storageClass else {}),
            },
            "serviceAccount": naming.RUN_SERVICE_ACCOUNT,
        },
    }


# --- quota approval ----------------------------------------------------------------------------
QUOTA_APPROVER_CLUSTERROLE = "taugrid-quota-approver"


def _binding_subjects(members: list[Member], namespace: str) -> list[dict[str, Any]]:
    out = []
    for m in members:
        s: dict[str, Any] = {"kind": m.kind, "name": m.name}
        if m.kind == "ServiceAccount":
            s["namespace"] = m.namespace or namespace
        else:
            s["apiGroup"] = "rbac.authorization.k8s.io"
        out.append(s)
    return out


def quota_approver_objects(cfg: PlatformConfig) -> list[dict[str, Any]]:
    """Deciding on quota requests = writing their status subresource, and reading every
    workspace's usage: only platform admins."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": object_meta(QUOTA_APPROVER_CLUSTERROLE),
        "rules": [
            {
                "apiGroups": [C.GROUP],
                "resources": ["quotarequests"],
                "verbs": ["get", "list", "watch"],
            },
            {
                "apiGroups": [C.GROUP],
                "resources": ["quotarequests/status"],
                "verbs": ["get", "patch", "update"],
            },
            {"apiGroups": [C.GROUP], "resources": ["clusters"], "verbs": ["get", "list", "watch"]},
            # `tau usage` cluster-wide: every workspace's ledger
            {"apiGroups": [C.GROUP], "resources": ["usages"], "verbs": ["get", "list"]},
        ],
    }
    if not cfg.admins:
        return [role]
    binding = rbac_binding(
        object_meta(QUOTA_APPROVER_CLUSTERROLE),
        "ClusterRole",
        QUOTA_APPROVER_CLUSTERROLE,
        _binding_subjects(cfg.admins, SYSTEM_NAMESPACE),
    )
    return [role, binding]
