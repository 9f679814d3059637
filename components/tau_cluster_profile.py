"""TauClusterProfile: the TauCluster object that publishes the workload profiles `tau` resolves
against."""

from __future__ import annotations

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
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("taugrid:platform:TauClusterProfile", name, None, opts)
        objs = [
            tau_cluster(cfg, stack),
            researcher_read_clusterrole(),
            *quota_approver_objects(cfg),
        ]
        self.objects = config_group("tau-cluster", objs, self, provider, depends_on)
        self.profiles = [p.name for p in derive_profiles(cfg)]
        self.register_outputs({"profiles": self.profiles})
