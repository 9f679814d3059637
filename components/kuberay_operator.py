"""KubeRayOperator: the KubeRay operator (RayJob, RayCluster)."""

from __future__ import annotations

import pulumi

from taugrid.api.platform import CHARTS, PlatformConfig
from taugrid.components.kube import helm_release
from taugrid.components.manifests import kuberay_values


class KubeRayOperator(pulumi.ComponentResource):
    def __init__(self, name: str, cfg: PlatformConfig, provider: pulumi.ProviderResource,
                 depends_on: list[pulumi.Resource] | None = None, opts: pulumi.ResourceOptions | None = None) -> None:  # fmt: skip
        super().__init__("taugrid:platform:KubeRayOperator", name, None, opts)
        version = cfg.components.version("kuberay")
        self.release = helm_release(
            "kuberay-operator",
            CHARTS["kuberay"],
            version,
            kuberay_values(cfg),
            self,
            provider,
            depends_on,
        )
        self.register_outputs({"version": version})
