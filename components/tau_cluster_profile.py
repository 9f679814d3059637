"""TauClusterProfile: the TauCluster object that publishes the workload profiles `tau` resolves
against."""

from __future__ import annotations

from typing import Any

import pulumi

from taugrid.api.platform import PlatformConfig, derive_profiles
from taugrid.components.kube import config_group
from taugrid.components.manifests import (
    quota_approver_objects,
    researcher_read_clusterrole,
    tau_cluster,
)


class TauClusterProfile(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        cfg: PlatformConfig,
        stack: str,
        provider: pulumi.ProviderResource,
        depends_on: list[pulumi.Resource] | None = None,
        worker_registries: pulumi.Output[dict[str, dict[str, str]]] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`worker_registries` (a MultiKueue manager's): each worker's registry per workspace,
        read from the workers' stacks, published with the workspaces."""
        super().__init__("taugrid:platform:TauClusterProfile", name, None, opts)
        rest = [researcher_read_clusterrole(), *quota_approver_objects(cfg)]
        objs: pulumi.Input[list[dict[str, Any]]] = [tau_cluster(cfg, stack), *rest]
        if worker_registries is not None:
            objs = worker_registries.apply(lambda regs: [tau_cluster(cfg, stack, regs), *rest])
        self.objects = config_group("tau-cluster", objs, self, provider, depends_on)
        self.profiles = [p.name for p in derive_profiles(cfg)]
        self.register_outputs({"profiles": self.profiles})
