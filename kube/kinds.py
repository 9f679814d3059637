"""The kinds tau reads and writes, by kind name: their group, version, plural, scope, and who
installs them (for "not served" messages)."""

from __future__ import annotations

from dataclasses import dataclass

from taugrid.api import constants as C


@dataclass(frozen=True)
class Kind:
    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    namespaced: bool = True
    component: str = ""  # who installs it (for "CRD missing" messages)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


TAUGRID = "TauGrid's CRDs (the platform)"


KINDS: dict[str, Kind] = {
    k.kind: k
    for k in (
        Kind("", "v1", "ConfigMap", "configmaps"),
        Kind("", "v1", "Pod", "pods"),
        Kind("", "v1", "Secret", "secrets"),
        Kind("apps", "v1", "Deployment", "deployments"),
        Kind("apps", "v1", "DaemonSet", "daemonsets"),
        Kind("", "v1", "Event", "events"),
        Kind("", "v1", "Service", "services"),
        Kind("", "v1", "Node", "nodes", namespaced=False),
        Kind("batch", "v1", "Job", "jobs"),
        Kind("ray.io", "v1", "RayJob", "rayjobs", component="the KubeRay operator"),
        Kind("ray.io", "v1", "RayCluster", "rayclusters", component="the KubeRay operator"),
        Kind("ray.io", "v1", "RayService", "rayservices", component="the KubeRay operator"),
        Kind(C.GROUP, C.VERSION, "TauService", "tauservices", True, TAUGRID),
        Kind("kueue.x-k8s.io", "v1beta2", "Workload", "workloads", component="Kueue"),
        Kind(
            "kueue.x-k8s.io",
            "v1beta2",
            "MultiKueueCluster",
            "multikueueclusters",
            namespaced=False,
            component="Kueue",
        ),
        Kind("kueue.x-k8s.io", "v1beta2", "LocalQueue", "localqueues", component="Kueue"),
        Kind(C.GROUP, C.VERSION, "TauRun", "runs", True, TAUGRID),
        # Kueue's visibility API: GET .../localqueues/<queue>/pendingworkloads
        Kind(
            "visibility.kueue.x-k8s.io",
            "v1beta2",
            "PendingWorkloadsSummary",
            "localqueues",
            component="Kueue's visibility API",
        ),
        Kind(
            C.GROUP,
            C.VERSION,
            "TauCluster",
            "clusters",
            namespaced=False,
            component="TauGrid's CRDs (the platform)",
        ),
        Kind(
            C.GROUP,
            C.VERSION,
            "TauWorkspace",
            "workspaces",
            component="TauGrid's CRDs (the platform)",
        ),
        Kind(C.GROUP, C.VERSION, "TauQuotaRequest", "quotarequests", True, TAUGRID),
        Kind(C.GROUP, C.VERSION, "TauUsage", "usages", True, TAUGRID),
        Kind("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
        Kind("", "v1", "PersistentVolume", "persistentvolumes", namespaced=False),
        Kind("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
        Kind(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            namespaced=False,
        ),
        Kind("kueue.x-k8s.io", "v1beta2", "ClusterQueue", "clusterqueues", False, "Kueue"),
        Kind("kueue.x-k8s.io", "v1beta2", "Cohort", "cohorts", False, "Kueue"),
        Kind("kueue.x-k8s.io", "v1beta2", "ResourceFlavor", "resourceflavors", False, "Kueue"),
    )
}
