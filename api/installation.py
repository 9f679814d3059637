"""A cluster's installation checked against its platform declaration (pure: objects in, findings
out; `taugrid.client.cluster.validate_installation` reads them).

What the declaration says reaches the cluster as the TauCluster (its stack, the version lock of
each enabled component, which of them are installed outside the stack, the profiles with their
queues and flavors, the workspaces); each check compares what the cluster shows with it:
the Kubernetes version, the CRDs, each component's Helm release (deployed, at the locked chart
version) and its workloads (Ready), the queues and flavors, the controller's heartbeat, and
NPD's and DCGM's exporter's pods on every GPU node. One finding per item, with the fix.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from taugrid.api import constants as C
from taugrid.api.defaults import new_list
from taugrid.api.platform import CHARTS

MIN_KUBERNETES = (1, 30)  # Kueue 0.19 and KubeRay 1.7 need at least this
# The CRDs each part needs (by CRD name), beside TauGrid's own.
COMPONENT_CRDS: dict[str, tuple[str, ...]] = {
    "kueue": (
        "clusterqueues.kueue.x-k8s.io",
        "localqueues.kueue.x-k8s.io",
        "resourceflavors.kueue.x-k8s.io",
        "workloads.kueue.x-k8s.io",
    ),
    "kuberay": ("rayjobs.ray.io", "rayclusters.ray.io", "rayservices.ray.io"),
}
# The per-node agents a GPU node needs, by component: pods whose name holds the word, in the
# component's namespace (the GPU Operator's exporter and the standalone chart's alike).
NODE_AGENTS: dict[str, str] = {"nodeProblemDetector": "node-problem-detector"}
DCGM_AGENT = "dcgm-exporter"


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    item: str  # what was checked: "kubernetes", "crd ...", "component kueue", ...
    state: Literal["ok", "failed", "skipped"]
    message: str
    fix: str | None = None


@dataclass(frozen=True)
class Seen:
    """What the cluster shows, read once (see the module)."""

    version: str
    tau_cluster: Mapping[str, Any] | None
    crds: list[Mapping[str, Any]] = field(default_factory=new_list)
    releases: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)  # by component
    workloads: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)  # by component
    agents: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)  # pods, by component
    cluster_queues: list[Mapping[str, Any]] = field(default_factory=new_list)
    flavors: list[Mapping[str, Any]] = field(default_factory=new_list)
    local_queues: list[Mapping[str, Any]] = field(default_factory=new_list)
    gpu_nodes: list[str] = field(default_factory=new_list)
    workers: list[Mapping[str, Any]] = field(default_factory=new_list)  # MultiKueueClusters
    now: float = 0.0


def check(seen: Seen) -> list[Finding]:
    """Every check, in the order an operator reads them."""
    out = [kubernetes(seen.version)]
    tc = seen.tau_cluster
    if tc is None:
        out.append(
            Finding(
                item="platform",
                state="failed",
                message="no TauCluster: the TauGrid platform is not installed on this cluster",
                fix="tau platform up --stack STACK",
            )
        )
        return out
    spec = tc.get("spec") or {}
    components: dict[str, str] = dict(spec.get("components") or {})
    installed_by: dict[str, str] = dict(spec.get("installedBy") or {})
    external = {n for n, how in installed_by.items() if how == "external"}
    out.append(_ok("platform", f"stack {spec.get('stack', '?')}"))
    out += crds(seen.crds, components)
    for name, version in sorted(components.items()):
        if name == "controller":
            continue
        out.append(
            component(
                name,
                version,
                installed_by.get(name, "helm"),
                seen.releases.get(name, []),
                seen.workloads.get(name, []),
            )
        )
    out.append(heartbeat(tc, seen.now, "controller" in components))
    out += queues(spec, seen.cluster_queues, seen.flavors, seen.local_queues)
    out += agents(components, external, seen.agents, seen.gpu_nodes)
    out += workers(spec, seen.workers)
    return out


def workers(spec: Mapping[str, Any], clusters: Iterable[Mapping[str, Any]]) -> list[Finding]:
    """A MultiKueue manager: each declared worker connected (Kueue's Active condition on its
    MultiKueueCluster), or why not, with the fix."""
    mc = spec.get("multiCluster") or {}
    if mc.get("role") != "manager":
        return []
    by_name = {c["metadata"]["name"]: c for c in clusters}
    out = []
    for name in mc.get("workers") or []:
        item = f"worker {name}"
        got = by_name.get(name)
        if got is None:
            out.append(
                _fail(
                    item,
                    "no MultiKueueCluster of that name: nothing is dispatched to it",
                    "pulumi up the manager's stack (it makes one per declared worker)",
                )
            )
            continue
        conds = (got.get("status") or {}).get("conditions") or []
        active: Mapping[str, Any] = next((c for c in conds if c.get("type") == "Active"), {})
        if active.get("status") == "True":
            out.append(_ok(item, "connected: MultiKueue dispatches runs to it"))
            continue
        why = f"{active.get('reason') or 'no status yet'}: {active.get('message') or ''}"
        out.append(_fail(item, f"not connected ({why.strip(': ')})", _worker_fix(name, why)))
    return out


def _worker_fix(name: str, why: str) -> str:
    """What to do about a worker MultiKueue cannot reach, from what Kueue says."""
    low = why.lower()
    # client-go's words for a 401: "the server has asked for the client to provide credentials"
    if any(w in low for w in ("unauthorized", "401", "provide credentials", "token", "expired")):
        return (
            f"the manager's kubeconfig Secret kueue-system/multikueue-{name} holds credentials "
            "the worker refuses (an expired or revoked token): pulumi up the worker's stack (a "
            "new token), then the manager's (it copies it)"
        )
    if "forbidden" in low:
        return (
            "the worker's MultiKueue account may not do what dispatching needs: pulumi up the "
            "worker's stack with this TauGrid version (it scopes that account's ClusterRole)"
        )
    if any(w in low for w in ("refused", "no such host", "timeout", "dial tcp", "unreachable")):
        return (
            "the worker's API server does not answer the manager: is the worker up, and is "
            "its multiCluster.server reachable from the manager's network?"
        )
    return f"its status says more: kubectl get multikueuecluster {name} -o yaml"


def _ok(item: str, message: str) -> Finding:
    return Finding(item=item, state="ok", message=message)


def _fail(item: str, message: str, fix: str) -> Finding:
    return Finding(item=item, state="failed", message=message, fix=fix)


def kubernetes(version: str) -> Finding:
    m = re.match(r"v?(\d+)\.(\d+)", version)
    if m is None:
        return _fail("kubernetes", f"an unreadable version {version!r}", "check the API server")
    have = (int(m.group(1)), int(m.group(2)))
    if have < MIN_KUBERNETES:
        least = ".".join(map(str, MIN_KUBERNETES))
        return _fail(
            "kubernetes",
            f"{version}: Kueue and KubeRay need at least {least}",
            f"upgrade the cluster (AKS: az aks upgrade --kubernetes-version {least}.x)",
        )
    return _ok("kubernetes", version)


def crds(items: Iterable[Mapping[str, Any]], components: Mapping[str, str]) -> list[Finding]:
    """TauGrid's CRDs, and each enabled component's, present and Established."""
    from taugrid.api.crds import CRD_TYPES

    by_name = {str((c.get("metadata") or {}).get("name")): c for c in items}
    wanted = [f"{t.plural}.{C.GROUP}" for t in CRD_TYPES]
    for name, names in COMPONENT_CRDS.items():
        if name in components:
            wanted += names
    out = []
    for name in wanted:
        crd = by_name.get(name)
        if crd is None:
            out.append(_fail(f"crd {name}", "missing", "tau platform up (it installs the CRDs)"))
            continue
        conds = (crd.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Established" and c.get("status") == "True" for c in conds):
            out.append(
                _fail(f"crd {name}", "not Established", "check the API server's log for the CRD")
            )
    if not any(f.state == "failed" for f in out):
        out.append(_ok("crds", f"{len(wanted)} CRDs established"))
    return out


def release_of(secret: Mapping[str, Any]) -> dict[str, Any] | None:
    """A Helm release as Helm keeps it in a Secret (base64 of gzip of JSON, in a Secret's base64
    data): its chart version and status; None when it is not one."""
    raw = (secret.get("data") or {}).get("release")
    if not raw:
        return None
    try:
        blob = base64.b64decode(base64.b64decode(raw))
        if blob[:2] == b"\x1f\x8b":
            blob = gzip.decompress(blob)
        doc = json.loads(blob)
        return {
            "version": str(((doc.get("chart") or {}).get("metadata") or {}).get("version", "")),
            "status": str((doc.get("info") or {}).get("status", "")),
            "revision": int(doc.get("version") or 0),
        }
    except (ValueError, OSError, AttributeError, TypeError):
        return None


def component(
    name: str,
    version: str,
    installed_by: str,
    secrets: Iterable[Mapping[str, Any]],
    workloads: Iterable[Mapping[str, Any]],
) -> Finding:
    """One chart of the platform: its newest release deployed at the locked version, and its
    Deployments and DaemonSets Ready. `installed_by`: helm (its own release), external (outside
    the stack: nothing to check) or the component whose release brings it."""
    item = f"component {name}"
    if installed_by == "external":
        return Finding(
            item=item,
            state="skipped",
            message="installed outside the stack (install: external): no release to check",
        )
    if installed_by != "helm":
        return Finding(
            item=item, state="skipped", message=f"part of component {installed_by}'s release"
        )
    chart = CHARTS.get(name)
    where = f"namespace {chart.namespace}" if chart else "its namespace"
    releases = [r for r in (release_of(s) for s in secrets) if r is not None]
    if not releases:
        return _fail(
            item,
            f"no Helm release {chart.release if chart else name} in {where}",
            "tau platform up (it installs the chart)",
        )
    newest = max(releases, key=lambda r: r["revision"])
    if newest["status"] != "deployed":
        return _fail(
            item,
            f"release revision {newest['revision']} is {newest['status']}",
            "tau platform up again; its log says why the release failed",
        )
    if newest["version"].lstrip("v") != version.lstrip("v"):
        return _fail(
            item,
            f"chart {newest['version']} is deployed; the stack's lock says {version}",
            "tau platform up (it moves the release to the locked version)",
        )
    waiting = [w for w in workloads if not _ready(w)]
    if waiting:
        said = ", ".join(
            f"{w.get('kind', '?')} {(w.get('metadata') or {}).get('name')}" for w in waiting
        )
        return _fail(
            item,
            f"chart {version} deployed, but not Ready: {said}",
            f"see the pods in {where} (kubectl -n {chart.namespace if chart else '?'} get pods)",
        )
    return _ok(item, f"chart {version} deployed, {len(list(workloads))} workload(s) Ready")


def _ready(w: Mapping[str, Any]) -> bool:
    status = w.get("status") or {}
    if w.get("kind") == "DaemonSet":
        want = int(status.get("desiredNumberScheduled") or 0)
        return int(status.get("numberReady") or 0) >= want
    want = int((w.get("spec") or {}).get("replicas", 1) or 0)
    return int(status.get("readyReplicas") or 0) >= want


def heartbeat(tc: Mapping[str, Any], now: float, declared: bool) -> Finding:
    """The controller says it is alive (TauCluster.status.controllerHeartbeat)."""
    from taugrid.api.kubetime import parse_k8s_time

    beat = (tc.get("status") or {}).get("controllerHeartbeat")
    at = parse_k8s_time(beat) if beat else None
    if not declared:
        return Finding(item="controller", state="skipped", message="not enabled in the stack")
    if at is None:
        return _fail(
            "controller",
            "no heartbeat: the TauGrid controller has never run against this cluster",
            "tau platform up (it deploys the controller), or start it: tau controller run",
        )
    age = now - at.timestamp()
    if age > C.HEARTBEAT_FRESH_S:
        return _fail(
            "controller",
            f"its last heartbeat is {int(age)}s old ({beat}): it is not running",
            "check the controller's pod in namespace taugrid-system",
        )
    return _ok("controller", f"alive (heartbeat {int(max(age, 0))}s ago)")


def queues(
    spec: Mapping[str, Any],
    cluster_queues: Iterable[Mapping[str, Any]],
    flavors: Iterable[Mapping[str, Any]],
    local_queues: Iterable[Mapping[str, Any]],
) -> list[Finding]:
    """Each profile's ClusterQueue (Active) and flavor, and each workspace's LocalQueue."""
    cqs = {str(q["metadata"]["name"]): q for q in cluster_queues}
    have_flavors = {str(f["metadata"]["name"]) for f in flavors}
    lqs = {(q["metadata"].get("namespace"), q["metadata"]["name"]) for q in local_queues}
    out: list[Finding] = []
    profiles = spec.get("workloadProfiles") or []
    for name in sorted({str(p.get("clusterQueue")) for p in profiles if p.get("clusterQueue")}):
        cq = cqs.get(name)
        if cq is None:
            out.append(_fail(f"queue {name}", "ClusterQueue missing", "tau platform up"))
            continue
        conds = (cq.get("status") or {}).get("conditions") or []
        active = next((c for c in conds if c.get("type") == "Active"), None)
        if active is None or active.get("status") != "True":
            why = (active or {}).get("message") or "Kueue has not made it Active"
            out.append(_fail(f"queue {name}", f"not Active: {why}", "see Kueue's log"))
    for name in sorted({str(p.get("flavor")) for p in profiles if p.get("flavor")} - have_flavors):
        out.append(_fail(f"flavor {name}", "ResourceFlavor missing", "tau platform up"))
    for ws in spec.get("workspaces") or []:
        ns = ws.get("namespace")
        mine = {p.get("localQueue") for p in profiles if _applies(p, str(ws.get("name")))}
        for q in sorted(str(q) for q in mine if q):
            if (ns, q) not in lqs:
                out.append(_fail(f"queue {ns}/{q}", "LocalQueue missing", "tau platform up"))
    if not out:
        out.append(_ok("queues", f"{len(cqs)} ClusterQueue(s) Active, flavors and LocalQueues"))
    return out


def _applies(profile: Mapping[str, Any], workspace: str) -> bool:
    only = profile.get("workspaces") or []
    return not only or workspace in only


def agents(
    components: Mapping[str, str],
    external: set[str],
    pods: Mapping[str, Iterable[Mapping[str, Any]]],
    gpu_nodes: list[str],
) -> list[Finding]:
    """NPD and DCGM's exporter running on every GPU node (where the stack enables them)."""
    wanted = dict(NODE_AGENTS)
    if "dcgmExporter" in components:
        wanted["dcgmExporter"] = DCGM_AGENT
    out = []
    for name, word in sorted(wanted.items()):
        if name not in components or name in external or not gpu_nodes:
            continue
        running = {
            str((p.get("spec") or {}).get("nodeName"))
            for p in pods.get(name, [])
            if word in str((p.get("metadata") or {}).get("name", ""))
            and (p.get("status") or {}).get("phase") == "Running"
        }
        missing = [n for n in gpu_nodes if n not in running]
        if missing:
            shown = ", ".join(missing[:10]) + (
                f" and {len(missing) - 10} more" if len(missing) > 10 else ""
            )
            out.append(
                _fail(
                    f"{word} on GPU nodes",
                    f"not running on {len(missing)} of {len(gpu_nodes)} GPU node(s): {shown}",
                    f"check the {word} DaemonSet's pods (a taint it does not tolerate?)",
                )
            )
        else:
            out.append(_ok(f"{word} on GPU nodes", f"running on all {len(gpu_nodes)}"))
    return out
