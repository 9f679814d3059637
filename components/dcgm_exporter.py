"""DcgmExporter: GPU metrics, from the GPU Operator's exporter or the standalone chart (never both)."""

from __future__ import annotations

import pulumi

from taugrid.api.platform import CHARTS, PlatformConfig
from taugrid.components.kube import helm_release
from taugrid.components.manifests import dcgm_exporter_values


class DcgmExporter(pulumi.ComponentResource):
    def __init__(self, name: str, cfg: PlatformConfig, provider: pulumi.ProviderResource,
                 depends_on: list[pulumi.Resource] | None = None, opts: pulumi.ResourceOptions | None = None) -> None:  # fmt: skip
        super().__init__("taugrid:platform:DcgmExporter", name, None, opts)
        spec = cfg.components.dcgmExporter
        self.release = None
        if spec.source == "standalone":
            version = cfg.components.version("dcgmExporter")
            self.release = helm_release(
                "dcgm-exporter",
                CHARTS["dcgmExporter"],
                version,
                dcgm_exporter_values(cfg),
                self,
                provider,
                depends_on,
            )
        # source: operator -> the GpuOperator release runs it (dcgmExporter.enabled in its values)
        self.register_outputs({"source": spec.source})
