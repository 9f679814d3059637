"""GpuOperator: the NVIDIA GPU Operator (driver, toolkit, device plugin, GFD, MIG manager, DCGM exporter)."""

from __future__ import annotations

import pulumi

from taugrid.api.platform import CHARTS, PlatformConfig
from taugrid.components.kube import helm_release
from taugrid.components.manifests import gpu_operator_values


class GpuOperator(pulumi.ComponentResource):
    def __init__(self, name: str, cfg: PlatformConfig, provider: pulumi.ProviderResource,
                 depends_on: list[pulumi.Resource] | None = None, opts: pulumi.ResourceOptions | None = None) -> None:  # fmt: skip
        super().__init__("taugrid:platform:GpuOperator", name, None, opts)
        version = cfg.components.version("gpuOperator")
        self.release = helm_release(
            "gpu-operator",
            CHARTS["gpuOperator"],
            version,
            gpu_operator_values(cfg),
            self,
            provider,
            depends_on,
        )
        self.register_outputs(
            {"version": version, "installDriver": cfg.components.gpuOperator.installDriver}
        )
