"""The platform declaration's rules that span several components: one function per rule, each
yielding its problems with their key paths (the models in api/platform.py check each field on
its own). `invariants` runs them all, in order."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from decimal import Decimal

from taugrid.api import constants as C
from taugrid.api.issues import Issue
from taugrid.api.platform import (
    CHARTS,
    VM_SIZES,
    ClusterQueueSpec,
    ComponentBase,
    CpuPool,
    FlavorQuota,
    GpuPool,
    PlatformConfig,
    Quantity,
)
from taugrid.api.quantity import (
    MAX_QUOTA_CPUS,
    MAX_QUOTA_MEMORY_BYTES,
    QuantityError,
    format_cpu,
    format_memory,
    parse_cpu,
    parse_memory,
)


def _q(v: Quantity, resource: str) -> Decimal:
    """One quantity parser for every quota field: memory and storage as memory, cpu as cores,
    any other resource (GPUs, MIG slices, ...) as a whole number >= 0. QuantityError says why,
    with an example. A quota of 0 is a quota (a team's queue that only borrows)."""
    if not isinstance(v, bool) and re.fullmatch(r"0+(\.0+)?(m|[KMGTPE]i?)?", str(v).strip()):
        return Decimal(0)
    if resource == "memory" or resource.endswith("storage"):
        return Decimal(parse_memory(v, most=MAX_QUOTA_MEMORY_BYTES))
    if resource == "cpu":
        n = parse_cpu(v, most=MAX_QUOTA_CPUS)
        if n < 0:
            raise QuantityError("must be >= 0 cores, e.g. 48")
        return n
    if isinstance(v, bool) or not re.fullmatch(r"[0-9]+", str(v)):
        what = "GPUs" if resource == C.GPU_RESOURCE else f"units of {resource}"
        raise QuantityError(f"must be a whole number of {what} >= 0, e.g. 2")
    return Decimal(str(v))


Rule = Callable[[PlatformConfig], Iterator[Issue]]


def _pools(cfg: PlatformConfig) -> Iterator[tuple[str, int, GpuPool | CpuPool]]:
    for i, gp in enumerate(cfg.gpuPools):
        yield "gpuPools", i, gp
    for i, cp in enumerate(cfg.cpuPools):
        yield "cpuPools", i, cp


def default_workspace_exists(cfg: PlatformConfig) -> Iterator[Issue]:
    if cfg.defaultWorkspace and cfg.defaultWorkspace not in {w.name for w in cfg.workspaces}:
        known = ", ".join(w.name for w in cfg.workspaces) or "(none)"
        yield Issue(
            "defaultWorkspace",
            cfg.defaultWorkspace,
            f"is not one of the workspaces ({known})",
            None,
        )


def pool_names_unique(cfg: PlatformConfig) -> Iterator[Issue]:
    seen: set[str] = set()
    for kind, i, p in _pools(cfg):
        if p.name in seen:
            yield Issue(f"{kind}[{i}].name", p.name, "is used by another pool", None)
        seen.add(p.name)


def _size_unknown(p: GpuPool | CpuPool) -> bool:
    """A size outside the catalog whose shape is not written out either."""
    if p.node_allocatable() is None:
        return True
    return isinstance(p, GpuPool) and (p.gpus() is None or p.gpu_class() is None)


def pool_size_known(cfg: PlatformConfig) -> Iterator[Issue]:
    """A VM size outside the catalog: one problem per pool (no cascade), with the nearest sizes
    of the catalog, and what to write out if the size is right."""
    import difflib

    for kind, i, p in _pools(cfg):
        if not _size_unknown(p):
            continue
        near = difflib.get_close_matches(p.vmSize, list(VM_SIZES), n=3, cutoff=0.6)
        missing = ["allocatable"] if p.node_allocatable() is None else []
        if isinstance(p, GpuPool):
            missing += [
                f for f, v in (("gpusPerNode", p.gpus()), ("gpuClass", p.gpu_class())) if v is None
            ]
        said = f"did you mean {' or '.join(near)}? " if near else ""
        yield Issue(
            f"{kind}[{i}].vmSize",
            p.vmSize,
            f"is not in the VM size catalog: {said}(a size outside it needs "
            f"{', '.join(missing)} written out)",
            near[0] if near else "allocatable: {cpu: 22, memory: 200Gi}",
        )


def cpu_pools_have_no_gpus(cfg: PlatformConfig) -> Iterator[Issue]:
    """A GPU size under cpuPools gets no GPU taint: CPU work would fill the GPU nodes."""
    for i, cp in enumerate(cfg.cpuPools):
        gpus = VM_SIZES.get(cp.vmSize, (0, 0, 0, None))[2]
        if gpus:
            yield Issue(
                f"cpuPools[{i}].vmSize",
                cp.vmSize,
                f"is a GPU size ({gpus} GPU(s) per node): declare it under gpuPools (a CPU "
                "pool is not tainted, so any CPU pod would land on these GPU nodes)",
                "cpuPools: [{name: cpu, vmSize: Standard_D16s_v5}]",
            )


def gpus_match_the_catalog(cfg: PlatformConfig) -> Iterator[Issue]:
    for i, gp in enumerate(cfg.gpuPools):
        catalog = VM_SIZES.get(gp.vmSize)
        if catalog and gp.gpusPerNode is not None and gp.gpusPerNode != catalog[2]:
            yield Issue(
                f"gpuPools[{i}].gpusPerNode",
                gp.gpusPerNode,
                f"contradicts {gp.vmSize}, which has {catalog[2]} GPU(s)",
                None,
            )


def one_driver_installer(cfg: PlatformConfig) -> Iterator[Issue]:
    """GPU Operator installs the driver <=> every GPU pool skips the AKS driver."""
    op = cfg.components.gpuOperator
    for i, gp in enumerate(cfg.gpuPools):
        if op.enabled and op.installDriver and gp.gpuDriver == "install":
            yield Issue(
                f"gpuPools[{i}].gpuDriver",
                "install",
                "the GPU Operator installs the driver (components.gpuOperator.installDriver); the "
                "pool must skip the AKS driver",
                "gpuDriver: none   # or components.gpuOperator.installDriver: false",
            )
        if (not op.enabled or not op.installDriver) and gp.gpuDriver == "none":
            yield Issue(
                f"gpuPools[{i}].gpuDriver",
                "none",
                "nothing would install the NVIDIA driver: AKS skips it and the GPU Operator does "
                "not install it",
                "gpuDriver: install",
            )


def mig_needs_the_operator(cfg: PlatformConfig) -> Iterator[Issue]:
    for i, gp in enumerate(cfg.gpuPools):
        if gp.migProfile and not cfg.components.gpuOperator.enabled:
            yield Issue(
                f"gpuPools[{i}].migProfile",
                gp.migProfile,
                "MIG needs the GPU Operator (mig-manager)",
                None,
            )


def gpu_class_is_one_shape(cfg: PlatformConfig) -> Iterator[Issue]:
    """A GPU class label means one shape (GPUs per node and VM size)."""
    shapes: dict[str, tuple[int | None, str, int]] = {}
    for i, gp in enumerate(cfg.gpuPools):
        cls = gp.gpu_class()
        if cls is None:
            continue
        shape = (gp.gpus(), gp.vmSize)
        if cls in shapes and shapes[cls][:2] != shape:
            first = cfg.gpuPools[shapes[cls][2]]
            yield Issue(
                f"gpuPools[{i}].gpuClass",
                cls,
                f"is also the class of pool {first.name} ({first.vmSize}, {first.gpus()} GPU/node) "
                "with a different shape "
                f"({gp.vmSize}, {gp.gpus()} GPU/node); give each shape its own class",
                f"gpuClass: {cls}-{gp.gpus()}x",
            )
        shapes.setdefault(cls, (*shape, i))


def enabled_components_have_versions(cfg: PlatformConfig) -> Iterator[Issue]:
    for name in ("gpuOperator", "dcgmExporter", "nodeProblemDetector", "kueue", "kuberay"):
        spec: ComponentBase = getattr(cfg.components, name)
        if spec.enabled and not cfg.components.version(name).strip():
            yield Issue(
                f"components.{name}.version",
                spec.version,
                "is empty; an enabled component needs a version",
                f"version: {CHARTS[name].version}",
            )


def dcgm_source_exists(cfg: PlatformConfig) -> Iterator[Issue]:
    dcgm = cfg.components.dcgmExporter
    if dcgm.enabled and dcgm.source == "operator" and not cfg.components.gpuOperator.enabled:
        yield Issue(
            "components.dcgmExporter.source",
            "operator",
            "the GPU Operator is disabled; use source: standalone",
            "source: standalone",
        )


def workspaces_need_kueue(cfg: PlatformConfig) -> Iterator[Issue]:
    if cfg.workspaces and not cfg.components.kueue.enabled:
        yield Issue(
            "components.kueue.enabled",
            False,
            "workspaces submit through Kueue LocalQueues; Kueue must be enabled",
            None,
        )


def queue_names(cfg: PlatformConfig) -> Iterator[Issue]:
    seen: set[str] = set()
    for qi, cq in enumerate(cfg.queues.clusterQueues):
        if cq.name == "default":
            yield Issue(
                f"queues.clusterQueues[{qi}].name",
                cq.name,
                "a LocalQueue named default captures every job of a namespace; pick another name",
                "name: gpu",
            )
        if cq.name in seen:
            yield Issue(
                f"queues.clusterQueues[{qi}].name", cq.name, "is used by another ClusterQueue", None
            )
        seen.add(cq.name)


def _flavors(cfg: PlatformConfig) -> Iterator[tuple[int, ClusterQueueSpec, str, FlavorQuota]]:
    for qi, cq in enumerate(cfg.queues.clusterQueues):
        for fi, fq in enumerate(cq.flavors):
            yield qi, cq, f"queues.clusterQueues[{qi}].flavors[{fi}]", fq


def flavors_name_pools(cfg: PlatformConfig) -> Iterator[Issue]:
    pools = [p.name for _k, _i, p in _pools(cfg)]
    for _qi, _cq, path, fq in _flavors(cfg):
        if fq.pool not in pools:
            yield Issue(
                f"{path}.pool",
                fq.pool,
                f"is not a pool; known: {', '.join(pools) or '(none)'}",
                None,
            )


def borrowing_needs_a_cohort(cfg: PlatformConfig) -> Iterator[Issue]:
    pools = {p.name for _k, _i, p in _pools(cfg)}
    for _qi, cq, path, fq in _flavors(cfg):
        if fq.pool in pools and fq.borrowingLimit and not (cq.cohort or cfg.queues.cohort):
            yield Issue(f"{path}.borrowingLimit", fq.borrowingLimit, "needs a cohort", None)


def flavors_cover_the_same_resources(cfg: PlatformConfig) -> Iterator[Issue]:
    pools = {p.name for _k, _i, p in _pools(cfg)}
    for qi, cq in enumerate(cfg.queues.clusterQueues):
        resources = {frozenset(fq.nominalQuota) for fq in cq.flavors if fq.pool in pools}
        if len(resources) > 1:
            yield Issue(
                f"queues.clusterQueues[{qi}].flavors",
                None,
                "every flavor of a queue must cover the same resources",
                None,
            )


def _format(res: str, amount: Decimal) -> str:
    if res == "memory":
        return format_memory(int(amount))
    return format_cpu(amount) if res == "cpu" else str(amount)


_QUOTA_FIELDS = ("nominalQuota", "borrowingLimit", "lendingLimit")


def quotas_are_quantities(cfg: PlatformConfig) -> Iterator[Issue]:
    """Every quota, borrowing and lending limit parses, per resource (no negative or fractional
    GPUs anywhere), with an example."""
    for _qi, _cq, path, fq in _flavors(cfg):
        for field in _QUOTA_FIELDS:
            for res, amount in (getattr(fq, field) or {}).items():
                try:
                    _q(amount, res)
                except (QuantityError, ArithmeticError, ValueError) as e:
                    example = {"cpu": "48", "memory": "400Gi"}.get(res, "2")
                    yield Issue(f"{path}.{field}.{res}", amount, str(e), f"{res}: {example}")


def quotas_within_capacity(cfg: PlatformConfig) -> Iterator[Issue]:
    """The queues' quotas on a pool fit its maximum capacity; the problem points at the flavor
    that goes over, with the fix (pools of unknown size are left to pool_size_known)."""
    pools = {p.name: p for _k, _i, p in _pools(cfg)}
    used: dict[tuple[str, str], Decimal] = {}
    last: dict[tuple[str, str], str] = {}
    for _qi, _cq, path, fq in _flavors(cfg):
        if fq.pool not in pools or _size_unknown(pools[fq.pool]):
            continue
        for res, amount in fq.nominalQuota.items():
            try:
                used[(fq.pool, res)] = used.get((fq.pool, res), Decimal(0)) + _q(amount, res)
            except (QuantityError, ArithmeticError, ValueError):
                continue  # said by quotas_are_quantities
            last[(fq.pool, res)] = f"{path}.nominalQuota.{res}"
    for (pool_name, res), total in used.items():
        pool = pools[pool_name]
        alloc = pool.node_allocatable()
        cap: Decimal | None = None
        per_node: Decimal | None = None
        if res == C.GPU_RESOURCE:
            per_node = Decimal(pool.gpus() or 0) if isinstance(pool, GpuPool) else Decimal(0)
        elif res == "cpu" and alloc:
            per_node = parse_cpu(alloc.cpu)
        elif res == "memory" and alloc:
            per_node = Decimal(parse_memory(alloc.memory))
        if per_node is not None:
            cap = per_node * pool.maxCount
        if cap is not None and total > cap:
            nodes = -(-total // per_node) if per_node else None
            fix = (
                (
                    f"lower the queues' quota on {pool_name} to {_format(res, cap)} in all, or "
                    "raise "
                    f"maxCount of pool {pool_name} to {nodes}"
                )
                if nodes
                else f"lower the quota on {pool_name}"
            )
            yield Issue(
                last[(pool_name, res)],
                f"{pool_name}/{res}",
                f"nominal quota {_format(res, total)} of {res} on pool {pool_name} exceeds its "
                f"maximum capacity {_format(res, cap)} ({pool.maxCount} nodes)",
                fix,
            )


def workspace_names_unique(cfg: PlatformConfig) -> Iterator[Issue]:
    seen: set[str] = set()
    for wi, ws in enumerate(cfg.workspaces):
        if ws.name in seen:
            yield Issue(f"workspaces[{wi}].name", ws.name, "is used by another workspace", None)
        seen.add(ws.name)


def workspace_queues_exist(cfg: PlatformConfig) -> Iterator[Issue]:
    qnames = {cq.name for cq in cfg.queues.clusterQueues}
    for wi, ws in enumerate(cfg.workspaces):
        for qi, qn in enumerate(ws.queues):
            if qn not in qnames:
                yield Issue(
                    f"workspaces[{wi}].queues[{qi}]",
                    qn,
                    f"is not a ClusterQueue; known: {', '.join(sorted(qnames)) or '(none)'}",
                    None,
                )


def default_priority_exists(cfg: PlatformConfig) -> Iterator[Issue]:
    prio = {p.name for p in cfg.priorityClasses}
    if cfg.defaultPriority and cfg.defaultPriority not in prio:
        yield Issue(
            "defaultPriority",
            cfg.defaultPriority,
            f"is not a priority class; known: {', '.join(sorted(prio))}",
            None,
        )


def teams_are_sound(cfg: PlatformConfig) -> Iterator[Issue]:
    """Team names unique; each team's queues are ClusterQueues that no other team owns, and it
    has at least one workspace; a workspace's team is a declared one."""
    qnames = {cq.name for cq in cfg.queues.clusterQueues}
    names = [t.name for t in cfg.teams]
    owner: dict[str, str] = {}
    for ti, team in enumerate(cfg.teams):
        if names.index(team.name) != ti:
            yield Issue(f"teams[{ti}].name", team.name, "is used by another team", None)
        for qi, qn in enumerate(team.owned()):
            path = f"teams[{ti}].queues[{qi}]" if team.queues else f"teams[{ti}].queues"
            if qn not in qnames:
                yield Issue(
                    path,
                    qn if team.queues else [],
                    f"team {team.name} owns no ClusterQueue {qn}: name its queues "
                    f"(known: {', '.join(sorted(qnames)) or '(none)'}), or declare a ClusterQueue "
                    f"named {team.name}",
                    f"teams: [{{name: {team.name}, weight: 2, queues: [gpu]}}]",
                )
            elif qn in owner:
                yield Issue(
                    path,
                    qn,
                    f"ClusterQueue {qn} is owned by team {owner[qn]} already: a queue is one "
                    "team's quota",
                    None,
                )
            owner.setdefault(qn, team.name)
        if not any(w.team == team.name for w in cfg.workspaces):
            yield Issue(
                f"teams[{ti}]",
                team.name,
                f"team {team.name} has no workspaces: add `team: {team.name}` to the workspaces "
                "of its people, or remove the team",
                f"workspaces: [{{name: vision, team: {team.name}, queues: [gpu]}}]",
            )
    for wi, ws in enumerate(cfg.workspaces):
        if ws.team is not None and ws.team not in names:
            yield Issue(
                f"workspaces[{wi}].team",
                ws.team,
                f"is not a team; known: {', '.join(names) or '(none: declare teams first)'}",
                f"teams: [{{name: {ws.team}, weight: 1}}]",
            )


def prices_cover_the_pools(cfg: PlatformConfig) -> Iterator[Issue]:
    """With a price table, every pool's VM size has a price (else its runs would cost 0)."""
    if cfg.prices is None:
        return
    for key, i, pool in _pools(cfg):
        if pool.vmSize not in cfg.prices.perNodeHour:
            yield Issue(
                f"{key}[{i}].vmSize",
                pool.vmSize,
                f"pool {pool.name}'s VM size has no price in prices.perNodeHour: add it (the "
                "price of one node for one hour), or `tau usage` could not cost its runs",
                f"prices: {{currency: USD, perNodeHour: {{{pool.vmSize}: 3.67}}}}",
            )


RULES: list[Rule] = [
    default_workspace_exists,
    pool_names_unique,
    pool_size_known,
    cpu_pools_have_no_gpus,
    gpus_match_the_catalog,
    one_driver_installer,
    mig_needs_the_operator,
    gpu_class_is_one_shape,
    enabled_components_have_versions,
    dcgm_source_exists,
    workspaces_need_kueue,
    queue_names,
    flavors_name_pools,
    borrowing_needs_a_cohort,
    flavors_cover_the_same_resources,
    quotas_are_quantities,
    quotas_within_capacity,
    workspace_names_unique,
    workspace_queues_exist,
    default_priority_exists,
    teams_are_sound,
    prices_cover_the_pools,
]


def invariants(cfg: PlatformConfig) -> list[Issue]:
    """Cross-component rules (RULES, in order), checked before any resource is declared.
    Empty: consistent."""
    return [issue for rule in RULES for issue in rule(cfg)]
