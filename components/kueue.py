"""Kueue: the Helm release, then (once its webhooks are ready) flavors, cohorts, priorities, queues."""

from __future__ import annotations

import pulumi

from taugrid.api.platform import CHARTS, PlatformConfig
from taugrid.components.kube import config_group, helm_release
from taugrid.components.manifests import kueue_objects, kueue_values


class Kueue(pulumi.ComponentResource):
    def __init__(self, name: str, cfg: PlatformConfig, provider: pulumi.ProviderResource,
                 depends_on: list[pulumi.Resource] | None = None, opts: pulumi.ResourceOptions | None = None) -> None:  # fmt: skip
        super().__init__("taugrid:platform:Kueue", name, None, opts)
        version = cfg.components.version("kueue")
        self.release = helm_release(
            "kueue", CHARTS["kueue"], version, kueue_values(cfg), self, provider, depends_on
        )
        # The release waits for the controller (and so its webhooks) before these are created.
        self.objects = config_group(
            "kueue-queues", kueue_objects(cfg), self, provider, depends_on=[self.release]
        )
        self.register_outputs(
            {"version": version, "clusterQueues": [q.name for q in cfg.queues.clusterQueues]}
        )
