"""TauController: the TauGrid controller's Deployment with its least-privilege RBAC and kopf's
peering (the image is built from controller/Dockerfile; its tag is pinned with the other
component versions and promoted with them)."""

from __future__ import annotations

import pulumi

from taugrid.api.platform import PlatformConfig
from taugrid.components.controller_manifests import controller_objects
from taugrid.components.kube import create_objects


class TauController(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        cfg: PlatformConfig,
        provider: pulumi.ProviderResource,
        depends_on: list[pulumi.Resource] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("taugrid:platform:TauController", name, None, opts)
        self.objects = create_objects(controller_objects(cfg), self, provider, depends_on)
        self.image = f"{cfg.components.controller.image}:{cfg.components.version('controller')}"
        self.register_outputs({"image": self.image})
