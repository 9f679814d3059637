"""GpuNodePool (and CpuNodePool): an AKS agent pool carrying TauGrid's labels and taints.

GPU pools are tainted `sku=gpu:NoSchedule` and labelled with the pool and GPU class; the AKS
driver install is skipped (`gpuProfile.driver: None`) when the GPU Operator installs the driver.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_azure_native.containerservice as CS

from taugrid.api.platform import (
    CpuPool,
    GpuPool,
    pool_labels,
    pool_taints,
    registration_taints,
)


def _agent_pool(
    component: pulumi.ComponentResource,
    pool: GpuPool | CpuPool,
    cluster: CS.ManagedCluster,
    resource_group: pulumi.Input[str],
    provider: pulumi.ProviderResource,
    driver: str | None,
) -> CS.AgentPool:
    extra: dict[str, Any] = {}
    if pool.spot:
        extra.update(
            scale_set_priority=CS.ScaleSetPriority.SPOT,
            scale_set_eviction_policy=CS.ScaleSetEvictionPolicy.DELETE,
            spot_max_price=-1,
        )
    if driver is not None:
        extra["gpu_profile"] = CS.GPUProfileArgs(
            driver=CS.GPUDriver.NONE if driver == "none" else CS.GPUDriver.INSTALL
        )
    if isinstance(pool, GpuPool) and pool.migProfile:
        extra["gpu_instance_profile"] = pool.migProfile
    return CS.AgentPool(
        pool.name,
        agent_pool_name=pool.name,
        resource_group_name=resource_group,
        resource_name_=cluster.name,
        mode=CS.AgentPoolMode.USER,
        os_type=CS.OSType.LINUX,
        type=CS.AgentPoolType.VIRTUAL_MACHINE_SCALE_SETS,
        vm_size=pool.vmSize,
        count=pool.minCount,
        min_count=pool.minCount,
        max_count=pool.maxCount,
        enable_auto_scaling=True,
        availability_zones=pool.zones or None,
        node_labels=pool_labels(pool),
        node_taints=[t.render() for t in [*pool_taints(pool), *registration_taints(pool)]],
        os_disk_size_gb=pool.osDiskSizeGB,
        opts=pulumi.ResourceOptions(parent=component, provider=provider),
        **extra,
    )


class GpuNodePool(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        pool: GpuPool,
        driver: str,
        cluster: CS.ManagedCluster,
        resource_group: pulumi.Input[str],
        provider: pulumi.ProviderResource,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("taugrid:platform:GpuNodePool", name, None, opts)
        self.agent_pool = _agent_pool(self, pool, cluster, resource_group, provider, driver)
        self.register_outputs(
            {"name": self.agent_pool.name, "vmSize": pool.vmSize, "gpuDriver": driver}
        )


class CpuNodePool(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        pool: CpuPool,
        cluster: CS.ManagedCluster,
        resource_group: pulumi.Input[str],
        provider: pulumi.ProviderResource,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("taugrid:platform:CpuNodePool", name, None, opts)
        self.agent_pool = _agent_pool(self, pool, cluster, resource_group, provider, None)
        self.register_outputs({"name": self.agent_pool.name, "vmSize": pool.vmSize})
