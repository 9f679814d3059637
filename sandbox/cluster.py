"""The sandbox: a real Kubernetes control plane on 127.0.0.1 with a stack's platform on it.

`tau sandbox up` starts etcd, kube-apiserver, controller-manager, scheduler, KWOK (fake nodes
shaped like the stack's pools, running pods without containers), Kueue and the KubeRay operator
(out of cluster, where built), then installs the stack's platform objects: TauGrid's CRDs and
TauCluster, Kueue's flavors, cohort, queues and priorities, and every workspace (namespace,
LocalQueues, RBAC, service account, a /data PVC bound to a folder under the sandbox). The
processes outlive the command; `down` stops every one of them. State lives under
$TAU_HOME/sandbox. Nothing is built here: without `make controlplane`, `up` says how.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taugrid.api import constants as C
from taugrid.api.errors import EXIT_PLATFORM, EXIT_USAGE, TauError, missing_extra
from taugrid.api.home import tau_home
from taugrid.api.platform import (
    SYSTEM_NAMESPACE,
    CpuPool,
    GpuPool,
    PlatformConfig,
    WorkspaceFiles,
    pool_labels,
    pool_taints,
    registration_taints,
)
from taugrid.api.profiles import HeadSize
from taugrid.api.published import workspace_registries
from taugrid.infra.stackfile import validated

if TYPE_CHECKING:
    from taugrid.kube.client import Kube

STACK = "sandbox"
Say = Callable[[str], None]


def sandbox_dir() -> Path:
    return tau_home() / "sandbox"


@dataclass
class State:
    stack: str
    api: str
    started_at: float
    pids: dict[str, int]  # component -> process group
    kubeconfigs: dict[str, str]  # identity -> kubeconfig path
    nodes: list[str] = field(default_factory=list)  # KWOK's
    real_nodes: list[str] = field(default_factory=list)  # kubelet + containerd (realnodes.py)
    skipped: dict[str, str] = field(default_factory=dict)  # component -> why it does not run
    platform: bool = True  # the platform objects installed by `up` (else: `tau platform up`)
    # MultiKueue workers (`up --clusters N`): name -> {api, nodes, real_nodes, admin
    # kubeconfig}; their processes are in `pids` as "<worker>/<component>"
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)
    # each workspace's data registry here (a worker's: what its manager publishes for it)
    registries: dict[str, str] = field(default_factory=dict)

    def real_node_count(self) -> int:
        """Real nodes per cluster that has them (a manager's are its workers')."""
        counts = [len(w.get("real_nodes") or []) for w in self.workers.values()]
        return counts[0] if counts else len(self.real_nodes)

    @classmethod
    def read(cls) -> State | None:
        try:
            return cls(**json.loads((sandbox_dir() / "state.json").read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            return None

    def write(self) -> None:
        path = sandbox_dir() / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)


def _need_clients() -> None:
    try:
        import cryptography  # noqa: F401
        import lightkube  # noqa: F401
    except ImportError as e:
        raise missing_extra("sandbox", f"the sandbox's libraries ({e.name})") from None


def component_status(state: State) -> list[dict[str, Any]]:
    """Each component: running or not (and why not), with its process group."""
    from taugrid.host.procs import group_alive

    rows = [
        {"component": name, "running": group_alive(pid), "pid": pid}
        for name, pid in state.pids.items()
    ]
    rows += [{"component": n, "running": False, "why": why} for n, why in state.skipped.items()]
    return rows


def api_ready(state: State, who: str = "admin", timeout: float = 2.0) -> bool:
    import ssl
    import urllib.request

    cfg = json.loads(Path(state.kubeconfigs[who]).read_text())
    user = cfg["users"][0]["user"]
    cluster = cfg["clusters"][0]["cluster"]
    ctx = ssl.create_default_context(cafile=cluster["certificate-authority"])
    ctx.load_cert_chain(user["client-certificate"], user["client-key"])
    try:
        with urllib.request.urlopen(f"{state.api}/readyz", timeout=timeout, context=ctx) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def healthy(state: State) -> bool:
    return all(r["running"] for r in component_status(state) if "pid" in r) and api_ready(state)


PACKAGED_STACKS = Path(__file__).resolve().parent / "stack"


def stacks_dir_for(stack: str, stacks_dir: Path | None) -> Path:
    """The project's stacks (Pulumi.yaml's stackConfigDir), else, for the sandbox stack, the one
    that ships with tau (stacks/Pulumi.sandbox.yaml links to it), so `tau sandbox up` works from
    any folder."""
    from taugrid.infra.stackfile import find_stacks_dir

    if stacks_dir is not None:
        return stacks_dir
    try:
        return find_stacks_dir()
    except TauError:
        if stack == STACK:
            return PACKAGED_STACKS
        raise


MAX_REAL_NODES = 3
# one where the machine can run it (else 0, with the reason): CPU runs execute, and Ray clusters
# whose pods are all on real nodes are real (the sandbox's KubeRay operator talks to their head);
# GPU runs stay on KWOK. Every caller that wants a speed or a shape says --real-nodes N.
DEFAULT_REAL_NODES = 1


def real_nodes_wanted(asked: int | None, cfg: PlatformConfig) -> tuple[int, str | None]:
    """How many real nodes to start, and why none where the default could not be had. Asked
    for explicitly, a machine that cannot run them is an error; by default, a note."""
    from taugrid.sandbox import realnodes

    if asked is not None and not 0 <= asked <= MAX_REAL_NODES:
        raise TauError(f"--real-nodes {asked}: 0 to {MAX_REAL_NODES}", exit_code=EXIT_USAGE)
    n = DEFAULT_REAL_NODES if asked is None else asked
    if n == 0:
        return 0, None
    why = realnodes.can_run()
    if why is None and not cfg.cpuPools:
        why = "the stack declares no CPU pool for them"
    if why is not None:
        if asked is not None:
            raise TauError(
                f"real nodes cannot start here: {why}",
                exit_code=EXIT_PLATFORM,
                hint="tau sandbox up --real-nodes 0 (KWOK only)",
            )
        return 0, why
    return n, None


def up(
    say: Say,
    stack: str = STACK,
    stacks_dir: Path | None = None,
    platform: bool = True,
    real_nodes: int | None = None,
    clusters: int = 1,
) -> tuple[State, bool]:
    """Start the sandbox (or find it running). Returns (state, started_now).

    Without `platform`, only the cluster: control plane, KWOK nodes shaped like the stack's
    pools, the external components (Kueue, KubeRay and their CRDs) and the members'
    identities; the platform objects are then `tau platform up --stack sandbox`'s to create.
    `real_nodes` (default DEFAULT_REAL_NODES): the stack's first CPU pool as real
    nodes (kubelet, containerd, runc; realnodes.py) instead of KWOK's. `clusters` > 1: a
    MultiKueue manager and its workers (multicluster.py); real nodes, when asked for, are the
    workers' (each gets `real_nodes`), since a manager runs no run's pods."""
    from taugrid.sandbox import multicluster as MCS
    from taugrid.sandbox.controlplane import NOT_BUILT, binaries_dir

    if not 1 <= clusters <= MCS.MAX_CLUSTERS:
        raise TauError(f"--clusters {clusters}: 1 to {MCS.MAX_CLUSTERS}", exit_code=EXIT_USAGE)
    if clusters > 1 and real_nodes is None:
        real_nodes = 0  # three control planes on a small machine: KWOK unless asked

    existing = State.read()
    if existing is not None:
        same = (
            existing.stack == stack
            and existing.platform == platform
            and (real_nodes is None or existing.real_node_count() == real_nodes)
            and len(existing.workers) + 1 == clusters
        )
        if same and healthy(existing):
            return existing, False
        say("the sandbox is partly down or asked for differently: stopping it, then starting it")
        down(say)
    _need_clients()
    bin_dir = binaries_dir()
    if bin_dir is None:
        raise TauError(NOT_BUILT, exit_code=EXIT_PLATFORM, hint="make controlplane")
    work = sandbox_dir()
    cfg = validated(stack, stacks_dir_for(stack, stacks_dir))
    n_real, why_not = real_nodes_wanted(real_nodes, cfg)
    cfg = with_registries(cfg, work)
    cfg = for_real_nodes(cfg) if n_real else without_real_nodes(cfg)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    t0 = time.monotonic()
    state = _start(bin_dir, work, cfg, stack, say, platform, n_real, MCS.worker_names(clusters))
    if why_not:
        state.skipped["real nodes"] = why_not
    state.write()
    say(f"sandbox up in {time.monotonic() - t0:.0f}s")
    return state, True


def _start(
    bin_dir: Path,
    work: Path,
    cfg: PlatformConfig,
    stack: str,
    say: Say,
    platform: bool,
    n_real: int,
    names: list[str],
) -> State:
    """The workers (`names`, each its own control plane and `n_real` real nodes), then the
    cluster itself (their MultiKueue manager when there are workers, without real nodes: its
    runs' pods run on the workers); on any failure, everything started stops."""
    from taugrid.sandbox import multicluster as MCS
    from taugrid.sandbox import realnodes
    from taugrid.sandbox.controlplane import ControlPlane

    cp = ControlPlane(bin_dir=bin_dir, work=work)
    workers: dict[str, tuple[ControlPlane, State]] = {}
    try:
        for name in names:  # first: the manager's Secrets are made from what they publish
            wcp = ControlPlane(bin_dir=bin_dir, work=work / "workers" / name)
            wcp.work.mkdir(parents=True)
            workers[name] = (wcp, _start_worker(wcp, cfg, name, stack, say, platform, n_real))
        say(
            "starting etcd, kube-apiserver, controller-manager, scheduler and KWOK on 127.0.0.1 ..."
        )
        cp.start()
        mcfg = MCS.manager_config(cfg, names) if names else cfg
        registries = {n: w.registries for n, (_, w) in workers.items()}
        state = _install(cp, mcfg, stack, say, platform, 0 if names else n_real, registries)
        if names:
            _wire_workers(cp, mcfg, workers, state, platform, say)
    except BaseException:
        cp.stop()
        for wcp, _ in workers.values():
            wcp.stop()
        for folder in _node_folders(work):
            realnodes.stop_nodes(folder, realnodes.load_network(folder))
        raise
    return state


def _node_folders(work: Path) -> list[Path]:
    """The folders whose real nodes (if any) are this sandbox's: its own and each worker's."""
    workers = work / "workers"
    return [*(sorted(workers.iterdir()) if workers.is_dir() else []), work]  # its own last


def _start_worker(
    cp: Any, cfg: PlatformConfig, name: str, stack: str, say: Say, platform: bool, n_real: int
) -> State:
    """A MultiKueue worker: its own control plane and real nodes, the same stack as a worker."""
    from taugrid.sandbox import multicluster as MCS

    def said(line: str) -> None:
        say(f"{name}: {line}")

    said("starting its control plane on 127.0.0.1 ...")
    cp.start()
    return _install(cp, MCS.worker_config(cfg, cp.url, name), stack, said, platform, n_real)


def _wire_workers(
    cp: Any,
    cfg: PlatformConfig,
    workers: dict[str, tuple[Any, State]],
    state: State,
    platform: bool,
    say: Say,
) -> None:
    """The manager's MultiKueue objects (a kubeconfig Secret per worker from its token), each
    identity's contexts for the workers, the workers' processes in the state."""
    from taugrid.components import multikueue as MK
    from taugrid.sandbox import multicluster as MCS
    from taugrid.sandbox.controlplane import apply

    if platform:
        kubeconfigs = {n: MCS.worker_kubeconfig(n, wcp) for n, (wcp, _) in workers.items()}
        kube = cp.kube()
        for obj in MK.manager_objects(cfg, kubeconfigs):
            apply(kube, obj)
        say(f"MultiKueue: this cluster dispatches to {', '.join(workers)}")
    MCS.add_worker_contexts(state.kubeconfigs, {n: w.kubeconfigs for n, (_, w) in workers.items()})
    for name, (_, w) in workers.items():
        state.pids.update({f"{name}/{c}": pid for c, pid in w.pids.items()})
        state.skipped.update({f"{name}/{c}": why for c, why in w.skipped.items()})
        state.workers[name] = {
            "api": w.api,
            "nodes": w.nodes,
            "real_nodes": w.real_nodes,
            "admin": w.kubeconfigs["admin"],
        }


def with_registries(cfg: PlatformConfig, work: Path) -> PlatformConfig:
    """Each workspace without a declared data registry gets one in the sandbox's folder (its
    KWOK pods run no containers, so nothing reads it in a pod; submissions copy a run's inputs
    there, as they would into a real workspace's registry). With real nodes it becomes the
    workspace volume's own folder once the volume is bound (`_registries_on_volumes`)."""
    workspaces = []
    for ws in cfg.workspaces:
        if not ws.storage.registry:
            folder = (work / "registries" / ws.name).as_uri()
            storage = ws.storage.model_copy(update={"registry": folder})
            ws = ws.model_copy(update={"storage": storage})
        workspaces.append(ws)
    return cfg.model_copy(update={"workspaces": workspaces})


VOLUME_BOUND_TIMEOUT_S = 60.0  # a workspace's claim bound by the host-path provisioner


def _registries_on_volumes(kube: Kube, cfg: PlatformConfig, work: Path, say: Say) -> PlatformConfig:
    """With real nodes, pods read a workspace's registry at /data/registry on its volume: each
    workspace that got a sandbox folder as its registry (`with_registries`) gets its volume's
    own `registry` folder instead (the host-path provisioner's folder, on this machine), so what
    a submission copies there is what the run's pod reads."""
    from taugrid.api import naming

    workspaces = []
    for ws in cfg.workspaces:
        if ws.storage.registry == (work / "registries" / ws.name).as_uri():
            path = _volume_path(kube, ws.ns, naming.workspace_pvc(ws.name))
            folder = Path(path) / C.REGISTRY_SUBDIR
            folder.mkdir(parents=True, exist_ok=True)
            ws = ws.model_copy(
                update={"storage": ws.storage.model_copy(update={"registry": folder.as_uri()})}
            )
            say(f"workspace {ws.name}: its registry is its volume's /data/registry ({folder})")
        workspaces.append(ws)
    return cfg.model_copy(update={"workspaces": workspaces})


def _volume_path(kube: Kube, namespace: str, claim: str) -> str:
    """The host folder of a claim's volume, once the provisioner has bound it."""
    deadline = time.monotonic() + VOLUME_BOUND_TIMEOUT_S
    while True:
        got = kube.get("PersistentVolumeClaim", claim, namespace) or {}
        volume = (got.get("spec") or {}).get("volumeName")
        if volume and (got.get("status") or {}).get("phase") == "Bound":
            pv = kube.get("PersistentVolume", volume) or {}
            path = ((pv.get("spec") or {}).get("hostPath") or {}).get("path")
            if path:
                return str(path)
        if time.monotonic() >= deadline:
            raise TauError(
                f"the workspace volume {namespace}/{claim} was not bound in "
                f"{VOLUME_BOUND_TIMEOUT_S:.0f} s (the controller-manager's host-path provisioner)",
                exit_code=EXIT_PLATFORM,
                hint="tau sandbox status; its log: kube-controller-manager.log in the sandbox "
                "folder",
            )
        time.sleep(0.2)  # the provisioner's binding: a few seconds


def for_real_nodes(cfg: PlatformConfig) -> PlatformConfig:
    """The stack as real nodes run it: the images tau.yaml files name (Ray's, Python's) run as
    the runtime image built here (`make images`; nothing is pulled; the stack's own mirrors come
    first), and a Ray head sized for this machine (the stack's own `rayHead` where it sets one):
    the default head asks for 2 cores, the whole of a 2-core machine."""
    from taugrid.api.profiles import ImageMirror
    from taugrid.sandbox.realnodes import built_images

    update: dict[str, Any] = {}
    if "rayHead" not in cfg.model_fields_set:
        update["rayHead"] = SANDBOX_HEAD
    built = built_images() or {}
    runtime = built.get("runtime_ref")
    if runtime:
        torch = built.get("torch_ref")
        ours = [ImageMirror(match=m, image=torch) for m in SANDBOX_TORCH] if torch else []
        ours += [ImageMirror(match=m, image=runtime) for m in SANDBOX_MIRRORED]
        update["imageMirrors"] = [*cfg.imageMirrors, *ours]
        # the real nodes pull nothing: an image none of these covers is refused at submission
        # rather than left in ImagePullBackOff
        update["imageMirrorsOnly"] = True
        if "workspaceFiles" not in cfg.model_fields_set and cfg.cpuPools:
            # each workspace's file server on the real nodes (python3 is in the runtime image)
            real = {C.LABEL_POOL: cfg.cpuPools[0].name}
            update["workspaceFiles"] = WorkspaceFiles(image=runtime, nodeSelector=real)
    return cfg.model_copy(update=update)


def without_real_nodes(cfg: PlatformConfig) -> PlatformConfig:
    """KWOK's pods run nothing: a workspace file server there would be a pod that never answers
    (and the API server would wait on its address), so the stack's is left out, and tau says
    that the volume cannot be read from here."""
    if "workspaceFiles" in cfg.model_fields_set:
        return cfg
    return cfg.model_copy(update={"workspaceFiles": WorkspaceFiles(enabled=False)})


# what the runtime image stands in for on real nodes (Debian, python3, Ray, numpy)
SANDBOX_MIRRORED = (
    "rayproject/ray:*",
    "rayproject/ray-ml:*",
    "python:3*",
    # AKS's AI runtime (Ray with CUDA): the default GPU image, the quickstart's; on the
    # sandbox's CPU nodes (a RayJob's head) Ray alone stands in for it
    "mcr.microsoft.com/aks/ai-runtime/ray:*",
)
# what the torch image stands in for (the runtime image and torch, CPU): torchrun's images
SANDBOX_TORCH = ("pytorch/pytorch:*",)
# a Ray head on a real node of a small machine (it runs the driver, GCS and dashboard: ~0.6 GiB)
SANDBOX_HEAD = HeadSize(cpu="250m", memory="1Gi", cpuLimit="2", memoryLimit="4Gi")


def _start_real_nodes(cp: Any, kube: Kube, pool: CpuPool, n: int, say: Say) -> list[str]:
    from taugrid.sandbox import realnodes as R
    from taugrid.sandbox.controlplane import apply

    images = R.built_images()
    assert images is not None  # real_nodes_wanted checked
    names = [f"{pool.name}-{i}" for i in range(n)]
    say(
        f"starting {n} real node(s) of pool {pool.name}: {', '.join(names)} "
        "(kubelet, containerd, runc, kube-proxy) ..."
    )
    t0 = time.monotonic()
    for obj in R.node_rbac():
        apply(kube, obj)
    net = R.make_network(cp.work, n)
    R.save_network(cp.work, net)
    R.hold_sysctls(net.tag)
    taints = [t.model_dump(mode="json", exclude_none=True) for t in pool_taints(pool)]
    for i, name in enumerate(names):
        R.start_node(cp, net, R.NodeSpec(name, i, pool_labels(pool), taints), images, say)
    R.wait_ready(cp, names, timeout=R.READY_TIMEOUT_S)
    say(f"real node(s) Ready in {time.monotonic() - t0:.0f}s")
    return names


def _install(
    cp: Any,
    cfg: PlatformConfig,
    stack: str,
    say: Say,
    platform: bool,
    n_real: int = 0,
    worker_registries: dict[str, dict[str, str]] | None = None,
) -> State:
    """The sandbox's cluster made whole: CRDs, operators, KWOK and real nodes, the storage,
    the platform's objects (with `platform`), identities and the controller. A manager's
    TauCluster names its workers' registries (`worker_registries`), as its stack would."""
    from taugrid.components import manifests as M
    from taugrid.sandbox.controlplane import apply, crds_dir, install_crds

    skipped: dict[str, str] = {}
    kube = cp.kube()
    crds = crds_dir()
    groups = tuple(g for g in ("kueue", "kuberay") if crds is not None and (crds / g).is_dir())
    say(f"installing CRDs: {', '.join([*(['TauGrid'] if platform else []), *groups])}")
    install_crds(kube, crds or cp.work, groups, taugrid=platform)
    if platform:
        apply(kube, M.namespace(SYSTEM_NAMESPACE))
    skipped.update(_start_operators(cp, groups, say, M.kueue_settings(cfg)))
    real_pool = cfg.cpuPools[0] if n_real and cfg.cpuPools else None
    # GPU nodes register as on AKS, with the validating taint: the controller lifts it once a
    # node passes (without a controller, nothing would: then none)
    validated = platform and cfg.components.controller.enabled
    nodes = _fake_nodes(cp, cfg, real_pool, validated)
    say(f"{len(nodes)} KWOK nodes: {', '.join(nodes)}")
    real = _start_real_nodes(cp, kube, real_pool, n_real, say) if real_pool else []
    objects = _storage_classes(cfg)  # the cluster's storage, always
    if platform:
        objects += _platform_objects(cfg, stack, worker_registries)
    for obj in _ordered(objects):  # namespaces and volumes first
        apply(kube, obj)
    if platform and real:
        # the sandbox's own folder (`with_registries`), for a worker too (its work is below it)
        cfg = _registries_on_volumes(kube, cfg, sandbox_dir(), say)
        apply(kube, M.tau_cluster(cfg, stack, worker_registries))
    _alias_context(cp.admin.kubeconfig, cfg)
    identities = _identities(cp, cfg, platform)
    ctl = cfg.components.controller
    if platform and ctl.enabled:
        _start_controller(cp, cfg, kube, say)
    elif ctl.enabled:
        skipped["controller"] = f"no platform objects yet (tau platform up --stack {stack})"
    say(_installed(cfg, stack, platform))
    return State(
        stack=stack,
        api=cp.url,
        started_at=time.time(),
        pids=cp.pids(),
        kubeconfigs=identities,
        nodes=nodes,
        real_nodes=real,
        skipped=skipped,
        platform=platform,
        registries=workspace_registries(cfg),
    )


def _installed(cfg: PlatformConfig, stack: str, platform: bool) -> str:
    if platform:
        return (
            f"platform objects of stack {stack!r}: {len(cfg.workspaces)} workspace(s), "
            f"{len(cfg.queues.clusterQueues)} ClusterQueue(s)"
        )
    return f"no platform objects: `tau platform up --stack {stack}` creates them"


def _platform_objects(
    cfg: PlatformConfig, stack: str, worker_registries: dict[str, dict[str, str]] | None = None
) -> list[dict[str, Any]]:
    """What the platform program applies, as plain objects: queues, the cluster's profile,
    the shared RBAC and every workspace."""
    from taugrid.components import controller_manifests as CM
    from taugrid.components import manifests as M
    from taugrid.components import multikueue as MK

    objects = [
        *M.kueue_objects(cfg),
        *CM.validation_objects(cfg),
        M.tau_cluster(cfg, stack, worker_registries),
        M.researcher_read_clusterrole(),
        *M.quota_approver_objects(cfg),
        *MK.worker_objects(cfg),  # a MultiKueue worker's (none elsewhere)
    ]
    for ws in cfg.workspaces:
        objects += M.workspace_objects(cfg, ws)
    return objects


def _start_operators(
    cp: Any, groups: tuple[str, ...], say: Say, kueue_config: dict[str, Any]
) -> dict[str, str]:
    """Kueue (with the stack's fair sharing) and the KubeRay operator, out of cluster, where
    their CRDs and binaries are; what was not started, with why."""
    out: dict[str, str] = {}
    if "kueue" in groups and cp.has_kueue:
        say("starting Kueue (out of cluster, webhooks on 127.0.0.1) ...")
        cp.start_kueue(C.LABEL_WORKSPACE, rayjobs="kuberay" in groups, extra=kueue_config)
    else:
        out["kueue"] = (
            "not built (make controlplane)"
            if "kueue" not in groups or not (cp.bin_dir / "kueue").is_file()
            else "needs root and `unshare` (its metrics certificate path is fixed)"
        )
    if cp.has_kuberay and "kuberay" in groups:
        say("starting the KubeRay operator (out of cluster) ...")
        cp.start_kuberay()
    else:
        out["kuberay"] = "not built (make controlplane)"
    return out


def _fake_nodes(
    cp: Any, cfg: PlatformConfig, real_pool: CpuPool | None, validated: bool = False
) -> list[str]:
    """A KWOK node for each node a pool may have (the real nodes' pool left out), of the
    pool's allocatable size, labels and taints (with `validated`, its registration taints)."""
    nodes = []
    pools: list[GpuPool | CpuPool] = [*cfg.gpuPools, *cfg.cpuPools]
    for pool in pools:
        if pool is real_pool:
            continue
        size = pool.node_allocatable()
        gpus = (pool.gpus() or 0) if isinstance(pool, GpuPool) else 0
        for i in range(max(pool.maxCount, 1)):
            name = f"{pool.name}-{i}"
            cp.add_fake_node(
                name,
                gpus=gpus,
                labels={**pool_labels(pool), **gpu_operator_labels(pool)},
                taints=[
                    t.model_dump(mode="json", exclude_none=True)
                    for t in [*pool_taints(pool), *(registration_taints(pool) if validated else [])]
                ],
                cpu=str(size.cpu) if size else "8",
                memory=str(size.memory) if size else "32Gi",
            )
            nodes.append(name)
    return nodes


# What the GPU Operator's feature discovery would label a simulated GPU node with, by GPU family
# (the product names its labels carry on Azure's VM sizes).
SIMULATED_PRODUCTS = {
    "a100": "NVIDIA-A100-SXM4-{gb}GB",
    "h100": "NVIDIA-H100-{gb}GB-HBM3",
    "h200": "NVIDIA-H200",
    "a10": "NVIDIA-A10",
    "t4": "Tesla-T4",
}
SIMULATED_DRIVER = "550"


def gpu_operator_labels(pool: GpuPool | CpuPool) -> dict[str, str]:
    """A simulated GPU node's labels as the GPU Operator sets them (product, count, driver), so
    `tau cluster validate nodes` sees it as a real one; none for a CPU pool or an unknown class."""
    from taugrid.api import gpuhealth as G

    cls = pool.gpu_class() if isinstance(pool, GpuPool) else None
    if not cls or not isinstance(pool, GpuPool):
        return {}
    import re

    family = re.match(r"[a-z]+\d+", cls)
    memory = re.search(r"(\d+)gb", cls)
    product = SIMULATED_PRODUCTS.get(family.group(0)) if family else None
    if product is None:
        return {}
    return {
        G.GFD_PRODUCT: product.format(gb=memory.group(1) if memory else "80"),
        G.GFD_COUNT: str(pool.gpus() or 0),
        G.GFD_DRIVER_MAJOR: SIMULATED_DRIVER,
    }


def _identities(cp: Any, cfg: PlatformConfig, platform: bool) -> dict[str, str]:
    """A kubeconfig for the admin, each workspace member (a group's: one member of it) and
    each platform admin."""
    identities = {"admin": str(cp.admin.kubeconfig)}
    members = [m for ws in cfg.workspaces for m in ws.members]
    for m in [*members, *(cfg.admins if platform else [])]:
        if m.kind == "User":
            identities.setdefault(m.name, str(cp.add_identity(m.name).kubeconfig))
        elif m.kind == "Group":
            who = f"{m.name}-member"
            identities.setdefault(who, str(cp.add_identity(who, (m.name,)).kubeconfig))
    return identities


def _start_controller(cp: Any, cfg: PlatformConfig, kube: Kube, say: Say) -> None:
    """The controller out of cluster, as its ServiceAccount (a certificate with the account's
    user name) bound to the least-privilege ClusterRole the platform deploys it with: what it
    may do here is what it may do in a cluster."""
    import yaml

    from taugrid.components import controller_manifests as CM
    from taugrid.sandbox.controlplane import apply

    for obj in [*CM.controller_rbac(), *CM.manager_access(cfg)]:
        apply(kube, obj)
    who = cp.add_identity(CM.CONTROLLER, ("system:serviceaccounts",), user=CM.CONTROLLER_USER)
    say("starting the simulated DCGM exporter of the GPU nodes ...")
    settings = cp.work / "controller.yaml"
    settings.write_text(yaml.safe_dump(CM.controller_settings(cfg, cp.start_dcgm_sim())))
    say("starting the TauGrid controller (out of cluster) ...")
    cp.start_controller(who.kubeconfig, settings)


def _alias_context(kubeconfig: Path, cfg: PlatformConfig) -> None:
    """The admin kubeconfig also answers to the stack's `cluster.context`, so the stack's
    Kubernetes provider (`tau platform up --stack sandbox`) finds the sandbox by that name."""
    context = getattr(cfg.cluster, "context", None)
    doc = json.loads(kubeconfig.read_text())
    if not context or any(c["name"] == context for c in doc["contexts"]):
        return
    doc["contexts"].append({"name": context, "context": dict(doc["contexts"][0]["context"])})
    kubeconfig.write_text(json.dumps(doc))


_ORDER = {
    "Namespace": 0,
    "StorageClass": 1,
    "ResourceFlavor": 2,
    "Cohort": 2,
    "WorkloadPriorityClass": 2,
    "ClusterQueue": 3,
}


def _ordered(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(objects, key=lambda o: _ORDER.get(o["kind"], 5))


DEFAULT_CLASS = "standard"


def _storage_classes(cfg: PlatformConfig) -> list[dict[str, Any]]:
    """The storage classes the stack's workspaces name, as the cluster's own infrastructure
    (like AKS's built-in classes): provisioned by the controller-manager's host-path
    provisioner, so each PVC gets a fresh volume, also after `tau platform destroy` and `up`."""
    names = sorted({ws.storage.storageClass or DEFAULT_CLASS for ws in cfg.workspaces})
    return [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": name,
                "labels": {C.LABEL_MANAGED_BY: "tau-sandbox"},
                # a workspace that names no class gets the cluster's default, as on AKS
                **(
                    {"annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}
                    if name == DEFAULT_CLASS
                    else {}
                ),
            },
            "provisioner": "kubernetes.io/host-path",
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
        }
        for name in names
    ]


def down(say: Say) -> State | None:
    """Stop every process the sandbox started and remove its state. None: it was not up."""
    from taugrid.sandbox import realnodes
    from taugrid.sandbox.controlplane import stop_process_groups

    state = State.read()
    if state is None:
        return None
    work = sandbox_dir()
    volumes = [
        *volume_dirs(state.kubeconfigs["admin"]),
        *(d for w in state.workers.values() for d in volume_dirs(w["admin"])),
    ]
    stop_process_groups(list(state.pids.values()))
    for folder in _node_folders(work):
        realnodes.stop_nodes(folder, realnodes.load_network(folder))
    for folder in volumes:
        shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    say(f"stopped {len(state.pids)} sandbox process(es)")
    return state


def volume_dirs(admin_kubeconfig: str) -> list[Path]:
    """The folders the host-path provisioner made for this sandbox's volumes (under /tmp; its
    own deleter runs only when a claim is deleted). Only this sandbox's: /tmp/hostpath_pv may
    also hold another sandbox's, or one a killed sandbox never removed."""
    try:
        from taugrid.kube.client import Kube

        kube = Kube(kubeconfig=admin_kubeconfig)
        items = kube.list("PersistentVolume")
    except Exception:  # the API server is gone: nothing to ask it
        return []
    paths = [str(((pv.get("spec") or {}).get("hostPath") or {}).get("path") or "") for pv in items]
    return [Path(p) for p in paths if p.startswith("/tmp/hostpath")]


def kubeconfig(who: str = "admin") -> Path:
    state = State.read()
    if state is None:
        raise TauError("the sandbox is not up", exit_code=EXIT_PLATFORM, hint="tau sandbox up")
    if who == "researcher":
        who = next((n for n in state.kubeconfigs if n != "admin"), "admin")
    if who not in state.kubeconfigs:
        known = ", ".join(["researcher", *state.kubeconfigs])
        raise TauError(f"no sandbox identity {who!r}; identities: {known}", exit_code=EXIT_USAGE)
    return Path(state.kubeconfigs[who])


def admin_kube() -> Kube:
    """The project's client as the sandbox's admin (its knobs: `tau sandbox gpu`)."""
    from taugrid.kube.client import Kube

    return Kube(kubeconfig=kubeconfig("admin"))
