"""Profile resolution: tau.yaml + the platform's profiles -> one placement and one size.

Pure (no I/O). A run uses `policy.profile`, or the single profile that applies to its
workspace and fits its request. Requests inside a profile's bounds are honoured; requests
outside are refused with the numbers; ambiguity lists the candidates.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal

from taugrid.api import constants as C
from taugrid.api.errors import TauError
from taugrid.api.manifest import Manifest, WorkloadKind
from taugrid.api.profiles import (
    ImageMirror,
    ProfileSnapshot,
    WorkloadProfile,
    WorkspaceRef,
    mirrored,
)
from taugrid.api.quantity import format_cpu, format_memory, parse_cpu, parse_memory

MI = 2**20
CPU_RUN_DEFAULT_CPU = Decimal(1)
CPU_RUN_DEFAULT_MEMORY = 4 * 2**30


class ResolutionError(TauError):
    """The run cannot be placed on the platform as written (exit code 2)."""


def _covered(image: str, mirrors: list[ImageMirror]) -> bool:
    """A mirror stands in for `image`, or it is one of the images the mirrors run."""
    return any(m.applies(image) or m.image == image for m in mirrors)


@dataclass(frozen=True)
class Size:
    cpu_request: Decimal
    cpu_limit: Decimal
    memory_request: int
    memory_limit: int

    def resources(self) -> dict[str, dict[str, str]]:
        return {
            "requests": {
                "cpu": format_cpu(self.cpu_request),
                "memory": format_memory(self.memory_request),
            },
            "limits": {
                "cpu": format_cpu(self.cpu_limit),
                "memory": format_memory(self.memory_limit),
            },
        }


@dataclass(frozen=True)
class Resolved:
    manifest: Manifest
    kind: WorkloadKind
    profile: WorkloadProfile
    workspace: WorkspaceRef
    queue: str
    priority: str | None
    image: str  # what the pods run (the cluster's mirror of the named one, where it has one)
    gpus: int
    gpu_resource: str
    workers: int
    worker: Size  # the Job pod, or each Ray worker
    pvc: str
    profile_set_hash: str | None
    named_image: str = ""  # the image the run names (its Ray version)

    @property
    def namespace(self) -> str:
        return self.workspace.namespace


def _pick_workspace(m: Manifest, snap: ProfileSnapshot, override: str | None) -> WorkspaceRef:
    name = override or m.policy.workspace or snap.defaultWorkspace
    known = ", ".join(w.name for w in snap.workspaces) or "(none)"
    if name:
        ws = snap.workspace(name)
        if ws is None:
            raise ResolutionError(
                f"policy.workspace={name!r} is not a workspace of cluster {snap.cluster!r}; known: "
                f"{known}"
            )
    elif len(snap.workspaces) == 1:
        ws = snap.workspaces[0]
    elif not snap.workspaces:
        raise ResolutionError(
            f"cluster {snap.cluster!r} publishes no workspaces; a run needs one for its namespace "
            "and /data",
            hint="ask the platform team to add a workspace to the stack",
        )
    else:
        raise ResolutionError(
            f"which workspace? cluster {snap.cluster!r} has several: {known}",
            hint="set policy.workspace in tau.yaml or pass --workspace",
        )
    if m.policy.namespace and m.policy.namespace != ws.namespace:
        raise ResolutionError(
            f"policy.namespace={m.policy.namespace!r} conflicts with workspace {ws.name!r}, "
            f"whose namespace is {ws.namespace!r}; drop policy.namespace"
        )
    return ws


def _gpu_share(value: Decimal | int, gpus: int, per_node: int) -> Decimal:
    return (Decimal(value) * gpus / per_node).to_integral_value(rounding=ROUND_FLOOR)


def size_worker(m: Manifest, kind: WorkloadKind, p: WorkloadProfile) -> Size:
    c = m.compute
    if kind == "rayjob":
        cpu_req = c.worker_cpus if c.worker_cpus is not None else c.cpus
        cpu_lim = (
            c.worker_cpu_limit
            if c.worker_cpu_limit is not None
            else (c.cpu_limit if c.worker_cpus is None else None)
        )
        mem_req = c.worker_memory if c.worker_memory is not None else c.memory
        mem_lim = (
            c.worker_memory_limit
            if c.worker_memory_limit is not None
            else (c.memory_limit if c.worker_memory is None else None)
        )
    else:
        cpu_req, cpu_lim, mem_req, mem_lim = c.cpus, c.cpu_limit, c.memory, c.memory_limit
    alloc_cpu = parse_cpu(p.allocatable.cpu)
    alloc_mem = parse_memory(p.allocatable.memory)
    if p.workerDefaults is not None:
        d_cpu, d_mem = parse_cpu(p.workerDefaults.cpu), parse_memory(p.workerDefaults.memory)
    elif c.gpus > 0 and p.gpusPerWorker > 0:
        share = min(c.gpus, p.gpusPerWorker)
        d_cpu = max(Decimal(1), _gpu_share(alloc_cpu, share, p.gpusPerWorker))
        d_mem = max(MI, int(_gpu_share(alloc_mem // MI, share, p.gpusPerWorker)) * MI)
    else:
        d_cpu, d_mem = min(CPU_RUN_DEFAULT_CPU, alloc_cpu), min(CPU_RUN_DEFAULT_MEMORY, alloc_mem)
    cr = parse_cpu(cpu_req) if cpu_req is not None else d_cpu
    mr = parse_memory(mem_req) if mem_req is not None else d_mem
    cl = parse_cpu(cpu_lim) if cpu_lim is not None else cr
    ml = parse_memory(mem_lim) if mem_lim is not None else mr
    return Size(cr, max(cl, cr), mr, max(ml, mr))


def _misfits(m: Manifest, kind: WorkloadKind, p: WorkloadProfile) -> list[str]:
    """Why the request does not fit the profile, each with the numbers (empty: it fits)."""
    out: list[str] = []
    c = m.compute
    if c.gpus > p.gpusPerWorker:
        if p.gpusPerWorker == 0:
            out.append(f"compute.gpus={c.gpus} but profile {p.name} has no GPUs")
        else:
            unit = "GPU" if p.gpusPerWorker == 1 else "GPUs"
            out.append(
                f"compute.gpus={c.gpus} exceeds profile {p.name}: nodes have {p.gpusPerWorker} "
                f"{unit}"
            )
    if p.maxWorkers is not None and m.nodes > p.maxWorkers:
        what = "nodes" if m.launcher == "torchrun" else "workers"
        out.append(
            f"compute.workers={m.nodes} exceeds profile {p.name}: at most {p.maxWorkers} {what}"
        )
    # Only sizes the user wrote can misfit: defaults are derived from the profile itself.
    size = size_worker(m, kind, p)
    alloc_cpu = parse_cpu(p.allocatable.cpu)
    alloc_mem = parse_memory(p.allocatable.memory)
    key_cpu = "worker_cpus" if kind == "rayjob" and c.worker_cpus is not None else "cpus"
    key_mem = "worker_memory" if kind == "rayjob" and c.worker_memory is not None else "memory"
    if getattr(c, key_cpu) is not None and size.cpu_request > alloc_cpu:
        out.append(
            f"compute.{key_cpu}={format_cpu(size.cpu_request)} exceeds profile {p.name}: "
            f"a node has {format_cpu(alloc_cpu)} allocatable CPUs"
        )
    if getattr(c, key_mem) is not None and size.memory_request > alloc_mem:
        out.append(
            f"compute.{key_mem}={format_memory(size.memory_request)} exceeds profile {p.name}: "
            f"a node has {format_memory(alloc_mem)} allocatable memory"
        )
    return out


def _describe(p: WorkloadProfile) -> str:
    gpu = f"{p.gpusPerWorker}x {p.gpuClass or 'GPU'}" if p.gpusPerWorker else "CPU only"
    return f"{p.name} ({gpu}, {p.allocatable.cpu} CPU, {p.allocatable.memory})"


def _pick_profile(
    m: Manifest, kind: WorkloadKind, snap: ProfileSnapshot, ws: WorkspaceRef, override: str | None
) -> WorkloadProfile:
    name = override or m.policy.profile
    if name:
        p = snap.profile(name)
        if p is None:
            known = ", ".join(_describe(q) for q in snap.profiles) or "(none)"
            raise ResolutionError(
                f"policy.profile={name!r} is not offered by cluster {snap.cluster!r}; available: "
                f"{known}"
            )
        if not p.applies_to(ws.name):
            raise ResolutionError(
                f"profile {p.name} is not available to workspace {ws.name!r}; it serves: "
                f"{', '.join(p.workspaces)}"
            )
        misfits = _misfits(m, kind, p)
        if misfits:
            raise ResolutionError(
                "; ".join(misfits),
                hint="lower the request, or pick a larger profile with policy.profile",
            )
        return p
    usable = [p for p in snap.profiles if p.applies_to(ws.name)]
    wants_gpu = m.compute.gpus > 0
    same_kind = [p for p in usable if (p.gpusPerWorker > 0) == wants_gpu]
    fitting = [p for p in same_kind if not _misfits(m, kind, p)]
    if len(fitting) > 1 and wants_gpu:
        # Whole-node shapes first: a 1-GPU run goes to the 1-GPU pool, not an 8-GPU node.
        exact = [p for p in fitting if p.gpusPerWorker == m.compute.gpus]
        if len(exact) == 1:
            return exact[0]
    if len(fitting) == 1:
        return fitting[0]
    if len(fitting) > 1:
        raise ResolutionError(
            "several profiles fit this run: " + ", ".join(_describe(p) for p in fitting),
            hint=f"choose one with policy.profile (e.g. `policy: {{profile: {fitting[0].name}}}`) "
            "or --profile",
        )
    what = f"{m.compute.gpus} GPU(s) per worker" if wants_gpu else "CPU only"
    if not same_kind:
        raise ResolutionError(
            f"no profile of cluster {snap.cluster!r} for workspace {ws.name!r} offers {what}; "
            f"available: {', '.join(_describe(p) for p in usable) or '(none)'}"
        )
    reasons = [f"\n  {p.name}: " + "; ".join(_misfits(m, kind, p)) for p in same_kind]
    raise ResolutionError(
        "no profile fits this run:" + "".join(reasons),
        hint="lower the request, or ask for a larger pool",
    )


def resolve(
    m: Manifest,
    snap: ProfileSnapshot,
    *,
    workspace: str | None = None,
    profile: str | None = None,
) -> Resolved:
    kind = m.workload_kind()
    ws = _pick_workspace(m, snap, workspace)
    p = _pick_profile(m, kind, snap, ws, profile)
    if m.policy.queue and m.policy.queue != p.localQueue:
        raise ResolutionError(
            f"policy.queue={m.policy.queue!r} conflicts with profile {p.name}, which submits to "
            f"LocalQueue {p.localQueue!r}; drop policy.queue or pick another profile"
        )
    priority = m.policy.priority or p.defaultPriority
    if m.policy.priority and m.policy.priority not in p.priorityClasses:
        allowed = ", ".join(p.priorityClasses) or "(none: the profile fixes the priority)"
        raise ResolutionError(
            f"policy.priority={m.policy.priority!r} is not offered by profile {p.name}; allowed: "
            f"{allowed}"
        )
    image = m.image_ref or p.image or (C.DEFAULT_GPU_IMAGE if m.compute.gpus > 0 else None)
    if image is None:
        raise ResolutionError(
            "runtime.image is required for CPU-only runs (there is no default CPU image)",
            hint="runtime: {image: rayproject/ray:2.56.0-py312}",
        )
    named, image = image, mirrored(image, snap.imageMirrors)
    if snap.imageMirrorsOnly and not _covered(named, snap.imageMirrors):
        has = "; ".join(f"{m.match} (as {m.image})" for m in snap.imageMirrors) or "none"
        raise ResolutionError(
            f"runtime.image {named}: cluster {snap.cluster}'s nodes pull no image, and none it "
            f"has stands in for this one; it has: {has}",
            hint="name one of those images in tau.yaml (runtime.image), or ask a platform admin "
            "to add a mirror for it (imageMirrors in the stack)",
        )
    gpu_resource = p.gpuResource
    if m.compute.mig_profile:
        gpu_resource = f"nvidia.com/mig-{m.compute.mig_profile}"
    return Resolved(
        manifest=m,
        kind=kind,
        profile=p,
        workspace=ws,
        queue=p.localQueue,
        priority=priority,
        image=image,
        named_image=named,
        gpus=m.compute.gpus,
        gpu_resource=gpu_resource,
        workers=m.nodes,
        worker=size_worker(m, kind, p),
        pvc=m.storage.data_pvc or ws.pvc,
        profile_set_hash=snap.profileSetHash,
    )
