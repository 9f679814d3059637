"""NodeProblemDetector (opt-in): a GPU XID kernel-log monitor that sets the GPUXidError node condition."""

from __future__ import annotations

import pulumi

from taugrid.api.platform import CHARTS, PlatformConfig
from taugrid.components.kube import helm_release
from taugrid.components.manifests import XID_CONDITION, npd_values


class NodeProblemDetector(pulumi.ComponentResource):
    def __init__(self, name: str, cfg: PlatformConfig, provider: pulumi.ProviderResource,
                 depends_on: list[pulumi.Resource] | None = None, opts: pulumi.ResourceOptions | None = None) -> None:  # fmt: skip
        super().__init__("taugrid:platform:NodeProblemDetector", name, None, opts)
        version = cfg.components.version("nodeProblemDetector")
        self.release = helm_release(
            "node-problem-detector",
            CHARTS["nodeProblemDetector"],
            version,
            npd_values(cfg),
            self,
            provider,
            depends_on,
        )
        self.register_outputs({"version": version, "condition": XID_CONDITION})
