"""What the platform declaration publishes to the cluster (the TauCluster's spec, and the
profile snapshot `tau` reads offline): each GPU pool's declaration, the workspaces with their
teams, the teams, and the prices per pool. Pure: a PlatformConfig in, models out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from taugrid.api import constants as C
from taugrid.api import naming
from taugrid.api.gpuactive import nccl_floor
from taugrid.api.gpuhealth import PoolDeclaration
from taugrid.api.platform import VM_SIZES, GpuPool, PlatformConfig, derive_profiles, gpu_driver
from taugrid.api.profiles import WorkspaceRef, profile_set_hash
from taugrid.api.teams import PoolPrice, PriceTable, TeamRef


def pool_declarations(cfg: PlatformConfig) -> list[PoolDeclaration]:
    """What each GPU pool's nodes should be, as the cluster is told (`TauCluster.spec.pools`)."""
    return [
        PoolDeclaration(
            name=gp.name,
            vmSize=gp.vmSize,
            gpusPerNode=gp.gpus() or 0,
            gpuClass=gp.gpu_class(),
            migProfile=gp.migProfile,
            gpuOperator=cfg.components.gpuOperator.enabled,
            driverByOperator=gpu_driver(cfg, gp) == "none",
            active=gp.validation.active,
            diagLevel=gp.validation.diagLevel,
            ncclFloorGBps=nccl_floor(gp.vmSize, gp.validation.ncclFloorGBps),
        )
        for gp in cfg.gpuPools
    ]


def workspace_refs(
    cfg: PlatformConfig, worker_registries: Mapping[str, Mapping[str, str]] | None = None
) -> list[WorkspaceRef]:
    """The workspaces as runs see them; on a MultiKueue manager, with the registry each worker
    has for the same workspace (`worker_registries`: worker -> workspace -> registry)."""
    return [
        WorkspaceRef(
            name=w.name,
            namespace=w.ns,
            pvc=naming.workspace_pvc(w.name),
            serviceAccount=naming.RUN_SERVICE_ACCOUNT,
            registry=w.storage.registry,
            team=w.team,
            workerRegistries={
                worker: regs[w.name]
                for worker, regs in sorted((worker_registries or {}).items())
                if (regs or {}).get(w.name)
            }
            or None,
        )
        for w in cfg.workspaces
    ]


def workspace_registries(cfg: PlatformConfig) -> dict[str, str]:
    """Each workspace's declared data registry (what a stack publishes for its manager)."""
    return {w.name: w.storage.registry for w in cfg.workspaces if w.storage.registry}


def price_table(cfg: PlatformConfig) -> PriceTable | None:
    """The stack's prices per pool: what a GPU or a core of each pool costs an hour."""
    if cfg.prices is None:
        return None
    pools: dict[str, PoolPrice] = {}
    for pool in [*cfg.gpuPools, *cfg.cpuPools]:
        price = cfg.prices.perNodeHour.get(pool.vmSize)
        size = VM_SIZES.get(pool.vmSize)
        if price is None:
            continue
        gpus = (pool.gpus() or 0) if isinstance(pool, GpuPool) else 0
        pools[pool.name] = PoolPrice(
            vmSize=pool.vmSize,
            perNodeHour=price,
            gpusPerNode=gpus,
            cpusPerNode=max(1, size[0]) if size else 1,
        )
    return PriceTable(currency=cfg.prices.currency, pools=pools)


def team_refs(cfg: PlatformConfig) -> list[TeamRef]:
    return [
        TeamRef(
            name=t.name,
            weight=t.weight,
            queues=t.owned(),
            workspaces=[w.name for w in cfg.workspaces if w.team == t.name],
        )
        for t in cfg.teams
    ]


def profile_snapshot(cfg: PlatformConfig, stack: str) -> dict[str, Any]:
    """What `tau run render --profiles` reads: the same data the TauCluster publishes."""
    profiles = derive_profiles(cfg)
    return {
        "apiVersion": C.API_VERSION,
        "kind": "TauWorkloadProfileSnapshot",
        "cluster": stack,
        "profileSetHash": profile_set_hash(profiles),
        **({"defaultWorkspace": cfg.defaultWorkspace} if cfg.defaultWorkspace else {}),
        "workspaces": [w.model_dump(mode="json", exclude_none=True) for w in workspace_refs(cfg)],
        "profiles": [p.model_dump(mode="json", exclude_none=True) for p in profiles],
    }


def queue_signature(cfg: PlatformConfig) -> dict[str, dict[str, Any]]:
    """What a cluster's queues are, to compare a MultiKueue manager's with a worker's: per
    ClusterQueue, its cohort, its team's weight, and each (pool, resource) nominal quota."""
    from taugrid.api.quantity import canonical

    out: dict[str, dict[str, Any]] = {}
    for cq in cfg.queues.clusterQueues:
        team = cfg.team_of_queue(cq.name)
        sig: dict[str, Any] = {"cohort": cq.cohort or cfg.queues.cohort}
        if team is not None:
            sig["weight"] = team.weight
        for fq in cq.flavors:
            for res, q in fq.nominalQuota.items():
                sig[f"quota of {res} on {fq.pool}"] = canonical(q)
        out[cq.name] = sig
    return out
